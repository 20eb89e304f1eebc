/**
 * Before its inode write, a checkpoint looks for every object it stored before part 0
 * that it may point into (flush.ts, checkOwnObjects). A clean leaf dropped from the node
 * cache is named by its parent, but the objects its entries point into are named by no
 * node in memory: a leaf stored again in a later object (one of its blocks written again)
 * keeps pointing into the object that holds its other blocks.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { decodeInodeObject, INODE_KEY, segmentKey } from '../../lib/format/index.js'
import { pointerPart } from '../../lib/format/pointer.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { MapNode } from '../../lib/state/block-map.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024
/** Leaves of 4 blocks (16 KiB), at most 16 clean ones kept in memory (32 before a trim). */
const settings = { ...smallSettings, nodeCacheNodes: 16, rollForwardAfterMs: 0 }
const LEAF = 16 * KiB
const SIZE = 160 * KiB

async function readAll(store: ObjectStore): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/** The objects the nodes in memory name: the root's and every loaded node's entries. */
function namedInMemory(root: MapNode): Set<string> {
  const keys = new Set<string>()
  const visit = (node: MapNode) => {
    for (let i = 0; i < node.count; i++) {
      const hi = node.hi[i] as number
      if (hi !== 0) keys.add(segmentKey(hi, pointerPart(node.lo[i] as number)))
      const child = node.children?.[i]
      if (child !== undefined) visit(child)
    }
  }
  visit(root)
  return keys
}

/**
 * Checkpoint 1, then a writer on it that stores under checkpoint 2: SIZE bytes front to
 * back, then one block of each of the first leaves written again (those leaves are stored
 * again in later objects, pointing into the first ones for their other blocks), then as
 * much again past the end, so that those leaves leave the node cache.
 */
async function writerWithLeavesDropped(store: ObjectStore): Promise<{ w: SegmentFile; data: Buffer }> {
  const f = await SegmentFile.create(store, settings)
  await f.write(0, pattern(0, 4 * KiB, 1))
  assert.equal((await f.flush()).cno, 1)
  await f.close()
  const w = await SegmentFile.open(store, settings)
  const data = Buffer.concat([pattern(0, SIZE, 2), pattern(SIZE, SIZE, 4)])
  await w.write(0, data.subarray(0, SIZE))
  await w.settle()
  for (let at = 0; at < 4 * LEAF; at += LEAF) {
    const again = pattern(at, 4 * KiB, 3)
    again.copy(data, at)
    await w.write(at, again)
  }
  await w.settle()
  await w.write(SIZE, data.subarray(SIZE))
  await w.settle()
  return { w, data }
}

/** The writer's objects under checkpoint 2 that no node in its memory names. */
async function unnamed(store: ObjectStore, w: SegmentFile): Promise<string[]> {
  const named = namedInMemory(fileState(w).map.root)
  const keys: string[] = []
  for await (const e of store.list('0000000002.')) if (!named.has(e.key)) keys.push(e.key)
  return keys
}

describe('a checkpoint looks for its own objects, those of leaves dropped from memory too', () => {
  it('an object only a dropped leaf points into, deleted before the flush: ERR_CONFLICT, nothing published', async () => {
    const store = new MemoryStore()
    const { w } = await writerWithLeavesDropped(store)
    const gone = await unnamed(store, w)
    assert.ok(gone.includes(segmentKey(2, 1)), `the first object is named by no node in memory: ${gone.join(' ')}`)
    await store.delete(gone)

    await rejectsCode(
      w.flush(),
      'ERR_CONFLICT',
      /checkpoint 2 was not published: objects it stored before its part 0 were deleted/,
    )
    await w.close().catch(() => undefined)
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1, 'nothing published')
    assert.equal(await store.head(segmentKey(2, 0)), undefined, 'no part 0 left for a roll-forward')
    assert.ok((await readAll(store)).equals(pattern(0, 4 * KiB, 1)))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })

  it('with its objects all there, the same writer publishes, and the checkpoint reads back', async () => {
    const store = new MemoryStore()
    const { w, data } = await writerWithLeavesDropped(store)
    assert.ok((await unnamed(store, w)).length > 0)
    assert.equal((await w.flush()).cno, 2)
    await w.close()
    assert.ok((await readAll(store)).equals(data))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })

  it('objects stored before a rollback are not looked for: deleted, the next checkpoint publishes', async () => {
    const store = new MemoryStore()
    const { w } = await writerWithLeavesDropped(store)
    await w.rollback()
    const before: string[] = []
    for await (const e of store.list('0000000002.')) before.push(e.key)
    assert.ok(before.length > 0)
    await store.delete(before)
    const data = pattern(0, 8 * KiB, 5)
    await w.write(0, data)
    assert.ok((await w.flush()).cno >= 2)
    await w.close()
    assert.ok((await readAll(store)).equals(data))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })
})
