/**
 * The spec's send-ahead target: `streamSegmentBytes` is capped at
 * `segmentMaxObjectBytes`. A target over the limit, capped to one piece or less, sends
 * objects whole; left uncapped, it would fill objects a piece at a time, and a piece
 * larger than the largest object never fits one, so nothing would be sent ahead.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { decodeObject, FLAG_CHECKPOINT, FLAG_SENT_AHEAD } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB

it('streamSegmentBytes over segmentMaxObjectBytes aims at the limit: objects of it are sent ahead whole', async () => {
  const settings: Partial<Settings> & WithHooks = {
    dataCacheDirtyMaxBytesThreshold: 64 * MiB,
    segmentBufferSize: 64 * MiB,
    streamSegmentBytes: 1 * MiB,
    segmentMpuChunkSize: 128 * KiB,
    segmentMaxObjectBytes: 96 * KiB, // the target: under one piece, so objects go whole
    ...hooks({ maxNodeEntries: 8 }), // leaves of 8 blocks: two leaves and their data fill 72.5 KiB
  }
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, settings)
  const data = pattern(0, 256 * KiB)
  for (let at = 0; at < data.length; at += 32 * KiB) await f.write(at, data.subarray(at, at + 32 * KiB))
  const t = await f.flush()
  // Three objects of two leaves sent ahead; the flush writes the growing tail in part 0.
  assert.deepEqual([t.streamSentBytes, t.streamFlushBytes], [192 * KiB, 64 * KiB])
  const objects: [string, number, number][] = []
  for await (const e of store.list('')) {
    if (e.key === 'inode') continue
    const { header } = decodeObject(await store.get(e.key), e.key)
    assert.ok(e.size <= 96 * KiB, `${e.key}: ${e.size} bytes, over the limit`)
    objects.push([e.key, header.flags, header.dataCount])
  }
  assert.deepEqual(objects, [
    ['0000000001.0', FLAG_CHECKPOINT, 16],
    ['0000000001.1', FLAG_SENT_AHEAD, 16],
    ['0000000001.2', FLAG_SENT_AHEAD, 16],
    ['0000000001.3', FLAG_SENT_AHEAD, 16],
  ])
  const r = await SegmentFile.open(store, { readOnly: true })
  assert.deepEqual(Buffer.from(await r.read(0, r.size)), data)
})
