/**
 * One object's header, summary and node spans as a reader fetches them, with few and
 * exact requests (no HEAD, ever), and the cache of what is known of each object. What it
 * bounds and checks (head first, in a PartedSegment container, see the last point):
 *
 * - Header and summary, once per object, only when data blocks of that object are read,
 *   cached (bounded by `readSummaryCacheBytes`, least recently used first), never by a
 *   HEAD and never by a request for the header alone. Usually by a *tail read*: a ranged
 *   GET from a known offset in the object (a meta block its parent points at, or the
 *   summary's own offset) through the bytes wanted and room for all a legal object holds
 *   after them (tailRoom), so the answer runs to the object's end and tells its exact
 *   size; the header (the answer's last 256 bytes) is checked against it: magic, version,
 *   CRC, counts adding up to exactly the size, names, bounds. An answer that fills the
 *   range (an object longer than that: crafted, or with unusually many meta blocks above
 *   the span) is read no further: its header and summary come by a suffix read (one GET
 *   more, two for a summary larger than any seen). What a read allocates is bounded by
 *   what it wants, never by what an object claims or holds.
 * - A leaf span of a data part fetched for a read is a tail read itself: leaves,
 *   summary and header in one GET; for a small read it may start lower, and the data
 *   bytes below the span are kept for that read (at most DATA_BELOW_OBJECTS objects keep
 *   some; the oldest give theirs up). An object of which no meta block is known (data under
 *   a leaf stored elsewhere) is read by one suffix request sized for the largest summary
 *   seen: it tells the size only when the object is shorter than the suffix, but every
 *   block is still checked against the summary, which is found from the end, so a wrong
 *   size can only fail reads, never change what they return.
 * - Requests: at most `readMaxConcurrency` data GETs in flight, and beside them at most
 *   as many node, header and summary reads (small: a node span, a summary), so a
 *   read-ahead walk never takes a data GET's slot nor waits behind one. Both kinds are
 *   latency-bound, one of each per object read: sharing the slots halved the throughput
 *   on a 40 ms link (test/bench/read.ts: 0.45 of raw GETs against 0.81). A missing object
 *   is ERR_NOT_FOUND naming the checkpoint that points into it; a range past the end
 *   ERR_CORRUPT.
 * - Part 0 of a checkpoint opened by number: the open reads its header together with as
 *   much of its end (head first, its start) as the reader's first read of it takes
 *   (part0OpenBytes). The first GET of that object a reader makes takes those bytes
 *   (`opened`) when they hold its whole answer, as the store would give it, and checks
 *   them as it checks that answer; they are used once, then gone, so a read made again
 *   after a failed check asks the store. A tail read of part 0's index nodes widened
 *   further down than they reach is narrowed to them (fewer leaves along, no GET).
 * - Head first (PartedSegment). The header is an object's first 256 bytes, so no read
 *   tells an object's size; every block is still checked against the summary, so a
 *   wrong size can only fail reads. A leaf span fetched for a read is a *head read*:
 *   one GET from byte 0 through the span brings header, summary and leaves (when the
 *   span ends within HEAD_READ_MAX_BYTES); for a small read of a small object, some data
 *   after them too, kept as data below a tail read's span is. An object of which nothing
 *   is known is read from byte 0 for as many summary entries as the largest summary seen;
 *   a summary larger than that, or of an object whose header is known, costs one exact GET.
 */
import { StreamSegmentError } from '../errors.js'
import { decodeHeader, HEADER_BYTES, type Header, objectLayout, SUMMARY_ENTRY_BYTES } from '../format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { nodeOffsetProblem } from '../format/object.js'
import { UNIT_BYTES } from '../format/pointer.js'
import { decodeSummary, type Summary } from '../format/summary.js'
import { hasChunkedGet } from '../store/common.js'
import type { ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { isoTime } from '../util/time.js'
import { MiB } from '../util/units.js'
import { NODE_SPAN_BYTES } from './nodes.js'
import { answerFrom, type OpenedBytes, reachesEnd } from './opened.js'

/** How far below an index span a widened read of part 0 reaches (the index levels under it). */
export const WIDE_INDEX_BYTES = 4 * MiB

/** The farthest a head read (header, summary and a leaf span, head first) reaches into an object. */
export const HEAD_READ_MAX_BYTES = 8 * MiB

/**
 * How far a tail read's range reaches past the bytes it needs (`need`): what a legal
 * object holds after them. Its data ends below `need`, so it has at most one slot per
 * 4 KiB unit below it: 16 bytes of summary each, and 16 more for the leaves naming them
 * (12 bytes an entry, room for leaves not full); NODE_SPAN_BYTES of index nodes; the
 * header. A 1 GiB object's tail fits (8 MiB); a 4 KiB read of a small object asks 1 MiB.
 */
function tailRoom(need: number): number {
  return NODE_SPAN_BYTES + 2 * SUMMARY_ENTRY_BYTES * Math.ceil(need / UNIT_BYTES) + HEADER_BYTES
}

/** Objects that keep data bytes fetched with a leaf span (the oldest give theirs up). */
const DATA_BELOW_OBJECTS = 32

/**
 * Objects that keep the bytes of a widened index read (`metaBytes`; the oldest give theirs
 * up). They serve the next levels of the walks under way (a read stream walks two windows
 * at once), which read a few objects each: kept by every object walked, a read over a map
 * whose index nodes lie in many checkpoints' part 0 kept up to 4 MiB of each, outside
 * any cache's bound.
 */
const META_KEPT_OBJECTS = 32

export type ReadKind = 'inode' | 'header' | 'meta' | 'summary' | 'data'

/**
 * What reads cost. A request counts once, under what it was made for; its bytes count by
 * the region they came from (a leaf span's tail read brings meta, summary and header).
 * `inode` counts the requests of opening, when the read stream opened the file.
 */
export interface ReadTiming {
  requests: Record<ReadKind, number>
  bytes: Record<ReadKind, number>
  /** Children found in memory by a walk; summaries found in the cache by a data run. */
  nodeCacheHits: number
  summaryCacheHits: number
  /** Nodes loaded one at a time by the BlockMap (a walk could not prefetch them). */
  nodeFallbacks: number
  holeBlocks: number
  memoryBlocks: number
  storedBlocks: number
  /** Requests the store made again after a failure that may pass, while this reader read. */
  retries: number
}

export function newReadTiming(): ReadTiming {
  const zero = () => ({ inode: 0, header: 0, meta: 0, summary: 0, data: 0 })
  return {
    requests: zero(),
    bytes: zero(),
    nodeCacheHits: 0,
    summaryCacheHits: 0,
    nodeFallbacks: 0,
    holeBlocks: 0,
    memoryBlocks: 0,
    storedBlocks: 0,
    retries: 0,
  }
}

/** What the reader knows of one object. */
export class ObjectState {
  header: Header | undefined
  /** Exact size, once a tail read has shown it (−1 before). */
  size = -1
  summary: Summary | undefined
  pending: Promise<Summary> | undefined
  /** The signal `pending`'s requests were made under. */
  pendingSignal: AbortSignal | undefined
  /** The highest offset of a meta block known to be in this object (−1: none). */
  maxMeta = -1
  /** Bytes of the object kept from a widened index read (the walk's next levels are in them). */
  metaBytes: { start: number; bytes: Uint8Array } | undefined
  /** Data bytes just below a leaf span, fetched with it for a small read (few objects keep some). */
  dataBytes: { start: number; bytes: Uint8Array } | undefined
  constructor(
    readonly key: string,
    readonly cno: number,
    readonly part: number,
  ) {}
}

export interface ObjectReadsOptions {
  /** The container's format (FORMAT_STREAM or FORMAT_PARTED). */
  format: number
  readMaxConcurrency: number
  readSummaryCacheBytes: number
  /** The signal of the requests made now: the file's, or a read's own (which a failure of the read aborts). */
  signal: () => AbortSignal
  /** The checkpoint whose block map is being read, for messages. */
  mapCno: () => number
  /** Whether an object whose header names a file made at `ctimeMs` may be of this container (FileState.madeHere). */
  madeHere: (ctimeMs: number) => boolean
  /**
   * Part 0's bytes the open read (a checkpoint opened by number), shared by the readers
   * of one file: the first GET of that object any of them makes takes them.
   */
  opened?: { bytes: OpenedBytes | undefined }
}

export class ObjectReads {
  timing: ReadTiming = newReadTiming()
  /** Data GETs; and node, header and summary reads, which never wait behind them. */
  readonly dataLimiter: Limiter
  readonly walkLimiter: Limiter
  private objects = new Map<string, ObjectState>()
  /** The objects holding `dataBytes`, and those holding `metaBytes`, oldest first. */
  private withData: ObjectState[] = []
  private withMeta: ObjectState[] = []
  private summaryBytes = 0
  /**
   * The most data slots of a summary read (and checked): sizes the suffix read of an object
   * not seen yet. It starts at a default-sized object's (16 MiB of 4 KiB blocks): a handle
   * whose first summaries are small part 0s (a history of small checkpoints) would else
   * read the summary of each larger object it meets twice, a suffix too short and then the
   * exact range. A suffix of 73 KiB costs a request about what one of 18 KiB does.
   */
  private typicalSlots = 4096
  private readonly parted: boolean
  private readonly summaryCacheBytes: number
  private readonly signal: () => AbortSignal
  private readonly mapCno: () => number
  private readonly madeHere: (ctimeMs: number) => boolean
  private readonly opened: { bytes: OpenedBytes | undefined } | undefined

  constructor(
    private readonly store: ObjectStore,
    options: ObjectReadsOptions,
  ) {
    this.parted = options.format === FORMAT_PARTED
    this.summaryCacheBytes = options.readSummaryCacheBytes
    this.signal = options.signal
    this.mapCno = options.mapCno
    this.madeHere = options.madeHere
    this.opened = options.opened
    this.dataLimiter = new Limiter(options.readMaxConcurrency)
    this.walkLimiter = new Limiter(options.readMaxConcurrency)
  }

  /**
   * Forgets what is known of object `key` from its own bytes (its header and summary are
   * read again when needed). Where its meta blocks lie (`maxMeta`) is kept: the block map
   * says so, not the answer that failed, and the summary is then read again by a tail
   * read, whose length tells the object's size, against which its header's counts are
   * checked (a suffix read, which cannot tell it, would take counts that disagree with it).
   */
  forget(key: string): void {
    const st = this.objects.get(key)
    if (st === undefined) return
    this.objects.delete(key)
    this.dropKept(st)
    if (st.summary !== undefined) this.summaryBytes -= summaryMemory(st.summary)
    if (st.maxMeta >= 0) this.state(key, st.cno, st.part).maxMeta = st.maxMeta
  }

  /** Forgets cached headers and summaries. */
  clear(): void {
    this.objects.clear()
    for (const st of this.withData) st.dataBytes = undefined
    for (const st of this.withMeta) st.metaBytes = undefined
    this.withData = []
    this.withMeta = []
    this.summaryBytes = 0
  }

  /** Lets the bytes `st` keeps go (an object forgotten or evicted). */
  private dropKept(st: ObjectState): void {
    st.dataBytes = undefined
    st.metaBytes = undefined
    removeFrom(this.withData, st)
    removeFrom(this.withMeta, st)
  }

  /** Keeps `bytes` from `start` as the bytes of a widened index read of `st`; the oldest of more than META_KEPT_OBJECTS go. */
  private keepMeta(st: ObjectState, start: number, bytes: Uint8Array): void {
    removeFrom(this.withMeta, st) // kept before (perhaps dropped since, after a failed check): newest now
    this.withMeta.push(st)
    if (this.withMeta.length > META_KEPT_OBJECTS) (this.withMeta.shift() as ObjectState).metaBytes = undefined
    st.metaBytes = { start, bytes }
  }

  /** Where the data slots of `st` start (head first they follow the meta blocks; 0 until its header is known). */
  dataOffset(st: ObjectState): number {
    return st.header === undefined ? 0 : objectLayout(st.header, st.header).dataOffset
  }

  /**
   * Bytes [start, end) of the object's data region: one data GET, its body as the chunks
   * it came in when the store can answer so (S3Store: no copy into one buffer), else one.
   */
  readData(st: ObjectState, start: number, end: number): Promise<Uint8Array[]> {
    return this.get(st.key, { start, end }, 'data', st.cno, true)
  }

  /**
   * Bytes [start, end) of the data region and the object's summary in one GET: a tail
   * read from `start` (data, then meta blocks, summary and header), for data that lies
   * just before the object's meta blocks and an object whose summary is not known yet
   * (a leaf written with a later object points at the last data blocks of this one).
   * The data bytes come first in the answer; its length tells the object's size.
   */
  async readDataWithSummary(
    st: ObjectState,
    start: number,
    end: number,
  ): Promise<{ chunks: Uint8Array[]; summary: Summary }> {
    // The leaves between these blocks and the last known one come along (TAIL_DATA_MAX_BYTES).
    const p = this.tailRead(st, start, 'data', end - start, Math.max(end, st.maxMeta))
    const pending = p.then((t) => t.summary)
    st.pending = pending
    st.pendingSignal = this.signal()
    pending.then(
      () => {
        if (st.pending === pending) st.pending = undefined
      },
      () => {
        if (st.pending === pending) st.pending = undefined
      },
    )
    const { bytes, summary } = await p
    this.timing.bytes.data += Math.min(end - start, bytes.byteLength)
    return { chunks: [bytes.subarray(0, Math.min(end - start, bytes.byteLength))], summary }
  }

  /**
   * The bytes of a span of meta blocks, from `span.start`. `withSummary`: the object's
   * summary comes along (a tail read, or head first a head read) and is cached.
   * `widen`: more bytes read below, kept for the nodes the walk reads there next
   * (`metaBytes`): without the summary, `widen` bytes up to the span's end; with it, from
   * `widen` bytes below the span's start. `data`: data bytes that come along, kept for the
   * read (`keptData`): tail first, that many below the span; head first, the data region
   * after the meta blocks, read that far past the span's end.
   */
  async readNodeSpan(
    st: ObjectState,
    span: { start: number; end: number },
    withSummary: boolean,
    widen = 0,
    data = 0,
  ): Promise<Uint8Array> {
    if (!withSummary) {
      const kept = st.metaBytes
      if (kept !== undefined && span.start >= kept.start && span.end <= kept.start + kept.bytes.byteLength) {
        this.timing.nodeCacheHits++
        return kept.bytes.subarray(span.start - kept.start, span.end - kept.start)
      }
      // Index nodes lie below their parent in the object (a map is written bottom up): the
      // bytes before the span bring the next levels along, kept for the walk's next steps.
      const start = widen > 0 ? Math.max(0, span.end - widen) : span.start
      const bytes = await this.get(st.key, { start, end: span.end }, 'meta', st.cno)
      this.timing.bytes.meta += bytes.byteLength
      if (widen === 0) return bytes
      this.keepMeta(st, start, bytes)
      return bytes.subarray(Math.min(bytes.byteLength, span.start - start))
    }
    // Tail first, a small read may want the data blocks just below the span (a leaf's
    // last blocks lie right before the object's meta blocks): `data` bytes come along.
    let from = this.parted ? span.start : span.start - Math.min(widen > 0 ? widen : data, span.start)
    // The open's bytes of this object (its end) hold the span but not all that is wanted
    // below it: what they hold is enough, for no request (the nodes further down, if the
    // walk needs them, cost the read they would have cost without the widening).
    const opened = this.opened?.bytes
    if (!this.parted && opened?.key === st.key && reachesEnd(opened) && opened.start <= span.start) {
      from = Math.max(from, opened.start)
    }
    const p = this.parted
      ? this.headSpanRead(st, span, data)
      : this.tailRead(st, from, 'meta', widen > 0 ? 0 : span.start - from, span.end)
    const pending = p.then((t) => t.summary)
    st.pending = pending
    st.pendingSignal = this.signal()
    pending.catch(() => {
      if (st.pending === pending) st.pending = undefined
    })
    const { bytes } = await p
    if (from === span.start) return bytes
    if (widen > 0) {
      this.keepMeta(st, from, bytes)
      return bytes.subarray(span.start - from)
    }
    this.timing.bytes.data += span.start - from
    this.keepData(st, from, bytes.subarray(0, span.start - from))
    return bytes.subarray(span.start - from)
  }

  /**
   * ERR_CORRUPT unless `offset` names one of the object's meta blocks, once its header is
   * known (every read that takes the summary along learns it; a node span read beside such
   * a read waits for it: headerInFlight): a data block whose bytes decode as a node (the
   * file's own content may) must not be taken for one.
   */
  checkNodeOffset(st: ObjectState, offset: number): void {
    if (st.header === undefined) return
    const problem = nodeOffsetProblem(objectLayout(st.header, st.header), offset)
    if (problem !== undefined) throw StreamSegmentError.corrupt(`${this.store.url}/${st.key}: ${problem}`)
  }

  /**
   * Settles once the read bringing the object's header (and summary) that is under way, if
   * any, has: the nodes a read without it fetched are then checked against the header
   * (checkNodeOffset) at no cost of a request. Its failure is its own reader's to report.
   */
  async headerInFlight(st: ObjectState): Promise<void> {
    if (st.header !== undefined || st.pending === undefined) return
    await st.pending.catch(() => undefined)
  }

  /** Bytes [start, end) of the object when a read below a leaf span brought them, else undefined. */
  keptData(st: ObjectState, start: number, end: number): Uint8Array | undefined {
    const kept = st.dataBytes
    if (kept === undefined || start < kept.start || end > kept.start + kept.bytes.byteLength) return undefined
    return kept.bytes.subarray(start - kept.start, end - kept.start)
  }

  private keepData(st: ObjectState, start: number, bytes: Uint8Array): void {
    if (st.dataBytes === undefined) {
      this.withData.push(st)
      if (this.withData.length > DATA_BELOW_OBJECTS) (this.withData.shift() as ObjectState).dataBytes = undefined
    }
    st.dataBytes = { start, bytes }
  }

  state(key: string, cno: number, part: number): ObjectState {
    let st = this.objects.get(key)
    if (st === undefined) {
      st = new ObjectState(key, cno, part)
      this.objects.set(key, st)
      if (this.objects.size > 65536) this.evict()
    } else {
      // Most recently used last.
      this.objects.delete(key)
      this.objects.set(key, st)
    }
    return st
  }

  private evict(): void {
    for (const [key, st] of this.objects) {
      if (this.summaryBytes <= this.summaryCacheBytes && this.objects.size <= 65536) return
      this.objects.delete(key)
      this.dropKept(st)
      if (st.summary !== undefined) this.summaryBytes -= summaryMemory(st.summary)
    }
  }

  /**
   * The object's summary: cached, or fetched once (concurrent callers share the fetch);
   * `minSlots`: the object has at least this many data slots (a pointer names the last).
   */
  summaryOf(st: ObjectState, minSlots: number): Promise<Summary> {
    if (st.summary !== undefined) {
      this.timing.summaryCacheHits++
      return Promise.resolve(st.summary)
    }
    // Not one made under a signal aborted since (a read that failed aborts its siblings):
    // it ends in that abort, which a later call, made after the failure, never asked for.
    if (st.pending !== undefined && st.pendingSignal?.aborted !== true) return st.pending
    const p = (async () => {
      if (this.parted) return this.headRead(st, minSlots)
      if (st.header !== undefined) {
        return (await this.tailRead(st, objectLayout(st.header, st.header).summaryOffset, 'summary')).summary
      }
      if (st.maxMeta >= 0) return (await this.tailRead(st, st.maxMeta, 'summary')).summary
      return this.suffixRead(st, minSlots)
    })()
    st.pending = p
    st.pendingSignal = this.signal()
    p.then(
      () => {
        if (st.pending === p) st.pending = undefined
      },
      () => {
        if (st.pending === p) st.pending = undefined
      },
    )
    return p
  }

  /**
   * A suffix read of `st` sized for `slots` summary entries (and an eighth more) and the
   * header, and the header at its end, taken in: checked against the object's size when the
   * answer is the whole object (`whole`: shorter than asked).
   */
  private async suffixHeader(
    st: ObjectState,
    slots: number,
    kind: ReadKind,
  ): Promise<{ bytes: Uint8Array; header: Header; whole: boolean }> {
    const want = HEADER_BYTES + SUMMARY_ENTRY_BYTES * (slots + (slots >> 3))
    const bytes = await this.get(st.key, { suffix: want }, kind, st.cno)
    const whole = bytes.byteLength < want
    const tail = bytes.subarray(Math.max(0, bytes.byteLength - HEADER_BYTES))
    const header = this.decodeHeaderAt(tail, whole ? bytes.byteLength : undefined, { ...st, format: FORMAT_STREAM })
    return { bytes, header: this.acceptHeader(st, header), whole }
  }

  /**
   * Header and summary of an object of which no meta block is known, by one suffix read
   * sized for the largest summary seen so far (an object shorter than that comes whole,
   * and its size is checked). A suffix does not tell the size of a longer object: its
   * data is still checked block by block against this summary, found from the end, so a
   * wrong size can only fail reads. A summary larger than guessed costs an exact tail read.
   */
  private async suffixRead(st: ObjectState, minSlots: number): Promise<Summary> {
    const { bytes, header, whole } = await this.suffixHeader(st, Math.max(minSlots, this.typicalSlots), 'summary')
    const layout = objectLayout(header, header)
    const length = layout.headerOffset - layout.summaryOffset
    if (length + HEADER_BYTES > bytes.byteLength) {
      return (await this.tailRead(st, layout.summaryOffset, 'summary')).summary
    }
    const end = bytes.byteLength - HEADER_BYTES
    const summary = decodeSummary(bytes.subarray(end - length, end), {
      count: header.dataCount,
      summaryCrc: header.summaryCrc,
      where: `${this.store.url}/${st.key}`,
    })
    const t = this.timing.bytes
    t.meta += end - length
    t.summary += length
    t.header += HEADER_BYTES
    if (whole) st.size = bytes.byteLength
    return this.acceptSummary(st, summary)
  }

  /**
   * Head first: the summary of an object, by one GET from byte 0 sized for the largest
   * summary seen (header and summary), or one exact GET when its header is known or the
   * summary turned out larger.
   */
  private async headRead(st: ObjectState, minSlots: number): Promise<Summary> {
    let header = st.header
    let bytes: Uint8Array | undefined
    if (header === undefined) {
      const slots = Math.max(minSlots, this.typicalSlots)
      bytes = await this.get(
        st.key,
        { start: 0, end: HEADER_BYTES + SUMMARY_ENTRY_BYTES * (slots + (slots >> 3)) },
        'summary',
        st.cno,
      )
      header = this.acceptHeader(
        st,
        this.decodeHeaderAt(bytes.subarray(0, HEADER_BYTES), undefined, { ...st, format: FORMAT_PARTED }),
      )
      this.timing.bytes.header += HEADER_BYTES
    }
    const layout = objectLayout(header, header)
    const length = layout.summaryEnd - layout.summaryOffset
    let summaryBytes: Uint8Array
    if (bytes !== undefined && bytes.byteLength >= layout.summaryEnd) {
      summaryBytes = bytes.subarray(layout.summaryOffset, layout.summaryEnd)
      this.timing.bytes.meta += bytes.byteLength - layout.summaryEnd
    } else if (length === 0) {
      summaryBytes = new Uint8Array(0)
    } else {
      // The summary is larger than guessed, or the header was known: one exact GET.
      summaryBytes = await this.get(st.key, { start: layout.summaryOffset, end: layout.summaryEnd }, 'summary', st.cno)
      if (summaryBytes.byteLength !== length) {
        throw StreamSegmentError.corrupt(
          `${this.store.url}/${st.key}: the object ends at ${layout.summaryOffset + summaryBytes.byteLength}, within its summary`,
        )
      }
    }
    this.timing.bytes.summary += length
    return this.acceptSummary(st, this.decodeSummaryBytes(st, header, summaryBytes))
  }

  /**
   * Head first: GETs the object from byte 0 through `span` (header, summary, padding and
   * meta blocks up to the span's end) and `after` bytes more; the summary is taken from it,
   * the data region's bytes it reached kept (`keptData`), the span's bytes returned.
   */
  private async headSpanRead(
    st: ObjectState,
    span: { start: number; end: number },
    after: number,
  ): Promise<{ bytes: Uint8Array; summary: Summary }> {
    const bytes = await this.get(st.key, { start: 0, end: span.end + after }, 'meta', st.cno)
    const where = `${this.store.url}/${st.key}`
    const header = this.acceptHeader(
      st,
      this.decodeHeaderAt(bytes.subarray(0, HEADER_BYTES), undefined, { ...st, format: FORMAT_PARTED }),
    )
    const layout = objectLayout(header, header)
    if (span.start < layout.metaOffset || span.end > layout.metaEnd) {
      throw StreamSegmentError.corrupt(
        `${where}: a pointer names bytes [${span.start}, ${span.end}), outside the meta blocks [${layout.metaOffset}, ${layout.metaEnd})`,
      )
    }
    const summary = this.decodeSummaryBytes(st, header, bytes.subarray(layout.summaryOffset, layout.summaryEnd))
    const t = this.timing.bytes
    t.header += HEADER_BYTES
    t.summary += layout.summaryEnd - layout.summaryOffset
    t.meta += Math.min(bytes.byteLength, layout.dataOffset) - layout.summaryEnd
    if (bytes.byteLength > layout.dataOffset) {
      const data = bytes.subarray(layout.dataOffset, Math.min(bytes.byteLength, layout.dataEnd))
      t.data += data.byteLength
      this.keepData(st, layout.dataOffset, data)
    }
    return { bytes: bytes.subarray(span.start, span.end), summary: this.acceptSummary(st, summary) }
  }

  /**
   * decodeHeader, its errors naming the store as well as the key (as those of nodes and
   * summaries do): a reader of several containers can tell which one is damaged. A header
   * written by a writer of another container (one made again at this place since the
   * block map was read: its objects have the same names, and are whole and valid) is
   * ERR_NOT_FOUND: the objects this checkpoint needs are gone.
   */
  private decodeHeaderAt(
    bytes: Uint8Array,
    size: number | undefined,
    expected: { cno: number; part: number; format: number },
  ): Header {
    let header: Header
    try {
      header = decodeHeader(bytes, size, expected)
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_CORRUPT')) {
        throw StreamSegmentError.corrupt(`${this.store.url}/${err.message}`, err)
      }
      if (StreamSegmentError.is(err, 'ERR_UNSUPPORTED')) {
        throw StreamSegmentError.unsupported(`${this.store.url}/${err.message}`)
      }
      throw err
    }
    if (!this.madeHere(header.inode.ctimeMs)) {
      const made = isoTime(header.inode.ctimeMs)
      throw StreamSegmentError.notFound(
        `${this.store.url}/${segmentKey(expected.cno, expected.part)}: is of another container, made at ${made} (the container was removed and made again since checkpoint ${this.mapCno()} was read); open the container again`,
      )
    }
    return header
  }

  /** The summary of `st` from its bytes, checked against the header's count and CRC. */
  private decodeSummaryBytes(st: ObjectState, header: Header, bytes: Uint8Array): Summary {
    return decodeSummary(bytes, {
      count: header.dataCount,
      summaryCrc: header.summaryCrc,
      where: `${this.store.url}/${st.key}`,
    })
  }

  /** Keeps the header of `st` (the same one as before, if it had one). */
  private acceptHeader(st: ObjectState, header: Header): Header {
    if (
      st.header !== undefined &&
      (st.header.summaryCrc !== header.summaryCrc || st.header.createdMs !== header.createdMs)
    ) {
      throw StreamSegmentError.corrupt(`${this.store.url}/${st.key}: the header changed between two reads`)
    }
    st.header = header
    return header
  }

  private acceptSummary(st: ObjectState, summary: Summary): Summary {
    // Sized by summaries that checked out, not by a header's count alone: a header whose
    // count the object does not hold (crafted, its CRC sealed again) would make every
    // later suffix read of this reader megabytes long.
    if (summary.count > this.typicalSlots) this.typicalSlots = summary.count
    if (st.summary === undefined) {
      st.summary = summary
      // An object evicted (or forgotten) while its summary was on the way is no longer in
      // the cache: its summary serves the reads waiting for it, and is not counted, or the
      // count would grow past what the cache holds and every summary after it evict all.
      if (this.objects.get(st.key) !== st) return summary
      this.summaryBytes += summaryMemory(summary)
      if (this.summaryBytes > this.summaryCacheBytes) this.evict()
    }
    return st.summary
  }

  /**
   * GETs the object from `start` to its end: the answer's length gives the exact size,
   * against which the header (its last 256 bytes) is checked; the summary is taken from it.
   * The range stops tailRoom past `need` (the last byte the caller wants): an answer that
   * fills it is an object longer than a legal tail there, whose header and summary are
   * then read from its end (tailOfLong), never the bytes in between.
   */
  private async tailRead(
    st: ObjectState,
    start: number,
    kind: ReadKind,
    dataBytes = 0,
    need = start,
  ): Promise<{ bytes: Uint8Array; summary: Summary }> {
    const end = Math.max(need, start) + tailRoom(need)
    const bytes = await this.get(st.key, { start, end }, kind, st.cno)
    if (start + bytes.byteLength >= end) return this.tailOfLong(st, start, bytes, kind, dataBytes)
    const size = start + bytes.byteLength
    const where = `${this.store.url}/${st.key}`
    const header = this.acceptHeader(
      st,
      this.decodeHeaderAt(bytes.subarray(Math.max(0, bytes.byteLength - HEADER_BYTES)), size, {
        ...st,
        format: FORMAT_STREAM,
      }),
    )
    const layout = objectLayout(header, header)
    if (start > layout.summaryOffset) {
      throw StreamSegmentError.corrupt(
        `${where}: a pointer names byte ${start}, past the meta blocks, which end at ${layout.summaryOffset}`,
      )
    }
    const summary = decodeSummary(bytes.subarray(layout.summaryOffset - start, layout.headerOffset - start), {
      count: header.dataCount,
      summaryCrc: header.summaryCrc,
      where,
    })
    const t = this.timing.bytes
    t.meta += Math.max(0, layout.summaryOffset - start - dataBytes)
    t.summary += layout.headerOffset - layout.summaryOffset
    t.header += HEADER_BYTES
    st.size = size
    return { bytes, summary: this.acceptSummary(st, summary) }
  }

  /**
   * A tail read whose answer (`bytes`, from `start`) filled its range: header and summary
   * by one suffix read sized for the largest summary seen, a larger summary by one exact
   * GET more. As with suffixRead the size is then known only from the header, which must
   * at least cover the bytes already read; every block is still checked against the
   * summary, so a wrong size can only fail reads.
   */
  private async tailOfLong(
    st: ObjectState,
    start: number,
    bytes: Uint8Array,
    kind: ReadKind,
    dataBytes: number,
  ): Promise<{ bytes: Uint8Array; summary: Summary }> {
    const where = `${this.store.url}/${st.key}`
    const { bytes: suffix, header, whole } = await this.suffixHeader(st, this.typicalSlots, kind)
    const layout = objectLayout(header, header)
    const read = start + bytes.byteLength
    if (layout.objectSize < read) {
      throw StreamSegmentError.corrupt(
        `${where}: the object runs past byte ${read}, but its header counts ${header.dataCount} data + ${header.metaCount} meta blocks = ${layout.objectSize} bytes`,
      )
    }
    if (start > layout.summaryOffset) {
      throw StreamSegmentError.corrupt(
        `${where}: a pointer names byte ${start}, past the meta blocks, which end at ${layout.summaryOffset}`,
      )
    }
    const length = layout.headerOffset - layout.summaryOffset
    let summaryBytes: Uint8Array
    if (length + HEADER_BYTES <= suffix.byteLength) {
      const end = suffix.byteLength - HEADER_BYTES
      summaryBytes = suffix.subarray(end - length, end)
    } else {
      summaryBytes = await this.get(
        st.key,
        { start: layout.summaryOffset, end: layout.headerOffset },
        'summary',
        st.cno,
      )
      if (summaryBytes.byteLength !== length) {
        throw StreamSegmentError.corrupt(
          `${where}: the object ends at ${layout.summaryOffset + summaryBytes.byteLength}, within its summary (${layout.summaryOffset}..${layout.headerOffset})`,
        )
      }
    }
    const summary = this.decodeSummaryBytes(st, header, summaryBytes)
    const t = this.timing.bytes
    t.meta += Math.max(0, bytes.byteLength - dataBytes)
    t.summary += length
    t.header += HEADER_BYTES
    if (whole) st.size = suffix.byteLength
    return { bytes, summary: this.acceptSummary(st, summary) }
  }

  /** One GET through the limiter, counted; missing and short objects say where. */
  private get(
    key: string,
    range: { start: number; end: number } | { suffix: number },
    kind: ReadKind,
    cno: number,
  ): Promise<Uint8Array>
  private get(
    key: string,
    range: { start: number; end: number } | { suffix: number },
    kind: ReadKind,
    cno: number,
    chunked: true,
  ): Promise<Uint8Array[]>
  private async get(
    key: string,
    range: { start: number; end: number } | { suffix: number },
    kind: ReadKind,
    cno: number,
    chunked = false,
  ): Promise<Uint8Array | Uint8Array[]> {
    const where = `${this.store.url}/${key}`
    const opened = this.opened?.bytes
    if (this.opened !== undefined && opened?.key === key) {
      // Once, whether they answer this GET or not: a read made again after a failed check
      // asks the store, and the bytes are not held longer than the first read of the object.
      this.opened.bytes = undefined
      const bytes = answerFrom(opened, range)
      if (bytes !== undefined) {
        if (kind === 'data') this.timing.bytes.data += bytes.byteLength
        return chunked ? [bytes] : bytes
      }
    }
    this.timing.requests[kind]++
    try {
      const limiter = kind === 'data' ? this.dataLimiter : this.walkLimiter
      const store = this.store
      const options = { range, signal: this.signal() }
      if (chunked) {
        const chunks = await limiter.run(() =>
          hasChunkedGet(store) ? store.getChunks(key, options) : store.get(key, options).then((b) => [b]),
        )
        if (kind === 'data') for (const c of chunks) this.timing.bytes.data += c.byteLength
        return chunks
      }
      const bytes = await limiter.run(() => store.get(key, options))
      if (kind === 'data') this.timing.bytes.data += bytes.byteLength
      return bytes
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
        throw StreamSegmentError.notFound(
          `${where}: no such object, but the block map (checkpoint ${this.mapCno()}) points into it (written by checkpoint ${cno})`,
          err,
        )
      }
      if (StreamSegmentError.is(err, 'ERR_RANGE') && 'start' in range) {
        throw StreamSegmentError.corrupt(
          `${where}: the object ends before byte ${range.start}, which is pointed at`,
          err,
        )
      }
      throw err
    }
  }
}

function removeFrom(list: ObjectState[], st: ObjectState): void {
  const i = list.indexOf(st)
  if (i >= 0) list.splice(i, 1)
}

function summaryMemory(s: Summary): number {
  return s.count * 9 + 200
}

/** Whether object `key` is there (a HEAD). */
export async function objectExists(store: ObjectStore, key: string, signal?: AbortSignal): Promise<boolean> {
  return (await store.head(key, { signal })) !== undefined
}

/**
 * Bytes [start, end) of object `key`, exactly: a short answer is ERR_CORRUPT naming the
 * object and the offset, a range past its end too. For readers that check a whole object
 * region by region (verify, inspect).
 */
export async function readExact(
  store: ObjectStore,
  key: string,
  start: number,
  end: number,
  signal?: AbortSignal,
): Promise<Uint8Array> {
  if (end <= start) return new Uint8Array(0)
  const [bytes] = await exactly(store, key, start, end, () =>
    store.get(key, { range: { start, end }, signal }).then((b) => [b]),
  )
  return bytes as Uint8Array
}

/**
 * As readExact, the bytes as the store's GET gives them (`getChunks` when it has it: no
 * buffer of the whole range, no copy), for a reader that walks them once (verify).
 */
export async function readExactChunks(
  store: ObjectStore,
  key: string,
  start: number,
  end: number,
  signal?: AbortSignal,
): Promise<Uint8Array[]> {
  if (end <= start) return []
  const options = { range: { start, end }, signal }
  return exactly(store, key, start, end, () =>
    hasChunkedGet(store) ? store.getChunks(key, options) : store.get(key, options).then((b) => [b]),
  )
}

/** `get`'s answer, checked to be exactly [start, end): a range past the end or a short answer is ERR_CORRUPT. */
async function exactly(
  store: ObjectStore,
  key: string,
  start: number,
  end: number,
  get: () => Promise<Uint8Array[]>,
): Promise<Uint8Array[]> {
  const where = `${store.url}/${key}`
  let chunks: Uint8Array[]
  try {
    chunks = await get()
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_RANGE')) {
      throw StreamSegmentError.corrupt(`${where}: the object ends before byte ${start}`, err)
    }
    throw err
  }
  let got = 0
  for (const c of chunks) got += c.byteLength
  if (got !== end - start) {
    throw StreamSegmentError.corrupt(`${where}: short read at ${start}: ${got} of ${end - start} bytes`)
  }
  return chunks
}
