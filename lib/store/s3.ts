/**
 * `S3Store`: the ObjectStore on S3 and S3-compatible servers (`@aws-sdk/client-s3`).
 *
 * Invariants and failure handling:
 * - Every request carries the caller's AbortSignal; a fired signal is ERR_ABORTED with
 *   the signal's reason as cause, even mid-body (the SDK destroys the socket; a GET body
 *   being read is destroyed by our own listener).
 * - Bodies are whole Uint8Arrays (never streams, so never aws-chunked). A GET body is
 *   read into one buffer of the announced length; a shorter or longer body is ERR_STORE.
 * - Per-byte client costs are avoided: payloads are sent UNSIGNED-PAYLOAD (no SHA-256
 *   pass), the SDK computes no checksum of its own (`createS3Client` sets WHEN_REQUIRED),
 *   and with `checksums` on we send our CRC-32 (lib/crc32.ts) as `x-amz-checksum-crc32`.
 * - ETags are returned unquoted everywhere, and sent unquoted in If-Match (radosgw,
 *   R2 and Spaces match only that form; AWS ignores the quotes).
 * - A conditional put stores a write id in metadata `hf-write`. When it fails its
 *   precondition (412/409) and a HEAD shows our write id, the write landed earlier and
 *   its answer was lost (the SDK resent it): success with the stored ETag.
 * - `createMultipart(key, { ifNoneMatch: '*' })` first puts an empty placeholder
 *   create-only (radosgw ignores If-None-Match on CompleteMultipartUpload); if creating
 *   the upload then fails, the placeholder is deleted so that a retry can claim again.
 * - radosgw answers CompleteMultipartUpload with an empty ETag: we HEAD for it.
 * - With `checksums` on, a multipart upload declares CRC32 and Complete lists every
 *   part's CRC: kept per upload in memory, or read back with ListParts when unknown.
 */
import { createHash, randomUUID } from 'node:crypto'
import { Agent as HttpAgent } from 'node:http'
import { Agent as HttpsAgent } from 'node:https'
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  UploadPartCommand,
} from '@aws-sdk/client-s3'
import createDebug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import { checkKey, joinBody, unquoteEtag } from './common.js'
import {
  type Body,
  type ByteRange,
  type CompletedPart,
  type CreateMultipartOptions,
  type GetOptions,
  type ListEntry,
  type MultipartUpload,
  type ObjectInfo,
  type ObjectStore,
  type PutOptions,
  type RequestOptions,
  WRITE_ID_METADATA,
} from './types.js'

const log = createDebug('stream-segment:s3')
const EMPTY = new Uint8Array(0)
const MAX_PAGE = 1000

export interface S3StoreOptions {
  client: S3Client
  bucket: string
  /** Key prefix of the container; a `/` is appended when missing. */
  prefix: string
  /** Send our CRC-32 with every body. Default: on for AWS, off for a custom endpoint. */
  checksums?: boolean
  /** Sign bodies as UNSIGNED-PAYLOAD instead of hashing them (default true). */
  unsignedPayload?: boolean
  /** Entries per list page and keys per DeleteObjects batch, 1..1000 (default 1000; small in tests). */
  pageSize?: number
}

export type CreateS3ClientOptions = S3ClientConfig & {
  /** Sockets per origin of the keep-alive agents (default 64). */
  maxSockets?: number
}

/**
 * An S3Client configured the SDK's usual way (credential chain, region,
 * `AWS_ENDPOINT_URL_S3`) and tuned for whole-buffer bodies: keep-alive agents, no
 * `Expect: 100-continue`, no SDK checksums, path-style addressing on a custom endpoint.
 */
export function createS3Client(options: CreateS3ClientOptions = {}): S3Client {
  const { maxSockets = 64, ...config } = options
  const endpoint = config.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL
  const region = config.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION
  return new S3Client({
    requestHandler: {
      httpAgent: new HttpAgent({ keepAlive: true, maxSockets }),
      httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets }),
    },
    expectContinueHeader: false,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    ...config,
    ...(endpoint !== undefined && { endpoint, forcePathStyle: config.forcePathStyle ?? true }),
    // A custom endpoint (radosgw, MinIO) needs some region to sign with.
    ...((region !== undefined || endpoint !== undefined) && { region: region ?? 'us-east-1' }),
  })
}

function crc32Base64(body: Uint8Array): string {
  const b = Buffer.allocUnsafe(4)
  b.writeUInt32BE(crc32(body) >>> 0)
  return b.toString('base64')
}

type SdkError = { name?: string; message?: string; $metadata?: { httpStatusCode?: number } }

function statusOf(err: unknown): number | undefined {
  return (err as SdkError | undefined)?.$metadata?.httpStatusCode
}

function nameOf(err: unknown): string {
  return (err as SdkError | undefined)?.name ?? 'Error'
}

type HttpRequestLike = { headers: Record<string, string>; body?: unknown }

function isHttpRequest(x: unknown): x is HttpRequestLike {
  return typeof x === 'object' && x !== null && typeof (x as HttpRequestLike).headers === 'object'
}

type MiddlewareCommand = {
  middlewareStack: {
    add(
      mw: (next: (args: unknown) => Promise<unknown>) => (args: unknown) => Promise<unknown>,
      options: { step: 'build'; name: string },
    ): void
  }
}

/** Per-command middleware (never the caller's client): set one header at the build step. */
function addHeader<C>(command: C, name: string, value: (req: HttpRequestLike) => string | undefined): C {
  ;(command as unknown as MiddlewareCommand).middlewareStack.add(
    (next) => async (args) => {
      const req = (args as { request?: unknown }).request
      if (isHttpRequest(req)) {
        const v = value(req)
        if (v !== undefined) req.headers[name] = v
      }
      return next(args)
    },
    { step: 'build', name: `streamSegment-${name}` },
  )
  return command
}

export class S3Store implements ObjectStore {
  readonly url: string
  readonly client: S3Client
  readonly bucket: string
  /** The key prefix, `''` or ending in `/`. */
  readonly prefix: string
  readonly checksums: boolean
  readonly unsignedPayload: boolean
  readonly pageSize: number
  /** uploadId → partNumber → CRC-32 (base64), for Complete when `checksums` is on. */
  #partCrcs = new Map<string, Map<number, string>>()

  constructor(options: S3StoreOptions) {
    if (!(options.client instanceof S3Client))
      throw StreamSegmentError.invalidArgument('S3Store: client must be an S3Client')
    if (typeof options.bucket !== 'string' || options.bucket === '') {
      throw StreamSegmentError.invalidArgument('S3Store: bucket must be a non-empty string')
    }
    this.client = options.client
    this.bucket = options.bucket
    const p = (options.prefix ?? '').replace(/^\/+/, '')
    this.prefix = p === '' || p.endsWith('/') ? p : `${p}/`
    this.url = `s3://${this.bucket}/${this.prefix.replace(/\/$/, '')}`
    const custom = (this.client.config as { isCustomEndpoint?: boolean }).isCustomEndpoint === true
    this.checksums = options.checksums ?? !custom
    this.unsignedPayload = options.unsignedPayload ?? true
    this.pageSize = options.pageSize ?? MAX_PAGE
    if (!Number.isInteger(this.pageSize) || this.pageSize < 1 || this.pageSize > MAX_PAGE) {
      throw StreamSegmentError.invalidArgument(`S3Store: pageSize ${this.pageSize} is not in 1..${MAX_PAGE}`)
    }
  }

  async put(key: string, chunks: Body, options: PutOptions = {}): Promise<{ etag: string }> {
    const { ifNoneMatch, ifMatch, signal } = options
    checkKey(key)
    if (ifNoneMatch !== undefined && ifNoneMatch !== '*') {
      throw StreamSegmentError.invalidArgument(`put ${key}: ifNoneMatch must be '*'`)
    }
    if (ifNoneMatch !== undefined && ifMatch !== undefined) {
      throw StreamSegmentError.invalidArgument(`put ${key}: ifNoneMatch and ifMatch together`)
    }
    const conditional = ifNoneMatch !== undefined || ifMatch !== undefined
    const writeId = conditional ? (options.writeId ?? randomUUID()) : undefined
    const metadata = writeId === undefined ? options.metadata : { ...options.metadata, [WRITE_ID_METADATA]: writeId }
    // The SDK takes one buffer (a stream body would go aws-chunked): several are joined here.
    const joined = joinBody(chunks)
    const body = joined.bytes
    const command = this.#unsigned(
      new PutObjectCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        Body: body,
        ContentLength: body.byteLength,
        IfNoneMatch: ifNoneMatch,
        IfMatch: ifMatch === undefined ? undefined : unquoteEtag(ifMatch),
        Metadata: metadata,
        ChecksumCRC32: this.checksums ? crc32Base64(body) : undefined,
      }),
    )
    try {
      const out = await this.#send('PutObject', key, signal, () => this.client.send(command, { abortSignal: signal }))
      return { etag: out.ETag ? unquoteEtag(out.ETag) : await this.#etagOf(key, signal) }
    } catch (err) {
      if (writeId === undefined || !StreamSegmentError.is(err)) throw err
      if (err.code === 'ERR_CONFLICT') {
        // A resent write whose first answer was lost comes back 412: recognise it as ours.
        const info = await this.head(key, { signal })
        if (info !== undefined && info.metadata[WRITE_ID_METADATA] === writeId) {
          log('PutObject %s: precondition failed but write id matches: an earlier try landed', this.#where(key))
          return { etag: info.etag }
        }
      }
      // AWS answers If-Match on a missing key with 404 (radosgw with 412).
      if (err.code === 'ERR_NOT_FOUND' && ifMatch !== undefined) {
        throw StreamSegmentError.conflict(`put ${this.#where(key)} if-match ${ifMatch}: no such key`, err)
      }
      throw err
    } finally {
      joined.release()
    }
  }

  async get(key: string, options: GetOptions = {}): Promise<Uint8Array> {
    const { range, signal } = options
    checkKey(key)
    const header = range === undefined ? undefined : this.#rangeHeader(key, range)
    try {
      return await this.#send('GetObject', key, signal, async () => {
        const command = new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Range: header })
        const out = await this.client.send(command, { abortSignal: signal })
        return readBody(out.Body, out.ContentLength, signal)
      })
    } catch (err) {
      // A suffix of an empty object is empty (servers answer 416: no byte to return).
      if (range !== undefined && 'suffix' in range && StreamSegmentError.is(err, 'ERR_RANGE')) return EMPTY
      throw err
    }
  }

  async head(key: string, options: RequestOptions = {}): Promise<ObjectInfo | undefined> {
    const { signal } = options
    try {
      const command = new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key })
      const out = await this.#send('HeadObject', key, signal, () => this.client.send(command, { abortSignal: signal }))
      return { size: out.ContentLength ?? 0, etag: unquoteEtag(out.ETag), metadata: out.Metadata ?? {} }
    } catch (err) {
      // (HEAD answers carry no error code: a missing bucket looks like a missing key.)
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
      throw err
    }
  }

  async *list(prefix = '', options: RequestOptions = {}): AsyncIterable<ListEntry> {
    const { signal } = options
    let token: string | undefined
    do {
      const command = new ListObjectsV2Command({
        Bucket: this.bucket,
        Prefix: this.prefix + prefix,
        ContinuationToken: token,
        MaxKeys: this.pageSize,
      })
      const out = await this.#send('ListObjectsV2', prefix, signal, () =>
        this.client.send(command, { abortSignal: signal }),
      )
      for (const o of out.Contents ?? []) {
        if (o.Key === undefined || !o.Key.startsWith(this.prefix)) continue
        yield {
          key: o.Key.slice(this.prefix.length),
          size: o.Size ?? 0,
          etag: unquoteEtag(o.ETag),
          lastModifiedMs: o.LastModified?.getTime() ?? 0,
        }
      }
      token = out.IsTruncated ? out.NextContinuationToken : undefined
    } while (token !== undefined)
  }

  async delete(keys: string | readonly string[], options: RequestOptions = {}): Promise<void> {
    const { signal } = options
    const list = typeof keys === 'string' ? [keys] : keys
    if (list.length === 1) {
      const key = list[0] as string
      const command = new DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + key })
      try {
        await this.#send('DeleteObject', key, signal, () => this.client.send(command, { abortSignal: signal }))
      } catch (err) {
        if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
      }
      return
    }
    for (let i = 0; i < list.length; i += this.pageSize) {
      const batch = list.slice(i, i + this.pageSize)
      const what = `${batch.length} keys from ${batch[0]}`
      // radosgw (and other S3-compatible servers) require Content-MD5 on DeleteObjects.
      const command = addHeader(
        new DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((k) => ({ Key: this.prefix + k })), Quiet: true },
        }),
        'content-md5',
        (req) => (typeof req.body === 'string' ? createHash('md5').update(req.body).digest('base64') : undefined),
      )
      const out = await this.#send('DeleteObjects', what, signal, () =>
        this.client.send(command, { abortSignal: signal }),
      )
      const failed = (out.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey')
      if (failed.length > 0) {
        const first = failed[0]
        throw StreamSegmentError.store(
          `DeleteObjects ${this.url}: ${failed.length} of ${batch.length} keys failed, first ${first?.Key}: ${first?.Code} ${first?.Message ?? ''}`,
          out.Errors,
        )
      }
    }
  }

  async createMultipart(key: string, options: CreateMultipartOptions = {}): Promise<string> {
    checkKey(key)
    const { ifNoneMatch, signal } = options
    let writeId: string | undefined
    if (ifNoneMatch !== undefined) {
      if (ifNoneMatch !== '*')
        throw StreamSegmentError.invalidArgument(`createMultipart ${key}: ifNoneMatch must be '*'`)
      writeId = randomUUID()
      await this.put(key, EMPTY, { ifNoneMatch: '*', writeId, signal })
    }
    const metadata = writeId === undefined ? options.metadata : { ...options.metadata, [WRITE_ID_METADATA]: writeId }
    const command = new CreateMultipartUploadCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      Metadata: metadata,
      ChecksumAlgorithm: this.checksums ? 'CRC32' : undefined,
    })
    try {
      const out = await this.#send('CreateMultipartUpload', key, signal, () =>
        this.client.send(command, { abortSignal: signal }),
      )
      if (!out.UploadId) throw StreamSegmentError.store(`CreateMultipartUpload ${this.#where(key)}: no UploadId`)
      return out.UploadId
    } catch (err) {
      if (writeId !== undefined) await this.#releasePlaceholder(key, writeId)
      throw err
    }
  }

  async uploadPart(
    key: string,
    uploadId: string,
    partNumber: number,
    chunks: Body,
    options: RequestOptions = {},
  ): Promise<{ etag: string }> {
    const { signal } = options
    const joined = joinBody(chunks)
    const body = joined.bytes
    const crc = this.checksums ? crc32Base64(body) : undefined
    const command = this.#unsigned(
      new UploadPartCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
        PartNumber: partNumber,
        Body: body,
        ContentLength: body.byteLength,
        ChecksumCRC32: crc,
      }),
    )
    const out = await this.#send('UploadPart', `${key}#${partNumber}`, signal, () =>
      this.client.send(command, { abortSignal: signal }),
    ).finally(joined.release)
    if (crc !== undefined) {
      let crcs = this.#partCrcs.get(uploadId)
      if (crcs === undefined) this.#partCrcs.set(uploadId, (crcs = new Map()))
      crcs.set(partNumber, crc)
    }
    return { etag: unquoteEtag(out.ETag) }
  }

  async completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options: RequestOptions = {},
  ): Promise<{ etag: string }> {
    const { signal } = options
    const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber)
    const crcs = this.checksums ? await this.#crcsOf(key, uploadId, sorted, signal) : undefined
    const command = new CompleteMultipartUploadCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      UploadId: uploadId,
      MultipartUpload: {
        Parts: sorted.map((p) => ({
          PartNumber: p.partNumber,
          ETag: `"${unquoteEtag(p.etag)}"`,
          ChecksumCRC32: crcs?.get(p.partNumber),
        })),
      },
    })
    let out: { ETag?: string }
    try {
      out = await this.#send('CompleteMultipartUpload', key, signal, () =>
        this.client.send(command, { abortSignal: signal }),
      )
    } catch (err) {
      // radosgw answers an unknown upload id with 500 "This multipart completion is
      // already in progress" (not 404 NoSuchUpload): ask whether the upload exists.
      if (StreamSegmentError.is(err, 'ERR_STORE') && (statusOf(err.cause) ?? 0) >= 500) {
        const exists = await this.#uploadExists(key, uploadId, signal)
        if (!exists)
          throw StreamSegmentError.notFound(`CompleteMultipartUpload ${this.#where(key)}: no upload ${uploadId}`, err)
      }
      throw err
    }
    this.#partCrcs.delete(uploadId)
    // radosgw answers with an empty ETag.
    return { etag: out.ETag ? unquoteEtag(out.ETag) : await this.#etagOf(key, signal) }
  }

  async abortMultipart(key: string, uploadId: string, options: RequestOptions = {}): Promise<void> {
    const { signal } = options
    const command = new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: this.prefix + key, UploadId: uploadId })
    try {
      await this.#send('AbortMultipartUpload', key, signal, () => this.client.send(command, { abortSignal: signal }))
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    }
    this.#partCrcs.delete(uploadId)
  }

  async *listMultipart(prefix = '', options: RequestOptions = {}): AsyncIterable<MultipartUpload> {
    const { signal } = options
    let keyMarker: string | undefined
    let uploadIdMarker: string | undefined
    for (;;) {
      const command = new ListMultipartUploadsCommand({
        Bucket: this.bucket,
        Prefix: this.prefix + prefix,
        KeyMarker: keyMarker,
        UploadIdMarker: uploadIdMarker,
        MaxUploads: this.pageSize,
      })
      const out = await this.#send('ListMultipartUploads', prefix, signal, () =>
        this.client.send(command, { abortSignal: signal }),
      )
      for (const u of out.Uploads ?? []) {
        if (u.Key === undefined || u.UploadId === undefined || !u.Key.startsWith(this.prefix)) continue
        yield { key: u.Key.slice(this.prefix.length), uploadId: u.UploadId, initiatedMs: u.Initiated?.getTime() ?? 0 }
      }
      if (!out.IsTruncated || (out.NextKeyMarker === undefined && out.NextUploadIdMarker === undefined)) return
      keyMarker = out.NextKeyMarker
      uploadIdMarker = out.NextUploadIdMarker
    }
  }

  #where(key: string): string {
    return `s3://${this.bucket}/${this.prefix}${key}`
  }

  #unsigned<C>(command: C): C {
    return this.unsignedPayload ? addHeader(command, 'x-amz-content-sha256', () => 'UNSIGNED-PAYLOAD') : command
  }

  /** The Range header for `range`; an empty range is a caller's error, as in every store. */
  #rangeHeader(key: string, range: ByteRange): string {
    if ('suffix' in range) {
      if (!Number.isSafeInteger(range.suffix) || range.suffix <= 0) {
        throw StreamSegmentError.invalidArgument(
          `get ${key}: suffix range must be a positive integer, got ${range.suffix}`,
        )
      }
      return `bytes=-${range.suffix}`
    }
    const { start, end } = range
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
      throw StreamSegmentError.invalidArgument(`get ${key}: range must be 0 ≤ start < end, got [${start}, ${end})`)
    }
    return `bytes=${start}-${end - 1}`
  }

  async #etagOf(key: string, signal: AbortSignal | undefined): Promise<string> {
    const info = await this.head(key, { signal })
    if (info === undefined) throw StreamSegmentError.store(`${this.#where(key)} vanished right after it was written`)
    return info.etag
  }

  async #crcsOf(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    signal: AbortSignal | undefined,
  ): Promise<Map<number, string>> {
    const known = this.#partCrcs.get(uploadId)
    if (known !== undefined && parts.every((p) => known.has(p.partNumber))) return known
    // Parts uploaded by another process (or store): ask the server.
    const crcs = new Map<number, string>()
    let marker: string | undefined
    do {
      const command = new ListPartsCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
        PartNumberMarker: marker,
        MaxParts: this.pageSize,
      })
      const out = await this.#send('ListParts', key, signal, () => this.client.send(command, { abortSignal: signal }))
      for (const p of out.Parts ?? []) {
        if (p.PartNumber !== undefined && p.ChecksumCRC32 !== undefined) crcs.set(p.PartNumber, p.ChecksumCRC32)
      }
      marker = out.IsTruncated ? out.NextPartNumberMarker : undefined
    } while (marker !== undefined)
    return crcs
  }

  async #uploadExists(key: string, uploadId: string, signal: AbortSignal | undefined): Promise<boolean> {
    const command = new ListPartsCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      UploadId: uploadId,
      MaxParts: 1,
    })
    try {
      await this.#send('ListParts', key, signal, () => this.client.send(command, { abortSignal: signal }))
      return true
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return false
      throw err
    }
  }

  /** Best effort, without the caller's signal: un-claim a key whose upload failed to start. */
  async #releasePlaceholder(key: string, writeId: string): Promise<void> {
    try {
      const info = await this.head(key)
      if (info !== undefined && info.size === 0 && info.metadata[WRITE_ID_METADATA] === writeId) await this.delete(key)
    } catch (err) {
      log('release placeholder %s failed: %s', this.#where(key), (err as Error).message)
    }
  }

  /** Runs one request: logs its outcome, and maps its failure to a StreamSegmentError. */
  async #send<T>(op: string, key: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    if (signal?.aborted) throw StreamSegmentError.aborted(`${op} ${this.#where(key)} aborted`, signal.reason)
    const t0 = log.enabled ? performance.now() : 0
    try {
      const out = await fn()
      if (log.enabled) {
        const status = (out as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode
        const bytes = out instanceof Uint8Array ? ` ${out.byteLength} B` : ''
        log('%s %s %s%s %d ms', op, this.#where(key), status ?? 'ok', bytes, Math.round(performance.now() - t0))
      }
      return out
    } catch (err) {
      const mapped = this.#mapError(op, key, err, signal)
      if (log.enabled) {
        log('%s %s failed: %s %d ms', op, this.#where(key), mapped.code, Math.round(performance.now() - t0))
      }
      throw mapped
    }
  }

  #mapError(op: string, key: string, err: unknown, signal: AbortSignal | undefined): StreamSegmentError {
    if (StreamSegmentError.is(err)) return err
    const where = this.#where(key)
    if (signal?.aborted) return StreamSegmentError.aborted(`${op} ${where} aborted`, signal.reason ?? err)
    const status = statusOf(err)
    const name = nameOf(err)
    const what = `${op} ${where}: HTTP ${status ?? '-'} ${name}`
    if (name === 'AbortError') return StreamSegmentError.aborted(`${op} ${where} aborted`, err)
    if (status === 412 || name === 'PreconditionFailed' || name === 'ConditionalRequestConflict') {
      return StreamSegmentError.conflict(`${what}: precondition failed`, err)
    }
    if (name === 'NoSuchBucket')
      return StreamSegmentError.notFound(`${what}: bucket ${this.bucket} does not exist`, err)
    if (status === 404 || name === 'NoSuchKey' || name === 'NotFound' || name === 'NoSuchUpload') {
      return StreamSegmentError.notFound(`${what}: not found`, err)
    }
    if (status === 416 || name === 'InvalidRange')
      return StreamSegmentError.range(`${what}: range not satisfiable`, err)
    const message = (err as SdkError | undefined)?.message
    return StreamSegmentError.store(`${what}${message ? `: ${message}` : ''}`, err)
  }
}

type NodeReadable = AsyncIterable<Uint8Array> & { destroy(err?: Error): void }

/**
 * Reads a response body into one buffer of `length` bytes (copying each chunk once; a
 * body that arrives in one chunk is returned as is). The signal destroys the stream.
 */
async function readBody(
  body: unknown,
  length: number | undefined,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  if (body === undefined || body === null) return EMPTY
  const stream = body as Partial<NodeReadable>
  if (typeof stream[Symbol.asyncIterator] !== 'function' || typeof stream.destroy !== 'function') {
    return (body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()
  }
  const readable = stream as NodeReadable
  const onAbort = () => readable.destroy(new Error('aborted while reading the body', { cause: signal?.reason }))
  if (signal?.aborted) onAbort()
  signal?.addEventListener('abort', onAbort, { once: true })
  try {
    if (length === undefined) {
      const chunks: Uint8Array[] = []
      for await (const chunk of readable) chunks.push(chunk)
      return chunks.length === 1 ? (chunks[0] as Uint8Array) : Buffer.concat(chunks)
    }
    let out: Uint8Array | undefined
    let filled = 0
    for await (const chunk of readable) {
      if (out === undefined && chunk.byteLength === length) {
        out = chunk
        filled = length
        continue
      }
      if (filled + chunk.byteLength > length) throw new Error(`body longer than its Content-Length ${length}`)
      if (out === undefined) out = Buffer.allocUnsafe(length)
      out.set(chunk, filled)
      filled += chunk.byteLength
    }
    if (filled !== length) throw new Error(`body ended after ${filled} of ${length} bytes`)
    return out ?? EMPTY
  } finally {
    signal?.removeEventListener('abort', onAbort)
  }
}
