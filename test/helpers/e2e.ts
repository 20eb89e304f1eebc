import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { fillBlocks } from './pattern.js'

const MiB = 1024 * 1024

/**
 * Streams `mib` MiB of patterned data into `store` with a 32 MiB dirty limit, checks the
 * dirty tier never held more than the limit plus one chunk, and reads it back through a
 * fresh handle, comparing SHA-256. Prints the memory it took.
 */
export async function endToEnd(store: ObjectStore, mib: number, chunk = 1 * MiB): Promise<void> {
  const total = mib * MiB
  const limit = 32 * MiB
  const want = createHash('sha256')
  const rss0 = process.memoryUsage().rss
  let peakRss = rss0
  // The source reuses a pool of buffers round and round, so the memory measured is the
  // writer's, not the source's garbage. The write stream copies its chunks (adoptChunks is
  // off), so a buffer may be reused once its write has called back; the pool is larger
  // than what the pipeline holds (Readable.from buffers 16, the stream 1), and a buffer
  // reused too early would change what is stored and fail the hash comparison.
  const pool = Array.from({ length: Math.ceil(limit / chunk) + 32 }, () => Buffer.allocUnsafe(chunk))
  const source = Readable.from(
    (async function* () {
      for (let at = 0, i = 0; at < total; at += chunk, i++) {
        const b = (pool[i % pool.length] as Buffer).subarray(0, Math.min(chunk, total - at))
        fillBlocks(b, at)
        want.update(b)
        peakRss = Math.max(peakRss, process.memoryUsage().rss)
        yield b
      }
    })(),
  )
  const ws = createStreamSegmentWriteStream({ store, dataCacheDirtyMaxBytesThreshold: limit, segmentBufferSize: limit })
  const t0 = performance.now()
  await pipeline(source, ws)
  const seconds = (performance.now() - t0) / 1000
  const file = ws.file as SegmentFile
  assert.ok(file.peakDirtyBytes <= limit + chunk, `peak dirty ${file.peakDirtyBytes} > limit ${limit} + chunk ${chunk}`)
  const timing = ws.flushTiming
  assert.ok(timing !== undefined)
  assert.equal(timing.cno, 1)

  const reader = await SegmentFile.open(store, { readOnly: true })
  assert.equal(reader.size, total)
  const got = createHash('sha256')
  for (let at = 0; at < total; at += 16 * MiB) got.update(await reader.read(at, Math.min(16 * MiB, total - at)))
  assert.equal(got.digest('hex'), want.digest('hex'), 'read back differs')
  console.log(
    `# ${store.url}: ${mib} MiB in ${seconds.toFixed(1)} s (${(mib / seconds).toFixed(0)} MiB/s), ${timing.objects} objects, ` +
      `peak dirty ${(file.peakDirtyBytes / MiB).toFixed(1)} MiB, peak RSS growth while writing ${((peakRss - rss0) / MiB).toFixed(0)} MiB`,
  )
}
