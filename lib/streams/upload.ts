/**
 * `Upload`: `@aws-sdk/lib-storage`'s `Upload`, constructor and behaviour, writing a
 * StreamSegment container at `s3://Bucket/Key` instead of one object. A lib-storage
 * program works by changing its import line only:
 *
 *   new Upload({ client, params: { Bucket, Key, Body, … }, queueSize, partSize, … })
 *   upload.on('httpUploadProgress', ({ loaded, total, part, Key, Bucket }) => …)
 *   await upload.done()   // { $metadata, Bucket, Key, ETag, Location, cno, size, timing }
 *   await upload.abort()  // done() rejects with an error named 'AbortError'
 *
 * - Every parameter lib-storage takes is honoured, accepted and ignored, or refused in the
 *   constructor with ERR_INVALID_ARGUMENT naming it and saying why (PARAMS below; the
 *   table in docs/api.md). Refused are those whose silent loss would change security,
 *   retention or cost (tags, encryption, ACLs, object lock, storage class, whole-body
 *   checksums): a container is many objects, and the store does not set them per object.
 * - All or nothing: `done()` resolves once the checkpoint is published; a Body error, a
 *   store error or `abort()` publishes nothing and leaves no multipart upload open (it
 *   rejects once they are aborted, not before).
 * - Errors as lib-storage's callers test them: a store error from an S3 answer carries the
 *   SDK exception's `name`, `$metadata` and `$fault` (asLibStorageError), one from the
 *   network the SDK error's `name` and `$metadata` (its `code` the library's, the system's
 *   on its cause), bad input's message lib-storage's words; a client of another copy of the
 *   SDK is sent through.
 * - 'httpUploadProgress' is emitted after each upload request completes (so at least once
 *   per object sent), the last one before the inode write (a Body with nothing to send
 *   gets its one event after the commit), none after an abort; `loaded` never decreases,
 *   never passes the bytes taken in, and is the Body's size in the last event.
 * - The params are taken in the constructor (the container, the Body, its size): done()
 *   refuses them changed since, where lib-storage would send the changed ones.
 */
import { EventEmitter } from 'node:events'
import { ReadStream, statSync } from 'node:fs'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import type {
  CompleteMultipartUploadCommandInput,
  CompleteMultipartUploadCommandOutput,
  CreateMultipartUploadCommandInput,
  PutObjectCommandInput,
  S3Client,
  Tag,
  UploadPartCommandInput,
} from '@aws-sdk/client-s3'
import { checkS3ExportTarget, type ExportResult, exportObject, type S3ExportTarget } from '../admin/export.js'
import { isSignal, StreamSegmentError } from '../errors.js'
import { fileState } from '../segment-file.js'
import { checkOptionNames, checkSettingValues, PART_BYTES, type Settings, type WithHooks } from '../settings.js'
import { prefixFault, quoteKey } from '../store/common.js'
import { openStore } from '../store/open.js'
import { type AnyS3Client, ownS3Client } from '../store/s3-client.js'
import type { ObjectStore } from '../store/types.js'
import { describeValue } from '../util/typed-arrays.js'
import type { FlushTiming } from '../write/flush.js'
import { createStreamSegmentWriteStream, type StreamSegmentWriteStream } from './write-stream.js'

const MiB = 1024 * 1024
/** lib-storage's smallest part, and its default. */
const MIN_PART_SIZE = 5 * MiB
const MAX_PART_SIZE = 5 * 1024 * MiB
/** The most requests with bodies a file may have in flight (segmentMpuMaxConcurrency's bound). */
const MAX_QUEUE = 64
/** A Buffer or string Body is fed to the writer in views of this size. */
const FEED_BYTES = MiB

/** lib-storage's progress event. */
export interface Progress {
  loaded?: number
  total?: number
  part?: number
  Key?: string
  Bucket?: string
}

/** The AbortController polyfill lib-storage takes (@smithy/types): a signal with `aborted` and `onabort`, no listeners. */
export interface LibStorageAbortController {
  readonly signal: { readonly aborted: boolean; onabort: unknown }
  abort(): void
}

/** lib-storage's `params`: PutObject's input and the multipart ones'. */
export type UploadParams = PutObjectCommandInput &
  Partial<CreateMultipartUploadCommandInput & UploadPartCommandInput & CompleteMultipartUploadCommandInput>

/** The options `Upload` takes (lib-storage's, and `settings` and `exportTo`). */
const UPLOAD_OPTIONS = [
  'client',
  'params',
  'queueSize',
  'partSize',
  'leavePartsOnError',
  'tags',
  'abortController',
  'settings',
  'exportTo',
]

export interface UploadOptions {
  /** An S3Client of this package's SDK or of another copy of it (an application's own version). */
  client: AnyS3Client
  params: UploadParams
  /** Requests carrying bodies in flight (segmentMpuMaxConcurrency), at least 1, rounded up, capped at 64. Default 4. */
  queueSize?: number
  /** Bytes per upload request (segmentMpuChunkSize), 5 MiB to 5 GiB, rounded up to a whole data block. Default 16 MiB. */
  partSize?: number
  /** Accepted and ignored: a failed or aborted upload always aborts its multipart uploads. */
  leavePartsOnError?: boolean
  /** Refused unless empty: see docs/api.md. */
  tags?: Tag[]
  /**
   * Its signal aborts the upload, as `abort()` does: an AbortController, or the polyfill
   * lib-storage's options also take (@smithy/abort-controller's, a signal with `onabort` only).
   */
  abortController?: AbortController | LibStorageAbortController
  /** Not in lib-storage: the container's settings (the write stream's streaming profile fills the rest). */
  settings?: Partial<Settings>
  /**
   * Not in lib-storage: once the checkpoint is published, also export it as one plain object
   * (`exportObject`, copied server-side) at `{ Bucket, Key, ContentType?, Metadata?, … }`,
   * with this Upload's client; `done()` then resolves with its result as `export`.
   */
  exportTo?: Omit<S3ExportTarget, 'client'>
}

/**
 * lib-storage's names for the types above, exported by it beside `Upload`, so that code
 * importing them (`import { Upload, type Options } from '@aws-sdk/lib-storage'`) compiles
 * with only its import line changed: `Options` is `UploadOptions`, `Configuration` its
 * tuning options as lib-storage declares them (every one given), `BodyDataTypes` a Body.
 */
export type Options = UploadOptions
export type Configuration = Required<Pick<UploadOptions, 'queueSize' | 'partSize' | 'leavePartsOnError' | 'tags'>> &
  Pick<UploadOptions, 'abortController'>
export type BodyDataTypes = PutObjectCommandInput['Body']
/** lib-storage's deprecated name for its client's type. */
export type ServiceClients = S3Client
/** lib-storage's part of a Body, as its public type declares it (this Upload makes none). */
export interface RawDataPart {
  partNumber: number
  data: BodyDataTypes
  lastPart?: boolean
}

/**
 * What `done()` resolves with: lib-storage's fields, and the checkpoint's. Those of its type
 * that describe one object (VersionId, Expiration, ServerSideEncryption, the checksums) are
 * typed, so that code reading them compiles, and never set: a container is many objects.
 */
export interface UploadResult
  extends Omit<CompleteMultipartUploadCommandOutput, '$metadata' | 'Bucket' | 'Key' | 'ETag' | 'Location'> {
  /**
   * As lib-storage's (its last request's answer): `{ httpStatusCode: 200 }`, that of the
   * commit, the inode's PutObject, which done() waits for. No `requestId` nor `attempts`:
   * the container's requests are many, and the store keeps no answer's metadata.
   */
  $metadata: CompleteMultipartUploadCommandOutput['$metadata']
  Bucket: string
  Key: string
  /** The ETag of the container's inode as published (the commit point). */
  ETag: string | undefined
  /** The container's address, in the form lib-storage gives an object's. */
  Location: string
  /** The checkpoint published. */
  cno: number
  /** Bytes the checkpoint holds: the Body's. */
  size: number
  timing: FlushTiming
  /** With `exportTo`: the plain object written. */
  export?: ExportResult
}

type Treatment = { kind: 'honoured' } | { kind: 'ignored' } | { kind: 'refused'; why: string }

const HONOURED: Treatment = { kind: 'honoured' }
const IGNORED: Treatment = { kind: 'ignored' }
const refused = (why: string): Treatment => ({ kind: 'refused', why })

const TAGS_WHY =
  'a container is many objects and tags are not set on them; dropping the tags could defeat a lifecycle or access rule that reads them'
const TAGS = refused(TAGS_WHY)
const SSE = refused(
  "per-object encryption is not applied to a container's objects; the bucket's default encryption applies (set it with PutBucketEncryption)",
)
const ACL = refused("per-object access control is not applied to a container's objects; use a bucket policy")
const LOCK = refused("object lock is not applied to a container's objects; use the bucket's default retention")
const CHECKSUM = refused(
  'a checksum of the whole Body cannot be checked against a container; every block is stored with its own CRC-32 and read back checked',
)
const CONDITIONAL = refused('a container publishes its checkpoints by compare-and-swap on its inode already')
const REQUESTER = refused("not passed on to the container's requests")
const PART = refused('a multipart upload field: the container makes its own uploads')

/**
 * How each parameter lib-storage takes is treated; a name not here is refused as unknown.
 * Every name `UploadParams` has must be listed (checked below when the SDK is upgraded).
 */
export const PARAMS: Readonly<Record<string, Treatment>> = {
  Bucket: HONOURED,
  Key: HONOURED,
  Body: HONOURED,
  ContentLength: HONOURED,
  ContentType: IGNORED,
  ContentDisposition: IGNORED,
  ContentEncoding: IGNORED,
  ContentLanguage: IGNORED,
  CacheControl: IGNORED,
  Expires: IGNORED,
  Metadata: IGNORED,
  WebsiteRedirectLocation: IGNORED,
  ChecksumAlgorithm: IGNORED,
  ChecksumType: IGNORED,
  StorageClass: refused(
    "a container's objects are written in the bucket's default storage class (only 'STANDARD' is accepted); use a lifecycle rule",
  ),
  Tagging: TAGS,
  ServerSideEncryption: SSE,
  SSEKMSKeyId: SSE,
  SSEKMSEncryptionContext: SSE,
  SSECustomerAlgorithm: SSE,
  SSECustomerKey: SSE,
  SSECustomerKeyMD5: SSE,
  BucketKeyEnabled: SSE,
  ACL,
  GrantFullControl: ACL,
  GrantRead: ACL,
  GrantReadACP: ACL,
  GrantWriteACP: ACL,
  ObjectLockMode: LOCK,
  ObjectLockRetainUntilDate: LOCK,
  ObjectLockLegalHoldStatus: LOCK,
  ObjectLockEventHold: LOCK,
  ObjectLockEventHoldDurationDays: LOCK,
  ObjectLockEventHoldDurationYears: LOCK,
  ContentMD5: CHECKSUM,
  ChecksumCRC32: CHECKSUM,
  ChecksumCRC32C: CHECKSUM,
  ChecksumCRC64NVME: CHECKSUM,
  ChecksumSHA1: CHECKSUM,
  ChecksumSHA256: CHECKSUM,
  ChecksumSHA512: CHECKSUM,
  ChecksumMD5: CHECKSUM,
  ChecksumXXHASH3: CHECKSUM,
  ChecksumXXHASH64: CHECKSUM,
  ChecksumXXHASH128: CHECKSUM,
  IfMatch: CONDITIONAL,
  IfNoneMatch: CONDITIONAL,
  WriteOffsetBytes: refused('appending to an object of a directory bucket is not a container write'),
  ExpectedBucketOwner: REQUESTER,
  RequestPayer: REQUESTER,
  UploadId: PART,
  PartNumber: PART,
  MultipartUpload: PART,
  MpuObjectSize: PART,
} satisfies Record<keyof UploadParams, Treatment>

/** The params the constructor takes the container, the Body and its size from, which done() sends as they were. */
const TAKEN = ['Bucket', 'Key', 'Body', 'ContentLength'] as const

function invalid(message: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(`Upload: ${message}`)
}

/** The error `done()` rejects with after `abort()`: ERR_ABORTED, named 'AbortError' as lib-storage's. */
function abortError(cause?: unknown): StreamSegmentError {
  const err = StreamSegmentError.aborted('Upload aborted.', cause)
  err.name = 'AbortError'
  return err
}

/** An SDK service exception (@smithy's ServiceException judges one so): an S3 answer's error. */
interface ServiceError {
  name: string
  $fault: 'client' | 'server'
  $metadata: object
  Code?: unknown
}

function isServiceError(err: unknown): err is ServiceError {
  const e = err as Partial<ServiceError> | null
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof e.name === 'string' &&
    (e.$fault === 'client' || e.$fault === 'server') &&
    typeof e.$metadata === 'object' &&
    e.$metadata !== null
  )
}

/**
 * A store error of done() as lib-storage's callers test theirs, which is the SDK's exception
 * itself (`err.name === 'NoSuchBucket'`, `err.$metadata.httpStatusCode`, `err instanceof
 * NoSuchBucket`, `S3ServiceException.isInstance(err)`): the StreamSegmentError whose cause
 * is an S3 answer's error takes its `name`, `$fault`, `$metadata` and `Code`. An abort keeps
 * 'AbortError'; any other error is as it came.
 */
function asLibStorageError(err: unknown): unknown {
  if (!StreamSegmentError.is(err) || err.code === 'ERR_ABORTED') return err
  let cause: unknown = err.cause
  /**
   * The first SDK error on the way: one with `$metadata` (a network error's too), or the
   * credential chain's (@smithy/property-provider's ProviderError, which says `tryNextLink`;
   * no request was made, so it has no `$metadata`, nor has lib-storage's rejection then).
   */
  let sdk: { name: unknown; $metadata: object | undefined } | undefined
  for (let depth = 0; depth < 8 && cause !== undefined && !isServiceError(cause); depth++) {
    const { name, $metadata, tryNextLink } = (cause ?? {}) as {
      name?: unknown
      $metadata?: unknown
      tryNextLink?: unknown
    }
    if (sdk === undefined && typeof $metadata === 'object' && $metadata !== null) sdk = { name, $metadata }
    if (sdk === undefined && typeof tryNextLink === 'boolean') sdk = { name, $metadata: undefined }
    cause = (cause as { cause?: unknown } | null)?.cause
  }
  if (!isServiceError(cause)) {
    // No S3 answer (a connection refused, reset, timed out; no credentials): lib-storage rejects
    // with the SDK's error, whose `name` a catch tests (`'TimeoutError'`, which the SDK gives a
    // reset too; a system error's `'Error'`; 'CredentialsProviderError') and whose `$metadata`
    // ({ attempts, totalRetryDelay }) it may read unguarded (`err.$metadata.httpStatusCode`).
    // The code stays the store's (ERR_STORE, ERR_TIMEOUT: `code` is every error's kind here,
    // and `retryable` reads it); the SDK's error, with the system's code ('ECONNREFUSED'), is
    // the cause. An ERR_TIMEOUT is a 'TimeoutError' whatever the request's error was named:
    // one the store's deadline cut is an 'AbortError', which a caller would take for its own
    // abort.
    if (sdk !== undefined) {
      err.name = err.code === 'ERR_TIMEOUT' ? 'TimeoutError' : String(sdk.name ?? 'Error')
      if (sdk.$metadata !== undefined) Object.assign(err, { $metadata: sdk.$metadata })
    }
    return err
  }
  err.name = cause.name
  Object.assign(err, { $fault: cause.$fault, $metadata: cause.$metadata })
  if (cause.Code !== undefined) Object.assign(err, { Code: cause.Code })
  return err
}

/**
 * `o` without its entries set to null: what lib-storage takes as not given. Its options
 * (`options.tags || []`, `options.abortController ?? …`), and its params, which it passes
 * to the SDK, whose serializer leaves a null out of the request as it does an undefined
 * (`ACL: null` sends no x-amz-acl) and takes a null ContentLength as none (`??`).
 */
function withoutNulls<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null)) as T
}

/**
 * A `queueSize` or `partSize` as lib-storage reads it: it only compares them with numbers
 * (`queueSize < 1`, `index < queueSize`, `partSize < MIN_PART_SIZE`), so a numeric string
 * (`'4'`, `' 4 '`, `'0x4'`), `true` or `[4]` counts as its number. NaN for what has none
 * (`'abc'`, a Symbol, whose comparison throws a TypeError there).
 */
function asLibStorageNumber(value: unknown): number {
  if (typeof value === 'number') return value
  try {
    return Number(value)
  } catch {
    return Number.NaN
  }
}

/** An option's value in a message: a number as it is, anything else with its type. */
function describeOption(value: unknown): string {
  return typeof value === 'number' ? String(value) : describeValue(value)
}

/** Checks every parameter against PARAMS; undefined values count as not given. */
function checkParams(params: Partial<UploadParams>): void {
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined) continue
    const t = PARAMS[name]
    if (t === undefined) throw invalid(`params.${name} is not supported: a container is not one object`)
    if (t.kind === 'refused' && !(name === 'StorageClass' && value === 'STANDARD')) {
      throw invalid(`params.${name}: ${t.why}`)
    }
  }
  for (const name of ['Bucket', 'Key'] as const) {
    const value = params[name]
    if (typeof value !== 'string' || value === '') {
      // The SDK's words, which lib-storage's done() rejects with, where the SDK refuses it
      // (an empty Key it sends, to a request S3 refuses).
      const sdk = value === undefined || (name === 'Bucket' && value === '')
      throw invalid(
        `params.${name} must be a non-empty string${sdk ? `: No value provided for input HTTP label: ${name}.` : ''}`,
      )
    }
  }
  // Found here, not by the store at done(): a Key too long for the keys of a Body's later
  // parts would fail the upload part-way, after lib-storage's one PutObject would have passed.
  // As the store takes a prefix (the same rule): without its leading "/"s, and one at its end.
  const key = params.Key as string
  const prefix = key.replace(/^\/+/, '')
  if (prefix === '') {
    throw invalid(`params.Key ${JSON.stringify(key)} names the bucket's root: a container is written below its Key`)
  }
  const fault = prefixFault(prefix)
  if (fault !== undefined) throw invalid(`params.Key ${quoteKey(key)}: ${fault}: a container is written below it`)
}

/**
 * Refuses a Bucket with a "/" as the SDK does before any request (validateBucketNameMiddleware),
 * in its words, which lib-storage's done() rejects with: else done() would find it as a store
 * error (ERR_STORE, retryable) after the store's retries. An ARN (an access point's has a "/")
 * and a client whose `bucketEndpoint` makes the Bucket an endpoint are let through, as there.
 */
function checkBucket(bucket: string, client: AnyS3Client): void {
  const arn = bucket.startsWith('arn:') && bucket.split(':').length >= 6
  const bucketEndpoint = (client as { config?: { bucketEndpoint?: unknown } }).config?.bucketEndpoint
  if (bucket.includes('/') && !arn && !bucketEndpoint) {
    throw invalid(`params.Bucket ${quoteKey(bucket)}: Bucket name shouldn't contain '/', received '${bucket}'`)
  }
}

/**
 * params.ContentLength as lib-storage sends it: a number, or a string of one (an HTTP
 * request's content-length header), which the SDK sends as it is; NaN for anything else.
 */
function contentLengthOf(value: unknown): number {
  if (typeof value === 'number') return value
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value)
  return Number.NaN
}

/** The Body's size when it says it (string, bytes, Blob, a file's read stream), as lib-storage reads it. */
function bodyLength(body: unknown): number | undefined {
  if (typeof body === 'string' || body instanceof String) return Buffer.byteLength(String(body))
  if (body instanceof Uint8Array) return body.byteLength
  if (typeof Blob !== 'undefined' && body instanceof Blob) return body.size
  if (isBlobLike(body)) return typeof body.size === 'number' ? body.size : undefined
  if (body instanceof ReadStream) {
    // What the stream reads: from `start` (0) to `end` inclusive (the file's end), so far as the file goes.
    const { start = 0, end = Number.POSITIVE_INFINITY, path } = body as ReadStream & { start?: number; end?: number }
    try {
      const stat = statSync(path)
      // Only a regular file's size is what it holds: a pipe's or a device's is 0 (/dev/stdin piped).
      if (stat.isFile()) return Math.max(0, Math.min(stat.size, end + 1) - start)
    } catch {
      // Not to be found: the range alone says it.
    }
    return Number.isFinite(end) ? end + 1 - start : undefined
  }
  return undefined
}

/** The `onabort` handlers signalOf set on a polyfill's signal, each with the handler it wraps. */
const wrapped = new WeakMap<object, unknown>()
/** Those of uploads that have ended: taken out of the chain once on top of it. */
const ended = new WeakSet<object>()

/**
 * The uploads listening to one AbortSignal, and the one 'abort' listener they share on it:
 * a controller shared by many uploads at once (a server's shutdown) would otherwise hold a
 * listener per upload, and Node warns of a leak past 10 ("Possible EventTarget memory leak").
 */
const listening = new WeakMap<AbortSignal, { uploads: Set<AbortController>; onAbort: () => void }>()

/** An AbortSignal's abort heard through the one listener the uploads share on it (`listening`). */
function sharedListener(signal: AbortSignal): { signal: AbortSignal; release: () => void } {
  const own = new AbortController()
  if (signal.aborted) {
    own.abort(signal.reason)
    return { signal: own.signal, release: () => {} }
  }
  let entry = listening.get(signal)
  if (entry === undefined) {
    const uploads = new Set<AbortController>()
    const onAbort = () => {
      listening.delete(signal)
      // A copy: an upload's own listeners may release it as it aborts.
      for (const upload of [...uploads]) upload.abort(signal.reason)
    }
    entry = { uploads, onAbort }
    listening.set(signal, entry)
    signal.addEventListener('abort', onAbort, { once: true })
  }
  const { uploads, onAbort } = entry
  uploads.add(own)
  const release = () => {
    uploads.delete(own)
    if (uploads.size === 0 && listening.get(signal)?.uploads === uploads) {
      listening.delete(signal)
      signal.removeEventListener('abort', onAbort)
    }
  }
  return { signal: own.signal, release }
}

/**
 * The signal the upload listens to while `done()` runs: one the controller's signal aborts
 * (through the listener the uploads share on it), or for the polyfill (no addEventListener)
 * one its `onabort` aborts, as lib-storage listens through `onabort`, calling the handler it
 * had too. `release()` lets the polyfill go: a handler no other wraps since is put back at
 * once, one wrapped by another upload's once that one lets go. A controller shared by many
 * uploads (a server's shutdown) would otherwise hold a handler, and the upload's controller,
 * per upload it ever served.
 */
function signalOf(controller: AbortController | LibStorageAbortController): {
  signal: AbortSignal
  release: () => void
} {
  const signal = controller.signal
  if (isSignal(signal)) return sharedListener(signal)
  const own = new AbortController()
  const before = signal.onabort
  const onabort = function (this: unknown, ...args: unknown[]) {
    if (!ended.has(onabort)) own.abort()
    if (typeof before === 'function') return before.apply(this, args)
  }
  wrapped.set(onabort, before)
  signal.onabort = onabort
  if (signal.aborted) own.abort()
  const release = () => {
    ended.add(onabort)
    let top = signal.onabort
    while (typeof top === 'function' && ended.has(top)) {
      top = wrapped.get(top)
      signal.onabort = top
    }
  }
  return { signal: own.signal, release }
}

/**
 * A Blob of another implementation (fetch-blob's, formdata-node's File): lib-storage reads
 * any Body with a `stream()` method through it, and takes its `size` as the total.
 */
function isBlobLike(body: unknown): body is { stream(): unknown; size?: unknown } {
  return (
    typeof (body as { stream?: unknown })?.stream === 'function' &&
    !(body instanceof Uint8Array) &&
    !isNodeStream(body) &&
    !isWebStream(body)
  )
}

function isWebStream(body: unknown): body is WebReadableStream<Uint8Array> {
  return typeof (body as { getReader?: unknown })?.getReader === 'function'
}

/** A Node stream (a Readable, or one like it that pipe() and `for await` take) as a Body. */
function isNodeStream(body: unknown): body is Readable {
  if (body instanceof Readable) return true
  return typeof (body as { pipe?: unknown })?.pipe === 'function' && Symbol.asyncIterator in (body as object)
}

/**
 * The Body as a source of bytes for pipeline(), made when done() starts: a web stream is
 * locked and read from then, not from the constructor (as lib-storage), so that one which
 * errors before done() fails done(), not the process with an error nobody listens to.
 */
function bodySource(body: unknown): AsyncIterable<Uint8Array> {
  if (typeof body === 'string' || body instanceof String) return feed(Buffer.from(String(body)))
  if (body instanceof Uint8Array) return feed(body)
  if (typeof Blob !== 'undefined' && body instanceof Blob) {
    return Readable.fromWeb(body.stream() as unknown as WebReadableStream<Uint8Array>)
  }
  // Chunks of any kind (ArrayBuffer too): sized() makes them bytes, as lib-storage does.
  if (isWebStream(body)) return Readable.fromWeb(body, { objectMode: true })
  if (isBlobLike(body)) {
    const stream = body.stream()
    if (isWebStream(stream)) return Readable.fromWeb(stream, { objectMode: true })
    if (typeof (stream as AsyncIterable<Uint8Array>)?.[Symbol.asyncIterator] === 'function') {
      return stream as AsyncIterable<Uint8Array>
    }
    throw invalid(`params.Body.stream() gave ${describeValue(stream)}, not a ReadableStream: nothing was published`)
  }
  return body as AsyncIterable<Uint8Array>
}

/** ERR_INVALID_ARGUMENT for a Body of a kind lib-storage does not take. */
function checkBody(body: unknown): void {
  if (typeof body === 'string' || body instanceof String || body instanceof Uint8Array) return
  if ((typeof Blob !== 'undefined' && body instanceof Blob) || isWebStream(body) || isNodeStream(body)) return
  if (isBlobLike(body)) return
  // lib-storage's words (its done() rejects with them; null and undefined with a TypeError).
  throw invalid(
    `params.Body must be a string, Buffer, Uint8Array, Blob (or an object with stream()), Node Readable or web ReadableStream, got ${
      body === null ? 'null' : typeof body
    }: Body Data is unsupported format, expected data to be one of: string | Uint8Array | Buffer | Readable | ReadableStream | Blob;.`,
  )
}

/**
 * A chunk of the Body as bytes, as lib-storage makes them (`Buffer.from`): bytes as they are,
 * a string in UTF-8, an ArrayBuffer's memory viewed, an array (or array-like) of byte values
 * copied; what `Buffer.from` refuses is ERR_INVALID_ARGUMENT, naming it. Another typed array
 * or a DataView is its memory viewed, where `Buffer.from` would keep each element's low byte
 * (of a DataView, none).
 */
function bodyChunk(chunk: unknown): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk
  if (typeof chunk === 'string') return Buffer.from(chunk)
  if (chunk instanceof ArrayBuffer || chunk instanceof SharedArrayBuffer) return Buffer.from(chunk)
  if (ArrayBuffer.isView(chunk)) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
  // Any other object as `Buffer.from` makes it (lib-storage's done() rejects what it refuses):
  // a String object, a Buffer's JSON form ({ type: 'Buffer', data }), an array-like.
  if (typeof chunk === 'object' && chunk !== null) {
    try {
      return Buffer.from(chunk as Parameters<typeof Buffer.from>[0] & object)
    } catch {
      // Not bytes to Buffer.from either: refused below.
    }
  }
  const kind =
    chunk === null ? 'null' : typeof chunk === 'object' ? (chunk.constructor?.name ?? 'object') : typeof chunk
  throw invalid(`params.Body gave a chunk of type ${kind}, not bytes: nothing was published`)
}

/** Bytes in views of FEED_BYTES (no copy), so the writer takes them as it takes a stream. */
async function* feed(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.byteLength; at += FEED_BYTES) {
    yield bytes.subarray(at, Math.min(at + FEED_BYTES, bytes.byteLength))
  }
}

/** An endpoint as the SDK's `config.endpoint()` gives one. */
interface EndpointV1 {
  protocol: string
  hostname: string
  port?: number
}

/**
 * lib-storage's Location for an object at `key` (here: the container's prefix), made as
 * lib-storage makes it after a PutObject: the client's own endpoint, else the one the
 * client's endpoint rules give a PutObject of it (region, FIPS, dual-stack, Accelerate, the
 * global endpoint, path style, an endpoint from the environment); then the bucket in the path
 * when the client forces path style, else in the host name; bucket and key segments encoded
 * as the SDK encodes them.
 */
async function locationOf(client: S3Client, bucket: string, key: string): Promise<string> {
  const config = client.config as unknown as EndpointConfig & {
    endpoint?: () => Promise<EndpointV1>
    forcePathStyle?: boolean
  }
  const endpoint = (await config.endpoint?.()) ?? (await ruledEndpoint(config, bucket, key))
  const path = key
    .split('/')
    .map((s) => sdkEncode(s))
    .join('/')
  const b = sdkEncode(bucket)
  const port = endpoint.port ? `:${endpoint.port}` : ''
  if (config.forcePathStyle) return `${endpoint.protocol}//${endpoint.hostname}${port}/${b}/${path}`
  if (endpoint.hostname.startsWith(`${b}.`)) return `${endpoint.protocol}//${endpoint.hostname}${port}/${path}`
  return `${endpoint.protocol}//${b}.${endpoint.hostname}${port}/${path}`
}

/** A client's configuration, as the SDK's endpoint rules read it. */
interface EndpointConfig {
  endpointProvider?: (params: Record<string, unknown>) => { url: URL }
  clientContextParams?: Record<string, unknown>
  [name: string]: unknown
}

/**
 * The parameters of PutObject's endpoint rules (client-s3's commonParams and its Bucket and
 * Key) and the configuration each is read from; `true` for a client context parameter,
 * which its `clientContextParams` may set too. Endpoint is the environment's, below.
 */
const ENDPOINT_PARAMS: ReadonlyArray<[string, string, boolean]> = [
  ['Region', 'region', false],
  ['UseFIPS', 'useFipsEndpoint', false],
  ['UseDualStack', 'useDualstackEndpoint', false],
  ['UseGlobalEndpoint', 'useGlobalEndpoint', false],
  ['ForcePathStyle', 'forcePathStyle', true],
  ['Accelerate', 'useAccelerateEndpoint', true],
  ['UseArnRegion', 'useArnRegion', true],
  ['DisableMultiRegionAccessPoints', 'disableMultiregionAccessPoints', true],
  ['DisableS3ExpressSessionAuth', 'disableS3ExpressSessionAuth', true],
]

/**
 * The endpoint the client's rules give a PutObject of `key` on `bucket`, the parameters
 * read from its configuration as the SDK reads them (createConfigValueProvider), which is
 * how lib-storage finds the endpoint of its Location: AWS's for the region (FIPS,
 * dual-stack, Accelerate, the global endpoint), or the environment's.
 */
async function ruledEndpoint(config: EndpointConfig, bucket: string, key: string): Promise<EndpointV1> {
  const params: Record<string, unknown> = { Bucket: bucket, Key: key }
  for (const [param, name, contextParam] of ENDPOINT_PARAMS) {
    let value = (contextParam ? config.clientContextParams?.[name] : undefined) ?? config[name]
    try {
      if (typeof value === 'function') value = await value()
    } catch {
      // A provider that fails (a setting read from a file): the rules' default. The
      // checkpoint is published; the Location is informative.
      value = undefined
    }
    if (value !== undefined) params[param] = value
  }
  const region = typeof params.Region === 'string' ? params.Region : 'us-east-1'
  // A client configured by the environment has no endpoint in its config: the SDK reads
  // these variables when it sends (createS3Client reads them the same way).
  const fromEnv = process.env.AWS_ENDPOINT_URL_S3 || process.env.AWS_ENDPOINT_URL
  if (fromEnv) params.Endpoint = fromEnv
  let url: URL | undefined
  try {
    url = config.endpointProvider?.({ Region: region, ...params }).url
  } catch {
    // Rules that refuse the parameters: the Location is informative, the upload is done.
  }
  url ??= new URL(fromEnv || `https://s3.${region}.amazonaws.com`)
  return { protocol: url.protocol, hostname: url.hostname, port: Number(url.port) || undefined }
}

/** A URI segment encoded as the SDK encodes bucket and key in a Location: `!'()*` too. */
function sdkEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${(c.codePointAt(0) as number).toString(16).toUpperCase()}`)
}

export class Upload extends EventEmitter {
  readonly client: AnyS3Client
  /** The params given, those set to null left out (not given, as in lib-storage). */
  readonly params: UploadParams
  /** The container's store: s3://Bucket/Key. */
  readonly store: ObjectStore
  /**
   * lib-storage's UploadId of its multipart upload (for a caller's own clean-up after
   * `leavePartsOnError`): never set, as a container makes several, each aborted on failure.
   */
  readonly uploadId: string | undefined = undefined
  private readonly settings: Partial<Settings> & WithHooks
  /** `client`, or the library's S3Client sending through it (ownS3Client). */
  private readonly storeClient: S3Client
  private readonly abortController: AbortController | LibStorageAbortController
  private readonly total: number | undefined
  /** params.ContentLength as a number. */
  private readonly contentLength: number | undefined
  /** lib-storage's part size: a Body of unknown size no larger goes in one PutObject, whose event has the total. */
  private readonly partBytes: number
  /** The Body's size, once it has ended. */
  private bodyBytes: number | undefined
  private readonly exportTo: Omit<S3ExportTarget, 'client'> | undefined
  /** The caller's params object, which lib-storage reads when done() sends: checked unchanged then. */
  private readonly givenParams: UploadParams
  /** The params the store, the Body and the total were taken from (TAKEN), as the constructor saw them. */
  private readonly taken: Pick<UploadParams, (typeof TAKEN)[number]>
  private sent = false
  private loaded = 0
  /** The write stream, once `done()` has started it. */
  // biome-ignore lint/correctness/noUnusedPrivateClassMembers: tests read it for the settings queueSize and partSize gave
  private writer: StreamSegmentWriteStream | undefined

  constructor(options: UploadOptions) {
    super()
    // As lib-storage's (`options.tags || []`, `options.abortController ?? …`), an option set to null is not given.
    const given = withoutNulls(options ?? ({} as UploadOptions))
    const { client, queueSize, partSize, tags, abortController, settings = {}, exportTo } = given
    if (given.params === undefined || typeof given.params !== 'object') {
      throw invalid(
        'params are required ({ Bucket, Key, Body }): InputError: Upload requires params to be passed to upload.',
      )
    }
    // A parameter set to null is not given, as in lib-storage: a null Body is refused below, as there.
    const params = withoutNulls(given.params)
    if (client === undefined || client === null) {
      throw invalid('client is required (an S3Client): InputError: Upload requires a AWS client to do uploads with.')
    }
    checkParams(params)
    checkBucket(params.Bucket as string, client)
    const length = params.ContentLength === undefined ? undefined : contentLengthOf(params.ContentLength)
    if (length !== undefined && (!Number.isSafeInteger(length) || length < 0)) {
      throw invalid(
        `params.ContentLength ${describeOption(params.ContentLength)}: must be a non-negative integer (or a string of one)`,
      )
    }
    // lib-storage reads tags, queueSize and partSize as `options.x || its default`: any falsy
    // value (0, NaN, false, '') is not given; a `queueSize` of 1.5 runs 2 uploaders (its loop's
    // count), one of '4' runs 4 (asLibStorageNumber).
    if (tags && (!Array.isArray(tags) || tags.length > 0)) throw invalid(`tags: ${TAGS_WHY}`)
    if (typeof settings !== 'object' || settings === null) throw invalid('settings: must be an object of settings')
    checkOptionNames('Upload', options, UPLOAD_OPTIONS)
    checkOptionNames('Upload: settings', settings, [], { settings: true })
    checkSettingValues(settings)
    const s: Partial<Settings> & WithHooks = { ...settings }
    const queue = asLibStorageNumber(queueSize)
    if (queueSize) {
      if (!(queue >= 1)) {
        throw invalid(
          `queueSize ${describeOption(queueSize)}: must be a number, at least 1. Queue size: Must have at least one uploading queue.`,
        )
      }
      s.segmentMpuMaxConcurrency = Math.min(Math.ceil(queue), MAX_QUEUE)
    }
    const part = asLibStorageNumber(partSize)
    if (partSize) {
      if (part < MIN_PART_SIZE) {
        // lib-storage's words, which a caller may match.
        throw invalid(
          `partSize ${describeOption(partSize)}: EntityTooSmall: Your proposed upload part size [${part}] is smaller than the minimum allowed size [${MIN_PART_SIZE}] (5MB)`,
        )
      }
      if (!Number.isSafeInteger(part) || part > MAX_PART_SIZE) {
        throw invalid(
          `partSize ${describeOption(partSize)}: must be an integer from ${MIN_PART_SIZE} (5 MiB) to ${MAX_PART_SIZE} (5 GiB, S3's largest part)`,
        )
      }
      // Rounded up to a whole data block when the file opens: an existing container's blocks
      // are its own, which only its inode says (PART_BYTES).
      s[PART_BYTES] = part
    }
    if (exportTo !== undefined) {
      const t = exportTo as Partial<S3ExportTarget> | null
      if (t === null || typeof t !== 'object' || typeof t.Bucket !== 'string' || typeof t.Key !== 'string') {
        throw invalid('exportTo: { Bucket, Key, … } naming the plain object to write')
      }
      if ('client' in t) throw invalid("exportTo: no client (the Upload's own is used)")
      // Checked now, as exportObject checks it: a Key S3 refuses would fail done() after the publish.
      try {
        checkS3ExportTarget(t as S3ExportTarget)
      } catch (err) {
        throw invalid(`exportTo: ${(err as Error).message.replace(/^exportObject: /, '')}`)
      }
    }
    if (abortController !== undefined) {
      const signal = (abortController as { signal?: { aborted?: unknown } | null } | null)?.signal
      const polyfill = typeof signal?.aborted === 'boolean' && 'onabort' in signal
      if (!isSignal(signal) && !polyfill) {
        throw invalid(
          'abortController: must be an AbortController (an object with an AbortSignal, or a signal with aborted and onabort, as its signal)',
        )
      }
    }
    this.exportTo = exportTo
    this.client = client
    this.params = params
    this.givenParams = given.params
    this.taken = { Bucket: params.Bucket, Key: params.Key, Body: params.Body, ContentLength: params.ContentLength }
    this.settings = s
    this.abortController = abortController ?? new AbortController()
    checkBody(given.params.Body)
    this.contentLength = length
    this.total = length ?? bodyLength(params.Body)
    this.partBytes = partSize ? part : MIN_PART_SIZE
    // Anything else is refused by the store, naming what it got.
    this.storeClient = ownS3Client(client) ?? (client as S3Client)
    this.store = openStore({ client: this.storeClient, bucket: params.Bucket as string, prefix: params.Key as string })
  }

  /** Aborts the upload: every request in flight is aborted, nothing is published. */
  async abort(): Promise<void> {
    this.abortController.abort()
  }

  override on(event: 'httpUploadProgress', listener: (progress: Progress) => void): this
  // biome-ignore lint/suspicious/noExplicitAny: EventEmitter's own catch-all
  override on(event: string | symbol, listener: (...args: any[]) => void): this
  // biome-ignore lint/suspicious/noExplicitAny: EventEmitter's own catch-all
  override on(event: string | symbol, listener: (...args: any[]) => void): this {
    return super.on(event, listener)
  }

  /** Writes the Body as a new checkpoint; resolves once it is published. Once per Upload, as lib-storage's. */
  async done(): Promise<UploadResult> {
    if (this.sent) {
      throw invalid(
        'done() was called already: make a new Upload (@aws-sdk/lib-storage: this instance of Upload has already executed .done(). Create a new instance.)',
      )
    }
    this.sent = true
    const heard = signalOf(this.abortController)
    try {
      this.checkUnchanged()
      return await this.send(heard.signal)
    } catch (err) {
      throw asLibStorageError(err)
    } finally {
      heard.release()
    }
  }

  /**
   * Refuses params changed since the constructor, on `upload.params` or on the caller's
   * object: lib-storage reads them when done() sends, but the container (Bucket, Key), the
   * Body and its total were taken in the constructor, so the upload would go elsewhere than
   * its result says, or drop a parameter that is refused (an ACL) without a word.
   */
  private checkUnchanged(): void {
    for (const p of [this.params, this.givenParams]) {
      // Its data properties: a getter is not called again (one that makes a new stream each
      // time would open one never read), its value as the constructor took it.
      const now: Record<string, unknown> = {}
      for (const [name, d] of Object.entries(Object.getOwnPropertyDescriptors(p))) {
        if (!d.enumerable) continue
        const value: unknown = 'value' in d ? d.value : this.taken[name as (typeof TAKEN)[number]]
        if (value !== null && value !== undefined) now[name] = value
      }
      for (const name of TAKEN) {
        if (now[name] !== this.taken[name]) {
          const [was, is] = [describeOption(this.taken[name]), describeOption(now[name])]
          throw invalid(
            `params.${name} was changed after the constructor (${was === is ? `another ${is}` : `${was}, now ${is}`}): the container, the Body and its size are taken there; make a new Upload with the params to send`,
          )
        }
      }
      checkParams(now as Partial<UploadParams>)
    }
  }

  /** done()'s upload, which `signal` aborts. */
  private async send(signal: AbortSignal): Promise<UploadResult> {
    if (signal.aborted) {
      // As lib-storage's, whose readers stop at the abort and so destroy a stream Body: a
      // file's read stream is not left holding its descriptor.
      if (this.params.Body instanceof Readable) this.params.Body.destroy()
      throw abortError(signal.reason)
    }
    const Bucket = this.params.Bucket as string
    const Key = this.params.Key as string
    // Before the writer: a Body that cannot be read (a locked web stream, a stream() that
    // throws) rejects done() with no request made, and no writer destroyed before pipeline()
    // listens to it, whose 'error' nobody would hear (thrown out of the process).
    const source = bodySource(this.params.Body)
    const writer = createStreamSegmentWriteStream({ store: this.store, signal, ...this.settings })
    this.writer = writer
    /** A listener that threw: lib-storage's done() rejects with it, so this one does too. */
    let listenerError: { err: unknown } | undefined
    let reported = false
    // One event per upload request, the last one (part 0's) before the inode write: a
    // listener that throws there stops the upload before anything is published. After the
    // commit, one event only when no request came before (a Body with nothing to send).
    writer.on('progress', (p) => {
      if (writer.flushTiming !== undefined && reported) return
      // Once aborted, requests already on their way still land: as lib-storage's uploaders
      // (which check the signal after each part), none is reported. The event after a commit
      // the abort could not stop is, when it is the one event.
      if (signal.aborted && writer.flushTiming === undefined) return
      reported = true
      this.loaded = Math.max(this.loaded, Math.min(p.uploadedBytes, p.bytesWritten))
      // A stream of unknown size that fits in one part: lib-storage's PutObject event has its size.
      const ended = this.bodyBytes
      const total = this.total ?? (ended !== undefined && ended <= this.partBytes ? ended : undefined)
      try {
        this.emit('httpUploadProgress', { loaded: this.loaded, total, part: p.requests, Key, Bucket })
      } catch (err) {
        listenerError ??= { err }
        writer.destroy(err instanceof Error ? err : new Error(String(err)))
      }
    })
    const closed = new Promise<void>((r) => (writer.closed ? r() : writer.once('close', () => r())))
    try {
      await pipeline(source, this.sized(), writer)
    } catch (err) {
      writer.destroy(err as Error)
      await closed // every multipart upload aborted, the file closed
      if (listenerError !== undefined) throw listenerError.err
      // An abort that came while the inode write was under way, which then published: done.
      if (writer.flushTiming === undefined) throw signal.aborted ? abortError(signal.reason) : err
    }
    await closed
    if (listenerError !== undefined) throw listenerError.err
    const timing = writer.flushTiming as FlushTiming
    const result: UploadResult = {
      $metadata: { httpStatusCode: 200 },
      Bucket,
      Key,
      ETag: writer.file === undefined ? undefined : fileState(writer.file).publishedEtag,
      Location: await locationOf(this.storeClient, Bucket, Key),
      cno: timing.cno,
      size: writer.bytesWritten,
      timing,
    }
    if (this.exportTo !== undefined) {
      const target = { ...this.exportTo, client: this.storeClient }
      result.export = await exportObject(this.store, target, { cno: timing.cno, signal }).catch((err: unknown) => {
        throw signal.aborted ? abortError(signal.reason) : err
      })
    }
    return result
  }

  /** Passes the Body through, failing unless it has exactly ContentLength bytes (when given). */
  private sized(): (source: AsyncIterable<Uint8Array>) => AsyncGenerator<Uint8Array> {
    const expected = this.contentLength
    const ended = (bytes: number) => {
      this.bodyBytes = bytes
    }
    return async function* (source) {
      let bytes = 0
      for await (const chunk of source) {
        const b = bodyChunk(chunk)
        bytes += b.byteLength
        if (expected !== undefined && bytes > expected) {
          throw invalid(`the Body has more than params.ContentLength (${expected}) bytes: nothing was published`)
        }
        yield b
      }
      if (expected !== undefined && bytes !== expected) {
        throw invalid(`the Body has ${bytes} bytes, params.ContentLength says ${expected}: nothing was published`)
      }
      ended(bytes)
    }
  }
}
