/**
 * Sends planned objects to the store, create-only.
 *
 * - An object no larger than one piece (`segmentMpuChunkSize`) goes in one PutObject
 *   with `If-None-Match: *`; a larger one as a multipart upload whose key is claimed
 *   first (see ObjectStore.createMultipart), in pieces of exactly `segmentMpuChunkSize`
 *   bytes but the last, several at once.
 * - At most `segmentMpuMaxConcurrency` requests carrying bodies are in flight across
 *   every object of the file (one shared `Semaphore`). Bodies are views of the dirty
 *   tier's slabs (ObjectPlan.take), pinned until their request ends: the upload itself
 *   copies nothing and holds no memory of its own.
 * - A failed multipart upload is aborted (best effort) before the error is returned;
 *   nothing of it becomes visible. The error is the store's, unchanged.
 */
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import type { CompletedPart, ObjectStore } from '../store/types.js'
import type { ObjectPlan } from '../write/object-plan.js'

const log = debug('stream-segment:upload')

export class Semaphore {
  private waiting: Array<() => void> = []
  private used = 0

  constructor(readonly limit: number) {}

  /** Slots taken now. */
  get inUse(): number {
    return this.used
  }

  async take(): Promise<void> {
    if (this.used < this.limit) {
      this.used++
      return
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve))
  }

  give(): void {
    const next = this.waiting.shift()
    if (next) next()
    else this.used--
  }
}

export interface UploadResult {
  key: string
  bytes: number
  requests: number
}

export class Uploader {
  readonly slots: Semaphore
  /** Body bytes of every request that completed (PutObject and UploadPart), for progress. */
  uploadedBytes = 0

  constructor(
    readonly store: ObjectStore,
    readonly pieceSize: number,
    concurrency: number,
  ) {
    this.slots = new Semaphore(concurrency)
  }

  /**
   * Waits for room, takes the whole object's bytes and starts its create-only PutObject;
   * resolves as soon as the request is under way, with a promise of its end.
   */
  async startPut(plan: ObjectPlan, signal?: AbortSignal): Promise<{ done: Promise<void> }> {
    await this.slots.take()
    let body: Awaited<ReturnType<ObjectPlan['take']>>
    try {
      body = await plan.take(0, plan.size)
    } catch (err) {
      this.slots.give()
      throw err
    }
    const done = this.store
      .put(plan.key, body.chunks, { ifNoneMatch: '*', signal })
      .then(() => {
        this.uploadedBytes += plan.size
        log('put %s %d bytes', plan.key, plan.size)
      })
      .finally(() => {
        body.done()
        this.slots.give()
      })
    return { done }
  }

  /**
   * Waits for room, takes a piece's bytes with `take` and starts its UploadPart (once
   * `uploadId` is known); resolves as soon as the request is under way.
   */
  async startPart(
    key: string,
    uploadId: Promise<string>,
    partNumber: number,
    take: () => Promise<{ chunks: Uint8Array[]; done: () => void }>,
    signal?: AbortSignal,
  ): Promise<{ done: Promise<CompletedPart> }> {
    await this.slots.take()
    let body: { chunks: Uint8Array[]; done: () => void }
    try {
      body = await take()
    } catch (err) {
      this.slots.give()
      throw err
    }
    const done = uploadId
      .then((id) => this.store.uploadPart(key, id, partNumber, body.chunks, { signal }))
      .then(({ etag }) => {
        this.uploadedBytes += byteLength(body.chunks)
        log('part %s #%d', key, partNumber)
        return { partNumber, etag }
      })
      .finally(() => {
        body.done()
        this.slots.give()
      })
    return { done }
  }

  /** Uploads `plan` create-only. */
  async upload(plan: ObjectPlan, signal?: AbortSignal): Promise<UploadResult> {
    const size = plan.size
    if (size <= this.pieceSize) {
      await this.slots.take()
      let body: Awaited<ReturnType<ObjectPlan['take']>>
      try {
        body = await plan.take(0, size)
      } catch (err) {
        this.slots.give()
        throw err
      }
      try {
        await this.store.put(plan.key, body.chunks, { ifNoneMatch: '*', signal })
        this.uploadedBytes += size
        log('put %s %d bytes', plan.key, size)
        return { key: plan.key, bytes: size, requests: 1 }
      } finally {
        body.done()
        this.slots.give()
      }
    }
    return this.uploadMultipart(plan, signal)
  }

  private async uploadMultipart(plan: ObjectPlan, signal?: AbortSignal): Promise<UploadResult> {
    const { key, size } = plan
    const pieces = Math.ceil(size / this.pieceSize)
    if (pieces > 10000)
      throw StreamSegmentError.invalidArgument(`${key}: ${size} bytes need ${pieces} pieces, over 10000`)
    const uploadId = await this.store.createMultipart(key, { ifNoneMatch: '*', signal })
    const parts: CompletedPart[] = new Array(pieces)
    const running = new Set<Promise<void>>()
    let failure: unknown
    try {
      for (let i = 0; i < pieces && failure === undefined; i++) {
        await this.slots.take()
        if (failure !== undefined) {
          this.slots.give()
          break
        }
        const start = i * this.pieceSize
        const end = Math.min(start + this.pieceSize, size)
        let body: Awaited<ReturnType<ObjectPlan['take']>>
        try {
          body = await plan.take(start, end)
        } catch (err) {
          this.slots.give()
          throw err
        }
        const p = this.store
          .uploadPart(key, uploadId, i + 1, body.chunks, { signal })
          .then(
            ({ etag }) => {
              parts[i] = { partNumber: i + 1, etag }
              this.uploadedBytes += end - start
              log('part %s #%d %d bytes', key, i + 1, end - start)
            },
            (err) => {
              failure ??= err
            },
          )
          .finally(() => {
            body.done()
            this.slots.give()
            running.delete(p)
          })
        running.add(p)
      }
      await Promise.all(running)
      if (failure !== undefined) throw failure
      await this.store.completeMultipart(key, uploadId, parts, { signal })
      log('complete %s %d bytes in %d pieces', key, size, pieces)
      return { key, bytes: size, requests: pieces + 2 }
    } catch (err) {
      await Promise.allSettled(running)
      await this.store.abortMultipart(key, uploadId).catch((e) => log('abort %s %s failed: %s', key, uploadId, e))
      throw err
    }
  }
}

function byteLength(chunks: readonly Uint8Array[]): number {
  let n = 0
  for (const c of chunks) n += c.byteLength
  return n
}
