/**
 * `benchStore`: how fast this store takes and gives back a stream, measured where the
 * user's data will live (the CLI's `bench`). Each round, on a store that holds nothing:
 * - the write stream (its default, streaming profile) fed `bytes` in 1 MiB chunks,
 *   seconds from the first write to the published checkpoint;
 * - the read stream of that checkpoint, cold (a new open), every byte read compared
 *   with what was written (one CRC-32 over the whole, against the source's);
 * - the baseline: the same bytes as plain objects of 16 MiB put by the store itself, 4 at
 *   once (the write stream's objects and sends in flight), then got whole, 10 at once
 *   (the read stream's GETs in flight);
 * - everything written deleted again (the container with `removeContainer`).
 * Each pass reports seconds and the process's CPU seconds (user + system, every thread).
 * Whatever happens, a round leaves nothing behind that it can still delete: a failure
 * or an abort (`signal`) deletes what was written before it is reported.
 */
import { randomFillSync } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { removeContainer } from '../admin/remove.js'
import { deleteObjects, getObjects, putObjects, someKeys } from '../container/raw-objects.js'
import { StreamSegmentError } from '../errors.js'
import { hex32 } from '../format/pointer.js'
import { checkKey } from '../store/common.js'
import { S3Store } from '../store/s3.js'
import type { ObjectStore } from '../store/types.js'
import { crc32 } from '../util/crc32.js'
import { createStreamSegmentReadStream } from './read-stream.js'
import { createStreamSegmentWriteStream } from './write-stream.js'

const MiB = 1024 * 1024
const CHUNK = MiB
/** The source repeats this many distinct chunks of random bytes (16 MiB, one object's worth). */
const DISTINCT_CHUNKS = 16
const OBJECT_BYTES = 16 * MiB
const PUTS_IN_FLIGHT = 4
const GETS_IN_FLIGHT = 10
/** Keys of the baseline's plain objects, under the store's prefix. */
const RAW_PREFIX = 'stream-segment-bench-raw-'

export interface BenchOptions {
  /** Bytes written and read per pass (default 256 MiB; at least 1). */
  bytes?: number
  /** Rounds of the four passes (default 3). */
  rounds?: number
  signal?: AbortSignal
  /** Called as each pass starts, e.g. to draw progress. */
  onPass?: (round: number, pass: BenchPass) => void
}

export type BenchPass = 'write stream' | 'read stream' | 'store put' | 'store get'

export interface BenchSample {
  seconds: number
  /** Process CPU seconds (user + system) during the pass. */
  cpuSeconds: number
}

export interface BenchRound {
  write: BenchSample & { objects: number }
  read: BenchSample & { firstByteMs: number }
  put: BenchSample & { objects: number }
  get: BenchSample
}

export interface BenchResult {
  url: string
  bytes: number
  rounds: BenchRound[]
}

/** Runs the rounds on `store`, which must hold nothing (ERR_CONFLICT otherwise: nothing is written then). */
export async function benchStore(store: ObjectStore, options: BenchOptions = {}): Promise<BenchResult> {
  const { bytes = 256 * MiB, rounds = 3, signal, onPass } = options
  if (!(Number.isSafeInteger(bytes) && bytes >= 1))
    throw StreamSegmentError.invalidArgument(`bench: bytes = ${bytes}: must be a positive integer`)
  if (!(Number.isInteger(rounds) && rounds >= 1 && rounds <= 100))
    throw StreamSegmentError.invalidArgument(`bench: rounds = ${rounds}: must be an integer from 1 to 100`)
  const rawKeys = Array.from({ length: Math.ceil(bytes / OBJECT_BYTES) }, (_, i) => `${RAW_PREFIX}${i}`)
  // An S3 prefix leaves room for a container's keys, not for these longer ones: checked
  // before anything is written, or their puts, and then their clean-up, would fail part-way.
  if (store instanceof S3Store) {
    try {
      checkKey(rawKeys[rawKeys.length - 1] as string, store.prefix)
    } catch (err) {
      throw StreamSegmentError.invalidArgument(
        `bench: ${store.url}: the keys of its plain objects do not fit below the prefix: ${(err as Error).message}`,
      )
    }
  }
  const found = await someKeys(store, 4, signal)
  if (found.length > 0) {
    const named = `${found.slice(0, 3).join(', ')}${found.length > 3 ? ', …' : ''}`
    throw StreamSegmentError.conflict(
      `bench: ${store.url} holds objects already (${named}); ` +
        'give a location that holds nothing (bench deletes all it writes there; a bench killed before it ' +
        `could clean up leaves keys starting ${RAW_PREFIX} and a container)`,
    )
  }
  const src = new BenchSource(bytes)
  /** Deletes the plain objects and the container (which the round may have removed already). */
  const cleanUp = async () => {
    await deleteObjects(store, rawKeys)
    await removeContainer(store).catch((err) => {
      if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    })
  }
  const out: BenchRound[] = []
  for (let r = 0; r < rounds; r++) {
    let round: BenchRound
    try {
      round = await benchRound(store, src, rawKeys, signal, (pass) => onPass?.(r, pass))
    } catch (err) {
      // Nothing left behind, also after a failure or an abort (so without the signal); the
      // round's own error is the one reported.
      await cleanUp().catch(() => undefined)
      throw err
    }
    await cleanUp().catch((err) => {
      throw StreamSegmentError.store(`bench: could not delete what the round wrote at ${store.url}`, err)
    })
    out.push(round)
  }
  return { url: store.url, bytes, rounds: out }
}

/** The bytes a bench writes: DISTINCT_CHUNKS chunks of random bytes, repeated, and their CRC-32. */
class BenchSource {
  private readonly chunks = Array.from({ length: DISTINCT_CHUNKS }, () => randomFillSync(Buffer.allocUnsafeSlow(CHUNK)))
  readonly crc: number

  constructor(readonly bytes: number) {
    let crc = 0
    for (const c of this.stream()) crc = crc32(c, crc)
    this.crc = crc
  }

  /** Bytes [at, at + n) (n ≤ CHUNK, within one chunk). */
  slice(at: number, n: number): Buffer {
    const c = this.chunks[Math.floor(at / CHUNK) % DISTINCT_CHUNKS] as Buffer
    return c.subarray(at % CHUNK, (at % CHUNK) + n)
  }

  /** Every byte, in 1 MiB chunks. */
  *stream(): Generator<Buffer> {
    for (let at = 0; at < this.bytes; at += CHUNK) yield this.slice(at, Math.min(CHUNK, this.bytes - at))
  }

  /** Plain object i's bytes (OBJECT_BYTES of them, or the rest), as chunks. */
  object(i: number): Uint8Array[] {
    const parts: Uint8Array[] = []
    const end = Math.min(this.bytes, (i + 1) * OBJECT_BYTES)
    for (let at = i * OBJECT_BYTES; at < end; at += CHUNK) parts.push(this.slice(at, Math.min(CHUNK, end - at)))
    return parts
  }
}

/** One round's four passes; what it wrote is left for the caller to delete. */
async function benchRound(
  store: ObjectStore,
  src: BenchSource,
  rawKeys: readonly string[],
  signal: AbortSignal | undefined,
  onPass: (pass: BenchPass) => void,
): Promise<BenchRound> {
  onPass('write stream')
  const write = await measure(async () => {
    const ws = createStreamSegmentWriteStream({ store, signal })
    await pipeline(Readable.from(src.stream()), ws)
    return { objects: ws.flushTiming?.objects ?? 0 }
  })
  onPass('read stream')
  const read = await measure(async () => {
    const t0 = performance.now()
    let firstByteMs = -1
    let got = 0
    let crc = 0
    for await (const c of createStreamSegmentReadStream({ store, signal })) {
      const chunk = c as Uint8Array
      if (firstByteMs < 0) firstByteMs = performance.now() - t0
      crc = crc32(chunk, crc)
      got += chunk.byteLength
    }
    if (got !== src.bytes || crc !== src.crc) {
      throw StreamSegmentError.corrupt(
        `bench: read back ${got} bytes of CRC-32 ${hex32(crc)}, wrote ${src.bytes} bytes of CRC-32 ${hex32(src.crc)}`,
      )
    }
    return { firstByteMs }
  })
  await removeContainer(store, { signal })
  onPass('store put')
  const put = await measure(async () => {
    await putObjects(store, rawKeys, (i) => src.object(i), PUTS_IN_FLIGHT, signal)
    return { objects: rawKeys.length }
  })
  onPass('store get')
  const get = await measure(async () => {
    let got = 0
    await getObjects(
      store,
      rawKeys,
      GETS_IN_FLIGHT,
      (_, cs) => {
        for (const c of cs) got += c.byteLength
      },
      signal,
    )
    if (got !== src.bytes)
      throw StreamSegmentError.corrupt(`bench: got ${got} bytes of plain objects, put ${src.bytes}`)
    return {}
  })
  return { write, read, put, get }
}

async function measure<T extends object>(run: () => Promise<T>): Promise<BenchSample & T> {
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const extra = await run()
  const seconds = (performance.now() - t0) / 1000
  const c = process.cpuUsage(c0)
  return { seconds, cpuSeconds: (c.user + c.system) / 1e6, ...extra }
}
