/**
 * A node pointer resealed to name a data block whose bytes decode as a valid node (a leaf
 * mapping 340 blocks to holes, in the file's own content), met by the admin walks:
 * inspect and verify report it, and export fails with ERR_CORRUPT naming it before
 * anything is written (it exported those 340 blocks as zeros). In both formats.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { exportObject, inspectCheckpoint, verifyCheckpoint } from '../../lib/admin/index.js'
import { UNIT_BYTES } from '../../lib/format/pointer.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { pointedAtDataBlock } from '../helpers/node-pointers.js'

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
