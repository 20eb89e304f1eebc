/**
 * Hostile block maps met by a writer. One that keeps blocks at or past its checkpoint's
 * size (no writer makes one: truncation cuts the map, growth writes in it) is corrupt: a
 * writer growing the file must never bring those blocks back, and verify says where they
 * are. A node pointer at a data block whose bytes decode as a node is corrupt too: a
 * writer changing blocks under it must fail, not publish the blocks that node maps.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeHeader, encodeHeader, HEADER_BYTES } from '../../lib/format/header.js'
import { decodeInodeObject, encodeInodeObject, FORMAT_STREAM, INODE_KEY, segmentKey } from '../../lib/format/index.js'
import { UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { smallSettings } from '../helpers/containers.js'
import { FIRST, pointedAtDataBlock, settingsOf } from '../helpers/node-pointers.js'
import { pattern } from '../helpers/pattern.js'

const BS = 4096

/**
 * Checkpoint 1: 16 blocks under leaves of 4 (root keys 0, 4, 8, 12), its size then forged
 * to 13 blocks in both the `inode` object and part 0's header (CRCs made again): every root
 * key is below the size, but the last leaf still maps blocks 13, 14 and 15.
 */
async function forged(): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 16 * BS, 1))
  await f.flush()
  await f.close()
  const inode = decodeInodeObject(await store.get(INODE_KEY))
  assert.equal(inode.rootLevel, 1)
  assert.deepEqual([...inode.rootKeys.subarray(0, inode.rootCount)], [0, 4, 8, 12])
  inode.size = 13 * BS
  await store.put(INODE_KEY, encodeInodeObject(inode))
  const key = segmentKey(1, 0)
  const bytes = Buffer.from(await store.get(key))
  const at = bytes.length - HEADER_BYTES
  const h = decodeHeader(bytes.subarray(at), bytes.length, { cno: 1, part: 0, format: FORMAT_STREAM })
  h.inode.size = 13 * BS
  encodeHeader(h, bytes, at)
  await store.put(key, bytes)
  return store
}

describe('a block map with blocks past its size', () => {
  it('a writer growing the file fails with ERR_CORRUPT naming the leaf, and brings nothing back', async () => {
    const store = await forged()
    const w = await SegmentFile.open(store, smallSettings)
    assert.equal(w.size, 13 * BS)
    await assert.rejects(
      w.write(14 * BS + 100, Buffer.from('0123456789')),
      (err) =>
        StreamSegmentError.is(err, 'ERR_CORRUPT') && /key \d+ \(1[3-5]\) is outside \[12, 13\)/.test(err.message),
    )
    await w.close().catch(() => {})
    const r = await SegmentFile.open(store, { readOnly: true })
    // Blocks under the intact leaves read as ever.
    assert.ok(Buffer.from(await r.read(0, 12 * BS)).equals(pattern(0, 12 * BS, 1)))
    await r.close()
  })

  it('verify reports the leaf', async () => {
    const store = await forged()
    const report = await verifyCheckpoint(store)
    assert.ok(
      report.problems.some((p) => p.what === 'node' && /is outside \[12, 13\)/.test(p.message)),
      JSON.stringify(report.problems),
    )
  })
})

for (const format of ['stream', 'parted'] as const) {
  describe(`a node pointer at a data block that decodes as a node, met by a writer (${format})`, () => {
    const changes: Array<[string, (w: SegmentFile) => Promise<unknown>]> = [
      ['a write over its blocks', (w) => w.write(FIRST * BS + 10, Buffer.from('0123456789'))],
      ['a truncation within them', (w) => w.truncate(FIRST * BS + 100)],
    ]
    for (const [name, change] of changes) {
      it(`${name} fails with ERR_CORRUPT naming the pointer, and nothing is published`, async () => {
        const store = new MemoryStore(`hostile-map-data-block-${format}-${name}`)
        const unit = await pointedAtDataBlock(store, format)
        const w = await SegmentFile.open(store, settingsOf(format))
        await rejectsCode(
          (async () => {
            await change(w)
            await w.flush()
          })(),
          'ERR_CORRUPT',
          new RegExp(`0000000001\\.1: a node pointer names byte ${unit * UNIT_BYTES}, not a meta block`),
        )
        w.abort()
        assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1)
        assert.equal(await store.head(segmentKey(2, 0)), undefined, 'no checkpoint 2 was made')
      })
    }
  })
}
