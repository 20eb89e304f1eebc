/**
 * The whole block map of one checkpoint, walked from its inode level by level: per object
 * one span of nodes at a time (container/nodes.ts), every node checked against its
 * parent's entry. Nodes that fail their checks, objects missing, pointers past an
 * object's end become problems; the walk goes on past them. For export: what it returns
 * is which objects the map reaches, and where in them; for gc, ls, inspect and verify
 * (told each leaf instead: WalkShare.onLeaf), which objects alone and how many data
 * pointers into each (WalkShare.objectsOnly).
 *
 * What a walk holds grows with the map's nodes and the objects it reaches, not with its
 * data pointers (a checkpoint of 1 TiB in 4 KiB blocks has 2^28 of them): a leaf's
 * pointers are visited as the leaf is decoded, its span's bytes and the leaf let go
 * then, never a whole level of leaves at once; only a walk that records every data
 * pointer (export, which copies each one) holds 8 bytes for each.
 * Nodes kept across walks (WalkShare.nodes) are kept whole but for the leaves of a walk
 * of objects only, which keep only the objects they reach (LeafObjects): a leaf is 4 KiB
 * decoded, and a map has one for every few hundred blocks. A walk told each leaf
 * (WalkShare.onLeaf: verify) lets a leaf's span go only once what it was told settled.
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
import { printable } from '../util/shell-words.js'
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
  /** This walk's claim on it in `share.seen`, if any. */
  claim?: Claim
  /** The claim on the node whose entry points at it, if any. */
  parent?: Claim
}

/**
 * A walk's claim in `share.seen` on the subtree under one node: that the subtree was walked
 * whole, as long as it is not given back.
 */
interface Claim extends NodePlace {
  id: string
  /** The claim on the node whose entry reached this one (none for the inode's root). */
  parent?: Claim
  /** The map whose walk made it. */
  by: MapToWalk
  /** Where the walkMaps that made it notes the claims given back (those of no other call are). */
  givenBack: Set<NodePlace>
}

/** A node pointer a walk passed over on an earlier claim, at the pointer's own place. */
interface PassedOver extends NodePlace {
  hi: number
  lo: number
  claim: NodePlace
  /** The claim on the node whose entry it is, if any. */
  parent?: Claim
}

export interface Reached {
  /** Node pointers into the object: byte offsets. */
  nodes: number[]
  /** How many data pointers point into the object (counted by every walk, recording them or not). */
  blocks: number
  /**
   * Data pointers: byte offsets, and the block each names (typed: a checkpoint may hold
   * 2^28 and more). None in a walk of objects only (WalkShare.objectsOnly).
   */
  dataAt: U32List
  dataBlock: U32List
}

/**
 * The data pointers of every object a walk of objects only reaches: one empty list for
 * them all (two lists of their own per object would cost more than the rest of its entry).
 * A push is a bug of this module, so it throws rather than fill the shared list.
 */
class NoDataPointers extends U32List {
  override push(): void {
    throw new Error('map-walk: a walk of objects only records no data pointers')
  }
}
const NO_DATA_POINTERS: U32List = new NoDataPointers()

export interface Problem {
  code: 'ERR_CORRUPT' | 'ERR_NOT_FOUND' | 'ERR_UNSUPPORTED'
  /** What failed: the inode, an object missing, a header, a summary, a node, a data block, a pointer. */
  what: 'inode' | 'missing' | 'header' | 'summary' | 'node' | 'block' | 'pointer'
  /** The key, and the byte offset in it when there is one. */
  where: string
  message: string
  /**
   * On the one problem of an object that stands for those left out (its message ending
   * `and N more problems`): N. Absent on every other problem.
   */
  more?: number
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
  if (isUnreadable(err)) return newProblem({ code: err.code as Problem['code'], what, where, message: err.message })
  throw err
}

/**
 * `p` with its message made printable, as an error's is (errors.ts): a problem's message
 * quotes the store's URL and keys, which may hold control characters, and a report's
 * reader prints it. `where` stays the key as it is.
 */
export function newProblem(p: Problem): Problem {
  return { ...p, message: printable(p.message) }
}

/** Problems inspect and verify keep per object; the rest are counted. */
export const MAX_PROBLEMS_PER_OBJECT = 20

/**
 * Where one object's problems go for inspect and verify: the first MAX_PROBLEMS_PER_OBJECT
 * kept, the rest only counted, as an object of 2^18 bad blocks or nodes (or a hostile map
 * pointing into it from a million entries) must not make as many messages. `done` gives
 * the kept ones, then one more counting the rest (its `what` that of the first left out).
 */
export class ObjectProblems {
  readonly #kept: Problem[] = []
  #whatLeftOut: Problem['what'] = 'block'
  #more = 0

  constructor(
    readonly url: string,
    readonly key: string,
  ) {}

  push(p: Problem): void {
    if (this.#kept.length < MAX_PROBLEMS_PER_OBJECT) this.#kept.push(p)
    else if (this.#more++ === 0) this.#whatLeftOut = p.what
  }

  /**
   * The problems of `other`, gathered apart for this same object, as if pushed here one by
   * one after those pushed so far: the first kept, the rest counted.
   */
  add(other: ObjectProblems): void {
    for (const p of other.#kept) this.push(p)
    if (other.#more === 0) return
    // `other` kept its fill, so this one is full now: what it left out is left out here.
    if (this.#more === 0) this.#whatLeftOut = other.#whatLeftOut
    this.#more += other.#more
  }

  done(): Problem[] {
    if (this.#more === 0) return this.#kept
    return [...this.#kept, moreProblems(this.url, this.key, this.#whatLeftOut, this.#more)]
  }
}

/**
 * How many problems `problems` tell of: each one, and each counting those of an object
 * left out (`and N more problems`) as those N.
 */
export function problemCount(problems: readonly Problem[]): number {
  let n = 0
  for (const p of problems) n += p.more ?? 1
  return n
}

/**
 * Problems in the order people read them: by key, then by byte offset (those of the
 * whole object first), the one counting those left out after the rest of its object's.
 */
export function byPlace(a: Problem, b: Problem): number {
  const [ka, oa] = place(a)
  const [kb, ob] = place(b)
  return ka < kb ? -1 : ka > kb ? 1 : oa - ob
}

/** A problem's key, and where in it: −1 the whole object, Infinity the count of those left out. */
function place(p: Problem): [string, number] {
  if (p.more !== undefined) return [p.where, Number.POSITIVE_INFINITY]
  const m = /^(.*) byte (\d+)$/.exec(p.where)
  return m === null ? [p.where, -1] : [m[1] as string, Number(m[2])]
}

/** The problem counting those of object `key` left out: `more` of them, the first of them a `what`. */
function moreProblems(url: string, key: string, what: Problem['what'], more: number): Problem {
  // ERR_CORRUPT: only a damaged object (or map) has that many.
  return { code: 'ERR_CORRUPT', what, where: key, message: moreMessage(url, key, more), more }
}

/** Printable, as newProblem makes every message: the count is set again as it grows. */
function moreMessage(url: string, key: string, more: number): string {
  return printable(`${url}/${key}: and ${more} more problems`)
}

/**
 * Where the walk of one map puts its problems: into the map's `problems` as they are met,
 * the first MAX_PROBLEMS_PER_OBJECT of each object kept, as ObjectProblems keeps them, and
 * the rest counted in one more, pushed with the first left out and counting on after it. A
 * hostile map may point at a million distinct damaged nodes of one object: only a count
 * per object is kept of them, never the records. Shared by every walk of the map
 * (walkMaps may walk it again), so that they count on from one another.
 */
class WalkProblems {
  readonly #byObject = new Map<string, { kept: number; more: number; rest?: Problem }>()

  constructor(
    private readonly url: string,
    private readonly problems: Problem[],
  ) {}

  /** Problem `p` of the walk, in object `key`. */
  push(key: string, p: Problem): void {
    let o = this.#byObject.get(key)
    if (o === undefined) this.#byObject.set(key, (o = { kept: 0, more: 0 }))
    if (o.kept < MAX_PROBLEMS_PER_OBJECT) {
      o.kept++
      this.problems.push(p)
      return
    }
    o.more++
    if (o.rest === undefined) this.problems.push((o.rest = moreProblems(this.url, key, p.what, o.more)))
    else {
      o.rest.message = moreMessage(this.url, key, o.more)
      o.rest.more = o.more
    }
  }
}

/**
 * The map's node pointers into object `key` (at `url`) that name no meta block of it, as
 * its header places them (a data block may decode as a node): a `pointer` problem each,
 * as inspect and verify report them. Made one at a time: a hostile map may point into
 * the object from a million entries, and the caller keeps only the first few.
 */
export function* nodePointerProblems(
  url: string,
  key: string,
  layout: ObjectLayout,
  reached: Reached | undefined,
): Generator<Problem> {
  for (const offset of reached?.nodes ?? []) {
    const problem = nodeOffsetProblem(layout, offset)
    if (problem !== undefined) {
      yield newProblem({
        code: 'ERR_CORRUPT',
        what: 'pointer',
        where: `${key} byte ${offset}`,
        message: `${url}: ${problem}`,
      })
    }
  }
}

/**
 * A leaf as a walk of objects only keeps it in `WalkShare.nodes`: what such a walk takes
 * from it, and what the checks against another parent's entry read (checkPlace), not its
 * entries. The objects as its data pointers reach them, one after another (a hostile leaf
 * may alternate between many: each run is one element, no search), in a real map one or
 * two.
 */
export interface LeafObjects {
  level: 0
  cno: number
  /** Its first and last keys. */
  first: number
  last: number
  holes: number
  /** The object of each run of data pointers, and how many are in that run. */
  objects: string[]
  blocks: number[]
}

/** A node kept by an earlier walk (WalkShare.nodes): decoded, or a leaf kept as its objects. */
export type KnownNode = BlockMapNode | LeafObjects

export function isLeafObjects(n: KnownNode): n is LeafObjects {
  return 'objects' in n
}

/** The objects leaf `n` reaches (`n` itself when kept so). */
export function leafObjects(n: KnownNode): LeafObjects {
  if (isLeafObjects(n)) return n
  return {
    level: 0,
    cno: n.cno,
    first: n.keys[0] as number,
    last: n.keys[n.count - 1] as number,
    ...runsOf({ hi: n.ptrHi, lo: n.ptrLo, count: n.count }),
  }
}

/** A leaf's entries as runs of data pointers into one object, and its holes. */
function runsOf(e: Pick<Entries, 'hi' | 'lo' | 'count'>): Pick<LeafObjects, 'holes' | 'objects' | 'blocks'> {
  const objects: string[] = []
  const blocks: number[] = []
  let holes = 0
  let lastHi = -1
  let lastPart = -1
  let run = 0
  for (let i = 0; i < e.count; i++) {
    const hi = e.hi[i] as number
    const lo = e.lo[i] as number
    if (hi === 0 && lo === 0) {
      holes++
      continue
    }
    const part = pointerPart(lo)
    if (hi !== lastHi || part !== lastPart) {
      if (run > 0) blocks.push(run)
      objects.push(segmentKey(hi, part))
      lastHi = hi
      lastPart = part
      run = 0
    }
    run++
  }
  if (run > 0) blocks.push(run)
  return { holes, objects, blocks }
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
   * first one (a cached node reached again at another level would close a cycle). A walk
   * of objects only keeps a leaf as the objects it reaches (LeafObjects), not decoded; a
   * walk recording every data pointer fetches such a leaf again.
   */
  nodes?: Map<string, KnownNode>
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
  /**
   * Objects known to be gone (a listing does not hold them). A leaf with a data pointer
   * into one is no problem of the walk, but its subtree is not whole: the claims on it
   * and on the nodes above it are given back, as for a node that fails (walkMaps).
   */
  gone?: (key: string) => boolean
  /** Told after each level walked (walkMaps: across the maps) how many nodes were taken at it. */
  onLevel?: (nodes: number) => void
  /**
   * Told each leaf as it is visited (after the walk counted it), the inode's root of a map
   * of one level too: its keys and data pointers, to check there rather than record them
   * (verify). What it returns is waited for before the leaf's span is let go (its fetch
   * slot held till then), so a walk holds no more leaves for it than fetches in flight. A
   * leaf kept as its objects (LeafObjects) is fetched again for it.
   */
  onLeaf?: (leaf: LeafEntries) => Promise<void> | undefined
  /**
   * Records only which objects the map reaches and how many data pointers point into each
   * (`Reached.blocks`), not each pointer (`dataAt`, `dataBlock` left empty): for gc, ls and
   * inspect, which need no more, and verify, told each leaf (onLeaf). A walk recording
   * them holds 8 bytes per mapped block, gigabytes for a checkpoint of a few TiB; this one
   * holds what grows with the objects and the nodes.
   */
  objectsOnly?: boolean
}

/** A leaf as WalkShare.onLeaf is told it: entry i maps block keys[i] to the pointer (hi[i], lo[i]), (0, 0) a hole. */
export interface LeafEntries {
  keys: Uint32Array
  hi: Uint32Array
  lo: Uint32Array
  count: number
}

/** The checks decodeNode makes against the parent's entry, for a node decoded earlier. */
function checkPlace(n: KnownNode, place: NodePlace, cno: number, maxCno: number, where: string): void {
  const fail = (msg: string) => StreamSegmentError.corrupt(`${where}: node ${msg}`)
  if (n.level !== place.level) throw fail(`level ${n.level}, expected ${place.level}`)
  if (n.cno !== cno) throw fail(`cno ${n.cno}, expected ${cno}`)
  if (n.cno > maxCno) throw fail(`cno ${n.cno} is not in 1..${maxCno}`)
  // Keys are ascending (checked at decode): the first and last bound them all.
  const first = isLeafObjects(n) ? n.first : (n.keys[0] as number)
  const last = isLeafObjects(n) ? n.last : (n.keys[n.count - 1] as number)
  if (first < place.minKey || last >= place.upper) {
    throw fail(`keys ${first}..${last} are outside [${place.minKey}, ${place.upper})`)
  }
}

/**
 * Walks every node reachable from `inode`; nodes that fail their checks become problems,
 * MAX_PROBLEMS_PER_OBJECT kept per object and one more counting the rest (as inspect and
 * verify keep an object's own), and each object of nodes found gone one problem
 * (`missing`), with what points into it.
 */
export async function walkMap(
  store: ObjectStore,
  inode: Inode,
  problems: Problem[],
  signal?: AbortSignal,
  share: WalkShare = {},
): Promise<MapWalk> {
  let walk: MapWalk | undefined
  // Walked alone, a map is not walked again (it passes over no claim given back but its own).
  await walkMaps(store, [{ inode, problems }], signal, share, (_, w) => {
    walk = w
  })
  return walk as MapWalk
}

/** One of the maps walkMaps walks: its inode, and where its problems go (capped per object, as walkMap's). */
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
 * one left holding it (a walk of a big map recording its data pointers holds every one).
 *
 * A claim in `seen` says that the subtree under its node was walked whole. A node that
 * fails its checks, or cannot be read, or a leaf pointing into an object gone
 * (`share.gone`), gives back the claims on it and on every node above it, which
 * the walk cannot call whole any more. A map that passed over one of those claims of
 * another map (at the same level, while they walked, or before) walks again from there:
 * `onWalked` is then told that further walk (`again`), which holds only what it reached
 * from there. Maps walked one after another give claims back before the next begins.
 */
export async function walkMaps(
  store: ObjectStore,
  maps: readonly MapToWalk[],
  signal: AbortSignal | undefined,
  share: WalkShare,
  onWalked: (index: number, walk: MapWalk, again: boolean) => void,
): Promise<void> {
  const limiter = new Limiter(8)
  const givenBack = new Set<NodePlace>()
  const passed = maps.map((): PassedOver[] => [])
  const found = maps.map(({ problems }) => new WalkProblems(store.url, problems))
  let from = new Map<number, Entries[]>(maps.map(({ inode }, i) => [i, [rootEntries(inode)]]))
  for (let again = false; from.size > 0; again = true) {
    const walkers = new Map<number, MapWalker>()
    for (const i of from.keys()) {
      const map = maps[i] as MapToWalk
      walkers.set(
        i,
        new MapWalker(store, map, found[i] as WalkProblems, signal, share, limiter, givenBack, passed[i] ?? []),
      )
    }
    await walkLevels(walkers, from, share.onLevel, (i, walker) => {
      // The map's walk is left to onWalked alone (a big map's may hold every pointer reached).
      walkers.delete(i)
      onWalked(i, finish(walker), again)
    })
    // What a map passed over on another map's claim given back since, it walks itself.
    from = new Map()
    passed.forEach((list, i) => {
      const now: PassedOver[] = []
      const later: PassedOver[] = []
      for (const p of list) (givenBack.has(p.claim) ? now : later).push(p)
      passed[i] = later
      if (now.length > 0) from.set(i, now.map(passedEntries))
    })
  }
}

/** A pointer passed over, as the entries of a node of one entry: where its map walks again. */
function passedEntries({ hi, lo, level, minKey, upper, parent }: PassedOver): Entries {
  return {
    level: level + 1,
    keys: Uint32Array.of(minKey),
    hi: Uint32Array.of(hi),
    lo: Uint32Array.of(lo),
    count: 1,
    upper,
    claim: parent,
  }
}

/** The inode's root as the entries of a node: where every walk of its map starts. */
function rootEntries(inode: Inode): Entries {
  return {
    level: inode.rootLevel,
    keys: inode.rootKeys,
    hi: inode.rootPtrHi,
    lo: inode.rootPtrLo,
    count: inode.rootCount,
    // A checkpoint maps no block at or past its size: a key there is corrupt.
    upper: Math.ceil(inode.size / 2 ** inode.dataShift),
  }
}

/**
 * Walks each map from its entries (`from`, of any levels), a level at a time across them
 * all, the highest first; `onEnd` is told each walker as its map ends.
 */
async function walkLevels(
  walkers: ReadonlyMap<number, MapWalker>,
  from: ReadonlyMap<number, Entries[]>,
  onLevel: ((nodes: number) => void) | undefined,
  onEnd: (index: number, walker: MapWalker) => void,
): Promise<void> {
  const left = new Map(from)
  while (left.size > 0) {
    // A loop, not Math.max(...): thousands of maps would be as many arguments.
    let top = -1
    for (const entries of left.values()) for (const e of entries) top = Math.max(top, e.level)
    // Each visit takes its level's node pointers before it first waits, so started in
    // order, the maps take them in order.
    let taken = 0
    const visits = [...left].map(async ([i, entries]) => {
      const here = entries.filter((e) => e.level === top)
      if (here.length === 0) return
      const { walk } = walkers.get(i) as MapWalker
      const before = walk.nodes
      const next = await (walkers.get(i) as MapWalker).visit(here)
      taken += walk.nodes - before
      for (const e of entries) if (e.level !== top) next.push(e)
      left.set(i, next)
    })
    await Promise.all(visits)
    onLevel?.(taken)
    for (const [i, entries] of left) {
      if (entries.length > 0) continue
      left.delete(i)
      onEnd(i, walkers.get(i) as MapWalker)
    }
  }
}

/** A map walked: each object of nodes found gone becomes one problem. */
function finish(walker: MapWalker): MapWalk {
  const { walk, store, inode, problems } = walker
  for (const [key, nodes] of [...walk.missing].sort(([a], [b]) => (a < b ? -1 : 1))) {
    problems.push(
      newProblem({
        code: 'ERR_NOT_FOUND',
        what: 'missing',
        where: key,
        message: `${store.url}/${key}: ${missingWhy(inode, key, walk.reached.get(key), nodes)}`,
      }),
    )
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
  const what = `${nodes} nodes and ${reached?.blocks ?? 0} blocks`
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
  /** The claim on that node, if any. */
  claim?: Claim
}

/** One walk: what it found so far, and the fetching and checking of one level's nodes. */
class MapWalker {
  readonly walk: MapWalk
  readonly inode: Inode
  readonly problems: Problem[]
  private readonly mbs: number
  /**
   * The object the last data pointer reached (cno and part): a leaf's pointers mostly share
   * one. Set afresh per leaf, and a leaf's pointers are visited in one synchronous run
   * (leaf), so leaves of spans fetched at once never see one another's.
   */
  private lastData: { cno: number; part: number; reached: Reached } | undefined
  /** WalkShare.objectsOnly: data pointers counted per object, not recorded. */
  private readonly objectsOnly: boolean

  constructor(
    readonly store: ObjectStore,
    private readonly map: MapToWalk,
    /** Where its problems go, but for the objects found gone (finish): capped per object. */
    private readonly found: WalkProblems,
    private readonly signal: AbortSignal | undefined,
    private readonly share: WalkShare,
    /** Bounds the fetches in flight, of this walk and those walked with it. */
    private readonly limiter: Limiter,
    /** Claims given back by any walk of this walkMaps. */
    private readonly givenBack: Set<NodePlace>,
    /** Where this walk notes what it passes over on earlier claims. */
    private readonly passed: PassedOver[],
  ) {
    const { inode, problems } = map
    this.inode = inode
    this.problems = problems
    this.mbs = 2 ** inode.metaShift
    this.objectsOnly = share.objectsOnly === true
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

  /**
   * Visits every entry of one level; returns the entries of the index nodes they point at.
   * The leaves they point at are visited as each is taken (take), so none are returned.
   */
  async visit(level: readonly Entries[]): Promise<Entries[]> {
    const refs = new Map<string, Ref[]>()
    const next: Entries[] = []
    // What WalkShare.onLeaf returned for the leaves taken from memory (or the root).
    const told: Promise<void>[] = []
    for (const e of level) {
      // Level 0 here only as the inode's root of a map of one level (no node above it).
      if (e.level === 0) tell(told, this.leaf(e))
      else for (let i = 0; i < e.count; i++) tell(told, this.nodePointer(e, i, refs, next))
    }
    await Promise.all([
      ...told,
      ...[...refs].flatMap(([key, list]) =>
        nodeSpans(list, this.mbs, NODE_SPAN_BYTES).map((span) =>
          this.limiter.run(() => this.fetchSpan(key, span, next)),
        ),
      ),
    ])
    return next
  }

  private reach(key: string): Reached {
    let r = this.walk.reached.get(key)
    if (r === undefined) {
      r = this.objectsOnly
        ? { nodes: [], blocks: 0, dataAt: NO_DATA_POINTERS, dataBlock: NO_DATA_POINTERS }
        : { nodes: [], blocks: 0, dataAt: new U32List(), dataBlock: new U32List() }
      this.walk.reached.set(key, r)
    }
    return r
  }

  /**
   * A node checked against its parent's entry: counted; an index node's entries the next
   * level's, a leaf's visited now. Held for the visit of their level, the leaves would all
   * be in memory at once, their keys and pointers 12 bytes per mapped block (gigabytes for
   * a checkpoint of a few TiB); visited as they come, each goes with its span. Nothing at
   * the leaf level waits for the level to be whole: a data pointer claims no node, and the
   * claims one gives back (an object gone) were all taken, by every map walked with this
   * one, before the first leaf's span came (walkLevels: each visit takes its node pointers
   * before it first waits), as when the leaves were visited after their level. A leaf
   * taken from memory (share.nodes) is visited as its pointer is taken: a map after this
   * one then finds a claim it gave back gone already, and walks that leaf at once rather
   * than pass over it and walk again. `id`: a node just decoded, kept in share.nodes under
   * it (a leaf of a walk of objects only as its objects). Returns what WalkShare.onLeaf
   * returned for a leaf.
   */
  private take(
    n: KnownNode,
    upper: number,
    next: Entries[],
    claim: Claim | undefined,
    id?: string,
  ): Promise<void> | undefined {
    this.walk.nodes++
    if (isLeafObjects(n)) {
      this.walk.leaves++
      this.objects(n, claim)
      return undefined
    }
    const kept = id === undefined ? undefined : this.share.nodes
    const entries = { level: n.level, keys: n.keys, hi: n.ptrHi, lo: n.ptrLo, count: n.count, upper, claim }
    if (n.level > 0) {
      kept?.set(id as string, n)
      next.push(entries)
      return undefined
    }
    this.walk.leaves++
    if (!this.objectsOnly) {
      kept?.set(id as string, n)
      return this.leaf(entries)
    }
    const objects = leafObjects(n)
    kept?.set(id as string, objects)
    this.objects(objects, claim)
    return this.share.onLeaf?.(entries)
  }

  /**
   * A leaf's entries (or the inode's root of a map of one level): holes and data pointers.
   * Returns what WalkShare.onLeaf returned for it.
   */
  private leaf(e: Entries): Promise<void> | undefined {
    if (this.objectsOnly) {
      this.objects(runsOf(e), e.claim)
      return this.share.onLeaf?.(e)
    }
    // Each leaf looks its objects up afresh: one gone gives back that leaf's claims.
    this.lastData = undefined
    for (let i = 0; i < e.count; i++) this.dataPointer(e, i)
    return this.share.onLeaf?.(e)
  }

  /**
   * A leaf's data pointers counted against their objects, for a walk of objects only: by
   * runs (LeafObjects), as the leaf's pointers would be one by one.
   */
  private objects(o: Pick<LeafObjects, 'holes' | 'objects' | 'blocks'>, claim: Claim | undefined): void {
    this.walk.holes += o.holes
    for (let i = 0; i < o.objects.length; i++) {
      const key = o.objects[i] as string
      const blocks = o.blocks[i] as number
      this.reach(key).blocks += blocks
      this.walk.dataPointers += blocks
      // A leaf into an object gone gives back its claims, each time it is visited.
      if (this.share.gone?.(key)) this.giveUp(claim)
    }
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
    else {
      const key = segmentKey(hi, part)
      this.lastData = { cno: hi, part, reached: (r = this.reach(key)) }
      if (this.share.gone?.(key)) this.giveUp(e.claim)
    }
    r.blocks++
    r.dataAt.push(pointerUnit(lo) * UNIT_BYTES)
    r.dataBlock.push(e.keys[i] as number)
    this.walk.dataPointers++
  }

  /**
   * An index node's entry i: skipped (covered by an earlier walk), taken from memory
   * (decoded by an earlier walk, checked against this entry), or added to `refs` to be
   * fetched with the other nodes of its object (one not newer than `newerThan` only to be
   * checked against this entry, not walked below). Returns what WalkShare.onLeaf returned
   * for a leaf taken from memory.
   */
  private nodePointer(e: Entries, i: number, refs: Map<string, Ref[]>, next: Entries[]): Promise<void> | undefined {
    const { seen, nodes, newerThan } = this.share
    const hi = e.hi[i] as number
    const lo = e.lo[i] as number
    const minKey = e.keys[i] as number
    const { key: objectKey, offset } = nodeLocation(hi, lo)
    const upper = i + 1 < e.count ? (e.keys[i + 1] as number) : e.upper
    const level = e.level - 1
    const where = `${objectKey} byte ${offset}`
    const parent = e.claim
    const read = (checkOnly: boolean, claim?: Claim) =>
      addRef(refs, objectKey, { hi, lo, level, minKey, upper, offset, needed: true, where, checkOnly, claim, parent })
    if (newerThan !== undefined && hi <= newerThan) {
      // Published before, so its subtree was checked then; but a new node's pointer at it
      // may name a node of another level or key range, which only its bytes tell.
      this.walk.skipped.add(objectKey)
      read(true)
      return undefined
    }
    const id = `${hi}:${lo}`
    let claim: Claim | undefined
    if (seen !== undefined) {
      const before = seen.get(id)
      if (before !== undefined && before.level === level && before.minKey >= minKey && before.upper <= upper) {
        // Noted only when it may be given back while this map is walked: another map's,
        // of this walkMaps (a map's own claims are given back only when it failed itself).
        const claim = before as Partial<Claim>
        if (claim.givenBack === this.givenBack && claim.by !== this.map) {
          this.passed.push({ hi, lo, level, minKey, upper, claim: before, parent })
        }
        this.share.onCovered?.(hi, lo, level)
        return undefined
      }
      // First reached, or reached elsewhere than before: walked (again), so checked here.
      claim = { id, level, minKey, upper, parent, by: this.map, givenBack: this.givenBack }
      seen.set(id, claim)
    }
    this.reach(objectKey).nodes.push(offset)
    const known = nodes?.get(id)
    // A leaf kept as its objects has no data pointers to record or tell: fetched again for those.
    const enough = this.objectsOnly && this.share.onLeaf === undefined
    if (known !== undefined && (enough || !isLeafObjects(known))) {
      try {
        checkPlace(known, { level, minKey, upper }, hi, this.inode.cno, `${this.store.url}/${where}`)
      } catch (err) {
        this.found.push(objectKey, toProblem(err, 'node', where))
        this.giveUp(claim ?? parent)
        return undefined
      }
      return this.take(known, upper, next, claim)
    }
    read(false, claim)
    return undefined
  }

  /** Fetches one span of an object's nodes and takes those that check out. */
  private async fetchSpan(key: string, span: NodeSpan<Ref>, next: Entries[]): Promise<void> {
    const { store, found, mbs } = this
    let bytes: Uint8Array
    try {
      bytes = await readNodeSpan(store, key, span, this.signal)
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_CORRUPT')) {
        found.push(key, toProblem(err, 'pointer', `${key} byte ${span.start}`))
      } else if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
        found.push(key, toProblem(err, 'node', key))
      } else {
        // One problem per object, once the walk knows what points into it (walkMap): its
        // other spans, and its nodes of other levels, find it gone too.
        const { missing } = this.walk
        missing.set(key, (missing.get(key) ?? 0) + span.refs.length)
      }
      for (const r of span.refs) this.giveUp(r.claim ?? r.parent)
      return
    }
    const told: Promise<void>[] = []
    for (const r of span.refs) {
      const at = r.offset - span.start
      let n: BlockMapNode
      try {
        if (at + mbs > bytes.byteLength) {
          throw StreamSegmentError.corrupt(`${store.url}/${r.where}: node pointed at past the object's end`)
        }
        n = decodeNode(bytes.subarray(at, at + mbs), {
          level: r.level,
          minKey: r.minKey,
          maxKeyExclusive: r.upper,
          cno: r.hi,
          maxCno: this.inode.cno,
          where: `${store.url}/${r.where}`,
        })
      } catch (err) {
        found.push(key, toProblem(err, 'node', r.where))
        this.giveUp(r.claim ?? r.parent)
        continue
      }
      if (r.checkOnly) continue
      // Outside the try: a leaf is visited here (take), and what fails in that is no
      // failure of this node's checks (nor was it when leaves were visited later).
      const id = this.share.nodes === undefined ? undefined : `${r.hi}:${r.lo}`
      tell(told, this.take(n, r.upper, next, r.claim, id))
    }
    // The span and its leaves go, and its fetch slot is given back, once those told settled.
    await Promise.all(told)
  }

  /**
   * Gives back `claim` and the claims above it: under it a node failed its checks, or its
   * bytes could not be read, or a leaf points into an object gone. Each goes from `seen` at
   * once, so that a later walk reaching it walks it rather than pass over it as covered:
   * reached elsewhere (a wider key range, where it may pass) it is walked for that map, and
   * reached alike it fails for that map too, which is then told broken as well. A walk of
   * walkMaps that passed over it already walks again from there. Kept, a later map would
   * reach nothing under it, and gc could delete what only that map reaches.
   */
  private giveUp(claim: Claim | undefined): void {
    const { seen } = this.share
    for (let c = claim; c !== undefined && !this.givenBack.has(c); c = c.parent) {
      if (seen?.get(c.id) === c) seen.delete(c.id)
      this.givenBack.add(c)
    }
  }
}

/** Adds what WalkShare.onLeaf returned for a leaf, if anything, to those waited for. */
function tell(told: Promise<void>[], p: Promise<void> | undefined): void {
  if (p !== undefined) told.push(p)
}

/** Adds `ref` to those of its object, to be fetched together. */
function addRef(refs: Map<string, Ref[]>, objectKey: string, ref: Ref): void {
  const list = refs.get(objectKey)
  if (list === undefined) refs.set(objectKey, [ref])
  else list.push(ref)
}
