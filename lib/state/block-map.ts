/**
 * The block map: a B+tree from file block index to data pointer, in meta-block-sized
 * nodes, with a small root (ROOT_ENTRIES entries) that lives in the inode.
 *
 * Invariants:
 * - Leaves (level 0) map block index → data pointer; index nodes map the first key under
 *   a child → the child's stored location. Keys are strictly increasing in a node, and
 *   every key under child i of an index node lies in [keys[i], keys[i+1]).
 * - A pointer (hi, lo) is a stored location, the ZERO sentinel (a hole: reads as zeros),
 *   or, in memory only, a reference to dirty data: hi = 0 and lo = DIRTY_BASE + id, where
 *   the id is a dirty-tier slot. Absent keys are holes too.
 * - A node is dirty when it must be written by the next checkpoint; every ancestor of a
 *   dirty node is dirty. A leaf with dirty blocks under it is dirty. A clean node's
 *   stored location is in its parent's entry, so a clean node can be dropped from
 *   memory and read back from storage at any time (the node cache is bounded by
 *   `maxCachedNodes`: clean leaves are evicted first-in first-out beyond it; see
 *   `trimCache` for the bound).
 * - Sequential appends fill leaves to capacity (a full leaf splits off a new, empty right
 *   leaf); an insert into the middle of a full node splits it in half.
 * - The root holds at most ROOT_ENTRIES entries; when it overflows, its entries move
 *   into a new node and the tree grows one level. At level 0 the root's entries are data
 *   pointers (a file of at most ROOT_ENTRIES blocks has no nodes at all).
 *
 * Nodes missing from memory are read through `loader`, which must validate what it reads
 * (decodeNode); every operation that may descend is async for that reason.
 */
import { StreamSegmentError } from '../errors.js'
import { ROOT_ENTRIES } from '../format/inode.js'
import type { BlockMapNode } from '../format/node.js'

/** hi = 0, lo ≥ DIRTY_BASE: a dirty block, id lo − DIRTY_BASE (in memory only, never stored). */
export const DIRTY_BASE = 2

export function isDirtyRef(hi: number, lo: number): boolean {
  return hi === 0 && lo >= DIRTY_BASE
}

export type NodeLoader = (
  hi: number,
  lo: number,
  expect: { level: number; minKey: number; maxKeyExclusive: number },
) => Promise<BlockMapNode>

/**
 * Calls that may point an entry at a dirty reference (insertAt, update, setRun, replaceIf),
 * counted over every map: while neither this nor the dirty tier's `unplacings` changes, a
 * leaf found with no unsent block under it gains none (send-ahead.ts counts on it).
 */
let dirtyRefWrites = 0

/** See `dirtyRefWrites`. */
export function mapDirtyRefWrites(): number {
  return dirtyRefWrites
}

export class MapNode {
  level: number
  count = 0
  readonly keys: Uint32Array
  readonly hi: Uint32Array
  readonly lo: Uint32Array
  /** Index nodes: the loaded children, by entry. */
  children: Array<MapNode | undefined> | undefined
  parent: MapNode | undefined
  dirty = true
  /** Where this node is stored (0, 0 when it never was). */
  storedHi = 0
  storedLo = 0
  /** Leaves: how many entries are dirty references. */
  dirtyCount = 0

  constructor(level: number, capacity: number, parent: MapNode | undefined) {
    this.level = level
    // One allocation for the three columns.
    const columns = new ArrayBuffer(12 * capacity)
    this.keys = new Uint32Array(columns, 0, capacity)
    this.hi = new Uint32Array(columns, 4 * capacity, capacity)
    this.lo = new Uint32Array(columns, 8 * capacity, capacity)
    this.children = level > 0 ? new Array(capacity) : undefined
    this.parent = parent
  }

  get capacity(): number {
    return this.keys.length
  }

  /** Index of the entry whose key is `key`, or −(insertion point) − 1. */
  search(key: number): number {
    let a = 0
    let b = this.count - 1
    const keys = this.keys
    while (a <= b) {
      const m = (a + b) >>> 1
      const k = keys[m] as number
      if (k < key) a = m + 1
      else if (k > key) b = m - 1
      else return m
    }
    return -a - 1
  }

  /** The child entry covering `key`: the last with keys[i] ≤ key, or 0. */
  childIndex(key: number): number {
    const i = this.search(key)
    return i >= 0 ? i : Math.max(0, -i - 2)
  }

  insertAt(i: number, key: number, hi: number, lo: number, child?: MapNode): void {
    dirtyRefWrites++
    const n = this.count
    this.keys.copyWithin(i + 1, i, n)
    this.hi.copyWithin(i + 1, i, n)
    this.lo.copyWithin(i + 1, i, n)
    this.keys[i] = key
    this.hi[i] = hi
    this.lo[i] = lo
    if (this.children) {
      this.children.splice(i, 0, child)
      this.children.length = this.capacity
      if (child) child.parent = this
    }
    if (isDirtyRef(hi, lo)) this.dirtyCount++
    this.count = n + 1
  }

  /** Drops entries [from, count). */
  cut(from: number): void {
    for (let i = from; i < this.count; i++) {
      if (isDirtyRef(this.hi[i] as number, this.lo[i] as number)) this.dirtyCount--
      this.keys[i] = this.hi[i] = this.lo[i] = 0
      if (this.children) this.children[i] = undefined
    }
    this.count = Math.min(this.count, from)
  }

  removeAt(i: number): void {
    if (isDirtyRef(this.hi[i] as number, this.lo[i] as number)) this.dirtyCount--
    const n = this.count
    this.keys.copyWithin(i, i + 1, n)
    this.hi.copyWithin(i, i + 1, n)
    this.lo.copyWithin(i, i + 1, n)
    this.keys[n - 1] = this.hi[n - 1] = this.lo[n - 1] = 0
    if (this.children) {
      this.children.splice(i, 1)
      this.children.length = this.capacity
    }
    this.count = n - 1
  }

  indexInParent(): number {
    const p = this.parent
    if (p?.children === undefined) return -1
    const i = p.childIndex(this.keys[0] as number)
    if (p.children[i] === this) return i
    return p.children.indexOf(this)
  }
}

/** Stands for the leaf under an index node with no entries (only a root, briefly, after truncation). */
const EMPTY = new MapNode(0, 0, undefined)

export class BlockMap {
  root: MapNode
  /**
   * Clean leaves (loaded from storage, or stored since), oldest first, for eviction. Index
   * nodes are not listed: they are never evicted (see `trimCache`). A leaf made dirty
   * stays listed until the next trim drops it, and is listed again when stored.
   */
  private cached = new Set<MapNode>()

  constructor(
    readonly nodeCapacity: number,
    private readonly loader: NodeLoader,
    readonly maxCachedNodes = 65536,
  ) {
    if (nodeCapacity < ROOT_ENTRIES)
      throw StreamSegmentError.internal(`node capacity ${nodeCapacity} < ${ROOT_ENTRIES}`)
    this.root = new MapNode(0, ROOT_ENTRIES, undefined)
    this.root.dirty = false
  }

  /**
   * The checkpoint the tree is built on: its number and its size in blocks. A checkpoint
   * maps no block at or past its size, so a node of it (or of an older one it reaches:
   * pointer cno at most its number) holding such a key is corrupt: writing past the end
   * must never bring back blocks a hostile map kept there. Nodes this writer stored since
   * (newer numbers) are bounded by their parents alone.
   */
  private base = { cno: 0, blocks: 2 ** 32 }

  /** Replaces the tree by the root stored in an inode (nodes load on demand). */
  setRoot(level: number, count: number, keys: Uint32Array, hi: Uint32Array, lo: Uint32Array): void {
    const r = new MapNode(level, ROOT_ENTRIES, undefined)
    r.count = count
    r.keys.set(keys.subarray(0, count))
    r.hi.set(hi.subarray(0, count))
    r.lo.set(lo.subarray(0, count))
    r.dirty = false
    this.root = r
    this.cached = new Set()
  }

  get height(): number {
    return this.root.level
  }

  /** The tree is built on checkpoint `cno` of `blocks` blocks now (see `base`). */
  builtOn(cno: number, blocks: number): void {
    this.base = { cno, blocks }
  }

  /** The bound on the keys of the stored node of checkpoint `cno` whose parent bounds them by `upper`. */
  storedUpper(cno: number, upper: number): number {
    return cno <= this.base.cno ? Math.min(upper, this.base.blocks) : upper
  }

  /**
   * The pointer of `key` into `out` ((0, 0) for a hole), without waiting, when every
   * node on its path is in memory; false when one must be loaded first (`load`). The
   * hot paths use these synchronous forms: an await per block costs more than the rest.
   */
  lookup(key: number, out: [number, number]): boolean {
    const leaf = this.leafLoaded(key)
    if (leaf === undefined) return false
    if (leaf === EMPTY) {
      out[0] = out[1] = 0
      return true
    }
    const i = leaf.search(key)
    out[0] = i >= 0 ? (leaf.hi[i] as number) : 0
    out[1] = i >= 0 ? (leaf.lo[i] as number) : 0
    return true
  }

  /**
   * Sets the pointer of `key` (inserting it), marking the path dirty, when its path is in
   * memory; false otherwise (nothing changed: `load` first).
   */
  update(key: number, hi: number, lo: number): boolean {
    dirtyRefWrites++
    const leaf = this.leafLoaded(key)
    if (leaf === undefined) return false
    if (leaf === EMPTY) throw StreamSegmentError.internal('empty index node on a lookup path')
    const i = leaf.search(key)
    if (i >= 0) {
      const oh = leaf.hi[i] as number
      const ol = leaf.lo[i] as number
      leaf.dirtyCount += (isDirtyRef(hi, lo) ? 1 : 0) - (isDirtyRef(oh, ol) ? 1 : 0)
      leaf.hi[i] = hi
      leaf.lo[i] = lo
      this.markDirty(leaf)
    } else {
      this.insert(leaf, -i - 1, key, hi, lo)
    }
    return true
  }

  /**
   * How many keys from `key` on (at most `max`) a run of whole blocks may take over
   * without looking at what they held: keys present in its leaf, consecutive, and not
   * dirty (stored, or holes), or keys absent past the leaf's last one, up to where the
   * next leaf's keys begin. 0 when the path is not in memory, `key` is dirty, or it falls
   * in a gap inside its leaf (the caller goes block by block).
   */
  freshRun(key: number, max: number): number {
    const leaf = this.leafLoaded(key)
    if (leaf === undefined || leaf === EMPTY) return 0
    const i = leaf.search(key)
    if (i >= 0) {
      let n = 0
      while (
        n < max &&
        i + n < leaf.count &&
        leaf.keys[i + n] === key + n &&
        !isDirtyRef(leaf.hi[i + n] as number, leaf.lo[i + n] as number)
      )
        n++
      return n
    }
    if (-i - 1 !== leaf.count) return 0
    return Math.max(0, Math.min(max, this.upperBound(leaf) - key))
  }

  /**
   * Sets keys key … key + count − 1 to (hi, lo), (hi, lo + 1), …: a leaf's entries are
   * filled in place, appended keys in bulk (a full leaf splits as appends do), one dirty
   * mark per leaf. Every path must be in memory; old pointers are overwritten, so the
   * caller has dealt with them (a run of fresh keys, see `freshRun`).
   */
  setRun(key: number, count: number, hi: number, lo: number): void {
    dirtyRefWrites++
    const dirty = isDirtyRef(hi, lo) ? 1 : 0
    while (count > 0) {
      const leaf = this.leafLoaded(key)
      if (leaf === undefined || leaf === EMPTY) throw StreamSegmentError.internal(`setRun: block ${key}: path unloaded`)
      const i = leaf.search(key)
      if (i >= 0) {
        let n = 0
        while (n < count && i + n < leaf.count && leaf.keys[i + n] === key + n) {
          const j = i + n
          leaf.dirtyCount += dirty - (isDirtyRef(leaf.hi[j] as number, leaf.lo[j] as number) ? 1 : 0)
          leaf.hi[j] = hi
          leaf.lo[j] = lo + n
          n++
        }
        this.markDirty(leaf)
        key += n
        lo += n
        count -= n
        continue
      }
      const at = -i - 1
      const n =
        at === leaf.count && leaf.count > 0
          ? Math.min(count, leaf.capacity - leaf.count, this.upperBound(leaf) - key)
          : 0
      if (n <= 0) {
        // A gap inside the leaf, an empty leaf or a full one: one key by insertion (which splits).
        this.insert(leaf, at, key, hi, lo)
        key++
        lo++
        count--
        continue
      }
      const keys = leaf.keys
      const los = leaf.lo
      for (let j = 0; j < n; j++) {
        keys[at + j] = key + j
        los[at + j] = lo + j
      }
      leaf.hi.fill(hi, at, at + n)
      leaf.count += n
      leaf.dirtyCount += dirty * n
      this.markDirty(leaf)
      key += n
      lo += n
      count -= n
    }
  }

  /** The leaf (or level-0 root) where `key` lives or would go, when its path is in memory. */
  leafAt(key: number): MapNode | undefined {
    const leaf = this.leafLoaded(key)
    return leaf === EMPTY ? undefined : leaf
  }

  /** The leaf (never the root) holding `key`, when its path is in memory and the key is present. */
  leafOf(key: number): MapNode | undefined {
    const leaf = this.leafLoaded(key)
    if (leaf === undefined || leaf === EMPTY || leaf === this.root) return undefined
    return leaf.search(key) >= 0 ? leaf : undefined
  }

  /**
   * Brings every node on the path to `key` into memory. The cache never evicts the node
   * it is attaching, nor index nodes (see `trimCache`), so the path is in memory when this
   * resolves; work that runs before the caller resumes (another read's walk) may still
   * evict the leaf: a caller that needs the pointer uses `loadLookup`, and one that then
   * changes the leaf checks that `update` took.
   */
  async load(key: number): Promise<void> {
    await this.leafFor(key)
  }

  /**
   * As `lookup`, loading the path to `key` first: the pointer is read from the leaf the
   * load reached, which holds it even if the cache let that leaf go before the caller
   * resumed (a clean leaf holds what storage does). Returns that leaf when it holds `key`
   * (as `leafOf`), for a caller that follows its next entries.
   */
  async loadLookup(key: number, out: [number, number]): Promise<MapNode | undefined> {
    const leaf = await this.leafFor(key)
    const i = leaf === EMPTY ? -1 : leaf.search(key)
    out[0] = i >= 0 ? (leaf.hi[i] as number) : 0
    out[1] = i >= 0 ? (leaf.lo[i] as number) : 0
    return i >= 0 && leaf !== this.root ? leaf : undefined
  }

  /**
   * Brings the path to every leaf over keys [from, to) into memory, a leaf at a time, as
   * far as the cache holds them (it keeps the leaf just loaded, and evicts past twice its
   * size): a write over the range then loads nothing.
   */
  async loadRange(from: number, to: number): Promise<void> {
    for (let key = from; key < to; ) {
      const leaf = await this.leafFor(key)
      if (leaf === EMPTY) return
      key = this.upperBound(leaf)
    }
  }

  /** The pointer of `key`: (0, 0) for a hole. */
  async get(key: number): Promise<[number, number]> {
    const out: [number, number] = [0, 0]
    if (!this.lookup(key, out)) await this.loadLookup(key, out)
    return out
  }

  /** Sets the pointer of `key`, loading its path first if needed. */
  async set(key: number, hi: number, lo: number): Promise<void> {
    if (this.update(key, hi, lo)) return
    await this.load(key)
    if (!this.update(key, hi, lo)) {
      throw StreamSegmentError.internal(`block-map set: block ${key}: its path left memory right after it was loaded`)
    }
  }

  /**
   * Sets `key` to (hi, lo) only if it holds (expectHi, expectLo) now; returns its leaf, or
   * undefined when it does not. Synchronous: a dirty block's path is always in memory
   * (dirty nodes are never evicted), so an unloaded path cannot hold a dirty reference.
   */
  replaceIf(key: number, expectHi: number, expectLo: number, hi: number, lo: number): MapNode | undefined {
    dirtyRefWrites++
    const leaf = this.leafLoaded(key)
    if (leaf === undefined || leaf === EMPTY) return undefined
    const i = leaf.search(key)
    if (i < 0 || leaf.hi[i] !== expectHi || leaf.lo[i] !== expectLo) return undefined
    leaf.dirtyCount += (isDirtyRef(hi, lo) ? 1 : 0) - (isDirtyRef(expectHi, expectLo) ? 1 : 0)
    leaf.hi[i] = hi
    leaf.lo[i] = lo
    return leaf
  }

  /**
   * Sets every present key in [from, to) to ZERO; `release` gets each dirty reference
   * dropped. Absent keys are holes already.
   */
  async zeroRange(from: number, to: number, release: (id: number) => void): Promise<void> {
    await this.visitRange(this.root, from, to, async (leaf, i) => {
      const hi = leaf.hi[i] as number
      const lo = leaf.lo[i] as number
      if (hi === 0 && lo === 0) return
      if (isDirtyRef(hi, lo)) {
        release(lo - DIRTY_BASE)
        leaf.dirtyCount--
      }
      leaf.hi[i] = 0
      leaf.lo[i] = 0
      this.markDirty(leaf)
    })
  }

  /** Removes every key ≥ `from`; `release` gets each dirty reference dropped. */
  async truncate(from: number, release: (id: number) => void): Promise<void> {
    await this.cutFrom(this.root, from, release)
    if (this.root.count === 0) {
      this.root.level = 0
      this.root.children = undefined
      this.root.dirtyCount = 0
    }
    this.root.dirty = true
  }

  /**
   * The dirty nodes, children before parents: leaves in key order (not the root), then
   * index nodes by level. The root is dirty whenever anything is.
   */
  dirtyNodes(): { leaves: MapNode[]; index: MapNode[] } {
    const leaves: MapNode[] = []
    const byLevel: MapNode[][] = []
    const walk = (n: MapNode) => {
      if (n.children === undefined) return
      for (let i = 0; i < n.count; i++) {
        const c = n.children[i]
        if (c === undefined || !c.dirty) continue
        walk(c)
        if (c.level === 0) leaves.push(c)
        else (byLevel[c.level] ??= []).push(c)
      }
    }
    walk(this.root)
    return { leaves, index: byLevel.flat() }
  }

  /** Marks `node` and its ancestors dirty. */
  markDirty(node: MapNode | undefined): void {
    for (let n = node; n !== undefined && !n.dirty; n = n.parent) n.dirty = true
    this.root.dirty = true
  }

  /** Records that `node` is now stored at (hi, lo) and clean; its parent stays dirty. */
  setStored(node: MapNode, hi: number, lo: number): void {
    node.storedHi = hi
    node.storedLo = lo
    node.dirty = false
    if (node.level === 0 && node !== this.root) this.cached.add(node)
    const p = node.parent
    if (p !== undefined) {
      const i = node.indexInParent()
      if (i < 0) return // detached (truncated away) meanwhile
      p.hi[i] = hi
      p.lo[i] = lo
      this.markDirty(p)
    }
  }

  /**
   * Evicts the oldest clean leaves until at most `maxCachedNodes` are left, never `keep`
   * (the node being attached: a load must end with its path in memory).
   *
   * Only leaves count and only leaves go. Index nodes stay: evicting one would cut off the
   * path a load is walking down, and other paths' leaves under it. Counting them against
   * the bound made a map with more index nodes than the bound evict every leaf on every
   * attach, the one just loaded too. So the memory held is bounded by: at most
   * 2 × maxCachedNodes clean leaves (`attach` trims once past twice the bound, so a trim's
   * cost is spread over as many attaches), plus the index nodes loaded, never more than
   * the tree has (each over up to `nodeCapacity` children: with 4 KiB nodes, a small share
   * of a map's nodes), plus the dirty nodes (never evicted: the next checkpoint writes them).
   */
  trimCache(keep?: MapNode): void {
    if (this.cached.size <= this.maxCachedNodes) return
    for (const n of this.cached) if (n.dirty || n.parent === undefined) this.cached.delete(n)
    let excess = this.cached.size - this.maxCachedNodes
    for (const n of this.cached) {
      if (excess <= 0) break
      if (n === keep) continue
      const p = n.parent as MapNode
      const i = n.indexInParent()
      if (i >= 0 && p.children !== undefined) p.children[i] = undefined
      n.parent = undefined
      this.cached.delete(n)
      excess--
    }
  }

  // --- internals ---

  private async child(node: MapNode, i: number): Promise<MapNode> {
    const children = node.children as Array<MapNode | undefined>
    const c = children[i]
    if (c !== undefined) return c
    const hi = node.hi[i] as number
    const lo = node.lo[i] as number
    const maxKeyExclusive = this.storedUpper(
      hi,
      i + 1 < node.count ? (node.keys[i + 1] as number) : this.upperBound(node),
    )
    const decoded = await this.loader(hi, lo, {
      level: node.level - 1,
      minKey: node.keys[i] as number,
      maxKeyExclusive,
    })
    // Another call may have loaded it while we waited.
    return children[i] ?? this.attach(node, i, decoded)
  }

  /**
   * Installs `decoded`, read from storage where entry `i` of `node` points (and checked
   * against it, as a loader does), as that entry's child; for readers that fetch several
   * nodes at once. The entry must be unloaded; the node joins the bounded cache.
   */
  attach(node: MapNode, i: number, decoded: BlockMapNode): MapNode {
    const children = node.children
    if (children === undefined || children[i] !== undefined || i >= node.count) {
      throw StreamSegmentError.internal(`attach: entry ${i} of a level-${node.level} node is not an unloaded child`)
    }
    const hi = node.hi[i] as number
    const lo = node.lo[i] as number
    const n = new MapNode(decoded.level, this.nodeCapacity, node)
    if (decoded.count > this.nodeCapacity) {
      throw StreamSegmentError.corrupt(
        `block-map node at (${hi}, ${lo}) has ${decoded.count} entries, capacity ${this.nodeCapacity}`,
      )
    }
    n.count = decoded.count
    n.keys.set(decoded.keys.subarray(0, decoded.count))
    n.hi.set(decoded.ptrHi.subarray(0, decoded.count))
    n.lo.set(decoded.ptrLo.subarray(0, decoded.count))
    n.dirty = false
    n.storedHi = hi
    n.storedLo = lo
    children[i] = n
    if (n.level === 0) {
      this.cached.add(n)
      if (this.cached.size > this.maxCachedNodes * 2) this.trimCache(n)
    }
    return n
  }

  /** The exclusive upper bound of keys under `node`, from its ancestors. */
  private upperBound(node: MapNode): number {
    for (let n = node; n.parent !== undefined; n = n.parent) {
      const i = n.indexInParent()
      if (i + 1 < n.parent.count) return n.parent.keys[i + 1] as number
    }
    return 2 ** 32
  }

  /** The leaf (or level-0 root) where `key` lives or would go, loading its path. */
  private async leafFor(key: number): Promise<MapNode> {
    let node = this.root
    while (node.level > 0) {
      if (node.count === 0) return EMPTY
      node = await this.child(node, node.childIndex(key))
    }
    return node
  }

  /** As leafFor, when the whole path is in memory; undefined when it is not. */
  private leafLoaded(key: number): MapNode | undefined {
    let node = this.root
    while (node.level > 0) {
      if (node.count === 0) return EMPTY
      const c = (node.children as Array<MapNode | undefined>)[node.childIndex(key)]
      if (c === undefined) return undefined
      node = c
    }
    return node
  }

  private insert(node: MapNode, at: number, key: number, hi: number, lo: number, child?: MapNode): void {
    if (node.count < node.capacity) {
      node.insertAt(at, key, hi, lo, child)
      this.markDirty(node)
      if (at === 0) this.fixFirstKey(node)
      return
    }
    if (node === this.root) {
      this.growRoot()
      const c = (this.root.children as MapNode[])[0] as MapNode
      this.insert(c, at, key, hi, lo, child)
      return
    }
    // Split: appends keep the full node and start an empty right sibling; inserts in the
    // middle split it in half.
    const n = node.count
    const mid = at === n ? n : Math.ceil(n / 2)
    const right = new MapNode(node.level, this.nodeCapacity, node.parent)
    for (let i = mid; i < n; i++) {
      right.insertAt(i - mid, node.keys[i] as number, node.hi[i] as number, node.lo[i] as number, node.children?.[i])
    }
    node.cut(mid)
    if (at <= mid && at < n) node.insertAt(at, key, hi, lo, child)
    else right.insertAt(at - mid, key, hi, lo, child)
    if (at === 0) this.fixFirstKey(node)
    // An append leaves the full node as it was: stored already, it need not be stored again.
    if (at < n) this.markDirty(node)
    right.dirty = true
    const parent = node.parent as MapNode
    const pi = node.indexInParent()
    this.insert(parent, pi + 1, right.keys[0] as number, 0, 0, right)
  }

  /**
   * Keys arrive in child 0 below its parent's first key only (any other child gets keys
   * at or above its own); carries a node's new first key up the leftmost path.
   */
  private fixFirstKey(node: MapNode): void {
    for (let n = node; n.parent !== undefined; n = n.parent) {
      const p = n.parent
      if (p.children?.[0] !== n || (p.keys[0] as number) <= (n.keys[0] as number)) return
      p.keys[0] = n.keys[0] as number
      this.markDirty(p)
    }
  }

  /** Moves the root's entries into a new node below it: the tree grows one level. */
  private growRoot(): void {
    const old = this.root
    const c = new MapNode(old.level, this.nodeCapacity, undefined)
    for (let i = 0; i < old.count; i++) {
      c.insertAt(i, old.keys[i] as number, old.hi[i] as number, old.lo[i] as number, old.children?.[i])
    }
    const r = new MapNode(old.level + 1, ROOT_ENTRIES, undefined)
    r.insertAt(0, c.keys[0] as number, 0, 0, c)
    c.dirty = true
    r.dirty = true
    this.root = r
  }

  private async cutFrom(node: MapNode, from: number, release: (id: number) => void): Promise<void> {
    if (node.level === 0) {
      const i = node.search(from)
      const at = i >= 0 ? i : -i - 1
      for (let j = at; j < node.count; j++) {
        if (isDirtyRef(node.hi[j] as number, node.lo[j] as number)) release((node.lo[j] as number) - DIRTY_BASE)
      }
      if (at < node.count) {
        node.cut(at)
        this.markDirty(node)
      }
      return
    }
    let i = node.childIndex(from)
    if (i < node.count && (node.keys[i] as number) < from) {
      // Child i straddles `from`: keep its part below.
      const c = await this.child(node, i)
      await this.cutFrom(c, from, release)
      if (c.count === 0) node.removeAt(i)
      else i++
    }
    for (let j = i; j < node.count; j++) this.releaseSubtree(node.children?.[j], release)
    if (i < node.count) {
      node.cut(i)
      this.markDirty(node)
    }
  }

  /** Releases the dirty references in a loaded subtree (unloaded ones are clean). */
  private releaseSubtree(node: MapNode | undefined, release: (id: number) => void): void {
    if (node === undefined) return
    if (node.level === 0) {
      if (node.dirtyCount === 0) return
      for (let j = 0; j < node.count; j++) {
        if (isDirtyRef(node.hi[j] as number, node.lo[j] as number)) release((node.lo[j] as number) - DIRTY_BASE)
      }
      return
    }
    for (let j = 0; j < node.count; j++) this.releaseSubtree(node.children?.[j], release)
  }

  private async visitRange(
    node: MapNode,
    from: number,
    to: number,
    fn: (leaf: MapNode, i: number) => void | Promise<void>,
  ): Promise<void> {
    if (node.level === 0) {
      const s = node.search(from)
      for (let i = s >= 0 ? s : -s - 1; i < node.count && (node.keys[i] as number) < to; i++) await fn(node, i)
      return
    }
    for (let i = node.childIndex(from); i < node.count && (node.keys[i] as number) < to; i++) {
      await this.visitRange(await this.child(node, i), from, to, fn)
    }
  }
}
