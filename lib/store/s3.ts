/**
 * `S3Store`: the ObjectStore on S3 and S3-compatible servers (`@aws-sdk/client-s3`).
 * Beside it: `createS3Client` (./s3-client.ts), the retry policy and the mapping of failures
 * to StreamSegmentError (./s3-calls.ts), request bodies and headers (./s3-body.ts), the
 * lean GET path and the reading of GET answers (./s3-get.ts).
 *
 * Invariants and failure handling:
 * - Every request carries the caller's AbortSignal; a fired signal is ERR_ABORTED with
 *   the signal's reason as cause, even mid-body (the SDK destroys the socket; a GET body
 *   being read is destroyed by our own listener).
 * - A body of several chunks (views of the writer's slabs) goes to the socket as the
 *   chunks are, never joined into a copy: a `ChunkBody` whose `pipe` writes every chunk
 *   to the request each time it is called (so a retry sends it again), with its
 *   Content-Length and payload hash known, and no SDK checksum: never aws-chunked.
 * - A GET body is exactly the announced length: a shorter or longer body, or a connection
 *   closed mid-body, is a failure with no HTTP status, retried by the policy below. By
 *   default (`getPath: 'http'`, lib/store/s3-get.ts) the SDK signs the request, which goes
 *   out on keep-alive sockets of our own, its body read by the kernel into pieces of
 *   64 KiB; with `getPath: 'sdk'` the SDK's body stream is kept as the chunks it arrived
 *   in. `getChunks` hands out either as they are; `get` joins them when there are several.
 * - Every body is checked by the server, at one pass of client CPU at most: on AWS it goes
 *   UNSIGNED-PAYLOAD with our CRC-32 (lib/util/crc32.ts) as `x-amz-checksum-crc32`
 *   (`checksums`); on a custom endpoint, whose server may ignore that header, it carries
 *   its SHA-256 as the signed payload hash, or Content-MD5 where MD5 is the cheaper pass
 *   on this CPU (lib/util/digest.ts). We compute the hash over the chunks, once for every
 *   try. The SDK computes no checksum of its own: `createS3Client` sets WHEN_REQUIRED, and
 *   on a client that would (the SDK's default) every body carries our CRC-32, which the
 *   SDK then takes as it is. A body the server refuses as damaged (BadDigest,
 *   XAmzContentSHA256Mismatch) is sent again.
 * - ETags are returned unquoted everywhere, and sent unquoted in If-Match (radosgw,
 *   R2 and Spaces match only that form; AWS ignores the quotes).
 * - A conditional put stores a write id in metadata `hf-write`. When it fails its
 *   precondition (412/409) and a HEAD shows our write id, the write landed earlier and
 *   its answer was lost (the SDK resent it): success with the stored ETag.
 * - `createMultipart(key, { ifNoneMatch: '*' })` first puts an empty placeholder
 *   create-only (radosgw ignores If-None-Match on CompleteMultipartUpload); if creating
 *   the upload then fails, the placeholder is deleted so that a retry can claim again, and
 *   so it is when the upload is aborted (while it is still the claim's empty placeholder).
 * - radosgw answers CompleteMultipartUpload with an empty ETag: we HEAD for it.
 * - With `checksums` on, a multipart upload declares CRC32 and Complete lists every
 *   part's CRC: kept per upload in memory, or read back with ListParts when unknown.
 * - A claim's write id and the part CRCs are remembered for the MAX_OPEN_UPLOADS most
 *   recently used uploads only: one left open forever (never completed nor aborted) is
 *   forgotten in time, and then completes as an upload of another process would.
 */
import { createHash, randomUUID } from 'node:crypto'
import type { Part, S3Client } from '@aws-sdk/client-s3'
import createDebug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { checkOptionNames, givenOr as or } from '../settings.js'
import { digestChunks, sha256BeatsMd5 } from '../util/digest.js'
import { lendPieces, returnPieces } from '../util/piece-pool.js'
import { printableLog } from '../util/shell-words.js'
import { signalWithin } from '../util/signals.js'
import { describeValue } from '../util/typed-arrays.js'
import {
  CLOCK_OFFSET_NOISE_MS,
  checkConditions,
  checkIfMatch,
  checkKey,
  checkListArguments,
  checkMetadataValues,
  checkPartBytes,
  checkPartList,
  checkPartNumber,
  describeEtag,
  ETAG_CHARS,
  prefixFault,
  quoteKey,
  unquoteEtag,
} from './common.js'
import { addHeader, crc32Base64, requestBody, s3Attributes, withoutStreamRetryWarning } from './s3-body.js'
import { AUTH_ERRORS, callS3, nameOf, statusOf } from './s3-calls.js'
import { type AnyS3Client, ownS3Client } from './s3-client.js'
import { askedRange, checkGetAnswer, piecesOf, readBody, refused, sendOverHttp, transportOf } from './s3-get.js'
import { s3Sdk } from './s3-sdk.cjs'
import {
  type AbortMultipartOptions,
  type Body,
  type ByteRange,
  type CompletedPart,
  type CopySource,
  type CreateMultipartOptions,
  type GetOptions,
  type ListEntry,
  type ListOptions,
  type MultipartUpload,
  type ObjectInfo,
  type ObjectStore,
  type PutOptions,
  type RequestOptions,
  type UploadedPart,
  WRITE_ID_METADATA,
} from './types.js'

export { type AnyS3Client, type CreateS3ClientOptions, createS3Client } from './s3-client.js'

const log = printableLog(createDebug('stream-segment:s3'))
const EMPTY = new Uint8Array(0)
const MD5_HEX = /^[0-9a-f]{32}$/

const MAX_PAGE = 1000
/** Characters XML 1.0 cannot carry, not even as a character reference (lone surrogates are in no key). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is looked for
const NOT_IN_XML = /[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]/
/** Truncated pages in a row with nothing on them before a listing is given up as endless. */
const MAX_EMPTY_PAGES = 100
/** How long releasing a claim's placeholder may take, retries included (see #releasePlaceholder). */
const PLACEHOLDER_RELEASE_MS = 10_000
/**
 * Open multipart uploads whose claim and part CRCs a store remembers, the most recently
 * used: one never completed nor aborted (its caller gave up, its abort failed) must not
 * hold memory for the store's lifetime. Forgetting is safe: without its claim, a lost
 * completion answer is judged by the ETag its parts give the object (where parts have no
 * MD5 ETags, such a completion is then refused, never taken for landed); without its
 * CRCs, Complete reads them back with ListParts.
 */
export const MAX_OPEN_UPLOADS = 1000

/** Sets `id` as the most recent entry of `map`, dropping the oldest beyond MAX_OPEN_UPLOADS (a Map keeps insertion order). */
function remember<V>(map: Map<string, V>, id: string, value: V): void {
  map.delete(id)
  map.set(id, value)
  if (map.size > MAX_OPEN_UPLOADS) map.delete(map.keys().next().value as string)
}

/**
 * The ETag S3 (and radosgw) gives the object a multipart upload of `parts` completes: the
 * MD5 of their MD5s, then `-` and their count; undefined when a part's ETag is no MD5
 * (SSE-KMS, some servers), as then nothing is known of the object's.
 */
function multipartEtag(parts: readonly CompletedPart[]): string | undefined {
  const md5 = createHash('md5')
  for (const p of parts) {
    const e = unquoteEtag(p.etag)
    if (!MD5_HEX.test(e)) return undefined
    md5.update(Buffer.from(e, 'hex'))
  }
  return `${md5.digest('hex')}-${parts.length}`
}

/** The names S3StoreOptions holds: any other is refused. */
const S3_STORE_OPTIONS: ReadonlyArray<keyof S3StoreOptions> = [
  'client',
  'bucket',
  'prefix',
  'checksums',
  'unsignedPayload',
  'pageSize',
  'unorderedListing',
  'contentMd5',
  'maxRetries',
  'retryBaseMs',
  'retryMaxMs',
  'deadlineMs',
  'getPath',
]

export interface S3StoreOptions {
  /** An S3Client of this package's SDK or of another copy of it (sent through). */
  client: AnyS3Client
  bucket: string
  /**
   * Key prefix of the container; a `/` is appended when missing, leading ones are dropped.
   * No empty, `.` or `..` segment (ERR_INVALID_ARGUMENT).
   */
  prefix: string
  /** Send our CRC-32 with every body. Default: on for AWS, off for a custom endpoint. */
  checksums?: boolean
  /**
   * Send bodies as UNSIGNED-PAYLOAD (true), or sign each body's SHA-256
   * (`x-amz-content-sha256`), which S3 servers (AWS, radosgw, MinIO) check against the
   * bytes they receive (false): a body damaged on the way up is refused and sent again.
   * Default: signed on a custom endpoint when this CPU hashes SHA-256 faster than MD5
   * (SHA extensions: then it replaces Content-MD5 there), else unsigned.
   */
  unsignedPayload?: boolean
  /** Entries per list page and keys per DeleteObjects batch, 1..1000 (default 1000; small in tests). */
  pageSize?: number
  /**
   * The bucket lists keys in no particular order and takes no StartAfter, as directory
   * buckets (S3 Express One Zone) do: a listing is then taken whole and sorted here.
   * Default: true for a bucket whose name ends in `--x-s3`.
   */
  unorderedListing?: boolean
  /**
   * Send Content-MD5 with every body, which S3-compatible servers check (radosgw, MinIO):
   * a body damaged on the way up is refused and sent again. Default: on for a custom
   * endpoint whose bodies go unsigned and without `checksums`; costs one MD5 pass over
   * the bytes sent.
   */
  contentMd5?: boolean
  /**
   * Retries of a request that may succeed when made again: throttling (503 SlowDown,
   * 429), 500/502/504, a reset or refused connection, a timeout, a body cut short, a body
   * damaged on the way (BadDigest). Default 6. Capped exponential backoff with full
   * jitter, from `retryBaseMs` (default 100) to `retryMaxMs` (default 5000).
   */
  maxRetries?: number
  retryBaseMs?: number
  retryMaxMs?: number
  /** A call's whole time, its retries included, before ERR_TIMEOUT (default 300000 ms; 0: none). */
  deadlineMs?: number
  /**
   * How GetObject answers are read: `'http'` (default) sends the SDK's signed request on
   * keep-alive sockets of our own and reads the body into 64 KiB pieces (lib/store/s3-get.ts,
   * HTTP/1.1 over node:net and node:tls); `'sdk'` reads the
   * SDK's body stream, kept as the chunks it arrived in.
   */
  getPath?: 'http' | 'sdk'
}

/** Whether `bucket` is a directory bucket (S3 Express One Zone): its names end in `--x-s3`. */
export function isDirectoryBucket(bucket: string): boolean {
  return bucket.endsWith('--x-s3')
}

/**
 * The pages of one listing, guarded against a server that never ends it: a truncated page
 * must name where the next one starts (else the listing would be cut silently), never a
 * place named before (else the same pages would come round forever), and truncated pages
 * with nothing on them end the listing as endless after MAX_EMPTY_PAGES in a row.
 */
class Pages {
  readonly #seen = new Set<string>()
  #empty = 0

  constructor(
    readonly op: string,
    readonly where: string,
  ) {}

  /** Where the next page starts (`marker`, as the answer names it), or undefined when this one was the last. */
  next(truncated: boolean | undefined, marker: string | undefined, entries: number): string | undefined {
    const page = `${this.op} ${this.where}: page ${this.#seen.size + 1}`
    // Every listing answer says whether it is truncated: one that does not is some other
    // document (an empty body, a proxy's HTML page), not an empty listing.
    if (truncated === undefined) throw StreamSegmentError.store(`${page}: the answer is no listing (no IsTruncated)`)
    if (!truncated) return undefined
    if (marker === undefined) {
      throw StreamSegmentError.store(`${page} is truncated but names no place for the next page`)
    }
    if (this.#seen.has(marker)) {
      throw StreamSegmentError.store(
        `${page} names a place for the next page named before (${marker}): the listing would never end`,
      )
    }
    this.#seen.add(marker)
    this.#empty = entries === 0 ? this.#empty + 1 : 0
    if (this.#empty >= MAX_EMPTY_PAGES) {
      throw StreamSegmentError.store(
        `${page}: ${this.#empty} truncated pages in a row with nothing on them: the listing would never end`,
      )
    }
    return marker
  }
}

/** The one key a store made by s3ObjectStore holds (a symbol: no option a caller can give). */
const ONE_KEY = Symbol('S3Store one key')

/**
 * An S3Store holding the one object at `key` below `options.prefix` rather than a container
 * (an export's `{ Bucket, Key }` target): its prefix needs room for that key only, not for
 * a container's keys, so a Key S3 takes is not refused for its folder's length.
 */
export function s3ObjectStore(options: S3StoreOptions, key: string): S3Store {
  return new S3Store({ ...options, [ONE_KEY]: key } as S3StoreOptions)
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
  readonly contentMd5: boolean
  readonly maxRetries: number
  readonly retryBaseMs: number
  readonly retryMaxMs: number
  readonly deadlineMs: number
  readonly getPath: 'http' | 'sdk'
  readonly unorderedListing: boolean
  /** Requests made again after a failure that may pass (for FlushTiming and ReadTiming). */
  retries = 0
  /** S3's minimum for every multipart piece but the last. */
  readonly minPartBytes = 5 * 1024 * 1024
  /** uploadId → the write id of its claim, to recognise a completion whose answer was lost (see MAX_OPEN_UPLOADS). */
  #claims = new Map<string, string>()
  /** uploadId → partNumber → CRC-32 (base64), for Complete when `checksums` is on (see MAX_OPEN_UPLOADS). */
  #partCrcs = new Map<string, Map<number, string>>()

  /** The SDK's module, loaded by the first store made (./s3-sdk.cts). */
  readonly #sdk = s3Sdk()

  /**
   * The server's time now, as its answers tell it: the SDK sets the client's clock offset
   * by the Date of each answer (and signs by it). LastModified and Initiated are on that
   * clock, which this machine's may be hours away from. A Date has whole seconds, so the
   * offset is a second short of the truth or less, plus the answer's way back: an offset
   * within CLOCK_OFFSET_NOISE_MS says the clocks agree as far as can be told, and this
   * machine's, finer, is taken.
   */
  now(): number {
    const offset = this.client.config.systemClockOffset
    const off = Number.isFinite(offset) && Math.abs(offset) > CLOCK_OFFSET_NOISE_MS ? offset : 0
    return Date.now() + off
  }

  constructor(options: S3StoreOptions) {
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      throw StreamSegmentError.invalidArgument(
        `S3Store: options must be an object ({ client, bucket, prefix }), got ${describeValue(options)}`,
      )
    }
    // A misspelt option would otherwise take its default without a word: a misspelt prefix,
    // the bucket's root as the container.
    checkOptionNames('S3Store', options, S3_STORE_OPTIONS)
    // A client of another copy of the SDK (an application's own version) is sent through.
    const client = ownS3Client(options.client)
    if (client === undefined) {
      throw StreamSegmentError.invalidArgument(
        `S3Store: client must be an S3Client (of @aws-sdk/client-s3), got ${describeValue(options.client)}`,
      )
    }
    if (typeof options.bucket !== 'string' || options.bucket === '') {
      throw StreamSegmentError.invalidArgument('S3Store: bucket must be a non-empty string')
    }
    this.client = client
    this.bucket = options.bucket
    if (options.prefix !== undefined && typeof options.prefix !== 'string') {
      throw StreamSegmentError.invalidArgument(`S3Store: prefix must be a string, got ${describeValue(options.prefix)}`)
    }
    const p = (options.prefix ?? '').replace(/^\/+/, '')
    // `a//b` or `a/../b` would be keys no key may be, and `p//` would show as `p/`'s URL; a
    // prefix without room for the container's keys would fail a write part-way.
    const fault = prefixFault(p, (options as { [ONE_KEY]?: string })[ONE_KEY])
    if (fault !== undefined) {
      throw StreamSegmentError.invalidArgument(`S3Store: prefix ${quoteKey(options.prefix)}: ${fault}`)
    }
    this.prefix = p === '' || p.endsWith('/') ? p : `${p}/`
    // The % ? # of a prefix escaped, so that openStore takes the url back to this container.
    this.url = `s3://${this.bucket}/${this.prefix.replace(/\/$/, '').replace(/[%?#]/g, encodeURIComponent)}`
    const custom = (this.client.config as { isCustomEndpoint?: boolean }).isCustomEndpoint === true
    // Only undefined is not given: a null (from JSON, say) is a value, and refused as one.
    const flag = (name: 'checksums' | 'unsignedPayload' | 'unorderedListing' | 'contentMd5', dflt: () => boolean) => {
      const v: unknown = options[name]
      if (v === undefined) return dflt()
      if (typeof v !== 'boolean') {
        throw StreamSegmentError.invalidArgument(`S3Store: ${name} must be true or false, got ${describeValue(v)}`)
      }
      return v
    }
    this.checksums = flag('checksums', () => !custom)
    this.unsignedPayload = flag('unsignedPayload', () => !(custom && !this.checksums && sha256BeatsMd5()))
    this.pageSize = or(options.pageSize, MAX_PAGE)
    if (!Number.isInteger(this.pageSize) || this.pageSize < 1 || this.pageSize > MAX_PAGE) {
      throw StreamSegmentError.invalidArgument(`S3Store: pageSize ${this.pageSize} is not in 1..${MAX_PAGE}`)
    }
    this.contentMd5 = flag('contentMd5', () => custom && !this.checksums && this.unsignedPayload)
    const nat = (name: string, v: number) => {
      if (!Number.isSafeInteger(v) || v < 0)
        throw StreamSegmentError.invalidArgument(`S3Store: ${name} ${v} must be an integer ≥ 0`)
      return v
    }
    this.maxRetries = nat('maxRetries', or(options.maxRetries, 6))
    this.retryBaseMs = nat('retryBaseMs', or(options.retryBaseMs, 100))
    this.retryMaxMs = nat('retryMaxMs', or(options.retryMaxMs, 5_000))
    this.deadlineMs = nat('deadlineMs', or(options.deadlineMs, 300_000))
    this.getPath = or(options.getPath, 'http')
    this.unorderedListing = flag('unorderedListing', () => isDirectoryBucket(options.bucket))
    if (this.getPath !== 'http' && this.getPath !== 'sdk') {
      throw StreamSegmentError.invalidArgument(
        `S3Store: getPath ${JSON.stringify(this.getPath)} is not 'http' or 'sdk'`,
      )
    }
  }

  #clientChecksums: Promise<boolean> | undefined

  /**
   * Whether a body must carry our CRC-32 (`x-amz-checksum-crc32`): with `checksums` on, or
   * when the client would otherwise compute a checksum of its own (`requestChecksumCalculation`
   * other than WHEN_REQUIRED, the SDK's default). The SDK skips its checksum when one is
   * there, so a body of several chunks still goes as a ChunkBody (never joined into a copy,
   * never aws-chunked), and the same header costs one pass of our CRC-32, not the SDK's.
   */
  async #sendsCrc(): Promise<boolean> {
    if (this.checksums) return true
    this.#clientChecksums ??= (async () => {
      const config = this.client.config as { requestChecksumCalculation?: () => Promise<string> }
      return (await config.requestChecksumCalculation?.()) !== 'WHEN_REQUIRED'
    })().catch(() => true)
    return this.#clientChecksums
  }

  async put(key: string, chunks: Body, options: PutOptions = {}): Promise<{ etag: string }> {
    const { ifNoneMatch, ifMatch, signal } = options
    checkKey(key, this.prefix)
    checkConditions(`put ${key}`, options)
    checkMetadataValues(`put ${key}`, options.metadata)
    const conditional = ifNoneMatch !== undefined || ifMatch !== undefined
    const writeId = conditional ? (options.writeId ?? randomUUID()) : undefined
    const metadata = writeId === undefined ? options.metadata : { ...options.metadata, [WRITE_ID_METADATA]: writeId }
    const joined = requestBody(chunks)
    const crc = (await this.#sendsCrc()) ? crc32Base64(joined.list) : undefined
    const command = this.#payload(
      joined.list,
      new this.#sdk.PutObjectCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        Body: joined.body,
        ContentLength: joined.length,
        IfNoneMatch: ifNoneMatch,
        IfMatch: ifMatch === undefined ? undefined : unquoteEtag(ifMatch),
        Metadata: metadata,
        ...s3Attributes(options.attributes),
        ChecksumCRC32: crc,
        ContentMD5: this.contentMd5 ? digestChunks('md5', joined.list, 'base64') : undefined,
      }),
    )
    try {
      const out = await this.#send('PutObject', key, signal, (s) => this.client.send(command, { abortSignal: s }))
      const etag = this.#etagOrNone('PutObject', key, out.ETag)
      if (etag !== '') return { etag }
      // Without an ETag the answer does not show that anything was stored. Only a conditional
      // put's write id tells this write from what was there before it.
      if (writeId === undefined) {
        throw StreamSegmentError.store(`PutObject ${this.#where(key)}: answered without an ETag`)
      }
      return {
        etag: await this.#landedEtag('PutObject', key, (info) => info.metadata[WRITE_ID_METADATA] === writeId, signal),
      }
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
    const chunks = await this.#get(key, options)
    if (chunks.length === 1) return chunks[0] as Uint8Array
    const joined = Buffer.concat(chunks)
    returnPieces(chunks) // copied: nobody sees the pieces of the lean path
    return joined
  }

  /** As `get`, the body as read: 64 KiB pieces (`getPath` 'http') or the chunks it arrived in ('sdk'), never joined. */
  async getChunks(key: string, options: GetOptions = {}): Promise<Uint8Array[]> {
    const chunks = await this.#get(key, options)
    lendPieces(chunks)
    return chunks
  }

  async #get(key: string, options: GetOptions): Promise<Uint8Array[]> {
    const { range, signal } = options
    checkKey(key, this.prefix)
    const header = range === undefined ? undefined : this.#rangeHeader(key, range)
    // Its failures name the range (a 416 says nothing of which bytes were asked).
    const what = header === undefined ? key : `${key} (${header})`
    try {
      return await this.#send('GetObject', what, signal, async (s) => {
        const command = new this.#sdk.GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Range: header })
        // The pieces of the lean path's body once read: the SDK may still fail the call (a
        // client that validates response checksums reads them), or hand out its own copy.
        let read: Uint8Array[] = []
        if (this.getPath === 'http') {
          sendOverHttp(command, await transportOf(this.client), s, this.#where(key), (pieces) => {
            read = pieces
          })
        }
        try {
          const out = await this.client.send(command, { abortSignal: s })
          const pieces = piecesOf(out.Body)
          if (pieces !== undefined) return pieces
          // The SDK's answer, checked as the lean path checks its own (s3-get.ts).
          const status = out.$metadata.httpStatusCode ?? 0
          const length = out.ContentLength === undefined ? undefined : String(out.ContentLength)
          const expected = checkGetAnswer(status, length, out.ContentRange, askedRange(header))
          if (typeof expected === 'string') {
            ;(out.Body as { destroy?: () => void } | undefined)?.destroy?.()
            throw refused(status, `GET ${this.#where(what)}: answer refused: ${expected}`)
          }
          const chunks = await readBody(out.Body, expected, s)
          const seen = new Set(chunks.map((c) => c.buffer))
          returnPieces(read.filter((p) => !seen.has(p.buffer)))
          return chunks
        } catch (err) {
          returnPieces(read)
          throw err
        }
      })
    } catch (err) {
      // A suffix of an empty object is empty (servers answer 416: no byte to return).
      if (range !== undefined && 'suffix' in range && StreamSegmentError.is(err, 'ERR_RANGE')) return []
      throw err
    }
  }

  async head(key: string, options: RequestOptions = {}): Promise<ObjectInfo | undefined> {
    const { signal } = options
    checkKey(key, this.prefix)
    try {
      const command = new this.#sdk.HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key })
      const out = await this.#send('HeadObject', key, signal, (s) => this.client.send(command, { abortSignal: s }))
      const size = out.ContentLength
      if (size === undefined || !Number.isSafeInteger(size) || size < 0) {
        throw StreamSegmentError.store(`HeadObject ${this.#where(key)}: answered without a valid Content-Length`)
      }
      return {
        size,
        etag: this.#etag('HeadObject', key, out.ETag),
        metadata: out.Metadata ?? {},
      }
    } catch (err) {
      // (HEAD answers carry no error code: a missing bucket looks like a missing key.)
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
      throw err
    }
  }

  async *list(prefix = '', options: ListOptions = {}): AsyncIterable<ListEntry> {
    checkListArguments('list', prefix, options?.startAfter)
    const { signal, startAfter } = options
    if (!this.unorderedListing) {
      yield* this.#listed(prefix, startAfter, true, signal)
      return
    }
    // A directory bucket (S3 Express One Zone) lists keys in no particular order and takes
    // no StartAfter: the listing is taken whole, then filtered and sorted here.
    const after = startAfter === undefined ? undefined : Buffer.from(this.prefix + startAfter)
    const entries: Array<ListEntry & { bytes: Buffer }> = []
    for await (const e of this.#listed(prefix, undefined, false, signal)) {
      const bytes = Buffer.from(this.prefix + e.key)
      if (after === undefined || Buffer.compare(bytes, after) > 0) entries.push({ ...e, bytes })
    }
    entries.sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    for (let i = 0; i < entries.length; i++) {
      const { bytes, ...e } = entries[i] as ListEntry & { bytes: Buffer }
      if (i > 0 && bytes.equals((entries[i - 1] as { bytes: Buffer }).bytes)) {
        throw StreamSegmentError.store(`ListObjectsV2 ${this.#where(e.key)}: listed twice`)
      }
      yield e
    }
  }

  /**
   * The pages of one ListObjectsV2 listing, each entry checked. `ordered`: keys must come in
   * strictly increasing order (UTF-8 bytes, as S3 sorts), after `startAfter`, across pages
   * (a server that repeats or reorders them is not trusted).
   */
  async *#listed(
    prefix: string,
    startAfter: string | undefined,
    ordered: boolean,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<ListEntry> {
    const pages = new Pages('ListObjectsV2', this.#where(prefix))
    let previous = startAfter === undefined ? undefined : Buffer.from(this.prefix + startAfter)
    let token: string | undefined
    do {
      const command = new this.#sdk.ListObjectsV2Command({
        Bucket: this.bucket,
        Prefix: this.prefix + prefix,
        ContinuationToken: token,
        StartAfter: startAfter === undefined ? undefined : this.prefix + startAfter,
        MaxKeys: this.pageSize,
      })
      const out = await this.#send('ListObjectsV2', prefix, signal, (s) =>
        this.client.send(command, { abortSignal: s }),
      )
      for (const o of out.Contents ?? []) {
        const bad = (why: string) =>
          StreamSegmentError.store(`ListObjectsV2 s3://${this.bucket}/${o.Key ?? ''}: listed ${why}`)
        if (o.Key === undefined) throw bad(`without a Key, under ${this.#where(prefix)}`)
        if (!o.Key.startsWith(this.prefix + prefix)) throw bad(`though not under ${this.#where(prefix)}`)
        const key = o.Key.slice(this.prefix.length)
        if (ordered) {
          const bytes = Buffer.from(o.Key)
          if (previous !== undefined && Buffer.compare(bytes, previous) <= 0) {
            throw bad(`out of order, not after ${previous.toString()}`)
          }
          previous = bytes
        }
        // An object under the prefix whose key this store could not name (the prefix itself,
        // a console's folder inside it such as `backup/`, `a//b`, `../x`) is another tool's,
        // never the container's: passed over, as a listing passes over keys not its own,
        // rather than failing every listing of the container (and so its writers and gc).
        try {
          checkKey(key)
        } catch {
          log('%s: passed over %s, which is no valid key', this.#where(prefix), JSON.stringify(key))
          continue
        }
        if (o.Size === undefined || !Number.isSafeInteger(o.Size) || o.Size < 0) {
          throw bad(`with size ${o.Size}, which is no byte count`)
        }
        yield {
          key,
          size: o.Size,
          etag: this.#etag('ListObjectsV2', key, o.ETag),
          lastModifiedMs: this.#time('ListObjectsV2', key, 'LastModified', o.LastModified),
        }
      }
      token = pages.next(out.IsTruncated, out.NextContinuationToken, out.Contents?.length ?? 0)
    } while (token !== undefined)
  }

  async delete(keys: string | readonly string[], options: RequestOptions = {}): Promise<void> {
    const { signal } = options
    const list = typeof keys === 'string' ? [keys] : keys
    for (const key of list) checkKey(key, this.prefix)
    if (list.length === 1) {
      await this.#deleteOne(list[0] as string, signal)
      return
    }
    // XML 1.0 has no form for most C0 controls, U+FFFE and U+FFFF: a DeleteObjects body
    // naming such a key is refused whole (400). Those keys go one by one, named in the URL.
    const batched = list.filter((k) => !NOT_IN_XML.test(this.prefix + k))
    for (const key of list) if (NOT_IN_XML.test(this.prefix + key)) await this.#deleteOne(key, signal)
    for (let i = 0; i < batched.length; i += this.pageSize) {
      const batch = batched.slice(i, i + this.pageSize)
      const what = `${batch.length} keys from ${batch[0]}`
      // radosgw (and other S3-compatible servers) require Content-MD5 on DeleteObjects.
      const command = addHeader(
        new this.#sdk.DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((k) => ({ Key: this.prefix + k })), Quiet: true },
        }),
        'content-md5',
        (req) => (typeof req.body === 'string' ? createHash('md5').update(req.body).digest('base64') : undefined),
      )
      const out = await this.#send('DeleteObjects', what, signal, (s) => this.client.send(command, { abortSignal: s }))
      const failed = (out.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey')
      // A key refused for the permission (a policy denying s3:DeleteObject) is refused again
      // on every try: ERR_AUTH, as a DeleteObject answered 403 is.
      const denied = failed.find((e) => AUTH_ERRORS.has(e.Code ?? ''))
      if (denied !== undefined) {
        throw StreamSegmentError.auth(
          `DeleteObjects ${this.url}: ${failed.length} of ${batch.length} keys failed, ${denied.Key}: ${denied.Code} ${denied.Message ?? ''}: the store refused the permission: check that the credentials may delete objects in bucket ${this.bucket}`,
          out.Errors,
        )
      }
      if (failed.length > 0) {
        const first = failed[0]
        throw StreamSegmentError.store(
          `DeleteObjects ${this.url}: ${failed.length} of ${batch.length} keys failed, first ${first?.Key}: ${first?.Code} ${first?.Message ?? ''}`,
          out.Errors,
        )
      }
    }
  }

  /** DeleteObject of one key; a missing one is not an error. */
  async #deleteOne(key: string, signal: AbortSignal | undefined): Promise<void> {
    const command = new this.#sdk.DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + key })
    try {
      await this.#send('DeleteObject', key, signal, (s) => this.client.send(command, { abortSignal: s }))
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    }
  }

  async createMultipart(key: string, options: CreateMultipartOptions = {}): Promise<string> {
    checkKey(key, this.prefix)
    const { ifNoneMatch, signal } = options
    let writeId: string | undefined
    checkConditions(`createMultipart ${key}`, options)
    checkPartBytes(`createMultipart ${key}`, options)
    checkMetadataValues(`createMultipart ${key}`, options.metadata)
    if (ifNoneMatch !== undefined) {
      writeId = randomUUID()
      // The placeholder carries the upload's metadata: an open upload's own is readable by nobody.
      await this.put(key, EMPTY, { ifNoneMatch: '*', writeId, metadata: options.metadata, signal })
    }
    const metadata = writeId === undefined ? options.metadata : { ...options.metadata, [WRITE_ID_METADATA]: writeId }
    const command = new this.#sdk.CreateMultipartUploadCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      Metadata: metadata,
      ...s3Attributes(options.attributes),
      ChecksumAlgorithm: this.checksums ? 'CRC32' : undefined,
    })
    let tries = 0
    try {
      const out = await this.#send('CreateMultipartUpload', key, signal, (s) => {
        tries++
        return this.client.send(command, { abortSignal: s })
      })
      if (!out.UploadId) throw StreamSegmentError.store(`CreateMultipartUpload ${this.#where(key)}: no UploadId`)
      if (writeId !== undefined) {
        remember(this.#claims, out.UploadId, writeId)
        // A try whose answer was lost may have created an upload too: the claim holds the
        // key, so every other upload on it is one of those. Abort them.
        if (tries > 1) await this.#abortOthers(key, out.UploadId, signal)
      }
      return out.UploadId
    } catch (err) {
      if (writeId !== undefined) {
        const released = this.#releasePlaceholder(key, writeId)
        // An abort is answered at once: the release goes on by itself (what it leaves, gc removes).
        if (!signal?.aborted) await released
      }
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
    checkKey(key, this.prefix)
    checkPartNumber(key, partNumber)
    const joined = requestBody(chunks)
    const crc = (await this.#sendsCrc()) ? crc32Base64(joined.list) : undefined
    const command = this.#payload(
      joined.list,
      new this.#sdk.UploadPartCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
        PartNumber: partNumber,
        Body: joined.body,
        ContentLength: joined.length,
        ChecksumCRC32: crc,
        ContentMD5: this.contentMd5 ? digestChunks('md5', joined.list, 'base64') : undefined,
      }),
    )
    const out = await this.#send('UploadPart', `${key}#${partNumber}`, signal, (s) =>
      this.client.send(command, { abortSignal: s }),
    ).finally(joined.release)
    this.#partSent(uploadId, partNumber, crc)
    return { etag: this.#etag('UploadPart', `${key}#${partNumber}`, out.ETag) }
  }

  canCopyFrom(source: ObjectStore): boolean {
    return source instanceof S3Store
  }

  /**
   * UploadPartCopy of bytes [start, end) of an object of another S3Store (same endpoint and
   * credentials). radosgw ignores `x-amz-copy-source-if-match` on UploadPartCopy, so with
   * `ifMatch` the source is also HEADed after the copy: an ETag names its content, so an
   * unchanged ETag then means the bytes copied were the expected ones.
   */
  async uploadPartCopy(
    key: string,
    uploadId: string,
    partNumber: number,
    source: CopySource,
    options: RequestOptions = {},
  ): Promise<{ etag: string; md5?: string }> {
    const { signal } = options
    checkKey(key, this.prefix)
    checkPartNumber(key, partNumber)
    const from = source.store
    if (!(from instanceof S3Store)) {
      throw StreamSegmentError.invalidArgument(`${this.#where(key)}: cannot copy a part from ${from.url}`)
    }
    checkKey(source.key, from.prefix)
    const { start, end } = source.range
    const what = `${from.#where(source.key)} [${start}, ${end})`
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
      throw StreamSegmentError.invalidArgument(`${what}: copy range must be 0 ≤ start < end`)
    }
    const ifMatch = source.ifMatch === undefined ? undefined : checkIfMatch(`copy from ${what}`, source.ifMatch)
    const command = new this.#sdk.UploadPartCopyCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      UploadId: uploadId,
      PartNumber: partNumber,
      CopySource: `${from.bucket}/${(from.prefix + source.key).split('/').map(encodeURIComponent).join('/')}`,
      CopySourceRange: `bytes=${start}-${end - 1}`,
      CopySourceIfMatch: ifMatch,
    })
    let out: { CopyPartResult?: { ETag?: string; ChecksumCRC32?: string } }
    try {
      out = await this.#send('UploadPartCopy', `${key}#${partNumber}`, signal, (s) =>
        this.client.send(command, { abortSignal: s }),
      )
    } catch (err) {
      const name = StreamSegmentError.is(err) ? nameOf(err.cause) : ''
      if (name === 'NoSuchKey') throw StreamSegmentError.notFound(`copy from ${what}: no such source object`, err)
      if (StreamSegmentError.is(err, 'ERR_CONFLICT')) {
        // 412: the source changed, or (radosgw, with If-Match) it is missing.
        const info = await from.head(source.key, { signal })
        if (info === undefined) throw StreamSegmentError.notFound(`copy from ${what}: no such source object`, err)
        throw StreamSegmentError.conflict(`copy from ${what}: etag is ${info.etag}, copy expected ${ifMatch}`, err)
      }
      if (name === 'InvalidArgument' && /range/i.test((err as Error).message)) {
        throw StreamSegmentError.range(`copy from ${what}: range not within the source`, err)
      }
      throw err
    }
    if (ifMatch !== undefined) {
      const info = await from.head(source.key, { signal })
      if (info === undefined) throw StreamSegmentError.notFound(`copy from ${what}: the source vanished meanwhile`)
      if (info.etag !== ifMatch) {
        throw StreamSegmentError.conflict(`copy from ${what}: etag is ${info.etag}, copy expected ${ifMatch}`)
      }
    }
    this.#partSent(uploadId, partNumber, out.CopyPartResult?.ChecksumCRC32)
    const etag = this.#etag('UploadPartCopy', `${key}#${partNumber}`, out.CopyPartResult?.ETag)
    return MD5_HEX.test(etag) ? { etag, md5: etag } : { etag }
  }

  async completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options: RequestOptions = {},
  ): Promise<{ etag: string }> {
    const { signal } = options
    checkKey(key, this.prefix)
    const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber)
    checkPartList(key, sorted)
    const crcs = this.checksums ? await this.#crcsOf(key, uploadId, sorted, signal) : undefined
    const command = new this.#sdk.CompleteMultipartUploadCommand({
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
    const claim = this.#claims.get(uploadId)
    let out: { ETag?: string }
    try {
      out = await this.#send('CompleteMultipartUpload', key, signal, (s) =>
        this.client.send(command, { abortSignal: s }),
      )
    } catch (err) {
      // radosgw answers an unknown upload id with 500 "This multipart completion is
      // already in progress" (not 404 NoSuchUpload): ask whether the upload exists.
      // A retry after a completion whose answer was lost finds no upload (404, or radosgw's
      // 500): when the object now carries this upload's claim, the completion landed.
      const gone =
        StreamSegmentError.is(err, 'ERR_NOT_FOUND') ||
        (StreamSegmentError.is(err, 'ERR_STORE') && (statusOf(err.cause) ?? 0) >= 500)
      if (!gone || (await this.#uploadExists(key, uploadId, signal))) throw err
      // An upload with no claim (a plain object, as an export writes) landed when the
      // object there has the ETag S3 gives these very parts.
      const info = await this.head(key, { signal })
      const landed =
        info !== undefined &&
        (claim === undefined
          ? info.etag === multipartEtag(sorted)
          : info.size > 0 && info.metadata[WRITE_ID_METADATA] === claim)
      if (!landed) {
        throw StreamSegmentError.notFound(
          `CompleteMultipartUpload ${this.#where(key)}: no upload ${uploadId}, and the object there is not of its parts (aborted by another client?)`,
          err,
        )
      }
      log(
        'CompleteMultipartUpload %s: the upload is gone and the object there is of its parts: it landed',
        this.#where(key),
      )
      out = { ETag: info.etag }
    }
    this.#partCrcs.delete(uploadId)
    this.#claims.delete(uploadId)
    const etag = this.#etagOrNone('CompleteMultipartUpload', key, out.ETag)
    if (etag !== '') return { etag }
    // radosgw answers with an empty ETag: HEAD for it. What is there counts as this upload only
    // when it is not the claim's empty placeholder and carries the claim's write id (if any):
    // else it is the object from before, and the completion did not land.
    return {
      etag: await this.#landedEtag(
        'CompleteMultipartUpload',
        key,
        (info) => info.size > 0 && (claim === undefined || info.metadata[WRITE_ID_METADATA] === claim),
        signal,
      ),
    }
  }

  async abortMultipart(key: string, uploadId: string, options: AbortMultipartOptions = {}): Promise<void> {
    const { signal } = options
    checkKey(key, this.prefix)
    const command = new this.#sdk.AbortMultipartUploadCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      UploadId: uploadId,
    })
    try {
      await this.#send('AbortMultipartUpload', key, signal, (s) => this.client.send(command, { abortSignal: s }))
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    }
    const claim = this.#claims.get(uploadId)
    this.#partCrcs.delete(uploadId)
    this.#claims.delete(uploadId)
    // A claim is known only for an upload this store created (what is left otherwise, gc removes).
    if (options.releaseClaim === true && claim !== undefined) await this.#releasePlaceholder(key, claim, signal)
  }

  async *listMultipart(prefix = '', options: RequestOptions = {}): AsyncIterable<MultipartUpload> {
    checkListArguments('listMultipart', prefix)
    const { signal } = options
    const pages = new Pages('ListMultipartUploads', this.#where(prefix))
    let keyMarker: string | undefined
    let uploadIdMarker: string | undefined
    for (;;) {
      const command = new this.#sdk.ListMultipartUploadsCommand({
        Bucket: this.bucket,
        Prefix: this.prefix + prefix,
        KeyMarker: keyMarker,
        UploadIdMarker: uploadIdMarker,
        MaxUploads: this.pageSize,
      })
      const out = await this.#send('ListMultipartUploads', prefix, signal, (s) =>
        this.client.send(command, { abortSignal: s }),
      )
      for (const u of out.Uploads ?? []) {
        if (u.Key === undefined || u.UploadId === undefined || !u.Key.startsWith(this.prefix)) continue
        const key = u.Key.slice(this.prefix.length)
        const initiatedMs = this.#time(
          'ListMultipartUploads',
          `${key} (upload ${u.UploadId})`,
          'Initiated',
          u.Initiated,
        )
        yield { key, uploadId: u.UploadId, initiatedMs }
      }
      const both =
        out.NextKeyMarker === undefined && out.NextUploadIdMarker === undefined
          ? undefined
          : `${out.NextKeyMarker ?? ''} ${out.NextUploadIdMarker ?? ''}`
      if (pages.next(out.IsTruncated, both, out.Uploads?.length ?? 0) === undefined) return
      keyMarker = out.NextKeyMarker
      uploadIdMarker = out.NextUploadIdMarker
    }
  }

  /**
   * The parts an open upload holds (ListParts, paged). S3 has no digest of a part's bytes
   * but its ETag, the MD5 of the part on radosgw and on AWS without SSE-KMS or SSE-C: an
   * ETag of an MD5's form is offered as `md5` (a caller finds no false match with it).
   */
  async listParts(key: string, uploadId: string, options: RequestOptions = {}): Promise<UploadedPart[]> {
    checkKey(key, this.prefix)
    const parts: UploadedPart[] = []
    const seen = new Set<number>()
    for await (const p of this.#parts(key, uploadId, options.signal)) {
      // A part the answer does not describe whole, or twice, is no part a resume may keep.
      const { PartNumber: n, Size: size } = p
      const bad = (why: string) =>
        StreamSegmentError.store(`ListParts ${this.#where(key)} upload ${uploadId}: part ${n} ${why}`)
      if (n === undefined || !Number.isInteger(n) || n < 1 || n > 10_000) throw bad('is no part number (1..10000)')
      if (seen.has(n)) throw bad('listed twice')
      seen.add(n)
      if (size === undefined || !Number.isSafeInteger(size) || size < 0)
        throw bad(`with size ${size}, which is no byte count`)
      const etag = this.#etag('ListParts', `${key}#${n}`, p.ETag)
      parts.push({ partNumber: n, size, etag, md5: MD5_HEX.test(etag) ? etag : undefined })
    }
    return parts.sort((a, b) => a.partNumber - b.partNumber)
  }

  /** Every part an open upload holds, as ListParts gives them, page after page. */
  async *#parts(key: string, uploadId: string, signal: AbortSignal | undefined): AsyncGenerator<Part> {
    const pages = new Pages('ListParts', `${this.#where(key)} upload ${uploadId}`)
    let marker: string | undefined
    do {
      const command = new this.#sdk.ListPartsCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        UploadId: uploadId,
        PartNumberMarker: marker,
        MaxParts: this.pageSize,
      })
      const out = await this.#send('ListParts', key, signal, (s) => this.client.send(command, { abortSignal: s }))
      yield* out.Parts ?? []
      marker = pages.next(out.IsTruncated, out.NextPartNumberMarker, out.Parts?.length ?? 0)
    } while (marker !== undefined)
  }

  /**
   * An answer's ETag, unquoted. A missing or empty one is ERR_STORE: it would be taken for the
   * object's and later sent as `If-Match: ""`, which some servers take for no condition.
   */
  #etag(op: string, key: string, etag: string | undefined): string {
    const e = this.#etagOrNone(op, key, etag)
    if (e === '') throw StreamSegmentError.store(`${op} ${this.#where(key)}: answered without an ETag`)
    return e
  }

  /**
   * An answer's ETag, unquoted, or '' when it has none. One that is no entity tag (RFC 9110:
   * visible ASCII but `"`, or obs-text, at most 1024 characters) is ERR_STORE: it is sent
   * back in If-Match and x-amz-copy-source-if-match, where a control character would fail the
   * request with Node's error rather than the store's, and it names nothing we can compare.
   */
  #etagOrNone(op: string, key: string, etag: string | undefined): string {
    const e = unquoteEtag(etag)
    if (e !== '' && !ETAG_CHARS.test(e)) {
      throw StreamSegmentError.store(
        `${op} ${this.#where(key)}: answered with ETag ${describeEtag(etag)}, no entity tag`,
      )
    }
    return e
  }

  /**
   * A listed time in ms. A missing or unreadable one is ERR_STORE, never taken as 0: gc
   * would take the object or upload for one older than any grace period and remove it.
   */
  #time(op: string, key: string, field: string, t: Date | undefined): number {
    const ms = t?.getTime()
    if (ms === undefined || !Number.isFinite(ms)) {
      throw StreamSegmentError.store(`${op} ${this.#where(key)}: entry without a valid ${field} time`)
    }
    return ms
  }

  #where(key: string): string {
    return `s3://${this.bucket}/${this.prefix}${key}`
  }

  /** A body's payload hash: UNSIGNED-PAYLOAD, or its SHA-256 computed here once for every try. */
  #payload<C>(body: readonly Uint8Array[], command: C): C {
    const hash = this.unsignedPayload ? 'UNSIGNED-PAYLOAD' : digestChunks('sha256', body, 'hex')
    return withoutStreamRetryWarning(addHeader(command, 'x-amz-content-sha256', () => hash))
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

  /**
   * The ETag of a write answered without one, from a HEAD: only when the object there is
   * this write (`ours`), else ERR_STORE: an answer of success is no proof that anything landed.
   */
  async #landedEtag(
    op: string,
    key: string,
    ours: (info: ObjectInfo) => boolean,
    signal: AbortSignal | undefined,
  ): Promise<string> {
    const info = await this.head(key, { signal })
    if (info === undefined || !ours(info)) {
      throw StreamSegmentError.store(
        `${op} ${this.#where(key)}: answered without an ETag, and ${info === undefined ? 'no object is there' : 'the object there is not this write'}: the write did not land`,
      )
    }
    return info.etag
  }

  /**
   * Part `partNumber` of `uploadId` stored, with CRC `crc`: kept for Complete, and the
   * upload made the most recently used of those remembered (a long upload still sending
   * parts is not the one forgotten).
   */
  #partSent(uploadId: string, partNumber: number, crc: string | undefined): void {
    const claim = this.#claims.get(uploadId)
    if (claim !== undefined) remember(this.#claims, uploadId, claim)
    // Complete lists the parts' CRCs only for an upload declared CRC32 (`checksums`).
    if (crc === undefined || !this.checksums) return
    const crcs = this.#partCrcs.get(uploadId) ?? new Map<number, string>()
    crcs.set(partNumber, crc)
    remember(this.#partCrcs, uploadId, crcs)
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
    for await (const p of this.#parts(key, uploadId, signal)) {
      if (p.PartNumber !== undefined && p.ChecksumCRC32 !== undefined) crcs.set(p.PartNumber, p.ChecksumCRC32)
    }
    return crcs
  }

  async #uploadExists(key: string, uploadId: string, signal: AbortSignal | undefined): Promise<boolean> {
    const command = new this.#sdk.ListPartsCommand({
      Bucket: this.bucket,
      Key: this.prefix + key,
      UploadId: uploadId,
      MaxParts: 1,
    })
    try {
      await this.#send('ListParts', key, signal, (s) => this.client.send(command, { abortSignal: s }))
      return true
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return false
      throw err
    }
  }

  /** Aborts every open upload on exactly `key` but `keep` (best effort, logged). */
  async #abortOthers(key: string, keep: string, signal: AbortSignal | undefined): Promise<void> {
    try {
      for await (const u of this.listMultipart(key, { signal })) {
        if (u.key === key && u.uploadId !== keep) {
          log(
            'CreateMultipartUpload %s: aborting %s, created by a try whose answer was lost',
            this.#where(key),
            u.uploadId,
          )
          await this.abortMultipart(key, u.uploadId, { signal })
        }
      }
    } catch (err) {
      log('abort of other uploads on %s failed: %s', this.#where(key), (err as Error).message)
    }
  }

  /**
   * Best effort: un-claim a key whose upload failed to start, or was aborted (what is left,
   * an empty placeholder, gc removes). Only while the key holds the claim's empty placeholder:
   * an object completed there is never taken.
   * `parent`: an abort's signal, which cuts it; a failed start gives none, its signal
   * may have fired (the reason it runs).
   */
  async #releasePlaceholder(key: string, writeId: string, parent?: AbortSignal): Promise<void> {
    // Bounded by its own deadline too.
    const within = signalWithin(
      parent,
      PLACEHOLDER_RELEASE_MS,
      () => new Error(`no answer within ${PLACEHOLDER_RELEASE_MS} ms`),
    )
    const { signal } = within
    try {
      const info = await this.head(key, { signal })
      if (info !== undefined && info.size === 0 && info.metadata[WRITE_ID_METADATA] === writeId) {
        await this.delete(key, { signal })
      }
    } catch (err) {
      log('release placeholder %s failed: %s', this.#where(key), (err as Error).message)
    } finally {
      within.done()
    }
  }

  /** One call through the retry policy (./s3-calls.ts), counted in `retries` when made again. */
  #send<T>(
    op: string,
    key: string,
    signal: AbortSignal | undefined,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    return callS3(this, { op, where: this.#where(key), bucket: this.bucket }, signal, fn, () => {
      this.retries++
    })
  }
}
