/**
 * Reading one object's header from a store, in a known format or by detection.
 *
 * - StreamSegment: one suffix request for the last 256 bytes.
 * - PartedSegment: one ranged request for the first 256 bytes.
 * - Format not known (a checkpoint opened by number, a listing): the end first; when the
 *   last 256 bytes are not a valid StreamSegment header, the start as a PartedSegment
 *   header. A StreamSegment header of a newer version is ERR_UNSUPPORTED, not a reason
 *   to look at the start; an object that has neither is ERR_CORRUPT naming both reasons.
 */

import { StreamSegmentError } from '../errors.js'
import { decodeHeader, detectedHeader, HEADER_BYTES, type Header, streamHeaderOrWhy } from '../format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import type { ObjectStore } from '../store/types.js'

export interface HeaderReadOptions {
  /** The container's format; undefined detects it. */
  format?: number | undefined
  /** The object's size when known (a listing, a HEAD): checked against the header's counts. */
  size?: number | undefined
  signal?: AbortSignal | undefined
}

/** The header of `<cno>.<part>`, in `options.format` or detected; the requests it took. */
export async function readObjectHeader(
  store: ObjectStore,
  cno: number,
  part: number,
  options: HeaderReadOptions = {},
): Promise<{ header: Header; requests: number }> {
  const { format, size, signal } = options
  const key = segmentKey(cno, part)
  const expected = { cno, part }
  // An empty object has no first byte to range over: its header is 0 bytes, as a suffix says.
  const readHead = () =>
    store.get(key, { range: { start: 0, end: HEADER_BYTES }, signal }).catch((err) => {
      if (StreamSegmentError.is(err, 'ERR_RANGE')) return new Uint8Array(0)
      throw err
    })
  if (format === FORMAT_PARTED) {
    return { header: decodeHeader(await readHead(), size, { ...expected, format }), requests: 1 }
  }
  const tail = await store.get(key, { range: { suffix: HEADER_BYTES }, signal })
  if (format === FORMAT_STREAM) return { header: decodeHeader(tail, size, { ...expected, format }), requests: 1 }
  const stream = streamHeaderOrWhy(tail, size, expected)
  if (!(stream instanceof Error)) return { header: stream, requests: 1 }
  const head = tail.byteLength < HEADER_BYTES ? tail : await readHead()
  return { header: detectedHeader(head, tail, size, expected, stream), requests: tail === head ? 1 : 2 }
}
