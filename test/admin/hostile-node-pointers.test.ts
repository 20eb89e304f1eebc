/**
 * A node pointer resealed to name a data block whose bytes decode as a valid node (a leaf
 * mapping 340 blocks to holes, in the file's own content), met by the admin walks:
 * inspect and verify report it, and export fails with ERR_CORRUPT naming it before
 * anything is written (it exported those 340 blocks as zeros). In both formats. Then
 * pointers at the object's own header, at the index node itself (a cycle, and a node of
 * its own level) and at a sibling leaf (another key range): a writer changing blocks
 * under them fails with ERR_CORRUPT and publishes nothing, list gives its answer,
 * inspect and verify report them, export refuses.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { exportObject, inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { decodeInodeObject, INODE_KEY, segmentKey } from '../../lib/format/index.js'
import { decodeObject, type SegmentObject } from '../../lib/format/object.js'
import { pointerLo, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import {
  FIRST,
  leafContent,
  pointedAtDataBlock,
  repointFirst,
  settingsOf,
  writeCheckpoint1,
} from '../helpers/node-pointers.js'

const BS = 4096

for (const format of ['stream', 'parted'] as const) {
  describe(`admin walks over a node pointer at a data block that decodes as a node (${format})`, () => {
    /** The damaged container, and what its problem says. */
    async function damaged(name: string): Promise<{ store: MemoryStore; notAMetaBlock: RegExp; where: string }> {
      const store = new MemoryStore(`admin-data-block-${name}-${format}`)
      const at = (await pointedAtDataBlock(store, format)) * UNIT_BYTES
      return {
        store,
        notAMetaBlock: new RegExp(`0000000001\\.1: a node pointer names byte ${at}, not a meta block`),
        where: `0000000001.1 byte ${at}`,
      }
    }

    it('inspect and verify report the pointer', async () => {
      const { store, notAMetaBlock, where } = await damaged('reports')
      for (const report of [await inspectCheckpoint(store), await verifyCheckpoint(store)]) {
        const found = report.problems.filter((p) => p.what === 'pointer' && p.where === where)
        assert.equal(found.length, 1, JSON.stringify(report.problems))
        assert.equal(found[0]?.code, 'ERR_CORRUPT')
        assert.match(found[0]?.message ?? '', notAMetaBlock)
      }
    })

    it('export fails with ERR_CORRUPT naming the pointer, and writes nothing', async () => {
      const { store, notAMetaBlock } = await damaged('export')
      const dest = new MemoryStore()
      await rejectsCode(exportObject(store, { store: dest, key: 'out' }), 'ERR_CORRUPT', notAMetaBlock)
      assert.equal(await dest.head('out'), undefined)
    })
  })
}

/** Where part 0's index entry for FIRST is pointed, from part 0 as written. */
const targets: Array<[string, (p0: SegmentObject, size0: number) => { hi: number; lo: number }]> = [
  ['at its object’s own header', (_p0, size0) => ({ hi: 1, lo: pointerLo(0, Math.floor((size0 - 256) / UNIT_BYTES)) })],
  [
    'at the index node holding it',
    (p0) => {
      const j = p0.nodes.findIndex((n) => n.level === 1)
      return { hi: 1, lo: pointerLo(0, (p0.layout.metaOffset + j * p0.layout.metaBlockSize) / UNIT_BYTES) }
    },
  ],
  [
    'at the leaf before it',
    (p0) => {
      const index = p0.nodes.find((n) => n.level === 1)
      const e = [...(index?.keys ?? [])].indexOf(FIRST)
      return { hi: index?.ptrHi[e - 1] as number, lo: index?.ptrLo[e - 1] as number }
    },
  ],
]

for (const format of ['stream', 'parted'] as const) {
  describe(`other hostile node pointers (${format})`, () => {
    for (const [name, target] of targets) {
      it(`${name}: the writer fails and publishes nothing; list answers, inspect and verify report it, export refuses`, async () => {
        const store = new MemoryStore(`admin-hostile-${name}-${format}`)
        await writeCheckpoint1(store, format, leafContent())
        const bytes = await store.get(segmentKey(1, 0))
        await repointFirst(store, target(decodeObject(bytes, segmentKey(1, 0)), bytes.length))

        const w = await SegmentFile.open(store, settingsOf(format))
        await rejectsCode(
          (async () => {
            await w.write(FIRST * BS + 10, Buffer.from('0123456789'))
            await w.flush()
          })(),
          'ERR_CORRUPT',
          /0000000001\.\d/,
        )
        w.abort()
        assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1)
        assert.equal(await store.head(segmentKey(2, 0)), undefined, 'no checkpoint 2 was made')

        assert.deepEqual(
          (await listCheckpoints(store)).checkpoints.map((c) => c.cno),
          [1],
        )
        for (const report of [await inspectCheckpoint(store), await verifyCheckpoint(store)]) {
          assert.ok(
            report.problems.some((p) => p.code === 'ERR_CORRUPT' && /^0000000001\.\d byte \d+$/.test(p.where)),
            JSON.stringify(report.problems),
          )
        }
        await rejectsCode(
          exportObject(store, { store: new MemoryStore(), key: 'out' }),
          'ERR_CORRUPT',
          /0000000001\.\d/,
        )
      })
    }
  })
}
