/**
 * Reading one object's header from a store, in a known format or by detection.
 *
 * - StreamSegment: one suffix request for the last 256 bytes (or `reach`: more of the
 *   object's end, for a reader to take; an object shorter than that comes whole).
 * - PartedSegment: one ranged request for the first 256 bytes (or `reach`, from byte 0).
 * - Format not known (the container's `inode` object missing or unreadable): both ends,
 *   side by side (two requests, one round trip). Either end of an object can be file
 *   content — a PartedSegment object ends with data, a StreamSegment one starts with it —
 *   so content can fake a header at the end the format does not use: an object with a
 *   header at both ends (or a newer version's at either) is ERR_CORRUPT, ambiguous
 *   without the container's inode, never taken for either. One header alone is taken
 *   (a newer version's is ERR_UNSUPPORTED); an object with neither is ERR_CORRUPT naming
 *   both reasons, or the one of the header whose magic it has. Callers that can pass the
 *   container's format (from its `inode` object) do.
 * - A header that fails its checks, or claims a newer version, is read once more before
 *   that is reported: bytes damaged on the way fail as bytes damaged on storage do, and a
 *   cleaner must not drop a checkpoint for a bit flipped in one answer.
 */
import { mayBeDamagedOnTheWay, StreamSegmentError } from '../errors.js'
import { decodeHeader, detectedHeader, HEADER_BYTES, type Header } from '../format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import type { ObjectStore } from '../store/types.js'
import { printable } from '../util/shell-words.js'
import { type OpenedBytes, part0OpenBytes } from './opened.js'

export interface HeaderReadOptions {
  /** The container's format; undefined detects it. */
  format?: number | undefined
  /** The object's size when known (a listing, a HEAD): checked against the header's counts. */
  size?: number | undefined
  /**
   * In a known format with `size` known: how many bytes of the object's end (StreamSegment)
   * or start (PartedSegment) to read, the header among them; returned as `opened`.
   */
  reach?: number | undefined
  signal?: AbortSignal | undefined
}

/** What readObjectHeader read: the header, the requests it took, and with `reach` the bytes read. */
export interface HeaderRead {
  header: Header
  requests: number
  opened?: OpenedBytes | undefined
}

/** The header of `<cno>.<part>`, in `options.format` or detected; the requests it took. */
export async function readObjectHeader(
  store: ObjectStore,
  cno: number,
  part: number,
  options: HeaderReadOptions = {},
): Promise<HeaderRead> {
  try {
    return await readHeaderOnce(store, cno, part, options)
  } catch (err) {
    if (!mayBeDamagedOnTheWay(err)) throw err
    const again = await readHeaderOnce(store, cno, part, options)
    const first = options.format === FORMAT_PARTED || options.format === FORMAT_STREAM ? 1 : 2
    return { ...again, requests: first + again.requests }
  }
}

/** readObjectHeader's one read: the header, or the error its bytes give. */
async function readHeaderOnce(
  store: ObjectStore,
  cno: number,
  part: number,
  options: HeaderReadOptions,
): Promise<HeaderRead> {
  const { format, size, signal } = options
  const key = segmentKey(cno, part)
  const expected = { cno, part }
  const reach = size === undefined ? HEADER_BYTES : Math.max(HEADER_BYTES, options.reach ?? HEADER_BYTES)
  // An empty object has no first byte to range over: its header is 0 bytes, as a suffix says.
  const readHead = (end: number) =>
    store.get(key, { range: { start: 0, end }, signal }).catch((err) => {
      if (StreamSegmentError.is(err, 'ERR_RANGE')) return new Uint8Array(0)
      throw err
    })
  if (format === FORMAT_PARTED) {
    const bytes = await readHead(reach)
    const header = decodeHeader(bytes.subarray(0, HEADER_BYTES), size, { ...expected, format })
    // Shorter than asked: the object whole.
    const whole = bytes.byteLength < reach
    return { header, requests: 1, opened: openedBytes(key, 0, bytes, whole ? bytes.byteLength : size, reach) }
  }
  if (format === FORMAT_STREAM) {
    const bytes = await store.get(key, { range: { suffix: reach }, signal })
    const header = decodeHeader(bytes.subarray(Math.max(0, bytes.byteLength - HEADER_BYTES)), size, {
      ...expected,
      format,
    })
    const whole = bytes.byteLength < reach
    const start = whole ? 0 : (size as number) - bytes.byteLength
    return { header, requests: 1, opened: openedBytes(key, start, bytes, whole ? bytes.byteLength : size, reach) }
  }
  const [tail, head] = await Promise.all([
    store.get(key, { range: { suffix: HEADER_BYTES }, signal }),
    readHead(HEADER_BYTES),
  ])
  const stream = headerOrWhy(tail, size, { ...expected, format: FORMAT_STREAM })
  const parted = headerOrWhy(head, size, { ...expected, format: FORMAT_PARTED })
  if (claims(stream) && claims(parted)) {
    throw StreamSegmentError.corrupt(
      `${store.url}/${key}: a StreamSegment header at its end and a PartedSegment header at its start: which one is file content is ambiguous without the container's inode`,
    )
  }
  if (claims(stream)) return { header: taken(stream), requests: 2 }
  if (claims(parted)) return { header: taken(parted), requests: 2 }
  return { header: detectedHeader(head, tail, size, expected, stream as StreamSegmentError), requests: 2 }
}

/** The bytes read with a header beyond it (`reach`), for a reader to take; none without `reach`. */
function openedBytes(
  key: string,
  start: number,
  bytes: Uint8Array,
  size: number | undefined,
  reach: number,
): OpenedBytes | undefined {
  if (reach <= HEADER_BYTES || size === undefined || start < 0) return undefined
  return { key, start, bytes, size }
}

/**
 * The header of checkpoint `cno`'s part 0, for a reader opening it by number: its size by
 * a HEAD while `format` comes in (the container's, from its `inode` object, fetched by the
 * caller meanwhile; undefined when that is missing or unreadable), then the header in that
 * format, read with as much of the object as a reader's first read of it takes
 * (part0OpenBytes: `opened`, for the file's readers; none when the format was detected).
 * ERR_NOT_FOUND when the checkpoint has no part 0 (never complete, or abandoned).
 */
export async function readPart0Header(
  store: ObjectStore,
  cno: number,
  format: Promise<number | undefined>,
  signal?: AbortSignal,
): Promise<{ header: Header; opened: OpenedBytes | undefined }> {
  const key = segmentKey(cno, 0)
  const [info, known] = await Promise.all([store.head(key, { signal }), format])
  if (info === undefined) throw StreamSegmentError.notFound(`${store.url}: checkpoint ${cno} has no part 0 (${key})`)
  try {
    const reach = part0OpenBytes(info.size)
    const read = await readObjectHeader(store, cno, 0, { format: known, size: info.size, reach, signal })
    return { header: read.header, opened: read.opened }
  } catch (err) {
    // decodeHeader names the key alone: the store too, as a reader's other errors do (a
    // reader of several containers can tell which one is damaged).
    if (!mayBeDamagedOnTheWay(err)) throw err
    // Messages are made printable (errors.ts): the URL as they quote it.
    if (err.message.startsWith(`${printable(store.url)}/`)) throw err
    throw new StreamSegmentError(err.code, `${store.url}/${err.message}`, { cause: err })
  }
}

/** The header `bytes` hold in `expected.format`, or the error saying why not. */
function headerOrWhy(
  bytes: Uint8Array,
  size: number | undefined,
  expected: { cno: number; part: number; format: number },
): Header | StreamSegmentError {
  try {
    return decodeHeader(bytes, size, expected)
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_CORRUPT') || StreamSegmentError.is(err, 'ERR_UNSUPPORTED')) return err
    throw err
  }
}

/** Whether the bytes are a header of their format: a valid one, or a newer version's. */
function claims(h: Header | StreamSegmentError): boolean {
  return !(h instanceof StreamSegmentError) || h.code === 'ERR_UNSUPPORTED'
}

function taken(h: Header | StreamSegmentError): Header {
  if (h instanceof StreamSegmentError) throw h
  return h
}
