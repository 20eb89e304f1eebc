/**
 * What a walk of a block map (admin/map-walk.ts) holds must grow with the map's nodes and
 * the objects it reaches, not with its data pointers (2^28 of them for a checkpoint of
 * 1 TiB in 4 KiB blocks): gc records no data pointer, only which objects each map reaches,
 * and the leaves are visited as their spans come, not all held for a visit of their level.
 * ls keeps the nodes it walked for all its maps, but a leaf only as the objects it reaches.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { type KnownNode, type MapWalk, type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { listContainer } from '../../lib/container/listing.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { U32List } from '../../lib/util/typed-arrays.js'
import { buildContainer } from '../helpers/containers.js'
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

  it('gc records no data pointer (verify, walked alike, records each one)', async () => {
    const verified = await u32Pushes(() => verifyCheckpoint(store))
    assert.ok(verified > 0, `verify's walk records its data pointers in U32Lists (${verified} pushes)`)
    let deleted: number | undefined
    const byGc = await u32Pushes(async () => {
      deleted = (await gc(store, { graceMs: 0, dryRun: true })).deletedObjects
    })
    assert.ok(deleted !== undefined && deleted > 0, 'gc marked, and found something to delete')
    assert.equal(byGc, 0, 'gc recorded data pointers: 8 bytes per mapped block of every kept map')
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
