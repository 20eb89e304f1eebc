/**
 * verify's checks of the block map's data pointers, made as the walk visits each leaf:
 * a pointer must name a live data slot of its object holding that very block, whether
 * that object's summary is still kept when the leaf comes or must be read again (a
 * budget of no bytes keeps none); an object's problems are capped as before, its
 * pointers' among them.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { problemCount, walkMap } from '../../lib/admin/map-walk.js'
import { SUMMARY_BUDGET } from '../../lib/admin/verify.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import type { BlockMapNode } from '../../lib/format/node.js'
import { decodeObject, encodeObject, type SegmentObject } from '../../lib/format/object.js'
import { pointerLo, pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { buildContainer } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

/** verifyCheckpoint keeping summaries within `budget` bytes (the test hook). */
function verifyWithin(store: ObjectStore, budget: number) {
  return verifyCheckpoint(store, { [SUMMARY_BUDGET]: budget } as Parameters<typeof verifyCheckpoint>[1])
}

/** A reached leaf of the published checkpoint with two entries into the object holding it. */
async function ownLeaf(store: MemoryStore): Promise<{ obj: SegmentObject; leaf: BlockMapNode; part: number }> {
  const { inode } = (await readObjectHeader(store, 3, 0)).header
  const walk = await walkMap(store, inode, [])
  for (const [key, r] of walk.reached) {
    const obj = decodeObject(await store.get(key), key)
    for (const offset of r.nodes) {
      const leaf = obj.nodes[(offset - obj.layout.metaOffset) / obj.layout.metaBlockSize]
      if (leaf === undefined || leaf.level !== 0 || leaf.count < 2) continue
      const part = obj.header.part
      const own = (i: number) => leaf.ptrHi[i] === obj.header.cno && pointerPart(leaf.ptrLo[i] as number) === part
      if (own(0) && own(1)) return { obj, leaf, part }
    }
  }
  throw new Error('no reached leaf with two entries into its own object')
}

function put(store: MemoryStore, obj: SegmentObject): Promise<unknown> {
  const { dataCount: _d, metaCount: _m, summaryCrc: _s, ...fields } = obj.header
  return store.put(obj.key, encodeObject(fields, obj.data, obj.nodes, obj.summary))
}

const slotOf = (obj: SegmentObject, lo: number) =>
  (pointerUnit(lo) * UNIT_BYTES - obj.layout.dataOffset) / obj.layout.dataBlockSize

describe("verify: the block map's data pointers", () => {
  const cases: [string, (s: MemoryStore) => Promise<{ key: string; at: number; message: RegExp }>][] = [
    [
      "a pointer at another block's slot",
      async (s) => {
        const { obj, leaf } = await ownLeaf(s)
        leaf.ptrLo[1] = leaf.ptrLo[0] as number
        await put(s, obj)
        const at = pointerUnit(leaf.ptrLo[0] as number) * UNIT_BYTES
        const message = new RegExp(
          `points block ${leaf.keys[1]} at byte ${at}, slot ${slotOf(obj, leaf.ptrLo[0] as number)}, which holds block ${leaf.keys[0]}$`,
        )
        return { key: obj.key, at, message }
      },
    ],
    [
      'a pointer into the meta region',
      async (s) => {
        const { obj, leaf, part } = await ownLeaf(s)
        leaf.ptrLo[1] = pointerLo(part, obj.layout.metaOffset / UNIT_BYTES)
        await put(s, obj)
        const at = obj.layout.metaOffset
        const message = new RegExp(`points block ${leaf.keys[1]} at byte ${at}, not one of its \\d+ data slots$`)
        return { key: obj.key, at, message }
      },
    ],
    [
      'a pointer at a dead slot',
      async (s) => {
        const { obj, leaf } = await ownLeaf(s)
        obj.summary.live[slotOf(obj, leaf.ptrLo[1] as number)] = 0
        await put(s, obj)
        const at = pointerUnit(leaf.ptrLo[1] as number) * UNIT_BYTES
        const message = new RegExp(`points block ${leaf.keys[1]} at byte ${at}, slot \\d+, which is dead`)
        return { key: obj.key, at, message }
      },
    ],
  ]
  for (const [what, damage] of cases) {
    it(`${what}: one pointer problem, its summary kept or read again`, async () => {
      const store = new MemoryStore()
      await buildContainer(store)
      assert.deepEqual((await verifyCheckpoint(store)).problems, [])
      const { key, at, message } = await damage(store)
      const kept = await verifyCheckpoint(store)
      assert.deepEqual(
        kept.problems.map((p) => [p.code, p.what, p.where]),
        [['ERR_CORRUPT', 'pointer', `${key} byte ${at}`]],
      )
      assert.match(kept.problems[0]?.message ?? '', message)
      const none = await verifyWithin(store, 0)
      assert.deepEqual(none.problems, kept.problems)
      assert.ok(none.bytesRead >= kept.bytesRead)
    })
  }

  it('an object of 100 bad pointers and a bad block: 20 of them kept, the rest counted, the block among those', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 100 * 4096, 1))
    await f.flush()
    await f.close()
    const key = '0000000001.0'
    const obj = decodeObject(await store.get(key), key)
    assert.equal(obj.summary.count, 100)
    // Each pair of slots swapped in the summary: every pointer names a slot holding another block.
    const b = obj.summary.blockIndex
    for (let i = 0; i + 1 < 100; i += 2) [b[i], b[i + 1]] = [b[i + 1] as number, b[i] as number]
    obj.data[50 * 4096 + 7] = (obj.data[50 * 4096 + 7] as number) ^ 1 // and slot 50's bytes, against its CRC
    await put(store, obj)
    for (const budget of [64 * 2 ** 20, 0]) {
      const r = await verifyWithin(store, budget)
      assert.equal(r.dataPointers, 100)
      assert.equal(r.slots, 100)
      assert.equal(problemCount(r.problems), 101, JSON.stringify(r.problems.slice(-2)))
      assert.equal(r.problems.length, 21)
      assert.ok(r.problems.slice(0, 20).every((p) => p.what === 'pointer' && /which holds block/.test(p.message)))
      const rest = r.problems[20]
      assert.deepEqual([rest?.what, rest?.where, rest?.more], ['pointer', key, 81])
    }
  })
})
