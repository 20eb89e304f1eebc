/**
 * The write stream's typed events, checked by the compiler: this file is built under the
 * project's strict tsconfig (`npm run typecheck`, and `npm test` builds before it runs), so
 * a handler typed wrongly fails the build (`@ts-expect-error` lines must be errors), and
 * a strict handler of 'flush' or 'progress' must compile. The run checks the handlers got
 * what their types say.
 */
import assert from 'node:assert/strict'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { it } from 'node:test'
import {
  createStreamSegmentWriteStream,
  type FlushTiming,
  MemoryStore,
  type StreamSegmentWriteStream,
  type WriteProgress,
} from '../../lib/index.js'

it("strict handlers of 'flush' and 'progress' type-check and get a FlushTiming and a WriteProgress", async () => {
  const ws: StreamSegmentWriteStream = createStreamSegmentWriteStream({
    store: new MemoryStore(),
    streamSegmentBytes: 1024 * 1024,
  })
  const timings: FlushTiming[] = []
  const progress: WriteProgress[] = []
  ws.on('flush', (timing: FlushTiming) => {
    timings.push(timing)
  })
  ws.once('progress', (p) => {
    const taken: number = p.bytesWritten // contextually typed: WriteProgress
    assert.ok(taken >= 0)
  })
  ws.on('progress', (p: WriteProgress) => progress.push(p))
  ws.prependListener('error', (err: Error) => assert.fail(err))
  ws.on('finish', () => undefined)
  ws.on('some-other-event', (a: string, b: number) => [a, b])
  // @ts-expect-error 'flush' passes a FlushTiming, not a string
  ws.on('flush', (t: string) => t)
  // @ts-expect-error 'progress' passes a WriteProgress, which has no cno
  ws.on('progress', (p: FlushTiming) => p.cno)
  // @ts-expect-error 'drain' passes nothing
  ws.once('drain', (n: number) => n)
  const size = 3 * 1024 * 1024 + 5
  await pipeline(Readable.from([Buffer.alloc(size, 9)]), ws)
  assert.equal(timings.length, 1)
  assert.equal(timings[0], ws.flushTiming)
  assert.equal(timings[0]?.cno, 1)
  assert.ok(progress.length >= 2, `one event per upload request and one at the commit: ${progress.length}`)
  const last = progress.at(-1) as WriteProgress
  assert.equal(last.bytesWritten, size)
  assert.ok(last.requests >= progress.length - 1)
  for (let i = 1; i < progress.length; i++) {
    assert.ok((progress[i] as WriteProgress).uploadedBytes >= (progress[i - 1] as WriteProgress).uploadedBytes)
  }
})
