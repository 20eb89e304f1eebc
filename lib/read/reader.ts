/**
 * Reads file bytes: dirty blocks from memory, stored blocks from their objects, with few
 * and exact requests (no HEAD, ever). What it bounds and what it checks (in a
 * PartedSegment container, where header and summary come first, see the last point):
 *
 * - Nodes. Before reading [from, to) the block map is walked level by level. The nodes a
 *   level needs are fetched together with the unloaded siblings under the same parents
 *   that live in the same object: one ranged GET per object span (≤ NODE_SPAN_BYTES), so
 *   a cold walk fetches each object's index nodes once. Every node is checked against
 *   its parent's entry (decodeNode: CRC, level, cno, key range) before it joins the
 *   BlockMap, whose node cache is bounded (`nodeCacheNodes`). A sibling that fails its
 *   checks is dropped; the walk that needs it later reports it.
 * - Header and summary, once per object, only when data blocks of that object are read,
 *   cached (bounded by `readSummaryCacheBytes`, least recently used first), never by a
 *   HEAD and never by a request for the header alone. Usually by a *tail read*: a ranged
 *   GET from a known offset in the object (a meta block its parent points at, or the
 *   summary's own offset) with its end past any legal object, so the answer runs to the
 *   object's end and tells its exact size; the header (the answer's last 256 bytes) is
 *   checked against it: magic, version, CRC, counts adding up to exactly the size, names,
 *   bounds. A leaf span of a data part fetched for a read is a tail read itself: leaves,
 *   summary and header in one GET. An object of which no meta block is known (data under
 *   a leaf stored elsewhere) is read by one suffix request sized for the largest summary
 *   seen: it tells the size only when the object is shorter than the suffix, but every
 *   block is still checked against the summary, which is found from the end, so a wrong
 *   size can only fail reads, never change what they return.
 * - Data. Holes cost nothing; dirty blocks are copied from the dirty tier; stored blocks
 *   contiguous in one object coalesce into one ranged GET of at most `readGetMaxBytes`.
 *   At most `readMaxConcurrency` data GETs of this reader are in flight, and beside them
 *   at most as many of the walk's node, header and summary reads (small: a node span, a
 *   summary), so a read-ahead walk never takes a data GET's slot nor waits behind one.
 *   Both kinds are latency-bound, one of each per object read: sharing the slots halved
 *   the throughput on a 40 ms link (test/bench/read.ts: 0.45 of raw GETs against 0.81).
 *   Every block fetched must sit in a live summary slot naming that block, with a
 *   matching CRC-32 (computed for the whole GET before its bytes are returned):
 *   otherwise ERR_CORRUPT naming the key, offset and both CRCs, never the bytes.
 *   A missing object is ERR_NOT_FOUND; a short answer or a range past the end ERR_CORRUPT.
 * - Head first (PartedSegment). The header is an object's first 256 bytes, so no read
 *   tells an object's size; every block is still checked against the summary, so a
 *   wrong size can only fail reads. A leaf span fetched for a read is a *head read*:
 *   one GET from byte 0 through the span brings header, summary and leaves (when the
 *   span ends within HEAD_READ_MAX_BYTES). An object of which nothing is known is read
 *   from byte 0 for as many summary entries as the largest summary seen; a summary
 *   larger than that, or of an object whose header is known, costs one exact GET.
 */

import { StreamSegmentError } from '../errors.js'
import { decodeHeader, HEADER_BYTES, type Header, objectLayout, SUMMARY_ENTRY_BYTES } from '../format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { type BlockMapNode, decodeNode } from '../format/node.js'
import { hex32, pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import { decodeSummary, type Summary } from '../format/summary.js'
import { type BlockMap, DIRTY_BASE, isDirtyRef, type MapNode } from '../state/block-map.js'
import type { FileCore } from '../state/file-state.js'
import type { ObjectStore } from '../store/types.js'
import { crc32Blocks } from '../util/crc32.js'

const KiB = 1024
const MiB = 1024 * KiB
/** Largest span of meta blocks one node GET brings. */
export const NODE_SPAN_BYTES = 1 * MiB
/**
 * Past the end of any legal object: its last block starts below 1 GiB and is at most
 * 16 MiB, then at most 2^18 summary entries and the header. A longer object's tail read
 * answers short of its header, which then fails the size check.
 */
export const TAIL_END = 2 ** 31
/** The farthest a head read (header, summary and a leaf span, head first) reaches into an object. */
export const HEAD_READ_MAX_BYTES = 8 * MiB

export interface ReadOptions {
  /** Largest data GET: contiguous blocks of one object coalesce up to this (default 16 MiB). */
  readGetMaxBytes?: number
  /** Data GETs in flight at once (default 10); the walk's node and summary reads have as many slots beside them. */
  readMaxConcurrency?: number
  /** Memory for cached object summaries (default 64 MiB; ~9 bytes per data block). */
  readSummaryCacheBytes?: number
}

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
  }
}

export function resolveReadOptions(o: ReadOptions = {}): Required<ReadOptions> {
  const int = (name: keyof ReadOptions, v: unknown, def: number, min: number, max: number): number => {
    if (v === undefined) return def
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
      throw StreamSegmentError.invalidArgument(
        `option ${name} = ${JSON.stringify(v)}: must be an integer in ${min}..${max}`,
      )
    }
    return v
  }
  return {
    readGetMaxBytes: int('readGetMaxBytes', o.readGetMaxBytes, 16 * MiB, 4 * KiB, 2 ** 30),
    readMaxConcurrency: int('readMaxConcurrency', o.readMaxConcurrency, 10, 1, 256),
    readSummaryCacheBytes: int('readSummaryCacheBytes', o.readSummaryCacheBytes, 64 * MiB, 0, Number.MAX_SAFE_INTEGER),
  }
}

/** Runs at most `limit` tasks at once, the others in arrival order; `peak` is the most that ran at once. */
export class Limiter {
  peak = 0
  private active = 0
  private waiting: Array<() => void> = []
  constructor(readonly limit: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((r) => this.waiting.push(r))
    else this.active++
    if (this.active > this.peak) this.peak = this.active
    try {
      return await fn()
    } finally {
      const next = this.waiting.shift()
      if (next) next()
      else this.active--
    }
  }
}

/** What the reader knows of one object. */
class ObjectState {
  header: Header | undefined
  /** Exact size, once a tail read has shown it (−1 before). */
  size = -1
  summary: Summary | undefined
  pending: Promise<Summary> | undefined
  /** The highest offset of a meta block known to be in this object (−1: none). */
  maxMeta = -1
  constructor(
    readonly key: string,
    readonly cno: number,
    readonly part: number,
  ) {}
}

/** A contiguous piece of a read, in file order. */
export type Piece =
  | { kind: 'zero'; start: number; end: number }
  | { kind: 'memory'; start: number; end: number; bytes: Uint8Array }
  | { kind: 'data'; start: number; end: number; run: Run }

/** Stored blocks contiguous in one object: `count` slots from byte `at`, holding file blocks `first`…. */
export interface Run {
  key: string
  cno: number
  part: number
  at: number
  first: number
  count: number
}

/** A child entry a walk wants, or may take along. */
interface NodeRef {
  parent: MapNode
  i: number
  hi: number
  lo: number
  key: string
  offset: number
  minKey: number
  upper: number
  needed: boolean
  node?: MapNode
}

export class Reader {
  readonly options: Required<ReadOptions>
  timing: ReadTiming = newReadTiming()
  private objects = new Map<string, ObjectState>()
  private summaryBytes = 0
  /** The most data slots seen in an object: sizes the suffix read of an object not seen yet. */
  private typicalSlots = 1024
  /** Data GETs; and the walk's node, header and summary reads, which never wait behind them. */
  readonly dataLimiter: Limiter
  readonly walkLimiter: Limiter
  /** CRCs of the blocks of one data GET (filled and compared with no await between). */
  private crcs = new Uint32Array(0)

  constructor(
    private readonly core: FileCore,
    options: ReadOptions = {},
  ) {
    this.options = resolveReadOptions(options)
    this.dataLimiter = new Limiter(this.options.readMaxConcurrency)
    this.walkLimiter = new Limiter(this.options.readMaxConcurrency)
  }

  private get store(): ObjectStore {
    return this.core.store
  }

  private get map(): BlockMap {
    return this.core.map
  }

  /** Forgets cached headers and summaries. */
  clear(): void {
    this.objects.clear()
    this.summaryBytes = 0
  }

  /** The bytes [offset, offset + length) (the caller clips to the file size); holes read as zeros. */
  async read(offset: number, length: number): Promise<Uint8Array> {
    const out = Buffer.alloc(length)
    if (length === 0) return out
    const pieces = await this.plan(offset, offset + length)
    await Promise.all(
      pieces.map(async (p) => {
        if (p.kind === 'memory') out.set(p.bytes, p.start - offset)
        else if (p.kind === 'data') await this.fetchRun(p.run, out, offset, p.start, p.end)
      }),
    )
    return out
  }

  /**
   * The pieces of [start, end): walks the block map (fetching nodes), then cuts the range
   * into holes, bytes from memory (copied now) and runs of stored blocks. Fetches no data.
   */
  async plan(start: number, end: number): Promise<Piece[]> {
    const bs = this.core.blockSize
    const first = Math.floor(start / bs)
    const last = Math.ceil(end / bs)
    await this.walk(first, last, true)
    const { map, tier } = this.core
    const pieces: Piece[] = []
    const ptr: [number, number] = [0, 0]
    const max = Math.max(1, Math.floor(this.options.readGetMaxBytes / bs))
    let run: Run | undefined
    let piece: Piece | undefined
    const t = this.timing
    // The leaf entry of the previous block: when the leaf's next key is this block, that
    // entry is its pointer (keys are unique in the tree), with no descent from the root.
    let leaf: MapNode | undefined
    let li = -1
    for (let b = first; b < last; b++) {
      let hi: number
      let lo: number
      if (leaf !== undefined && li + 1 < leaf.count && leaf.keys[li + 1] === b) {
        li++
        hi = leaf.hi[li] as number
        lo = leaf.lo[li] as number
      } else {
        if (!map.lookup(b, ptr)) {
          t.nodeFallbacks++
          await map.load(b)
          map.lookup(b, ptr)
        }
        ;[hi, lo] = ptr
        leaf = hi === 0 && lo === 0 ? undefined : map.leafOf(b) // holes: no entry to follow
        li = leaf === undefined ? -1 : leaf.search(b)
      }
      const from = Math.max(start, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      if (hi === 0 && lo === 0) {
        t.holeBlocks++
        if (piece?.kind === 'zero' && piece.end === from) piece.end = to
        else pieces.push((piece = { kind: 'zero', start: from, end: to }))
        continue
      }
      if (isDirtyRef(hi, lo)) {
        t.memoryBlocks++
        const slot = lo - DIRTY_BASE
        let bytes: Uint8Array
        if (tier.isRef(slot)) {
          bytes = await tier.readRef(slot, from - b * bs, to - from)
          leaf = undefined // the map may have changed meanwhile
        } else {
          const so = tier.offset(slot) + (from - b * bs)
          bytes = Buffer.from(tier.slab(slot).subarray(so, so + (to - from)))
        }
        pieces.push((piece = { kind: 'memory', start: from, end: to, bytes }))
        continue
      }
      t.storedBlocks++
      const part = pointerPart(lo)
      const at = pointerUnit(lo) * UNIT_BYTES
      if (
        piece?.kind === 'data' &&
        run !== undefined &&
        run.cno === hi &&
        run.part === part &&
        run.at + run.count * bs === at &&
        run.first + run.count === b &&
        run.count < max
      ) {
        run.count++
        piece.end = to
        continue
      }
      run = { key: segmentKey(hi, part), cno: hi, part, at, first: b, count: 1 }
      pieces.push((piece = { kind: 'data', start: from, end: to, run }))
    }
    return pieces
  }

  /** The bytes of a data piece: a view of the GET's answer, checked block by block. */
  async fetchPiece(p: Piece & { kind: 'data' }): Promise<Uint8Array> {
    const bytes = await this.fetchBlocks(p.run)
    const base = p.run.first * this.core.blockSize
    return bytes.subarray(p.start - base, p.end - base)
  }

  private async fetchRun(r: Run, out: Uint8Array, offset: number, start: number, end: number): Promise<void> {
    const bytes = await this.fetchBlocks(r)
    const base = r.first * this.core.blockSize
    out.set(bytes.subarray(start - base, end - base), start - offset)
  }

  /** The run's blocks, each checked against the object's summary. */
  private async fetchBlocks(r: Run): Promise<Uint8Array> {
    const bs = this.core.blockSize
    const st = this.state(r.key, r.cno, r.part)
    const length = r.count * bs
    const [bytes, summary] = await Promise.all([
      this.get(r.key, { start: r.at, end: r.at + length }, 'data', r.cno),
      this.summaryOf(st, Math.ceil((r.at + length) / bs)),
    ])
    const where = `${this.store.url}/${r.key}`
    if (bytes.byteLength !== length) {
      throw StreamSegmentError.corrupt(`${where}: read ${bytes.byteLength} bytes at ${r.at}, expected ${length}`)
    }
    // The summary came with the header: head first, the data region starts after the meta blocks.
    const dataOffset = st.header === undefined ? 0 : objectLayout(st.header, st.header).dataOffset
    if (this.crcs.length < r.count) this.crcs = new Uint32Array(r.count)
    const crcs = this.crcs
    crc32Blocks(bytes, bs, crcs)
    for (let i = 0; i < r.count; i++) {
      const b = r.first + i
      const at = r.at + i * bs
      const k = (at - dataOffset) / bs
      if (!Number.isInteger(k) || k < 0 || k >= summary.count) {
        throw StreamSegmentError.corrupt(
          `${where}: block ${b} points at offset ${at}, not one of the object's ${summary.count} data slots of ${bs} bytes`,
        )
      }
      if (summary.blockIndex[k] !== b || summary.live[k] !== 1) {
        throw StreamSegmentError.corrupt(
          `${where}: slot ${k} (offset ${at}) holds block ${summary.blockIndex[k]}${summary.live[k] ? '' : ' (dead)'}, the block map says block ${b}`,
        )
      }
      const crc = crcs[i] as number
      if (crc !== summary.crc[k]) {
        throw StreamSegmentError.corrupt(
          `${where}: block ${b} at offset ${at} has CRC-32 ${hex32(crc)}, the summary says ${hex32(summary.crc[k] as number)}`,
        )
      }
    }
    return bytes
  }

  // --- the walk ---

  /**
   * Brings into memory every node on the paths to blocks [from, to), level by level,
   * fetching per object one span of the needed nodes and their unloaded siblings.
   * `wantData`: the caller will read data under the leaves, so a leaf span of a data part
   * is fetched as a tail read that brings the object's summary along.
   */
  async walk(from: number, to: number, wantData: boolean): Promise<void> {
    let frontier: Array<{ node: MapNode; upper: number }> = [{ node: this.map.root, upper: 2 ** 32 }]
    while (frontier.length > 0 && (frontier[0] as { node: MapNode }).node.level > 0) {
      const next: Array<{ node: MapNode; upper: number }> = []
      const byObject = new Map<string, NodeRef[]>()
      for (const { node, upper } of frontier) {
        if (node.count === 0 || node.children === undefined) continue
        const firstChild = node.childIndex(from)
        for (let i = 0; i < node.count; i++) {
          const inRange = i >= firstChild && (node.keys[i] as number) < to
          const childUpper = i + 1 < node.count ? (node.keys[i + 1] as number) : upper
          const c = node.children[i]
          if (c !== undefined) {
            if (inRange) {
              next.push({ node: c, upper: childUpper })
              this.timing.nodeCacheHits++
            }
            continue
          }
          const hi = node.hi[i] as number
          const lo = node.lo[i] as number
          if (hi === 0) continue // not a stored node: BlockMap.load reports it if needed
          const part = pointerPart(lo)
          const key = segmentKey(hi, part)
          const offset = pointerUnit(lo) * UNIT_BYTES
          const st = this.state(key, hi, part)
          if (offset > st.maxMeta) st.maxMeta = offset
          const ref: NodeRef = {
            parent: node,
            i,
            hi,
            lo,
            key,
            offset,
            minKey: node.keys[i] as number,
            upper: childUpper,
            needed: inRange,
          }
          const list = byObject.get(key)
          if (list === undefined) byObject.set(key, [ref])
          else list.push(ref)
        }
      }
      const leaves = (frontier[0] as { node: MapNode }).node.level === 1
      const fetches: Promise<void>[] = []
      for (const refs of byObject.values()) {
        if (!refs.some((r) => r.needed)) continue
        const first = refs[0] as NodeRef
        const st = this.state(first.key, first.hi, pointerPart(first.lo))
        const spans = nodeSpans(refs, this.core.settings.metaBlockSize, NODE_SPAN_BYTES)
        const withSummary = leaves && wantData && st.summary === undefined && st.pending === undefined
        if (this.parted) {
          // Head first: header and summary lie before the first span.
          const firstSpan = spans[0] as NodeSpan
          const head = withSummary && firstSpan.end <= HEAD_READ_MAX_BYTES
          for (const span of spans) fetches.push(this.fetchSpan(st, span, head && span === firstSpan))
          continue
        }
        // A data part holds only leaves before its summary; part 0 index nodes too, which
        // the walk has seen from above (maxMeta), so its tail is bounded when they are near.
        const lastSpan = spans[spans.length - 1] as NodeSpan
        const tail =
          withSummary &&
          (st.part !== 0 || st.maxMeta + this.core.settings.metaBlockSize - lastSpan.start <= NODE_SPAN_BYTES)
        for (const span of spans) fetches.push(this.fetchSpan(st, span, tail && span === lastSpan))
      }
      await Promise.all(fetches)
      for (const refs of byObject.values()) {
        for (const r of refs) if (r.needed && r.node !== undefined) next.push({ node: r.node, upper: r.upper })
      }
      frontier = next
    }
  }

  /**
   * Fetches one span of nodes (with the summary when `withSummary`: a tail read, or head
   * first a head read) and attaches those that check out.
   */
  private async fetchSpan(st: ObjectState, span: NodeSpan, withSummary: boolean): Promise<void> {
    const mbs = this.core.settings.metaBlockSize
    let bytes: Uint8Array
    if (withSummary) {
      const p = this.parted ? this.headSpanRead(st, span) : this.tailRead(st, span.start, 'meta')
      const pending = p.then((t) => t.summary)
      st.pending = pending
      pending.catch(() => {
        if (st.pending === pending) st.pending = undefined
      })
      bytes = (await p).bytes
    } else {
      bytes = await this.get(st.key, { start: span.start, end: span.end }, 'meta', st.cno)
      this.timing.bytes.meta += bytes.byteLength
    }
    const core = this.core
    const maxCno = Math.max(core.published.cno, core.base.cno, core.pending?.cno ?? 0)
    for (const r of span.refs) {
      const at = r.offset - span.start
      const where = `${this.store.url}/${r.key} meta block at ${r.offset}`
      let decoded: BlockMapNode
      try {
        if (at + mbs > bytes.byteLength) {
          throw StreamSegmentError.corrupt(`${where}: the object ends at ${span.start + bytes.byteLength}`)
        }
        decoded = decodeNode(bytes.subarray(at, at + mbs), {
          level: r.parent.level - 1,
          minKey: r.minKey,
          maxKeyExclusive: r.upper,
          cno: r.hi,
          maxCno,
          where,
        })
      } catch (err) {
        if (r.needed) throw err
        continue
      }
      const p = r.parent
      if (p.children?.[r.i] === undefined && p.hi[r.i] === r.hi && p.lo[r.i] === r.lo && p.keys[r.i] === r.minKey) {
        r.node = this.map.attach(p, r.i, decoded)
      } else {
        r.node = p.children?.[r.i] // loaded meanwhile, or the tree changed: the walk's fallback loads it
      }
    }
  }

  // --- headers and summaries ---

  private state(key: string, cno: number, part: number): ObjectState {
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
      if (this.summaryBytes <= this.options.readSummaryCacheBytes && this.objects.size <= 65536) return
      this.objects.delete(key)
      if (st.summary !== undefined) this.summaryBytes -= summaryMemory(st.summary)
    }
  }

  /**
   * The object's summary: cached, or fetched once (concurrent callers share the fetch);
   * `minSlots`: the object has at least this many data slots (a pointer names the last).
   */
  private summaryOf(st: ObjectState, minSlots: number): Promise<Summary> {
    if (st.summary !== undefined) {
      this.timing.summaryCacheHits++
      return Promise.resolve(st.summary)
    }
    if (st.pending !== undefined) return st.pending
    const p = (async () => {
      if (this.parted) return this.headRead(st, minSlots)
      if (st.header !== undefined) {
        return (await this.tailRead(st, objectLayout(st.header, st.header).summaryOffset, 'summary')).summary
      }
      if (st.maxMeta >= 0) return (await this.tailRead(st, st.maxMeta, 'summary')).summary
      return this.suffixRead(st, minSlots)
    })()
    st.pending = p
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
   * Header and summary of an object of which no meta block is known, by one suffix read
   * sized for the largest summary seen so far (an object shorter than that comes whole,
   * and its size is checked). A suffix does not tell the size of a longer object: its
   * data is still checked block by block against this summary, found from the end, so a
   * wrong size can only fail reads. A summary larger than guessed costs an exact tail read.
   */
  private async suffixRead(st: ObjectState, minSlots: number): Promise<Summary> {
    const slots = Math.max(minSlots, this.typicalSlots)
    const want = HEADER_BYTES + SUMMARY_ENTRY_BYTES * (slots + (slots >> 3))
    const bytes = await this.get(st.key, { suffix: want }, 'summary', st.cno)
    const whole = bytes.byteLength < want
    const header = this.acceptHeader(
      st,
      decodeHeader(bytes.subarray(Math.max(0, bytes.byteLength - HEADER_BYTES)), whole ? bytes.byteLength : undefined, {
        ...st,
        format: FORMAT_STREAM,
      }),
    )
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

  private get parted(): boolean {
    return this.core.format === FORMAT_PARTED
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
        decodeHeader(bytes.subarray(0, HEADER_BYTES), undefined, { ...st, format: FORMAT_PARTED }),
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
   * meta blocks up to the span's end); the summary is taken from it, the span's bytes returned.
   */
  private async headSpanRead(st: ObjectState, span: NodeSpan): Promise<{ bytes: Uint8Array; summary: Summary }> {
    const bytes = await this.get(st.key, { start: 0, end: span.end }, 'meta', st.cno)
    const where = `${this.store.url}/${st.key}`
    const header = this.acceptHeader(
      st,
      decodeHeader(bytes.subarray(0, HEADER_BYTES), undefined, { ...st, format: FORMAT_PARTED }),
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
    t.meta += bytes.byteLength - layout.summaryEnd
    return { bytes: bytes.subarray(span.start), summary: this.acceptSummary(st, summary) }
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
    if (header.dataCount > this.typicalSlots) this.typicalSlots = header.dataCount
    return header
  }

  private acceptSummary(st: ObjectState, summary: Summary): Summary {
    if (st.summary === undefined) {
      st.summary = summary
      this.summaryBytes += summaryMemory(summary)
      if (this.summaryBytes > this.options.readSummaryCacheBytes) this.evict()
    }
    return st.summary
  }

  /**
   * GETs the object from `start` to its end: the answer's length gives the exact size,
   * against which the header (its last 256 bytes) is checked; the summary is taken from it.
   */
  private async tailRead(
    st: ObjectState,
    start: number,
    kind: ReadKind,
  ): Promise<{ bytes: Uint8Array; summary: Summary }> {
    const bytes = await this.get(st.key, { start, end: Math.max(TAIL_END, start + 1) }, kind, st.cno)
    const size = start + bytes.byteLength
    const where = `${this.store.url}/${st.key}`
    const header = this.acceptHeader(
      st,
      decodeHeader(bytes.subarray(Math.max(0, bytes.byteLength - HEADER_BYTES)), size, {
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
    t.meta += layout.summaryOffset - start
    t.summary += layout.headerOffset - layout.summaryOffset
    t.header += HEADER_BYTES
    st.size = size
    return { bytes, summary: this.acceptSummary(st, summary) }
  }

  /** One GET through the limiter, counted; missing and short objects say where. */
  private async get(
    key: string,
    range: { start: number; end: number } | { suffix: number },
    kind: ReadKind,
    cno: number,
  ): Promise<Uint8Array> {
    this.timing.requests[kind]++
    const where = `${this.store.url}/${key}`
    try {
      const limiter = kind === 'data' ? this.dataLimiter : this.walkLimiter
      const bytes = await limiter.run(() => this.store.get(key, { range, signal: this.core.signal }))
      if (kind === 'data') this.timing.bytes.data += bytes.byteLength
      return bytes
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
        throw StreamSegmentError.notFound(
          `${where}: no such object, but the block map (checkpoint ${this.core.base.cno}) points into it (written by checkpoint ${cno})`,
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

function summaryMemory(s: Summary): number {
  return s.count * 9 + 200
}

export interface NodeSpan<T = NodeRef> {
  start: number
  end: number
  refs: T[]
}

/**
 * Cuts the refs of one object into spans of at most `cap` bytes that cover every needed
 * node, then widens each span over unneeded siblings (rightwards first: reads go forward)
 * while it stays under `cap` and clear of its neighbours.
 */
export function nodeSpans<T extends { offset: number; needed: boolean }>(
  refs: readonly T[],
  mbs: number,
  cap: number,
): NodeSpan<T>[] {
  const sorted = [...refs].sort((a, b) => a.offset - b.offset)
  const spans: NodeSpan<T>[] = []
  for (const r of sorted) {
    if (!r.needed) continue
    const last = spans[spans.length - 1]
    if (last !== undefined && r.offset + mbs - last.start <= cap) last.end = Math.max(last.end, r.offset + mbs)
    else spans.push({ start: r.offset, end: r.offset + mbs, refs: [] })
  }
  for (let j = 0; j < spans.length; j++) {
    const s = spans[j] as NodeSpan<T>
    const lowest = j > 0 ? (spans[j - 1] as NodeSpan<T>).end : 0
    const highest = j + 1 < spans.length ? (spans[j + 1] as NodeSpan<T>).start : Number.POSITIVE_INFINITY
    for (const r of sorted) {
      if (r.offset >= s.end && r.offset + mbs <= highest && r.offset + mbs - s.start <= cap) s.end = r.offset + mbs
    }
    for (let k = sorted.length - 1; k >= 0; k--) {
      const r = sorted[k] as T
      if (r.offset < s.start && r.offset >= lowest && s.end - r.offset <= cap) s.start = r.offset
    }
  }
  for (const r of sorted) {
    const s = spans.find((x) => r.offset >= x.start && r.offset + mbs <= x.end)
    s?.refs.push(r)
  }
  return spans
}
