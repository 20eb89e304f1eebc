/**
 * The spec's stream counters, on scenarios with known answers (4 KiB blocks, one leaf
 * that the writes fill, limits out of the way): bytes sent ahead, dead, written by the
 * flush, and of nodes. A leaf that is not full yet is not sent ahead (appends still go
 * into it).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB
const raised: Partial<Settings> = { dataCacheDirtyMaxBytesThreshold: 64 * MiB, segmentBufferSize: 64 * MiB }
// Objects sent whole once a leaf's unsent blocks make 64 KiB with their leaf, summary and
// header (15 blocks); leaves of 16 blocks, so 64 KiB fills one.
const whole: Partial<Settings> & WithHooks = {
  ...raised,
  streamSegmentBytes: 64 * KiB,
  ...hooks({ maxNodeEntries: 16 }),
}
// One object filled in 16 KiB pieces (4 blocks each), aiming at 1 MiB; leaves of 8 blocks.
const pieces: Partial<Settings> & WithHooks = {
  ...raised,
  streamSegmentBytes: 1 * MiB,
  segmentMpuChunkSize: 16 * KiB,
  segmentMaxObjectBytes: 128 * MiB,
  ...hooks({ maxNodeEntries: 8 }),
}

async function check(store: ObjectStore, want: Buffer) {
  const f = await SegmentFile.open(store, { readOnly: true })
  assert.deepEqual(Buffer.from(await f.read(0, f.size)), want)
}

describe('stream counters', () => {
  it('no rewrite: everything sent ahead, nothing dead, the flush writes only part 0', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, whole)
    await f.write(0, pattern(0, 64 * KiB))
    await f.settle()
    const t = await f.flush()
    assert.deepEqual(
      [t.streamSentBytes, t.streamDeadBytes, t.streamFlushBytes, t.streamMetaBytes, t.objects],
      [64 * KiB, 0, 0, 4 * KiB, 2],
    )
    await check(store, pattern(0, 64 * KiB))
  })

  it('a leaf not full yet stays for the flush: nothing sent ahead, whole or in pieces', async () => {
    for (const [settings, size] of [
      [whole, 60 * KiB],
      [pieces, 28 * KiB],
    ] as const) {
      const store = new MemoryStore()
      const f = await SegmentFile.create(store, settings)
      await f.write(0, pattern(0, size))
      await f.settle()
      const t = await f.flush()
      assert.deepEqual(
        [t.streamSentBytes, t.streamDeadBytes, t.streamFlushBytes, t.streamMetaBytes, t.objects],
        [0, 0, size, 4 * KiB, 1], // part 0: the data and its leaf
        `${size / KiB} KiB`,
      )
      await check(store, pattern(0, size))
    }
  })

  it('a rewrite of a block in a completed object: sent again by the flush, nothing dead', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, whole)
    await f.write(0, pattern(0, 64 * KiB))
    await f.settle()
    await f.write(0, pattern(0, 4 * KiB, 9))
    const t = await f.flush()
    // The object (16 blocks, its leaf), then part 0 (block 0 again, the leaf again).
    assert.deepEqual(
      [t.streamSentBytes, t.streamDeadBytes, t.streamFlushBytes, t.streamMetaBytes, t.objects],
      [64 * KiB, 0, 4 * KiB, 8 * KiB, 2],
    )
    await check(store, Buffer.concat([pattern(0, 4 * KiB, 9), pattern(4 * KiB, 60 * KiB)]))
  })

  it('a rewrite of a block in the open object: its first copy dies, its last bytes go when it closes', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, pieces)
    await f.write(0, pattern(0, 32 * KiB)) // two pieces placed in the open object
    await f.write(0, pattern(0, 4 * KiB, 9))
    const t = await f.flush()
    assert.deepEqual(
      [t.streamSentBytes, t.streamDeadBytes, t.streamFlushBytes, t.streamMetaBytes, t.objects],
      [32 * KiB, 4 * KiB, 4 * KiB, 4 * KiB, 2],
    )
    await check(store, Buffer.concat([pattern(0, 4 * KiB, 9), pattern(4 * KiB, 28 * KiB)]))
  })

  it('a failed object: its bytes are dead, the flush writes them, nothing is lost', async () => {
    const failing = new FailingStore(new MemoryStore(), [{ ops: ['put'], key: /^0000000001\.1$/, nth: 1 }])
    const f = await SegmentFile.create(failing, whole)
    await f.write(0, pattern(0, 64 * KiB))
    await f.settle()
    assert.equal(failing.count('put', 'failed'), 1)
    const t = await f.flush()
    assert.deepEqual(
      [t.streamSentBytes, t.streamDeadBytes, t.streamFlushBytes, t.streamMetaBytes, t.objects],
      [64 * KiB, 64 * KiB, 64 * KiB, 4 * KiB, 1],
    )
    await check(failing, pattern(0, 64 * KiB))
  })

  it('a failed piece: the open object is given up and aborted, the flush writes its blocks', async () => {
    const failing = new FailingStore(new MemoryStore(), [{ ops: ['uploadPart'], nth: 2 }])
    const f = await SegmentFile.create(failing, pieces)
    await f.write(0, pattern(0, 32 * KiB))
    const t = await f.flush()
    assert.equal(t.streamDeadBytes, 32 * KiB, 'both pieces of the given-up object died')
    assert.equal(t.streamSentBytes, 32 * KiB)
    assert.equal(t.streamFlushBytes, 32 * KiB)
    assert.equal(failing.count('abortMultipart'), 1)
    let open = 0
    for await (const _ of failing.listMultipart()) open++
    assert.equal(open, 0)
    await check(failing, pattern(0, 32 * KiB))
  })
})
