/**
 * A data part whose header (its CRC intact) counts more meta blocks than the object holds
 * is ERR_CORRUPT for a read, as for verify: the counts must add up to the object's size.
 * The first read's tail read tells the size; the read made again after that failure (as
 * for bytes damaged on the way) must check the counts against it too, not take the header
 * from a suffix read, which cannot tell the size. The error names the store and the key,
 * as it does when the part 0 of a checkpoint opened by number fails its header checks.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { HEADER_BYTES } from '../../lib/format/header.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { resealHeader, view } from '../helpers/format.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

describe('header counts that disagree with the object size', () => {
  it('a data part counting 200000 meta blocks: the read fails with ERR_CORRUPT, also when made again', async () => {
    const store = new MemoryStore()
    const size = 200 * 1024
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, size, 9))
    await f.flush()
    await f.close()
    const key = '0000000001.2'
    const bytes = Buffer.from(await store.get(key))
    const header = bytes.subarray(bytes.length - HEADER_BYTES)
    view(header).setUint32(28, 200_000, true) // metaCount
    resealHeader(header)
    await store.put(key, bytes)
    const r = await SegmentFile.open(store, { readOnly: true })
    try {
      await assert.rejects(r.read(0, size), (err) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), `ERR_CORRUPT, got ${(err as Error)?.message ?? err}`)
        // Named with its store, as node and summary errors are.
        const message = (err as Error).message
        assert.ok(message.startsWith(`${store.url}/0000000001.2: header counts `), message)
        assert.match(message, /object has \d+/)
        return true
      })
    } finally {
      await r.close()
    }
  })
})

/** A memory store that records the suffix length of every suffix GET. */
class SuffixRecorder extends MemoryStore {
  suffixes: Array<{ key: string; suffix: number }> = []
  override get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const range = options?.range
    if (range !== undefined && 'suffix' in range) this.suffixes.push({ key, suffix: range.suffix })
    return super.get(key, options)
  }
}

it("a data part counting 200000 data blocks fails its reads, and does not size the reader's suffix reads of other objects", async () => {
  const store = new SuffixRecorder()
  const size = 256 * 1024
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, size, 5))
  await f.flush()
  // Every other block written again: the leaves of checkpoint 2 point into checkpoint 1's
  // objects, whose meta blocks a reader never sees, so it reads their summaries by suffix.
  const expected = Buffer.from(pattern(0, size, 5))
  for (let at = 0; at < size; at += 8192) {
    await f.write(at, Buffer.from([at & 0xff]))
    expected[at] = at & 0xff
  }
  await f.flush()
  await f.close()
  const key = '0000000001.1'
  const bytes = Buffer.from(await store.get(key))
  const header = bytes.subarray(bytes.length - HEADER_BYTES)
  view(header).setUint32(24, 200_000, true) // dataCount
  view(header).setUint32(32, 200_000, true) // summaryCount
  resealHeader(header)
  await store.put(key, bytes)
  const r = await SegmentFile.open(store, { readOnly: true })
  store.suffixes = []
  let failed = 0
  try {
    // The blocks not written again, one at a time: each object's summary read cold.
    for (let at = 4096; at < size; at += 8192) {
      try {
        assert.deepEqual(Buffer.from(await r.read(at, 4096)), expected.subarray(at, at + 4096), `bytes at ${at}`)
      } catch (err) {
        assert.ok(
          StreamSegmentError.is(err, 'ERR_CORRUPT'),
          `ERR_CORRUPT at ${at}, got ${(err as Error)?.message ?? err}`,
        )
        assert.ok(err.message.startsWith(`${store.url}/${key}: `), err.message)
        failed++
      }
    }
  } finally {
    await r.close()
  }
  assert.ok(failed > 0, 'the reads of the crafted object fail')
  const others = store.suffixes.filter((s) => s.key !== key)
  assert.ok(others.length > 0, 'other objects were read by suffix')
  // Their summaries are a few entries: the first suffix read's size (4096 entries and an
  // eighth more, the header) is the most; the crafted count would have made it 3.6 MB.
  const largest = Math.max(...store.suffixes.map((s) => s.suffix))
  assert.ok(largest <= HEADER_BYTES + 16 * (4096 + 512), `a suffix GET of ${largest} bytes`)
})

for (const format of ['stream', 'parted'] as const) {
  it(`${format}: a checkpoint opened by number whose part 0 header fails its CRC: ERR_CORRUPT naming the store and the key`, async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, { ...smallSettings, format })
    await f.write(0, pattern(0, 100 * 1024, 3))
    await f.flush()
    await f.close()
    const key = '0000000001.0'
    const bytes = Buffer.from(await store.get(key))
    const at = format === 'stream' ? bytes.length - HEADER_BYTES + 40 : 40 // createdMs
    bytes[at] = (bytes[at] as number) ^ 1
    await store.put(key, bytes)
    await assert.rejects(SegmentFile.open(store, { cno: 1, readOnly: true }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), `ERR_CORRUPT, got ${(err as Error)?.message ?? err}`)
      assert.ok(err.message.startsWith(`${store.url}/${key}: header CRC `), err.message)
      return true
    })
  })
}
