/**
 * The spec's room check for objects filled in pieces: before each piece is placed, the
 * object must have room for it and its leaves, with one leaf in sixteen kept spare for
 * leaves that split before it closes; an object without room is closed early, and the
 * piece starts the next one.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { decodeObject } from '../../lib/format/index.js'
import { objectBytes } from '../../lib/format/layout.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB

it('an object that would hold two full leaves exactly, with no leaf spare, closes at one', async () => {
  // Two leaves of 8 blocks and their data fill the limit to the byte; the spare leaf
  // (one in sixteen, rounded up) does not fit beside them.
  const limit = objectBytes(16, 2, 4 * KiB, 4 * KiB)
  const settings: Partial<Settings> & WithHooks = {
    dataCacheDirtyMaxBytesThreshold: 64 * MiB,
    segmentBufferSize: 64 * MiB,
    streamSegmentBytes: 1 * MiB, // capped at the limit
    segmentMpuChunkSize: 16 * KiB, // pieces of 4 blocks
    segmentMaxObjectBytes: limit,
    ...hooks({ maxNodeEntries: 8 }),
  }
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, settings)
  const data = pattern(0, 96 * KiB) // three leaves; the last still grows until the flush
  await f.write(0, data)
  await f.flush()
  const objects: [string, number, number, number][] = []
  for await (const e of store.list('')) {
    if (e.key === 'inode') continue
    const { header } = decodeObject(await store.get(e.key), e.key)
    objects.push([e.key, header.dataCount, header.metaCount, e.size])
  }
  const oneLeaf = objectBytes(8, 1, 4 * KiB, 4 * KiB)
  assert.deepEqual(objects, [
    ['0000000001.0', 0, 0, 256],
    ['0000000001.1', 8, 1, oneLeaf],
    ['0000000001.2', 8, 1, oneLeaf],
    ['0000000001.3', 8, 1, oneLeaf],
  ])
  const r = await SegmentFile.open(store, { readOnly: true })
  assert.deepEqual(Buffer.from(await r.read(0, r.size)), data)
})
