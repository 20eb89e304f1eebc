/**
 * What a walk of a block map (admin/map-walk.ts) holds must grow with the map's nodes and
 * the objects it reaches, not with its data pointers (2^28 of them for a checkpoint of
 * 1 TiB in 4 KiB blocks): gc records no data pointer, only which objects each map reaches,
 * and the leaves are visited as their spans come, not all held for a visit of their level.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { type MapWalk, type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { U32List } from '../../lib/util/typed-arrays.js'
import { buildContainer } from '../helpers/containers.js'
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
