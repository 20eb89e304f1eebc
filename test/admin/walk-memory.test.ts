/**
 * What a walk of a block map (admin/map-walk.ts) holds must grow with the map's nodes and
 * the objects it reaches, not with its data pointers (2^28 of them for a checkpoint of
 * 1 TiB in 4 KiB blocks): gc records no data pointer, only which objects each map reaches,
 * and the leaves are visited as their spans come, not all held for a visit of their level.
 * ls keeps the nodes it walked for all its maps, but a leaf only as the objects it reaches.
 * inspect, which reports only counts per object, records no data pointer either.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import type { InspectReport } from '../../lib/admin/inspect.js'
import { type KnownNode, type MapWalk, type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { SUMMARY_BUDGET, type VerifyReport } from '../../lib/admin/verify.js'
import { listContainer } from '../../lib/container/listing.js'
import { nodeLocation } from '../../lib/container/nodes.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { objectLayout } from '../../lib/format/header.js'
import { parseKey, segmentKey } from '../../lib/format/names.js'
import type { BlockMapNode } from '../../lib/format/node.js'
import { decodeObject, encodeObject, type SegmentObject } from '../../lib/format/object.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { U32List } from '../../lib/util/typed-arrays.js'
import { buildContainer, olderCheckpointOfMany } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { hooks, smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/** Counts the GETs started and ended. */
class GetCounter extends WrappedStore {
  started = 0
  ended = 0
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op !== 'get') return await run()
    this.started++
    try {
      return await run()
    } finally {
      this.ended++
    }
  }
}

/** Every value pushed onto any U32List (the lists map-walk records data pointers in) while `run` runs. */
async function u32Pushes(run: () => Promise<unknown>): Promise<number> {
  const push = Object.getOwnPropertyDescriptor(U32List.prototype, 'push') as PropertyDescriptor
  let pushes = 0
  U32List.prototype.push = function (this: U32List, v: number) {
    pushes++
    ;(push.value as (v: number) => void).call(this, v)
  }
  try {
    await run()
  } finally {
    Object.defineProperty(U32List.prototype, 'push', push)
  }
  return pushes
}

/** Per object reached: its node pointers and how many data pointers point into it. */
function objectsOf(walk: MapWalk): Map<string, { nodes: number[]; blocks: number }> {
  return new Map([...walk.reached].map(([key, r]) => [key, { nodes: [...r.nodes].sort(), blocks: r.blocks }]))
}

describe('a walk of a block map holds no more than its nodes and objects need', () => {
  let store: MemoryStore
  before(async () => {
    store = new MemoryStore()
    // Small nodes and objects: a map of three levels and more, its leaves in many objects.
    await buildContainer(store, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
  })

  it('neither gc, verify nor inspect records a data pointer', async () => {
    let pointers = 0
    const verified = await u32Pushes(async () => {
      const r = await verifyCheckpoint(store)
      assert.deepEqual(r.problems, [])
      pointers = r.dataPointers
    })
    assert.ok(pointers > 100, `${pointers} data pointers checked`)
    assert.equal(verified, 0, 'verify recorded data pointers: 8 bytes per mapped block')
    let deleted: number | undefined
    const byGc = await u32Pushes(async () => {
      deleted = (await gc(store, { graceMs: 0, dryRun: true })).deletedObjects
    })
    assert.ok(deleted !== undefined && deleted > 0, 'gc marked, and found something to delete')
    assert.equal(byGc, 0, 'gc recorded data pointers: 8 bytes per mapped block of every kept map')
    let inspected = 0
    const byInspect = await u32Pushes(async () => {
      const r = await inspectCheckpoint(store)
      assert.deepEqual(r.problems, [])
      inspected = r.tree.dataPointers
    })
    assert.equal(inspected, pointers)
    assert.equal(byInspect, 0, 'inspect recorded data pointers: 8 bytes per mapped block')
  })

  it('a walk of objects only reaches what a full walk does, counting its data pointers, recording none', async () => {
    const { inode } = (await readObjectHeader(store, 3, 0)).header
    const problems: Problem[] = []
    const full = await walkMap(store, inode, problems)
    const only = await walkMap(store, inode, problems, undefined, { objectsOnly: true })
    assert.deepEqual(problems, [])
    assert.ok(full.dataPointers > 0)
    for (const [key, r] of full.reached) assert.equal(r.blocks, r.dataAt.length, `${key}: blocks counts dataAt`)
    assert.deepEqual(objectsOf(only), objectsOf(full))
    for (const [key, r] of only.reached) {
      assert.equal(r.dataAt.length + r.dataBlock.length, 0, `${key}: no data pointer recorded`)
    }
    const { reached: _a, ...counts } = only
    const { reached: _b, ...fullCounts } = full
    assert.deepEqual(counts, fullCounts)
  })

  it("leaves are visited as their spans come, while the level's other spans are still being fetched", async () => {
    const { inode } = (await readObjectHeader(store, 3, 0)).header
    const counted = new GetCounter(store)
    // `gone` is asked of a leaf's first data pointer into each object: when the leaf is visited.
    let atFirstLeaf: { started: number; ended: number } | undefined
    const gone = () => {
      atFirstLeaf ??= { started: counted.started, ended: counted.ended }
      return false
    }
    const problems: Problem[] = []
    const walk = await walkMap(counted, inode, problems, undefined, { gone, objectsOnly: true })
    assert.deepEqual(problems, [])
    assert.ok(walk.leaves > 8 && walk.height >= 2, `a map of ${walk.leaves} leaves and ${walk.height + 1} levels`)
    assert.ok(atFirstLeaf !== undefined, 'a leaf was visited')
    // Held for a visit of the leaf level, every leaf would be fetched before the first is visited.
    assert.ok(
      atFirstLeaf.ended < counted.ended,
      `the first leaf was visited after ${atFirstLeaf.ended} of the walk's ${counted.ended} GETs had come`,
    )
  })
})

/**
 * What inspect's report of checkpoint `cno` takes from the walk, found apart from
 * map-walk: every object decoded whole, the map followed from the inode node by node.
 */
async function mapCounts(store: ObjectStore, cno: number) {
  const objects = new Map<string, SegmentObject>()
  for await (const e of store.list('')) {
    if (parseKey(e.key)?.kind === 'segment') objects.set(e.key, decodeObject(await store.get(e.key), e.key))
  }
  const { inode } = (await readObjectHeader(store, cno, 0)).header
  const tree = { height: inode.rootLevel, nodes: 0, leaves: 0, dataPointers: 0, holes: 0 }
  const reached = new Map<string, { reachedNodes: number; reachedBlocks: number }>()
  const of = (key: string) => {
    let r = reached.get(key)
    if (r === undefined) reached.set(key, (r = { reachedNodes: 0, reachedBlocks: 0 }))
    return r
  }
  const visit = (level: number, hi: Uint32Array, lo: Uint32Array, count: number): void => {
    for (let i = 0; i < count; i++) {
      const h = hi[i] as number
      const l = lo[i] as number
      if (level === 0) {
        if (h === 0 && l === 0) tree.holes++
        else {
          tree.dataPointers++
          of(segmentKey(h, pointerPart(l))).reachedBlocks++
        }
        continue
      }
      const { key, offset } = nodeLocation(h, l)
      of(key).reachedNodes++
      const obj = objects.get(key) as SegmentObject
      const n = obj.nodes[(offset - obj.layout.metaOffset) / obj.layout.metaBlockSize] as BlockMapNode
      tree.nodes++
      if (n.level === 0) tree.leaves++
      visit(n.level, n.ptrHi, n.ptrLo, n.count)
    }
  }
  visit(inode.rootLevel, inode.rootPtrHi, inode.rootPtrLo, inode.rootCount)
  return { tree, reached }
}

describe('inspect counts what the map reaches without recording a data pointer', () => {
  it("each checkpoint's tree and each object's nodes and blocks, as the map itself holds them", async () => {
    const deep = new MemoryStore()
    await buildContainer(deep, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    const parted = new MemoryStore()
    await buildContainer(parted, { ...smallSettings, format: 'parted', ...hooks({ maxNodeEntries: 4 }) })
    const plain = new MemoryStore()
    await buildContainer(plain)
    let holes = 0
    let levels = 0
    for (const store of [deep, parted, plain, await truncatedHistory(), await olderCheckpointOfMany('stream')]) {
      const listing = await listContainer(store)
      assert.ok(listing.byCno.size >= 2, `${listing.byCno.size} checkpoints`)
      for (const cno of listing.byCno.keys()) {
        let report: InspectReport | undefined
        const pushes = await u32Pushes(async () => {
          report = await inspectCheckpoint(store, { cno })
        })
        assert.ok(report !== undefined)
        assert.deepEqual(report.problems, [])
        const { tree, reached } = await mapCounts(store, cno)
        assert.deepEqual(report.tree, tree, `checkpoint ${cno}`)
        for (const o of report.objects) {
          const want = reached.get(o.key) ?? { reachedNodes: 0, reachedBlocks: 0 }
          assert.deepEqual({ reachedNodes: o.reachedNodes, reachedBlocks: o.reachedBlocks }, want, `${cno}: ${o.key}`)
          reached.delete(o.key)
        }
        assert.deepEqual([...reached.keys()], [], `checkpoint ${cno}: objects reached but not reported`)
        assert.equal(pushes, 0, `checkpoint ${cno}: data pointers recorded`)
        holes += tree.holes
        levels = Math.max(levels, tree.height)
      }
    }
    assert.ok(holes > 0 && levels >= 2, `${holes} holes, maps of up to ${levels + 1} levels`)
  })
})

/** Every value set into any Map while `run` runs. */
async function mapSets(run: () => Promise<unknown>): Promise<unknown[]> {
  const set = Object.getOwnPropertyDescriptor(Map.prototype, 'set') as PropertyDescriptor
  const values: unknown[] = []
  Map.prototype.set = function (this: Map<unknown, unknown>, k: unknown, v: unknown) {
    values.push(v)
    return (set.value as (k: unknown, v: unknown) => Map<unknown, unknown>).call(this, k, v)
  }
  try {
    await run()
  } finally {
    Object.defineProperty(Map.prototype, 'set', set)
  }
  return values
}

const isDecodedLeaf = (v: unknown): boolean =>
  typeof v === 'object' && v !== null && (v as { level?: unknown }).level === 0 && 'ptrHi' in v

/**
 * A history whose leaves are reached again under narrower bounds (the file truncated below
 * where its last leaf's bounds ended): walked again from memory, not passed over.
 */
async function truncatedHistory(): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 100 * 4096, 1))
  await f.truncate(200 * 4096)
  await f.flush()
  await f.truncate(150 * 4096)
  await f.flush()
  await f.write(3 * 4096, pattern(3 * 4096, 4096, 2))
  await f.flush()
  await f.truncate(40 * 4096)
  await f.flush()
  await f.truncate(90 * 4096)
  await f.write(60 * 4096, pattern(60 * 4096, 4096, 3))
  await f.flush()
  await f.close()
  return store
}

/** Each checkpoint's uniqueBytes, as when every map is walked whole on its own. */
async function uniqueBytesAlone(store: ObjectStore): Promise<number[]> {
  const listing = await listContainer(store)
  const reached = new Map<number, Set<string>>()
  const by = new Map<string, number>()
  for (const cno of [...listing.byCno.keys()].sort((a, b) => a - b)) {
    const { inode } = (await readObjectHeader(store, cno, 0)).header
    const keys = new Set((await walkMap(store, inode, [])).reached.keys())
    keys.add(segmentKey(cno, 0))
    reached.set(cno, keys)
    for (const k of keys) by.set(k, (by.get(k) ?? 0) + 1)
  }
  return [...reached.values()].map((keys) => {
    let alone = 0
    for (const k of keys) if (by.get(k) === 1) alone += listing.sizes.get(k) ?? 0
    return alone
  })
}

describe('ls keeps the nodes of all its maps, but a leaf only as the objects it reaches', () => {
  it('no leaf is kept decoded while the checkpoints are listed', async () => {
    const store = await truncatedHistory()
    const deep = new MemoryStore()
    await buildContainer(deep, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    for (const s of [store, deep]) {
      let checkpoints = 0
      const values = await mapSets(async () => {
        checkpoints = (await listCheckpoints(s)).checkpoints.length
      })
      assert.ok(checkpoints >= 3, `${checkpoints} checkpoints`)
      // Each 4 KiB decoded (12 bytes an entry at 4 KiB nodes), held until the listing ends.
      assert.equal(values.filter(isDecodedLeaf).length, 0, 'leaves kept decoded in the nodes shared by the walks')
      const kept = values.filter(
        (v) => typeof v === 'object' && v !== null && (v as { level?: unknown }).level === 0 && 'objects' in v,
      )
      assert.ok(kept.length > 8, `${kept.length} leaves kept as the objects they reach`)
    }
  })

  it('uniqueBytes as when every map is walked whole alone, leaves reached again under narrower bounds among them', async () => {
    for (const store of [
      await truncatedHistory(),
      await (async () => {
        const s = new MemoryStore()
        await buildContainer(s, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
        return s
      })(),
    ]) {
      const list = await listCheckpoints(store)
      assert.deepEqual(
        list.checkpoints.map((c) => c.uniqueBytes),
        await uniqueBytesAlone(store),
      )
    }
  })

  it('a walk from the nodes kept reaches what a fresh walk does, with no GET; one recording pointers fetches the leaves again', async () => {
    const store = new MemoryStore()
    await buildContainer(store, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    const { inode } = (await readObjectHeader(store, 3, 0)).header
    const nodes = new Map<string, KnownNode>()
    const problems: Problem[] = []
    const first = await walkMap(store, inode, problems, undefined, { nodes, objectsOnly: true })
    const counted = new GetCounter(store)
    const again = await walkMap(counted, inode, problems, undefined, { nodes, objectsOnly: true })
    assert.deepEqual(problems, [])
    assert.equal(counted.started, 0, 'every node taken from memory')
    assert.ok(first.leaves > 8)
    assert.deepEqual(objectsOf(again), objectsOf(first))
    const { reached: _a, ...counts } = again
    const { reached: _b, ...firstCounts } = first
    assert.deepEqual(counts, firstCounts)
    // Every data pointer recorded, as by a walk of its own: the leaves read again for them.
    const full = await walkMap(counted, inode, problems, undefined, { nodes })
    const fresh = await walkMap(store, inode, problems)
    assert.deepEqual(problems, [])
    assert.ok(counted.started > 0)
    assert.deepEqual(full, fresh)
  })
})

/** GETs of a store, with their ranges; those of one key and range may be held back (`hold`) until a promise settles. */
class RangeCounter extends WrappedStore {
  readonly gets: { key: string; start: number; end: number }[] = []
  hold: ((key: string, start: number, end: number) => Promise<void> | undefined) | undefined
  /** Told each GET as it ends. */
  onGot: ((key: string, start: number, end: number) => void) | undefined
  protected async around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return await run()
  }
  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    // A suffix (a header read) or the whole object: -1 for where it starts or ends.
    const r = options?.range
    const [start, end] = r !== undefined && 'start' in r ? [r.start, r.end] : [-1, -1]
    this.gets.push({ key, start, end })
    await this.hold?.(key, start, end)
    const b = await super.get(key, options)
    this.onGot?.(key, start, end)
    return b
  }
}

/** Where each object's summary lies, by key. */
async function summaryRanges(store: ObjectStore): Promise<Map<string, { start: number; end: number }>> {
  const out = new Map<string, { start: number; end: number }>()
  for await (const e of store.list('')) {
    const k = parseKey(e.key)
    if (k?.kind !== 'segment') continue
    const { header } = await readObjectHeader(store, k.cno, k.part)
    const l = objectLayout(header, header)
    out.set(e.key, { start: l.summaryOffset, end: l.summaryEnd })
  }
  return out
}

/** A file of 300 blocks written in order, in objects of 64 KiB and leaves of 4 entries. */
async function sequential(): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 300 * 4096, 1))
  await f.flush()
  await f.close()
  return store
}

/** verifyCheckpoint keeping summaries within `budget` bytes (the test hook). */
function verifyWithin(store: ObjectStore, budget: number) {
  return verifyCheckpoint(store, { [SUMMARY_BUDGET]: budget } as Parameters<typeof verifyCheckpoint>[1])
}

describe("verify checks each leaf's data pointers as the walk visits it, against summaries it keeps within a budget", () => {
  it('a file written in order: every pointer checked, none recorded, no summary read twice', async () => {
    const store = await sequential()
    const counted = new RangeCounter(store)
    let r: VerifyReport | undefined
    const pushes = await u32Pushes(async () => {
      r = await verifyCheckpoint(counted)
    })
    assert.ok(r !== undefined)
    assert.deepEqual(r.problems, [])
    assert.equal(r.dataPointers, 300)
    assert.equal(pushes, 0, 'data pointers recorded: 8 bytes per mapped block')
    // A summary is read with its object's meta blocks; read alone, it was read again.
    const summaries = await summaryRanges(store)
    const again = counted.gets.filter((g) => {
      const at = summaries.get(g.key)
      return at !== undefined && g.start === at.start && g.end === at.end
    })
    assert.deepEqual(again, [], 'summaries read again')
    assert.ok(summaries.size > 10, `${summaries.size} objects`)
  })

  it('a pointer at another slot of an object whose summary went is caught, that summary read again and counted', async () => {
    const store = await sequential()
    const { inode } = (await readObjectHeader(store, 1, 0)).header
    const walk = await walkMap(store, inode, [])
    // Leaves, each in the object it points into (a file written in order).
    const leaves: { x: string; obj: SegmentObject; n: BlockMapNode }[] = []
    for (const [x, r] of walk.reached) {
      const obj = decodeObject(await store.get(x), x)
      for (const offset of r.nodes) {
        const n = obj.nodes[(offset - obj.layout.metaOffset) / obj.layout.metaBlockSize] as BlockMapNode
        if (n.level === 0 && n.count >= 2) leaves.push({ x, obj, n })
      }
    }
    assert.ok(leaves.length > 10, `${leaves.length} leaves`)
    // The last leaf's second block pointed back at the first block's slot in the first leaf's object (y).
    const { x, obj, n: leaf } = leaves[leaves.length - 1] as (typeof leaves)[number]
    const first = leaves[0] as (typeof leaves)[number]
    const y = first.x
    assert.notEqual(x, y)
    const block = leaf.keys[1] as number
    const at = pointerUnit(first.n.ptrLo[0] as number) * UNIT_BYTES
    leaf.ptrHi[1] = first.n.ptrHi[0] as number
    leaf.ptrLo[1] = first.n.ptrLo[0] as number
    const offset = obj.layout.metaOffset + obj.nodes.indexOf(leaf) * obj.layout.metaBlockSize
    const { dataCount: _d, metaCount: _m, summaryCrc: _s, ...fields } = obj.header
    await store.put(x, encodeObject(fields, obj.data, obj.nodes, obj.summary))
    const summaries = await summaryRanges(store)
    const ySummary = summaries.get(y) as { start: number; end: number }

    /** verify with the leaf's GET held back until y's data slots were read, and y's check done. */
    const run = async (budget: number) => {
      const counted = new RangeCounter(store)
      let yRead: () => void = () => {}
      const yDone = new Promise<void>((resolve) => {
        yRead = resolve
      })
      // Held no longer than that, should y's slots be read only after the walk.
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 5000)
      })
      const xSummary = summaries.get(x) as { start: number; end: number }
      // The walk's GET of the leaf: a span of x's nodes, without its summary (x's own check reads both).
      counted.hold = (key, start, end) => {
        if (key !== x || start > offset || end <= offset || (start <= xSummary.start && end >= xSummary.end)) return
        // A turn of the event loop more: y's check ends (its summary kept, or not) once its slots are read.
        return Promise.race([yDone, late]).then(() => new Promise<void>((resolve) => setImmediate(resolve)))
      }
      const yk = parseKey(y) as { cno: number; part: number }
      const yHeader = (await readObjectHeader(store, yk.cno, yk.part)).header
      const l = objectLayout(yHeader, yHeader)
      counted.onGot = (key, start, end) => {
        if (key === y && start >= l.dataOffset && end <= l.dataEnd) yRead()
      }
      const r = await verifyWithin(counted, budget)
      clearTimeout(timer)
      const yAgain = counted.gets.filter((g) => g.key === y && g.start === ySummary.start && g.end === ySummary.end)
      return { r, gets: counted.gets.length, yAgain: yAgain.length }
    }
    const kept = await run(64 * 1024 * 1024)
    const evicted = await run(0)
    const wrong = {
      code: 'ERR_CORRUPT',
      what: 'pointer',
      where: `${y} byte ${at}`,
      message: `${store.url}/${y}: the block map points block ${block} at byte ${at}, slot ${(at - first.obj.layout.dataOffset) / 4096}, which holds block ${first.n.keys[0]}`,
    }
    for (const { r } of [kept, evicted]) assert.deepEqual(r.problems, [wrong])
    assert.equal(kept.yAgain, 0, "y's summary kept: not read again")
    assert.equal(evicted.yAgain, 1, "y's summary gone: read again, once")
    assert.ok(evicted.gets > kept.gets, `${evicted.gets} GETs, ${kept.gets} with summaries kept`)
    // Each summary read again counted in bytesRead: those of every object gone when a leaf needed it.
    assert.ok(evicted.r.bytesRead >= kept.r.bytesRead + (ySummary.end - ySummary.start))
    const { bytesRead: _a, problems: _p, ...counts } = evicted.r
    const { bytesRead: _b, problems: _q, ...keptCounts } = kept.r
    assert.deepEqual(counts, keptCounts)
  })
})
