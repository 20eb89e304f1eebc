/**
 * The summary cache counts the summaries it holds, and only those: a summary that comes
 * for an object the cache let go while it was on the way (evicted as the least recently
 * used, under readMaxConcurrency reads at once) serves its read and is not counted. When
 * it was, the count grew past every summary held, and the cache, full of summaries it did
 * not hold, let every object go at each summary that came (their summaries fetched again
 * and again).
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { ObjectReads } from '../../lib/container/objects.js'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const settings: Partial<Settings> & WithHooks = { segmentMaxObjectBytes: 256 * KiB, ...hooks({ maxNodeEntries: 8 }) }

interface Inside {
  summaryBytes: number
  objects: Map<string, { summary?: { count: number } }>
}

it('a cache of about one summary under 8 reads at once counts only the summaries it holds', async () => {
  const store = new MemoryStore('summary-cache-count')
  const f = await SegmentFile.create(store, settings)
  const bs = f.settings.dataBlockSize
  const ref = Buffer.from(pattern(0, 8 * 1024 * KiB, 1))
  await f.write(0, ref)
  await f.flush()
  // Blocks written again across the file: later checkpoints' leaves name many older objects.
  for (let c = 0; c < 4; c++) {
    for (let i = 0; i < 64; i++) {
      const at = ((i * 29 + c * 7) % 2048) * bs
      const b = pattern(at, bs, c + 2)
      await f.write(at, b)
      ref.set(b, at)
    }
    await f.flush()
  }
  await f.close()

  const file = await SegmentFile.open(store, { readOnly: true })
  try {
    const cacheBytes = 2000
    const reader = new Reader(fileState(file), {
      readSummaryCacheBytes: cacheBytes,
      readMaxConcurrency: 8,
      readGetMaxBytes: 64 * KiB,
    })
    assert.ok(Buffer.from(await reader.read(0, file.size)).equals(ref), 'the read is right')
    const inside = (reader as unknown as { objects: ObjectReads }).objects as unknown as Inside
    let held = 0 // as ObjectReads counts a summary's memory
    for (const st of inside.objects.values()) if (st.summary !== undefined) held += st.summary.count * 9 + 200
    assert.equal(inside.summaryBytes, held, 'the cache counts the summaries it holds')
    assert.ok(inside.summaryBytes <= cacheBytes, `${inside.summaryBytes} bytes counted, at most ${cacheBytes}`)
  } finally {
    await file.close()
  }
})
