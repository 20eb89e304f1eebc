/**
 * A read stream fetches a data run once more when its bytes fail their checks (a byte
 * flipped on the way), its first GET included, which starts on a guess of where the data
 * lies before the leaf naming it is read. The run fetched again takes its place: the
 * stream pushes every byte once, in order, and pays one GET per run that failed (and the
 * summary read again), not more. (A guess that turns out wrong costs that GET only: see
 * cold-reads.test.ts.)
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { HEADER_BYTES } from '../../lib/format/header.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain } from '../helpers/assert.js'
import { view } from '../helpers/format.js'
import { pattern } from '../helpers/pattern.js'

const SIZE = 8 * 1024 * 1024

/**
 * Flips a byte of the answer to the first GET of each object that lies in its data region
 * (StreamSegment: [0, dataCount × block size)), a data GET (not a tail read bringing the
 * summary along): a transient fault, once an object (the read fails if the answer read
 * again is damaged too).
 */
class FlipDataOnce extends MemoryStore {
  flip = false
  flipped = new Set<string>()
  gets = 0
  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const bytes = await super.get(key, options)
    this.gets++
    const range = options?.range
    if (!this.flip || range === undefined || !('start' in range) || key === 'inode') return bytes
    if (this.flipped.has(key) || range.end > (await this.dataEnd(key))) return bytes
    this.flipped.add(key)
    const copy = Buffer.from(bytes) // the stored bytes stay as they are
    copy[0] = (copy[0] as number) ^ 0x40
    return copy
  }

  private async dataEnd(key: string): Promise<number> {
    const all = await super.get(key)
    const header = view(all.subarray(all.length - HEADER_BYTES))
    return header.getUint32(24, true) * 4096
  }
}

it('a read stream whose data GETs each fail their checks once pushes every byte once, in order, at most two GETs more per run', async () => {
  const store = new FlipDataOnce()
  // Objects of about 2 MiB, read in GETs of 256 KiB.
  const f = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 2 << 20, segmentBufferSize: 4 << 20 })
  const ref = Buffer.from(pattern(0, SIZE, 6))
  await f.write(0, ref)
  await f.flush()
  await f.close()
  const options = { store, readGetMaxBytes: 256 * 1024, readMaxConcurrency: 4 }

  const before = store.gets
  assert.ok((await drain(createStreamSegmentReadStream(options))).equals(ref), 'read right without flips')
  const clean = store.gets - before

  store.flip = true
  const start = store.gets
  const stream = createStreamSegmentReadStream(options)
  const got = await drain(stream)
  const flipped = store.gets - start
  assert.equal(got.length, ref.length)
  assert.ok(got.equals(ref), 'every byte pushed once, in order')
  const data = stream.timing?.requests.data ?? 0
  assert.ok(data > 8, `${data} data GETs, the guessed first one among them`)
  assert.ok(store.flipped.size >= 3, `${store.flipped.size} objects' answers flipped`)
  // Each run that failed: its GET again, and its object's summary once more.
  assert.ok(
    flipped <= clean + 2 * store.flipped.size,
    `${flipped} GETs with flips, ${clean} without, ${store.flipped.size} answers flipped`,
  )
})
