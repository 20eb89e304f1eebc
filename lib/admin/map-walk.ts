/**
 * The whole block map of one checkpoint, walked from its inode level by level: per object
 * one span of nodes at a time (container/nodes.ts), every node checked against its
 * parent's entry. Nodes that fail their checks, objects missing, pointers past an
 * object's end become problems; the walk goes on past them. For inspect and verify:
 * what it returns is which objects the map reaches, and where in them.
 */
import { NODE_SPAN_BYTES, type NodeSpan, nodeLocation, nodeSpans, readNodeSpan } from '../container/nodes.js'
import { StreamSegmentError } from '../errors.js'
import type { ObjectLayout } from '../format/header.js'
import type { Inode } from '../format/inode.js'
import { segmentKey } from '../format/names.js'
import { type BlockMapNode, decodeNode } from '../format/node.js'
import { nodeOffsetProblem } from '../format/object.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../format/pointer.js'
import type { ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { U32List } from '../util/typed-arrays.js'

interface Ref {
  hi: number
  lo: number
  level: number
  minKey: number
  upper: number
  offset: number
  needed: boolean
  where: string
  /** Checked against its parent's entry, not walked below (a node not newer than `newerThan`). */
  checkOnly: boolean
}

export interface Reached {
  /** Node pointers into the object: byte offsets. */
  nodes: number[]
  /** Data pointers: byte offsets, and the block each names (typed: a checkpoint may hold 2^28 and more). */
  dataAt: U32List
  dataBlock: U32List
}

export interface Problem {
  code: 'ERR_CORRUPT' | 'ERR_NOT_FOUND' | 'ERR_UNSUPPORTED'
  /** What failed: the inode, an object missing, a header, a summary, a node, a data block, a pointer. */
  what: 'inode' | 'missing' | 'header' | 'summary' | 'node' | 'block' | 'pointer'
  /** The key, and the byte offset in it when there is one. */
  where: string
  message: string
}

export interface MapWalk {
  reached: Map<string, Reached>
  /**
   * Objects holding nodes not walked below (`newerThan`), pointed at from nodes walked:
   * each such node was read and checked against its parent's entry (a problem when it
   * could not be read), so these objects were found.
   */
  skipped: Set<string>
  /**
   * Objects holding nodes that turned out to be gone, with the node pointers into each:
   * each one problem (`missing`, where its key), however many of its nodes were pointed
   * at, at however many levels. The checks of the objects themselves (inspect, verify)
   * must not report them again.
   */
  missing: Map<string, number>
  nodes: number
  leaves: number
  dataPointers: number
  holes: number
  height: number
}

/** Whether `err` says stored bytes cannot be used (damaged, gone, a newer layout): a problem, not a failure of the store. */
export function isUnreadable(err: unknown): err is StreamSegmentError {
  return (
    StreamSegmentError.is(err, 'ERR_CORRUPT') ||
    StreamSegmentError.is(err, 'ERR_NOT_FOUND') ||
    StreamSegmentError.is(err, 'ERR_UNSUPPORTED')
  )
}

export function toProblem(err: unknown, what: Problem['what'], where: string): Problem {
  if (isUnreadable(err)) return { code: err.code as Problem['code'], what, where, message: err.message }
  throw err
}

/**
 * The map's node pointers into object `key` (at `url`) that name no meta block of it, as
 * its header places them (a data block may decode as a node): a `pointer` problem each,
 * as inspect and verify report them.
 */
export function nodePointerProblems(
  url: string,
  key: string,
  layout: ObjectLayout,
  reached: Reached | undefined,
): Problem[] {
  const problems: Problem[] = []
  for (const offset of reached?.nodes ?? []) {
    const problem = nodeOffsetProblem(layout, offset)
    if (problem !== undefined) {
      problems.push({
        code: 'ERR_CORRUPT',
        what: 'pointer',
        where: `${key} byte ${offset}`,
        message: `${url}: ${problem}`,
      })
    }
  }
  return problems
}

/** Where a parent's entry placed a node: its level and the key range its subtree must lie in. */
export interface NodePlace {
  level: number
  minKey: number
  upper: number
}

/** What several walks of one container may share (nodes are never changed once stored). */
export interface WalkShare {
  /**
   * Node pointers ("hi:lo") whose subtrees an earlier walk covered, with where they were
   * placed: not walked again when reached at the same level within a range that holds the
   * earlier one (every key below was checked against it); walked again, and so checked,
   * otherwise. Every node walked is added.
   */
  seen?: Map<string, NodePlace>
  /**
   * Nodes decoded by earlier walks, by pointer: walked again from memory, not fetched
   * again, after the checks against this parent's entry that decoding made against the
   * first one (a cached node reached again at another level would close a cycle).
   */
  nodes?: Map<string, BlockMapNode>
  /**
   * Only nodes of checkpoint numbers above this one are walked: a node of a number at or
   * below it is read (with the other nodes of its object, a span at a time) and checked
   * against its parent's entry — its level, its keys within the entry's range — but not
   * walked below (that subtree was published, and checked, before).
   */
  newerThan?: number
  /**
   * Told each node pointer passed over as covered by an earlier walk (`seen`), with the
   * level it was reached at: its subtree is reached by this walk too, though not walked.
   */
  onCovered?: (hi: number, lo: number, level: number) => void
}

/** The checks decodeNode makes against the parent's entry, for a node decoded earlier. */
function checkPlace(n: BlockMapNode, place: NodePlace, cno: number, maxCno: number, where: string): void {
  const fail = (msg: string) => StreamSegmentError.corrupt(`${where}: node ${msg}`)
  if (n.level !== place.level) throw fail(`level ${n.level}, expected ${place.level}`)
  if (n.cno !== cno) throw fail(`cno ${n.cno}, expected ${cno}`)
  if (n.cno > maxCno) throw fail(`cno ${n.cno} is not in 1..${maxCno}`)
  // Keys are ascending (checked at decode): the first and last bound them all.
  const first = n.keys[0] as number
  const last = n.keys[n.count - 1] as number
  if (first < place.minKey || last >= place.upper) {
    throw fail(`keys ${first}..${last} are outside [${place.minKey}, ${place.upper})`)
  }
}

/**
 * Walks every node reachable from `inode`; nodes that fail their checks become problems,
 * and each object of nodes found gone one problem (`missing`), with what points into it.
 */
export async function walkMap(
  store: ObjectStore,
  inode: Inode,
  problems: Problem[],
  signal?: AbortSignal,
  share: WalkShare = {},
): Promise<MapWalk> {
  let walk: MapWalk | undefined
  await walkMaps(store, [{ inode, problems }], signal, share, (_, w) => {
    walk = w
  })
  return walk as MapWalk
}

/** One of the maps walkMaps walks: its inode, and where its problems go. */
export interface MapToWalk {
  inode: Inode
  problems: Problem[]
}

/**
 * Walks several maps together, as walkMap walks each: a level at a time across all of
 * them, the highest first, their nodes fetched a bounded number at a time in all, so a
 * remote store is waited for about once per level rather than once per level per map.
 * At each level the maps take their node pointers in the order given, as walking them
 * one after another would: a node two of them reach at the same level (`share.seen`) is
 * walked for the first. `onWalked` is told each map's walk as it ends, and is the only
 * one left holding it (a walk of a big map holds every pointer it reached).
 */
export async function walkMaps(
  store: ObjectStore,
  maps: readonly MapToWalk[],
  signal: AbortSignal | undefined,
  share: WalkShare,
  onWalked: (index: number, walk: MapWalk) => void,
): Promise<void> {
  const limiter = new Limiter(8)
  const walkers: Array<MapWalker | undefined> = maps.map(
    (m) => new MapWalker(store, m.inode, m.problems, signal, share, limiter),
  )
  let levels: Entries[][] = maps.map(({ inode }) => [
    {
      level: inode.rootLevel,
      keys: inode.rootKeys,
      hi: inode.rootPtrHi,
      lo: inode.rootPtrLo,
      count: inode.rootCount,
      // A checkpoint maps no block at or past its size: a key there is corrupt.
      upper: Math.ceil(inode.size / 2 ** inode.dataShift),
    },
  ])
  for (;;) {
    // A loop, not Math.max(...): thousands of maps would be as many arguments.
    const top = levels.reduce((t, l) => Math.max(t, l[0]?.level ?? -1), -1)
    if (top < 0) break
    // Each visit takes its level's node pointers before it first waits, so started in
    // order, the maps take them in order.
    const next = await Promise.all(
      levels.map((l, i) => (l[0]?.level === top ? (walkers[i] as MapWalker).visit(l) : undefined)),
    )
    levels = levels.map((l, i) => next[i] ?? l)
    next.forEach((n, i) => {
      if (n?.length !== 0) return
      const walk = finish(walkers[i] as MapWalker)
      walkers[i] = undefined
      onWalked(i, walk)
    })
  }
}

/** A map walked: each object of nodes found gone becomes one problem. */
function finish(walker: MapWalker): MapWalk {
  const { walk, store, inode, problems } = walker
  for (const [key, nodes] of [...walk.missing].sort(([a], [b]) => (a < b ? -1 : 1))) {
    problems.push({
      code: 'ERR_NOT_FOUND',
      what: 'missing',
      where: key,
      message: `${store.url}/${key}: ${missingWhy(inode, key, walk.reached.get(key), nodes)}`,
    })
  }
  return walk
}

/**
 * Why a missing object of checkpoint `inode.cno` matters: what points into it (`nodes`:
 * the node pointers into it, when not all of them are in `reached`), or that it is the
 * checkpoint's part 0.
 */
export function missingWhy(
  inode: Inode,
  key: string,
  reached: Reached | undefined,
  nodes = reached?.nodes.length ?? 0,
): string {
  const what = `${nodes} nodes and ${reached?.dataAt.length ?? 0} blocks`
  if (reached === undefined && nodes === 0 && key === segmentKey(inode.cno, 0)) {
    return `no such object, but it is part 0 of checkpoint ${inode.cno}, the checkpoint itself`
  }
  return `no such object, but the block map of checkpoint ${inode.cno} points at ${what} in it`
}

/** The entries of one node (or the inode's root): keys, pointers, level and upper bound. */
interface Entries {
  level: number
  keys: Uint32Array
  hi: Uint32Array
  lo: Uint32Array
  count: number
  upper: number
}

/** One walk: what it found so far, and the fetching and checking of one level's nodes. */
class MapWalker {
  readonly walk: MapWalk
  private readonly mbs: number
  /** The object the last data pointer reached (cno and part): a leaf's pointers mostly share one. */
  private lastData: { cno: number; part: number; reached: Reached } | undefined

  constructor(
    readonly store: ObjectStore,
    readonly inode: Inode,
    readonly problems: Problem[],
    private readonly signal: AbortSignal | undefined,
    private readonly share: WalkShare,
    /** Bounds the fetches in flight, of this walk and those walked with it. */
    private readonly limiter: Limiter,
  ) {
    this.mbs = 2 ** inode.metaShift
    this.walk = {
      reached: new Map(),
      skipped: new Set(),
      missing: new Map(),
      nodes: 0,
      leaves: 0,
      dataPointers: 0,
      holes: 0,
      height: inode.rootLevel,
    }
  }

  /** Visits every entry of one level; returns the entries of the nodes they point at. */
  async visit(level: readonly Entries[]): Promise<Entries[]> {
    const refs = new Map<string, Ref[]>()
    const next: Entries[] = []
    for (const e of level) {
      for (let i = 0; i < e.count; i++) {
        if (e.level === 0) this.dataPointer(e, i)
        else this.nodePointer(e, i, refs, next)
      }
    }
    await Promise.all(
      [...refs].flatMap(([key, list]) =>
        nodeSpans(list, this.mbs, NODE_SPAN_BYTES).map((span) =>
          this.limiter.run(() => this.fetchSpan(key, span, next)),
        ),
      ),
    )
    return next
  }

  private reach(key: string): Reached {
    let r = this.walk.reached.get(key)
    if (r === undefined)
      this.walk.reached.set(key, (r = { nodes: [], dataAt: new U32List(), dataBlock: new U32List() }))
    return r
  }

  /** A node checked against its parent's entry: counted, its entries the next level's. */
  private take(n: BlockMapNode, upper: number, next: Entries[]): void {
    this.walk.nodes++
    if (n.level === 0) this.walk.leaves++
    next.push({ level: n.level, keys: n.keys, hi: n.ptrHi, lo: n.ptrLo, count: n.count, upper })
  }

  /** A leaf's entry i: a hole, or a data pointer recorded against its object. */
  private dataPointer(e: Entries, i: number): void {
    const hi = e.hi[i] as number
    const lo = e.lo[i] as number
    if (hi === 0 && lo === 0) {
      this.walk.holes++
      return
    }
    const part = pointerPart(lo)
    const last = this.lastData
    let r: Reached
    if (last !== undefined && last.cno === hi && last.part === part) r = last.reached
    else this.lastData = { cno: hi, part, reached: (r = this.reach(segmentKey(hi, part))) }
    r.dataAt.push(pointerUnit(lo) * UNIT_BYTES)
    r.dataBlock.push(e.keys[i] as number)
    this.walk.dataPointers++
  }

  /**
   * An index node's entry i: skipped (covered by an earlier walk), taken from memory
   * (decoded by an earlier walk, checked against this entry), or added to `refs` to be
   * fetched with the other nodes of its object (one not newer than `newerThan` only to be
   * checked against this entry, not walked below).
   */
  private nodePointer(e: Entries, i: number, refs: Map<string, Ref[]>, next: Entries[]): void {
    const { seen, nodes, newerThan } = this.share
    const hi = e.hi[i] as number
    const lo = e.lo[i] as number
    const minKey = e.keys[i] as number
    const { key: objectKey, offset } = nodeLocation(hi, lo)
    const upper = i + 1 < e.count ? (e.keys[i + 1] as number) : e.upper
    const place: NodePlace = { level: e.level - 1, minKey, upper }
    const where = `${objectKey} byte ${offset}`
    const read = (checkOnly: boolean) =>
      addRef(refs, objectKey, { hi, lo, level: place.level, minKey, upper, offset, needed: true, where, checkOnly })
    if (newerThan !== undefined && hi <= newerThan) {
      // Published before, so its subtree was checked then; but a new node's pointer at it
      // may name a node of another level or key range, which only its bytes tell.
      this.walk.skipped.add(objectKey)
      read(true)
      return
    }
    const id = `${hi}:${lo}`
    if (seen !== undefined) {
      const before = seen.get(id)
      if (
        before !== undefined &&
        before.level === place.level &&
        before.minKey >= place.minKey &&
        before.upper <= place.upper
      ) {
        this.share.onCovered?.(hi, lo, place.level)
        return
      }
      // First reached, or reached elsewhere than before: walked (again), so checked here.
      seen.set(id, place)
    }
    this.reach(objectKey).nodes.push(offset)
    const known = nodes?.get(id)
    if (known !== undefined) {
      try {
        checkPlace(known, place, hi, this.inode.cno, `${this.store.url}/${where}`)
      } catch (err) {
        this.problems.push(toProblem(err, 'node', where))
        this.unsee(hi, lo, place)
        return
      }
      this.take(known, upper, next)
      return
    }
    read(false)
  }

  /** Fetches one span of an object's nodes and takes those that check out. */
  private async fetchSpan(key: string, span: NodeSpan<Ref>, next: Entries[]): Promise<void> {
    const { store, problems, mbs } = this
    let bytes: Uint8Array
    try {
      bytes = await readNodeSpan(store, key, span, this.signal)
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_CORRUPT')) {
        problems.push(toProblem(err, 'pointer', `${key} byte ${span.start}`))
      } else if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
        problems.push(toProblem(err, 'node', key))
      } else {
        // One problem per object, once the walk knows what points into it (walkMap): its
        // other spans, and its nodes of other levels, find it gone too.
        const { missing } = this.walk
        missing.set(key, (missing.get(key) ?? 0) + span.refs.length)
      }
      for (const r of span.refs) this.unsee(r.hi, r.lo, r)
      return
    }
    for (const r of span.refs) {
      const at = r.offset - span.start
      try {
        if (at + mbs > bytes.byteLength) {
          throw StreamSegmentError.corrupt(`${store.url}/${r.where}: node pointed at past the object's end`)
        }
        const n: BlockMapNode = decodeNode(bytes.subarray(at, at + mbs), {
          level: r.level,
          minKey: r.minKey,
          maxKeyExclusive: r.upper,
          cno: r.hi,
          maxCno: this.inode.cno,
          where: `${store.url}/${r.where}`,
        })
        if (r.checkOnly) continue
        this.share.nodes?.set(`${r.hi}:${r.lo}`, n)
        this.take(n, r.upper, next)
      } catch (err) {
        problems.push(toProblem(err, 'node', r.where))
        this.unsee(r.hi, r.lo, r)
      }
    }
  }

  /**
   * A node this walk claimed in `seen` (at `place`) and could not take: it failed its checks
   * there, or its bytes could not be read. The claim goes, so that a later walk reaching it
   * does not pass over it as covered: reached elsewhere (a wider key range, where it may
   * pass) it is walked for that map, and reached alike it fails for that map too, which is
   * then told broken as well. Kept, a later map would reach nothing under it, and gc could
   * delete what only that map reaches.
   */
  private unsee(hi: number, lo: number, place: NodePlace): void {
    const { seen } = this.share
    const id = `${hi}:${lo}`
    const claimed = seen?.get(id)
    if (
      claimed !== undefined &&
      claimed.level === place.level &&
      claimed.minKey === place.minKey &&
      claimed.upper === place.upper
    ) {
      seen?.delete(id)
    }
  }
}

/** Adds `ref` to those of its object, to be fetched together. */
function addRef(refs: Map<string, Ref[]>, objectKey: string, ref: Ref): void {
  const list = refs.get(objectKey)
  if (list === undefined) refs.set(objectKey, [ref])
  else list.push(ref)
}
