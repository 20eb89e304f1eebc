/**
 * An in-process store for tests and benchmarks (the spec's "memory staging"). Bodies are
 * copied once when they arrive, so a later change to a caller's buffer never changes a
 * stored object; a multipart object keeps its parts' copies as its chunks (no second
 * copy at completion). ETags are unique per write, not hashes, so storing costs one copy.
 * Stores with the same `mem://name` in one process share their objects.
 *
 * A write (put, part, completion) is done when called and answers in a later turn of the
 * event loop, as a real store's request does. Memory that Node frees in such a turn would
 * otherwise pile up in a program that works only with memory stores: the memory addon's
 * slabs (util/huge-memory.ts) are unmapped by a finalizer that Node runs from the event
 * loop, so a loop of writes that never yields to it held gigabytes.
 */
import { createHash } from 'node:crypto'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { StreamSegmentError } from '../errors.js'
import {
  checkConditions,
  checkCopyRange,
  checkIfMatch,
  checkKey,
  checkListArguments,
  checkMetadata,
  checkPartBytes,
  checkPartList,
  checkPartNumber,
  checkPartSizes,
  checkPutPrecondition,
  compareKeys,
  copyBody,
  listOf,
  newWriteId,
  putMetadata,
  resolveRange,
  throwIfAborted,
  unquoteEtag,
} from './common.js'
import type {
  AbortMultipartOptions,
  Body,
  CompletedPart,
  CopySource,
  CreateMultipartOptions,
  GetOptions,
  ListEntry,
  ListOptions,
  ListPartsOptions,
  MultipartUpload,
  ObjectInfo,
  ObjectStore,
  PutOptions,
  RequestOptions,
  UploadedPart,
} from './types.js'
import { WRITE_ID_METADATA } from './types.js'

interface StoredObject {
  /** The object's bytes, in order. */
  chunks: Uint8Array[]
  size: number
  etag: string
  metadata: Record<string, string>
  modifiedMs: number
}

interface Upload {
  key: string
  metadata: Record<string, string>
  parts: Map<number, { body: Uint8Array; etag: string }>
  initiatedMs: number
  uneven: boolean
  /** The write id of its claim's placeholder (created `ifNoneMatch: '*'`). */
  claim?: string
}

interface Bucket {
  objects: Map<string, StoredObject>
  uploads: Map<string, Upload>
}

const named = new Map<string, Bucket>()
let uploadSeq = 0

export class MemoryStore implements ObjectStore {
  readonly url: string
  private readonly bucket: Bucket

  /** `name` shares objects with every other MemoryStore of that name; omit for a private one. */
  constructor(name?: string) {
    this.url = `mem://${name ?? ''}`
    if (name === undefined) {
      this.bucket = { objects: new Map(), uploads: new Map() }
    } else {
      let b = named.get(name)
      if (b === undefined) named.set(name, (b = { objects: new Map(), uploads: new Map() }))
      this.bucket = b
    }
  }

  async put(key: string, body: Body, options?: PutOptions): Promise<{ etag: string }> {
    checkKey(key)
    checkConditions(`put ${key}`, options)
    throwIfAborted(options?.signal, `put ${key}`)
    const { metadata, writeId } = putMetadata(`put ${key}`, options)
    const current = this.bucket.objects.get(key)
    if (checkPutPrecondition(`${this.url}/${key}`, current && info(current), options, writeId) === 'replayed') {
      return { etag: (current as StoredObject).etag }
    }
    const etag = newEtag()
    const copy = copyBody(body)
    this.bucket.objects.set(key, { chunks: [copy], size: copy.byteLength, etag, metadata, modifiedMs: Date.now() })
    await nextTurn()
    return { etag }
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    checkKey(key)
    throwIfAborted(options?.signal, `get ${key}`)
    const o = this.bucket.objects.get(key)
    if (o === undefined) throw StreamSegmentError.notFound(`${this.url}/${key}: no such key`)
    const [start, end] = resolveRange(options?.range, o.size, `${this.url}/${key}`)
    const out = Buffer.allocUnsafe(end - start)
    let at = 0
    for (const c of o.chunks) {
      const from = Math.max(start, at)
      const to = Math.min(end, at + c.byteLength)
      if (from < to) out.set(c.subarray(from - at, to - at), from - start)
      at += c.byteLength
      if (at >= end) break
    }
    return out
  }

  async head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    checkKey(key)
    throwIfAborted(options?.signal, `head ${key}`)
    const o = this.bucket.objects.get(key)
    return o && info(o)
  }

  async *list(prefix = '', options?: ListOptions): AsyncIterable<ListEntry> {
    checkListArguments('list', prefix, options?.startAfter)
    // S3's order: the keys' UTF-8 bytes (UTF-16 code units sort U+E000..U+FFFF after the
    // characters above U+FFFF).
    const after = options?.startAfter === undefined ? undefined : Buffer.from(options.startAfter)
    const keys = [...this.bucket.objects.keys()]
      .filter((k) => k.startsWith(prefix))
      .map((k) => ({ k, bytes: Buffer.from(k) }))
      .filter((e) => after === undefined || Buffer.compare(e.bytes, after) > 0)
      .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
      .map((e) => e.k)
    for (const key of keys) {
      throwIfAborted(options?.signal, listOf(prefix))
      const o = this.bucket.objects.get(key)
      if (o !== undefined) yield { key, size: o.size, etag: o.etag, lastModifiedMs: o.modifiedMs }
    }
  }

  async delete(keys: string | readonly string[], options?: RequestOptions): Promise<void> {
    const list = typeof keys === 'string' ? [keys] : keys
    for (const key of list) checkKey(key)
    throwIfAborted(options?.signal, 'delete')
    for (const key of list) this.bucket.objects.delete(key)
  }

  async createMultipart(key: string, options?: CreateMultipartOptions): Promise<string> {
    checkKey(key)
    checkConditions(`createMultipart ${key}`, options)
    checkPartBytes(`createMultipart ${key}`, options)
    checkMetadata(`createMultipart ${key}`, options?.metadata)
    throwIfAborted(options?.signal, `create multipart ${key}`)
    const metadata = { ...options?.metadata }
    let claim: string | undefined
    if (options?.ifNoneMatch === '*') {
      // The claim: an empty create-only placeholder, as S3Store makes.
      claim = newWriteId()
      await this.put(key, new Uint8Array(0), { ifNoneMatch: '*', writeId: claim, metadata: options?.metadata })
      metadata[WRITE_ID_METADATA] = claim
    }
    const uploadId = `mem-upload-${++uploadSeq}`
    this.bucket.uploads.set(uploadId, {
      key,
      metadata,
      parts: new Map(),
      initiatedMs: Date.now(),
      uneven: options?.unevenParts === true,
      claim,
    })
    return uploadId
  }

  async uploadPart(
    key: string,
    uploadId: string,
    partNumber: number,
    body: Body,
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    checkKey(key)
    checkPartNumber(key, partNumber)
    throwIfAborted(options?.signal, `upload part ${partNumber} of ${key}`)
    const upload = this.upload(key, uploadId)
    const etag = newEtag()
    upload.parts.set(partNumber, { body: copyBody(body), etag })
    await nextTurn()
    return { etag }
  }

  /** With `md5: false`, no part's bytes hashed: sizes and ETags only. */
  async listParts(key: string, uploadId: string, options?: ListPartsOptions): Promise<UploadedPart[]> {
    checkKey(key)
    throwIfAborted(options?.signal, `list parts of ${key}`)
    const upload = this.upload(key, uploadId)
    const withMd5 = options?.md5 !== false
    return [...upload.parts]
      .map(([partNumber, p]) => ({
        partNumber,
        size: p.body.byteLength,
        etag: p.etag,
        ...(withMd5 ? { md5: createHash('md5').update(p.body).digest('hex') } : {}),
      }))
      .sort((a, b) => a.partNumber - b.partNumber)
  }

  canCopyFrom(source: ObjectStore): boolean {
    return source instanceof MemoryStore
  }

  async uploadPartCopy(
    key: string,
    uploadId: string,
    partNumber: number,
    source: CopySource,
    options?: RequestOptions,
  ): Promise<{ etag: string; md5: string }> {
    checkKey(key)
    checkPartNumber(key, partNumber)
    throwIfAborted(options?.signal, `upload part copy ${partNumber} of ${key}`)
    const from = source.store
    if (!(from instanceof MemoryStore)) {
      throw StreamSegmentError.invalidArgument(`${this.url}/${key}: cannot copy a part from ${from.url}`)
    }
    checkKey(source.key)
    const where = `${from.url}/${source.key}`
    const ifMatch = source.ifMatch === undefined ? undefined : checkIfMatch(`copy from ${where}`, source.ifMatch)
    const upload = this.upload(key, uploadId)
    const o = from.bucket.objects.get(source.key)
    if (o === undefined) throw StreamSegmentError.notFound(`${where}: no such key (copy source)`)
    if (ifMatch !== undefined && ifMatch !== o.etag) {
      throw StreamSegmentError.conflict(`${where}: etag is ${o.etag}, copy expected ${ifMatch}`)
    }
    checkCopyRange(source.range, o.size, where)
    const body = await from.get(source.key, { range: source.range })
    const etag = newEtag()
    upload.parts.set(partNumber, { body, etag })
    return { etag, md5: createHash('md5').update(body).digest('hex') }
  }

  async completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    checkKey(key)
    throwIfAborted(options?.signal, `complete multipart ${key}`)
    const upload = this.upload(key, uploadId)
    // Taken in part-number order, whatever order they are listed in (as S3Store takes them).
    const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber)
    checkPartList(key, sorted) // the caller's list, said as every store says it
    const where = `${this.url}/${key}`
    const bodies = sorted.map((p) => {
      const stored = upload.parts.get(p.partNumber)
      if (stored === undefined || stored.etag !== unquoteEtag(p.etag)) {
        throw StreamSegmentError.invalidArgument(`${where}: part ${p.partNumber} with etag ${p.etag} was not uploaded`)
      }
      return stored.body
    })
    if (!upload.uneven) {
      checkPartSizes(
        where,
        bodies.map((b) => b.byteLength),
      )
    }
    const etag = `${newEtag()}-${sorted.length}`
    const size = bodies.reduce((n, b) => n + b.byteLength, 0)
    this.bucket.objects.set(key, { chunks: bodies, size, etag, metadata: upload.metadata, modifiedMs: Date.now() })
    this.bucket.uploads.delete(uploadId)
    await nextTurn()
    return { etag }
  }

  async abortMultipart(key: string, uploadId: string, options?: AbortMultipartOptions): Promise<void> {
    checkKey(key)
    throwIfAborted(options?.signal, `abort multipart ${uploadId}`)
    // An upload is reached by its key and id together: named with another key, the id is
    // no upload (S3 answers NoSuchUpload), which an abort passes over.
    const upload = this.bucket.uploads.get(uploadId)
    if (upload?.key !== key) return
    this.bucket.uploads.delete(uploadId)
    if (options?.releaseClaim !== true || upload.claim === undefined) return
    // Only while the key still holds the claim's empty placeholder.
    const o = this.bucket.objects.get(key)
    if (o?.size === 0 && o.metadata[WRITE_ID_METADATA] === upload.claim) {
      this.bucket.objects.delete(key)
    }
  }

  async *listMultipart(prefix = '', options?: RequestOptions): AsyncIterable<MultipartUpload> {
    checkListArguments('listMultipart', prefix)
    const open = [...this.bucket.uploads].filter(([, u]) => u.key.startsWith(prefix))
    open.sort(([a, x], [b, y]) => compareKeys(x.key, y.key) || (a < b ? -1 : 1))
    for (const [uploadId, u] of open) {
      throwIfAborted(options?.signal, `list multipart ${prefix}`)
      yield { key: u.key, uploadId, initiatedMs: u.initiatedMs }
    }
  }

  private upload(key: string, uploadId: string): Upload {
    const upload = this.bucket.uploads.get(uploadId)
    if (upload === undefined || upload.key !== key) {
      throw StreamSegmentError.notFound(`${this.url}/${key}: no multipart upload ${uploadId}`)
    }
    return upload
  }
}

function info(o: StoredObject): ObjectInfo {
  return { size: o.size, etag: o.etag, metadata: { ...o.metadata } }
}

let etagSeq = 0
const etagBase = Math.floor(Math.random() * 2 ** 32).toString(16)

function newEtag(): string {
  return `${etagBase}${(++etagSeq).toString(16).padStart(12, '0')}`
}
