/**
 * Checks and helpers every backend shares, so that they agree on the contract in
 * `types.ts`: range resolution, ETags, write ids, part lists and key validation.
 */
import { randomUUID } from 'node:crypto'
import { StreamSegmentError, throwIfAborted } from '../errors.js'
import { BufferPool } from '../util/buffer-pool.js'
import { describeValue, showValue } from '../util/typed-arrays.js'
import type { Body, ByteRange, CompletedPart, GetOptions, ObjectInfo, ObjectStore, PutOptions } from './types.js'
import { WRITE_ID_METADATA } from './types.js'

/** The time now on `store`'s clock (ObjectStore.now), or this machine's. */
export async function storeNow(store: ObjectStore): Promise<number> {
  return (await store.now?.()) ?? Date.now()
}

/** An offset between two clocks this small is taken for the noise of reading the other one (whole seconds, a round trip). */
export const CLOCK_OFFSET_NOISE_MS = 2000

/** Resolves a range against an object's size to [start, end); ERR_RANGE past the end. */
export function resolveRange(range: ByteRange | undefined, size: number, where: string): [number, number] {
  if (range === undefined) return [0, size]
  if ('suffix' in range) {
    if (!Number.isSafeInteger(range.suffix) || range.suffix <= 0) {
      throw StreamSegmentError.invalidArgument(`${where}: suffix range must be a positive integer, got ${range.suffix}`)
    }
    return [Math.max(0, size - range.suffix), size]
  }
  const { start, end } = range
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
    throw StreamSegmentError.invalidArgument(`${where}: range must be 0 ≤ start < end, got [${start}, ${end})`)
  }
  if (start >= size) throw StreamSegmentError.range(`${where}: range starts at ${start}, object has ${size} bytes`)
  return [start, Math.min(end, size)]
}

/** A copy source's range must lie within the source: ERR_INVALID_ARGUMENT when empty, ERR_RANGE past its end. */
export function checkCopyRange(range: { start: number; end: number }, size: number, where: string): void {
  const { start, end } = range
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start) {
    throw StreamSegmentError.invalidArgument(`${where}: copy range must be 0 ≤ start < end, got [${start}, ${end})`)
  }
  if (end > size) {
    throw StreamSegmentError.range(`${where}: copy range [${start}, ${end}) ends past the object's ${size} bytes`)
  }
}

export function bodyLength(body: Body): number {
  if (body instanceof Uint8Array) return body.byteLength
  let n = 0
  for (const b of body) n += b.byteLength
  return n
}

/**
 * The body as one buffer for a request (for stores whose client takes only one): the
 * caller's own when it is one already, else the chunks joined into a buffer from a small
 * pool, so the pages of a fresh 16 MiB buffer are not faulted in for every request.
 * `release` returns the buffer once the request has ended.
 */
export function joinBody(body: Body): { bytes: Uint8Array; release: () => void } {
  if (body instanceof Uint8Array) return { bytes: body, release: () => {} }
  if (body.length === 1) return { bytes: body[0] as Uint8Array, release: () => {} }
  const n = bodyLength(body)
  const capacity = Math.ceil(n / JOIN_QUANTUM) * JOIN_QUANTUM
  const buf = joinPool.take(capacity, true) ?? Buffer.allocUnsafeSlow(capacity)
  let o = 0
  for (const b of body) {
    buf.set(b, o)
    o += b.byteLength
  }
  return {
    bytes: buf.subarray(0, n),
    release: () => joinPool.give(buf),
  }
}

/** Joined sizes are rounded up to a MiB, so that bodies of a few sizes share buffers. */
const JOIN_QUANTUM = 1024 * 1024
const joinPool = new BufferPool(128 * 1024 * 1024)

/** A copy of the body in one new buffer (for stores that keep it). */
export function copyBody(body: Body): Uint8Array {
  const out = Buffer.allocUnsafe(bodyLength(body))
  let at = 0
  for (const b of body instanceof Uint8Array ? [body] : body) {
    out.set(b, at)
    at += b.byteLength
  }
  return out
}

/** `"abc"`, `W/"abc"` → `abc`. */
export function unquoteEtag(etag: string | undefined): string {
  if (!etag) return ''
  const e = etag.startsWith('W/') ? etag.slice(2) : etag
  return e.length >= 2 && e.startsWith('"') && e.endsWith('"') ? e.slice(1, -1) : e
}

/** An entity tag's characters, unquoted (RFC 9110 etagc), and a bound on its length. */
export const ETAG_CHARS = /^[\x21\x23-\x7e\x80-\xff]{1,1024}$/

/** An ETag as a message shows it: JSON-quoted, its first 80 characters. */
export function describeEtag(etag: string | undefined): string {
  const e = etag ?? ''
  return JSON.stringify(e.length > 80 ? `${e.slice(0, 80)}…` : e)
}

/**
 * A caller's If-Match ETag, unquoted; ERR_INVALID_ARGUMENT, naming `what`, when it is empty
 * (no condition at all on some servers: the write would go through unchecked), `*` (on S3
 * it matches whatever object is there) or no entity tag: a condition no store could check
 * the same way, where the memory and directory stores would take it for a stale ETag.
 */
export function checkIfMatch(what: string, ifMatch: string): string {
  if (typeof ifMatch !== 'string') {
    throw StreamSegmentError.invalidArgument(`${what}: ifMatch must be a string, got ${describeValue(ifMatch)}`)
  }
  const e = unquoteEtag(ifMatch)
  if (e === '') throw StreamSegmentError.invalidArgument(`${what}: ifMatch is empty`)
  if (e === '*') {
    throw StreamSegmentError.invalidArgument(
      `${what}: ifMatch '*' would match any object; give the ETag the write expects`,
    )
  }
  if (!ETAG_CHARS.test(e)) {
    throw StreamSegmentError.invalidArgument(`${what}: ifMatch ${describeEtag(ifMatch)} is no entity tag`)
  }
  return e
}

/**
 * The conditions of a put (or of a createMultipart, which has only `ifNoneMatch`), checked
 * alike by every store before any write: `ifNoneMatch` is `'*'` or absent, `ifMatch` an
 * entity tag (checkIfMatch), and not both. ERR_INVALID_ARGUMENT naming `what` otherwise.
 */
export function checkConditions(what: string, options: { ifNoneMatch?: unknown; ifMatch?: unknown } | undefined): void {
  const ifNoneMatch = options?.ifNoneMatch
  const ifMatch = options?.ifMatch
  if (ifNoneMatch !== undefined && ifNoneMatch !== '*') {
    throw StreamSegmentError.invalidArgument(`${what}: ifNoneMatch must be '*', got ${describeValue(ifNoneMatch)}`)
  }
  if (ifMatch !== undefined) checkIfMatch(what, ifMatch as string)
  if (ifNoneMatch !== undefined && ifMatch !== undefined) {
    throw StreamSegmentError.invalidArgument(`${what}: ifNoneMatch and ifMatch together`)
  }
}

/** The most bytes one part may hold (S3's limit): the largest `partBytes` a createMultipart takes. */
export const MAX_PART_BYTES = 5 * 1024 ** 3

/** A createMultipart's `partBytes` (types.ts): a positive integer up to MAX_PART_BYTES, not with unevenParts. */
export function checkPartBytes(
  what: string,
  options: { partBytes?: unknown; unevenParts?: unknown } | undefined,
): void {
  const n = options?.partBytes
  if (n === undefined) return
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > MAX_PART_BYTES) {
    throw StreamSegmentError.invalidArgument(
      `${what}: partBytes must be an integer from 1 to ${MAX_PART_BYTES}, got ${describeValue(n)}`,
    )
  }
  if (options?.unevenParts === true) {
    throw StreamSegmentError.invalidArgument(
      `${what}: partBytes and unevenParts together (uneven parts have no one size)`,
    )
  }
}

export function newWriteId(): string {
  return randomUUID()
}

/**
 * Metadata values as S3 keeps them: printable ASCII, what an HTTP header carries unchanged
 * (another character fails the request, or its signature: ERR_AUTH on radosgw), with no
 * space at either end (S3 trims them: the value would read back changed). Every store
 * refuses others, ERR_INVALID_ARGUMENT naming `what` and the key.
 */
export function checkMetadataValues(what: string, metadata: Record<string, string> | undefined): void {
  for (const [k, v] of Object.entries(metadata ?? {})) {
    if (typeof v !== 'string' || !/^(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?$/.test(v)) {
      throw StreamSegmentError.invalidArgument(
        `${what}: metadata ${JSON.stringify(k)}: value ${showValue(v).slice(0, 80)} is not printable ASCII without a space at either end`,
      )
    }
  }
}

/** The memory and directory stores' metadata: keys [a-z0-9-] too, values as S3 keeps them. */
export function checkMetadata(what: string, metadata: Record<string, string> | undefined): void {
  for (const k of Object.keys(metadata ?? {})) {
    if (!/^[a-z0-9-]+$/.test(k)) {
      throw StreamSegmentError.invalidArgument(`${what}: metadata ${JSON.stringify(k)}: keys are [a-z0-9-]`)
    }
  }
  checkMetadataValues(what, metadata)
}

/** Metadata to store with a put (checked, for `what`): conditional puts carry their write id. */
export function putMetadata(
  what: string,
  options: PutOptions | undefined,
): { metadata: Record<string, string>; writeId?: string } {
  const metadata = { ...options?.metadata }
  checkMetadata(what, metadata)
  if (options?.ifNoneMatch === undefined && options?.ifMatch === undefined) return { metadata }
  const writeId = options.writeId ?? newWriteId()
  metadata[WRITE_ID_METADATA] = writeId
  return { metadata, writeId }
}

/**
 * Decides a conditional put against the current object (undefined when missing):
 * 'write' to go ahead, 'replayed' when the stored object is this very write landed
 * before, or throws ERR_CONFLICT.
 */
export function checkPutPrecondition(
  key: string,
  current: ObjectInfo | undefined,
  options: PutOptions | undefined,
  writeId: string | undefined,
): 'write' | 'replayed' {
  if (options?.ifNoneMatch === '*' && current !== undefined) {
    if (writeId !== undefined && current.metadata[WRITE_ID_METADATA] === writeId) return 'replayed'
    throw StreamSegmentError.conflict(`${key}: exists (create-only put)`)
  }
  if (options?.ifMatch !== undefined) {
    const want = unquoteEtag(options.ifMatch)
    if (current === undefined) throw StreamSegmentError.conflict(`${key}: missing (put if-match ${want})`)
    if (current.etag !== want) {
      if (writeId !== undefined && current.metadata[WRITE_ID_METADATA] === writeId) return 'replayed'
      throw StreamSegmentError.conflict(`${key}: etag is ${current.etag}, put expected ${want}`)
    }
  }
  return 'write'
}

export function checkPartNumber(key: string, partNumber: number): void {
  if (!Number.isInteger(partNumber) || partNumber < 1 || partNumber > 10000) {
    throw StreamSegmentError.invalidArgument(`${key}: part number must be 1..10000, got ${partNumber}`)
  }
}

/** Parts must be listed in increasing order, each once (the stores sort them first: a number listed twice fails). */
export function checkPartList(key: string, parts: readonly CompletedPart[]): void {
  if (parts.length === 0) throw StreamSegmentError.invalidArgument(`${key}: complete needs at least one part`)
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i] as CompletedPart
    checkPartNumber(key, p.partNumber)
    if (i > 0 && p.partNumber <= (parts[i - 1] as CompletedPart).partNumber) {
      throw StreamSegmentError.invalidArgument(`${key}: parts must be in increasing order (part ${p.partNumber})`)
    }
    checkPartEtag(key, p)
  }
}

/**
 * A part to complete must carry the ETag its upload was answered with, quoted or not (as S3
 * takes it): ERR_INVALID_ARGUMENT naming it otherwise. On S3 a part without one would go to
 * the server as `<ETag>""</ETag>`, a malformed Complete refused as it is (or one server's
 * idea of a match).
 */
function checkPartEtag(key: string, part: CompletedPart): void {
  const e = typeof part.etag === 'string' ? unquoteEtag(part.etag) : ''
  if (!ETAG_CHARS.test(e)) {
    throw StreamSegmentError.invalidArgument(
      `completeMultipart ${key}: part ${part.partNumber} has etag ${typeof part.etag === 'string' ? describeEtag(part.etag) : describeValue(part.etag)}, no entity tag (the ETag uploadPart gave)`,
    )
  }
}

/** Every non-final part the same size, as S3-compatible stores such as R2 require. */
export function checkPartSizes(key: string, sizes: readonly number[]): void {
  const first = sizes[0] ?? 0
  for (let i = 1; i < sizes.length - 1; i++) {
    if (sizes[i] !== first) {
      throw StreamSegmentError.invalidArgument(
        `${key}: non-final parts must be equal in size: part ${i + 1} has ${sizes[i]} bytes, part 1 has ${first}`,
      )
    }
  }
  const last = sizes[sizes.length - 1] ?? 0
  if (sizes.length > 1 && last > first) {
    throw StreamSegmentError.invalidArgument(`${key}: final part (${last} bytes) is larger than the others (${first})`)
  }
}

/** The most UTF-8 bytes an S3 object key may have (a prefix of the container's included). */
const KEY_MAX_BYTES = 1024

/**
 * The longest key a container writes below its prefix, in UTF-8 bytes: the segment key of
 * the largest checkpoint and part numbers, `1073741823.16383` (format/names.ts; `inode` is
 * shorter). A store holds one container, so its prefix must leave this much room within
 * KEY_MAX_BYTES (prefixFault). Stated here because store/ does not import format/;
 * test/format/names.test.ts pins it to the longest key format/names.ts builds.
 */
export const CONTAINER_KEY_MAX_BYTES = 16

/** The longest prefix that leaves a container's keys room, in UTF-8 bytes without its `/`: 1007. */
export const PREFIX_MAX_BYTES = KEY_MAX_BYTES - 1 - CONTAINER_KEY_MAX_BYTES

/**
 * Keys are relative to the container: non-empty, at most KEY_MAX_BYTES bytes of UTF-8 (S3's
 * limit, counted in bytes, not in UTF-16 code units as `key.length` does; `prefix`, the
 * container's prefix within the bucket, counts in), no NUL, no empty, `.` or `..` segments,
 * not absolute, and well-formed UTF-16 (no lone surrogate: it has no UTF-8 form, and would
 * be stored as U+FFFD, under another key's name). Every store checks every key it is
 * given, in reads as in writes, so that a bad key is the same ERR_INVALID_ARGUMENT from
 * each, naming the key and what is wrong with it.
 */
export function checkKey(key: string, prefix = ''): void {
  if (typeof key !== 'string') {
    throw StreamSegmentError.invalidArgument(`key must be a string, got ${describeValue(key)}`)
  }
  const why = keyFault(key, prefix)
  if (why !== undefined) throw StreamSegmentError.invalidArgument(`invalid key ${quoteKey(key)}: ${why}`)
}

/**
 * Why `prefix` cannot be a container's key prefix (one `/` at its end or none), or undefined:
 * a key under it must be one checkKey would take, so no "." or ".." segment, no "/" doubled,
 * and room, with its `/`, for every key the container writes (CONTAINER_KEY_MAX_BYTES)
 * within KEY_MAX_BYTES: else a write would be refused part-way, at its first segment key.
 * With `key`, the store holds that one object instead of a container (an export's target),
 * and the room is that key's.
 */
export function prefixFault(prefix: string, key?: string): string | undefined {
  const p = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix
  if (p === '') return undefined
  const fault = keyFault(p, '')
  if (fault !== undefined) return fault
  const bytes = Buffer.byteLength(p, 'utf8') + 1
  if (key !== undefined) {
    const room = Math.max(1, Buffer.byteLength(key, 'utf8'))
    if (bytes + room <= KEY_MAX_BYTES) return undefined
    return `${bytes} bytes of UTF-8 with its "/", and the key ${quoteKey(key)} below it takes ${room} more: ${bytes + room}, over the ${KEY_MAX_BYTES} an S3 key may have`
  }
  if (bytes + CONTAINER_KEY_MAX_BYTES <= KEY_MAX_BYTES) return undefined
  return `${bytes} bytes of UTF-8 with its "/", and a container's keys below it take up to ${CONTAINER_KEY_MAX_BYTES} bytes more: ${bytes + CONTAINER_KEY_MAX_BYTES}, over the ${KEY_MAX_BYTES} an S3 key may have (at most ${PREFIX_MAX_BYTES} bytes leave them room, ${PREFIX_MAX_BYTES + 1} with the "/")`
}

/** A listing as messages name it: `list` of the whole store, `list "p"` of what lies under `p`. */
export function listOf(prefix: string): string {
  return prefix === '' ? 'list' : `list ${quoteKey(prefix)}`
}

/**
 * A listing's `prefix` (and `startAfter`, when given): strings, and well-formed UTF-16, as
 * keys are. A lone surrogate has no UTF-8 form: the local stores would match it as U+FFFD
 * (a `startAfter` so skipping every key) where S3 fails the request; so every store
 * refuses it, ERR_INVALID_ARGUMENT naming `what` (the call), before listing anything.
 */
export function checkListArguments(what: string, prefix: unknown, startAfter?: unknown): void {
  for (const [name, value] of [
    ['prefix', prefix],
    ['startAfter', startAfter],
  ] as const) {
    if (value === undefined && name === 'startAfter') continue
    if (typeof value !== 'string') {
      throw StreamSegmentError.invalidArgument(`${what}: ${name} must be a string, got ${describeValue(value)}`)
    }
    const lone = /\p{Surrogate}/u.exec(value)?.[0]
    if (lone !== undefined) {
      const code = (lone.codePointAt(0) as number).toString(16).toUpperCase()
      throw StreamSegmentError.invalidArgument(
        `${what}: ${name} ${quoteKey(value)} has a lone surrogate (U+${code}), which has no UTF-8 form`,
      )
    }
  }
}

function keyFault(key: string, prefix: string): string | undefined {
  if (key.length === 0) return 'empty'
  const lone = /\p{Surrogate}/u.exec(key)?.[0]
  if (lone !== undefined) {
    const code = (lone.codePointAt(0) as number).toString(16).toUpperCase()
    return `it has a lone surrogate (U+${code}), which has no UTF-8 form`
  }
  const bytes = Buffer.byteLength(key, 'utf8')
  const total = bytes + Buffer.byteLength(prefix, 'utf8')
  if (total > KEY_MAX_BYTES) {
    const withPrefix = prefix === '' ? '' : `, ${total} with the prefix ${JSON.stringify(prefix)}`
    return `${bytes} bytes of UTF-8${withPrefix}, over the ${KEY_MAX_BYTES} an S3 key may have`
  }
  if (key.includes('\0')) return 'it has a NUL character'
  if (key.startsWith('/')) return 'it starts with "/" (keys are relative to the container)'
  const segments = key.split('/')
  if (segments.includes('')) return 'it has an empty segment (a "/" doubled or at its end)'
  const dots = segments.find((s) => s === '.' || s === '..')
  if (dots !== undefined) return `it has a "${dots}" segment`
  return undefined
}

/** The key in quotes for a message, its first 60 characters when it is longer. */
export function quoteKey(key: string): string {
  const chars = Array.from(key)
  return chars.length <= 60 ? JSON.stringify(key) : `${JSON.stringify(chars.slice(0, 60).join('')).slice(0, -1)}…"`
}

export { throwIfAborted }

/** Orders keys as S3 lists them: by their UTF-8 bytes (not by UTF-16 code units, as `<` does). */
export function compareKeys(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b))
}

/**
 * A store that has `ObjectStore.getChunks`: it can answer a GET with its body as the chunks
 * it arrived in, in order, with no copy into one buffer (S3Store): the same request, range
 * rules and errors as `get`, the total length checked against the announced one.
 */
export interface ChunkedGet {
  getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]>
}

export function hasChunkedGet<S extends object>(store: S): store is S & ChunkedGet {
  return typeof (store as Partial<ChunkedGet>).getChunks === 'function'
}

/** Whether `x` has the methods of an ObjectStore (a store of this package or one of the caller's own). */
export function isObjectStore(x: unknown): x is ObjectStore {
  if (typeof x !== 'object' || x === null) return false
  const s = x as Record<string, unknown>
  return ['put', 'get', 'head', 'list', 'delete'].every((m) => typeof s[m] === 'function')
}

/** `store` as an ObjectStore; ERR_INVALID_ARGUMENT, naming `who`, when it is none. */
export function checkStore(who: string, store: unknown): ObjectStore {
  if (!isObjectStore(store)) {
    throw StreamSegmentError.invalidArgument(
      `${who}: store must be an ObjectStore (DirectoryStore, S3Store, MemoryStore or one with put, get, head, list and delete), got ${describeValue(store)}`,
    )
  }
  return store
}
