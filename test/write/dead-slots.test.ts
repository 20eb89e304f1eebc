/**
 * The spec's dead slots: a block written again after it was placed in an object leaves a
 * dead slot there, and its summary entry says so (LIVE clear); the block is written again
 * by a later object or slot, whose entry for it is live. Readers and verifiers of any
 * implementation rely on the flag: only live slots are data the checkpoint may point at.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { decodeObject } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB
// One object filled in 16 KiB pieces (4 blocks each), aiming at 1 MiB; leaves of 8 blocks.
const pieces: Partial<Settings> & WithHooks = {
  dataCacheDirtyMaxBytesThreshold: 64 * MiB,
  segmentBufferSize: 64 * MiB,
  streamSegmentBytes: 1 * MiB,
  segmentMpuChunkSize: 16 * KiB,
  segmentMaxObjectBytes: 128 * MiB,
  ...hooks({ maxNodeEntries: 8 }),
}

/** Each slot of the object `key` as [block index, live]. */
async function slots(store: MemoryStore, key: string): Promise<[number, number][]> {
  const { summary } = decodeObject(await store.get(key), key)
  return Array.from({ length: summary.count }, (_, i) => [summary.blockIndex[i]!, summary.live[i]!])
}

it('a block written again in the open object: its first slot there is dead, the slot of its new copy live', async () => {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, pieces)
  await f.write(0, pattern(0, 32 * KiB)) // blocks 0..7 placed in the open object, part 1
  await f.write(0, pattern(0, 4 * KiB, 9)) // block 0 again, before that object completes
  const t = await f.flush()
  assert.equal(t.cno, 1)
  assert.equal(t.streamDeadBytes, 4 * KiB)
  // The new copy went into the same open object, after the blocks placed before it.
  const want: [number, number][] = [[0, 0], ...[1, 2, 3, 4, 5, 6, 7].map((b): [number, number] => [b, 1]), [0, 1]]
  assert.deepEqual(await slots(store, '0000000001.1'), want)
  assert.deepEqual(await slots(store, '0000000001.0'), [])
  const r = await SegmentFile.open(store, { readOnly: true })
  const expected = Buffer.concat([pattern(0, 4 * KiB, 9), pattern(4 * KiB, 28 * KiB)])
  assert.deepEqual(Buffer.from(await r.read(0, 32 * KiB)), expected)
})
