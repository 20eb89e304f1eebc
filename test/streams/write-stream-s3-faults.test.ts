/**
 * The write stream in a pipeline on radosgw through the fault proxy (test/helpers/fault-proxy.ts),
 * with faults on chosen requests while the producer keeps writing:
 * - on the bodies of objects sent ahead (multipart pieces, or whole PutObjects): a burst of
 *   503s, a burst past the retries on one piece, a reset, an answer lost after the object
 *   stored it, a stall past idleTimeoutMs;
 * - on part 0 and on the inode write at the end (the flush);
 * - on every body request, until the calls' deadline: the stream fails;
 * - a SegmentFile's flush that failed (bodies refused; the inode write landed, its answers
 *   lost), then a second flush of the same handle: it publishes every byte;
 * - the AbortSignal and destroy() while requests wait to be retried: the pipeline ends at
 *   once, nothing is published, no timer is left.
 * The pipeline either ends with a published checkpoint byte for byte the input, or fails with
 * a StreamSegmentError and the checkpoint published before stays, verified whole
 * (verifyCheckpoint). The dirty tier stays within the dirty limit and a chunk, and the
 * source is held (backpressure).
 * Fails, never skips, without the S3 server (s3-env).
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { describe, test } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { S3Store, S3StoreOptions } from '../../lib/store/s3.js'
import { createStreamSegmentWriteStream, type StreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { within } from '../helpers/containers.js'
import { type FaultKind, type FaultProxy, faultSeed, type RequestInfo, useFaultProxy } from '../helpers/fault-proxy.js'
import { fillBlocks } from '../helpers/pattern.js'
import { s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024
const CHUNK = MiB
const LIMIT = 24 * MiB
const SIZE = 32 * MiB
const IDLE_TIMEOUT_MS = 2000

/** Objects sent ahead in 5 MiB pieces, or whole (one PutObject each), within a 24 MiB dirty limit. */
const MODES: Record<string, Partial<Settings>> = {
  pieces: {
    streamSegmentBytes: 16 * MiB,
    segmentMpuChunkSize: 5 * MiB,
    segmentMpuMaxConcurrency: 4,
    dataCacheDirtyMaxBytesThreshold: LIMIT,
    segmentBufferSize: LIMIT,
  },
  whole: {
    streamSegmentBytes: 6 * MiB,
    segmentMpuChunkSize: 8 * MiB,
    segmentMpuMaxConcurrency: 4,
    dataCacheDirtyMaxBytesThreshold: LIMIT,
    segmentBufferSize: LIMIT,
  },
}

/** A segment object's key but part 0's (an object sent ahead, or a data part of the flush). */
const DATA_PART = /\/\d{10}\.(?!0$)\d+$/
const PART0 = /\/\d{10}\.0$/

/** A request carrying an object's bytes (not a multipart upload's empty claim). */
function isBody(r: RequestInfo): boolean {
  return (r.op === 'UploadPart' || r.op === 'PutObject') && r.length > 0
}

/** The requests that carry the bytes of objects sent ahead. */
function sentAheadBody(r: RequestInfo): boolean {
  return isBody(r) && DATA_PART.test(r.key)
}

/**
 * Matches the `skip`+1-th request `pred` matches, then only the same request made again
 * (the same key and part number): a burst on one request and its retries.
 */
function sticky(pred: (r: RequestInfo) => boolean, skip = 0): (r: RequestInfo) => boolean {
  let seen = 0
  let target: string | undefined
  return (r) => {
    const id = `${r.op} ${r.key} ${r.query.get('partNumber') ?? ''}`
    if (target !== undefined) return id === target
    if (!pred(r) || seen++ < skip) return false
    target = id
    return true
  }
}

function shaOf(size: number, seed: number): string {
  const h = createHash('sha256')
  const b = Buffer.allocUnsafe(CHUNK)
  for (let at = 0; at < size; at += CHUNK) {
    fillBlocks(b, at, seed)
    h.update(b.subarray(0, Math.min(CHUNK, size - at)))
  }
  return h.digest('hex')
}

/** What is published: its number, size and SHA-256, and the problems verifyCheckpoint finds in it. */
async function publishedState(
  direct: S3Store,
): Promise<{ cno: number; size: number; sha: string; problems: string[] }> {
  const f = await SegmentFile.open(direct, { readOnly: true })
  const h = createHash('sha256')
  try {
    for (let at = 0; at < f.size; at += 8 * MiB) h.update(await f.read(at, Math.min(8 * MiB, f.size - at)))
  } finally {
    await f.close()
  }
  const report = await verifyCheckpoint(direct)
  return { cno: f.cno, size: f.size, sha: h.digest('hex'), problems: report.problems.map((p) => p.message) }
}

async function openUploads(store: S3Store): Promise<string[]> {
  const open: string[] = []
  for await (const u of store.listMultipart('')) open.push(`${u.key} ${u.uploadId}`)
  return open
}

/** A source of `size` bytes in CHUNK chunks that records how far it ran ahead of the stream. */
function source(size: number, seed: number, ws: StreamSegmentWriteStream): { readable: Readable; ahead: () => number } {
  let produced = 0
  let maxAhead = 0
  const readable = new Readable({
    highWaterMark: CHUNK,
    read() {
      if (produced >= size) return void this.push(null)
      const b = Buffer.allocUnsafe(Math.min(CHUNK, size - produced))
      fillBlocks(b, produced, seed)
      produced += b.length
      maxAhead = Math.max(maxAhead, produced - ws.bytesWritten)
      this.push(b)
    },
  })
  return { readable, ahead: () => maxAhead }
}

/** Active handles by type (getActiveResourcesInfo), for what a stream left running. */
function resources(): Map<string, number> {
  const m = new Map<string, number>()
  for (const r of process.getActiveResourcesInfo()) m.set(r, (m.get(r) ?? 0) + 1)
  return m
}

describe('the write stream on S3 through the fault proxy', () => {
  let proxy: FaultProxy
  const proxied = useFaultProxy({ seed: faultSeed() }, (started) => {
    proxy = started
  })

  /** Every request carrying a segment object's bytes refused with a 503 (the open's reads pass). */
  function refuseBodies(): void {
    const segmentBody = (r: RequestInfo) => isBody(r) && (DATA_PART.test(r.key) || PART0.test(r.key))
    for (let i = 0; i < 10_000; i++) proxy.inject('slowdown', segmentBody)
  }

  const proxiedStore = (prefix: string, options: Partial<S3StoreOptions> = {}) =>
    proxied(prefix, options, IDLE_TIMEOUT_MS)

  /** A container with a first checkpoint of 6 MiB (seed 1), written directly. */
  async function withCheckpoint(label: string): Promise<{ prefix: string; direct: S3Store; first: string }> {
    const prefix = uniquePrefix(label)
    const direct = await s3TestStore(prefix)
    const ws = createStreamSegmentWriteStream({ store: direct })
    const { readable } = source(6 * MiB, 1, ws)
    await pipeline(readable, ws)
    return { prefix, direct, first: shaOf(6 * MiB, 1) }
  }

  /**
   * Streams SIZE bytes (seed 2) through the proxy into a container holding a first
   * checkpoint, with `arm` injecting faults; checks what is published either way.
   */
  async function streamThrough(
    label: string,
    settings: Partial<Settings>,
    arm: () => void,
    storeOptions: Partial<S3StoreOptions> = {},
  ): Promise<{ err: unknown; ws: StreamSegmentWriteStream; direct: S3Store }> {
    const { prefix, direct, first } = await withCheckpoint(label)
    const store = await proxiedStore(prefix, storeOptions)
    const ws = createStreamSegmentWriteStream({ store, ...settings })
    const { readable, ahead } = source(SIZE, 2, ws)
    proxy.resetStats()
    arm()
    const err = await within(
      pipeline(readable, ws).then(
        () => undefined,
        (e: unknown) => e ?? new Error('rejected without an error'),
      ),
      120_000,
      `${label}: the pipeline`,
    )
    proxy.clearInjected()
    proxy.setRate(0)
    const now = await publishedState(direct)
    assert.deepEqual(now.problems, [], `${label}: verify of checkpoint ${now.cno}`)
    if (err === undefined) {
      assert.equal(now.cno, ws.flushTiming?.cno, `${label}: the checkpoint the stream reported is published`)
      assert.equal(now.size, SIZE, `${label}: size published`)
      assert.equal(now.sha, shaOf(SIZE, 2), `${label}: the bytes published are not the input`)
    } else {
      assert.ok(StreamSegmentError.is(err), `${label}: not a StreamSegmentError: ${(err as Error)?.stack ?? err}`)
      assert.equal(now.cno, 1, `${label}: a checkpoint was published though the stream failed (${err.message})`)
      assert.equal(now.sha, first, `${label}: the first checkpoint's bytes changed`)
    }
    const file = ws.file as SegmentFile
    assert.ok(
      file.peakDirtyBytes <= LIMIT + CHUNK,
      `${label}: the dirty tier held ${file.peakDirtyBytes} bytes, over the limit ${LIMIT} and a chunk`,
    )
    assert.equal(fileState(file).tier.usedBytes, 0, `${label}: slots still held once the stream closed`)
    assert.ok(ahead() <= 6 * CHUNK, `${label}: the source ran ${ahead()} bytes ahead of the stream`)
    return { err, ws, direct }
  }

  const aheadFaults: Array<[string, FaultKind, number, number]> = [
    // name, kind, how many times on one request (and its retries), requests of the kind skipped first
    ['a burst of 503s (within the retries)', 'slowdown', 4, 1],
    ['a burst of 503s past the retries', 'slowdown', 7, 1],
    ['a reset before the body is taken', 'reset', 1, 2],
    ['an answer lost after the part was stored', 'lost', 1, 2],
    [`a stall past idleTimeoutMs (${IDLE_TIMEOUT_MS} ms)`, 'stall', 1, 1],
  ]
  for (const [mode, settings] of Object.entries(MODES)) {
    for (const [name, kind, times, skip] of aheadFaults) {
      test(`objects sent ahead ${mode === 'pieces' ? 'in pieces' : 'whole'}: ${name}: published whole, the tier within its limit`, async () => {
        const match = sticky(sentAheadBody, skip)
        const { err, direct } = await streamThrough(`ahead-${mode}-${kind}`, settings, () => {
          for (let i = 0; i < times; i++) proxy.inject(kind, match)
        })
        const stats = proxy.stats()
        assert.equal(
          stats.faults[kind],
          times,
          `${kind} injected ${stats.faults[kind]} times: ${JSON.stringify(stats.faultsByOp)}`,
        )
        assert.equal(err, undefined, `the stream failed: ${(err as Error)?.message}`)
        assert.deepEqual(await openUploads(direct), [], 'multipart uploads left open')
      })
    }
  }

  const endFaults: Array<[string, (r: RequestInfo) => boolean, FaultKind, number]> = [
    ["part 0's body: a burst of 503s", (r) => isBody(r) && PART0.test(r.key), 'slowdown', 3],
    ["part 0's body: an answer lost after it was stored", (r) => isBody(r) && PART0.test(r.key), 'lost', 1],
    ["part 0's body: a stall", (r) => isBody(r) && PART0.test(r.key), 'stall', 1],
    ['the inode write: a burst of 503s', (r) => r.op === 'PutObject' && r.key.endsWith('/inode'), 'slowdown', 3],
    ['the inode write: a reset', (r) => r.op === 'PutObject' && r.key.endsWith('/inode'), 'reset', 1],
    [
      'the inode write: an answer lost after it landed',
      (r) => r.op === 'PutObject' && r.key.endsWith('/inode'),
      'lost',
      1,
    ],
    ['the inode write: a stall', (r) => r.op === 'PutObject' && r.key.endsWith('/inode'), 'stall', 1],
  ]
  for (const [name, pred, kind, times] of endFaults) {
    test(`at the end, ${name}: published once, whole`, async () => {
      const match = sticky(pred)
      const { err, ws, direct } = await streamThrough(`end-${kind}`, MODES.pieces as Partial<Settings>, () => {
        for (let i = 0; i < times; i++) proxy.inject(kind, match)
      })
      assert.equal(proxy.stats().faults[kind], times, JSON.stringify(proxy.stats().faultsByOp))
      assert.equal(err, undefined, `the stream failed: ${(err as Error)?.message}`)
      assert.equal(ws.flushTiming?.cno, 2, 'published as the next checkpoint')
      assert.deepEqual(await openUploads(direct), [], 'multipart uploads left open')
    })
  }

  test('every body request refused (503) until the deadline: the stream fails, the first checkpoint stays whole', async () => {
    const { err } = await streamThrough('all-refused', MODES.pieces as Partial<Settings>, () => refuseBodies(), {
      deadlineMs: 3000,
      retryBaseMs: 10,
      retryMaxMs: 200,
      maxRetries: 10_000,
    })
    assert.ok(StreamSegmentError.is(err), `the stream did not fail: ${err}`)
    assert.ok(['ERR_TIMEOUT', 'ERR_STORE'].includes(err.code), `${err.code}: ${err.message}`)
  })

  /**
   * Writes SIZE bytes (seed 2) into a SegmentFile in CHUNK writes from `from`, objects sent
   * ahead as they go; resolves to where it stopped. A write that fails (at the dirty
   * limit, waiting for a partial segment that failed) has taken its bytes in all the same.
   */
  async function writeFrom(f: SegmentFile, from: number): Promise<{ to: number; err?: unknown }> {
    for (let at = from; at < SIZE; at += CHUNK) {
      const b = Buffer.allocUnsafe(CHUNK)
      fillBlocks(b, at, 2)
      try {
        await f.write(at, b)
      } catch (err) {
        return { to: at + CHUNK, err }
      }
    }
    return { to: SIZE }
  }

  const failedFlushes: Array<[string, () => void, Partial<S3StoreOptions>]> = [
    [
      "its objects' bodies refused until the deadline",
      () => refuseBodies(),
      { deadlineMs: 3000, retryBaseMs: 10, retryMaxMs: 200, maxRetries: 10_000 },
    ],
    [
      'the inode write landed, every answer to it lost (past the retries)',
      () => {
        for (let i = 0; i < 20; i++) proxy.inject('lost', (r) => r.op === 'PutObject' && r.key.endsWith('/inode'))
      },
      { retryBaseMs: 10, retryMaxMs: 50 },
    ],
  ]
  for (const [name, arm, options] of failedFlushes) {
    test(`a flush that failed (${name}), then a second flush of the same handle: published whole`, async () => {
      const { prefix, direct, first } = await withCheckpoint('second-flush')
      const store = await proxiedStore(prefix, options)
      const f = await SegmentFile.open(store, MODES.pieces)
      await f.truncate(0)
      arm()
      const written = await writeFrom(f, 0)
      const failure =
        written.err ??
        (await f.flush().then(
          () => undefined,
          (err: unknown) => err,
        ))
      proxy.clearInjected()
      assert.ok(StreamSegmentError.is(failure), `the first flush did not fail: ${failure}`)
      const between = await publishedState(direct)
      assert.deepEqual(between.problems, [])
      // Not published, the first checkpoint is as it was; published (the lost inode write
      // landed), the checkpoint holds the input.
      if (between.cno === 1) assert.equal(between.sha, first)
      else assert.equal(between.sha, shaOf(SIZE, 2))
      // The rest of the bytes, if a write failed, then the second flush.
      assert.equal((await writeFrom(f, written.to)).err, undefined)
      const t = await f.flush()
      await f.close()
      const now = await publishedState(direct)
      assert.deepEqual(now.problems, [], `verify of checkpoint ${now.cno}`)
      assert.equal(now.cno, t.cno)
      assert.equal(now.size, SIZE)
      assert.equal(now.sha, shaOf(SIZE, 2), 'the second flush published other bytes')
      assert.deepEqual(await openUploads(direct), [], 'multipart uploads left open')
    })
  }

  for (const how of ['the AbortSignal', 'destroy()'] as const) {
    test(`${how} while sent-ahead requests are between retries: ends at once, nothing published, no timer left`, async () => {
      const { prefix, direct, first } = await withCheckpoint('abort-retries')
      // Retries an hour apart: a stream that waited for one would hang.
      const store = await proxiedStore(prefix, { retryBaseMs: 3_600_000, retryMaxMs: 3_600_000, deadlineMs: 0 })
      const ac = new AbortController()
      const ws = createStreamSegmentWriteStream({ store, signal: ac.signal, ...MODES.pieces })
      const { readable } = source(SIZE, 2, ws)
      const before = resources()
      refuseBodies()
      let refused!: () => void
      const someRefused = new Promise<void>((resolve) => {
        refused = resolve
      })
      const poll = setInterval(() => {
        if (store.retries >= 2) refused()
      }, 20)
      const done = pipeline(readable, ws).then(
        () => undefined,
        (e: unknown) => e,
      )
      // A test that failed leaves no stream waiting an hour to retry.
      const cleanUp = () => {
        clearInterval(poll)
        ws.destroy()
        proxy.clearInjected()
      }
      await within(someRefused, 60_000, 'the first refusals').catch((e: unknown) => {
        cleanUp()
        throw e
      })
      clearInterval(poll)
      const stop = new Error('stop')
      if (how === 'destroy()') ws.destroy(stop)
      else ac.abort(stop)
      const err = await within(done, 10_000, `the pipeline after ${how}`).finally(cleanUp)
      assert.ok(err !== undefined, 'the pipeline resolved')
      if (how === 'destroy()') assert.equal(err, stop)
      else assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), `${err}`)
      await within(
        new Promise<void>((resolve) => (ws.closed ? resolve() : ws.once('close', () => resolve()))),
        10_000,
        'close',
      )
      const now = await publishedState(direct)
      assert.equal(now.cno, 1, 'a checkpoint was published')
      assert.equal(now.sha, first)
      assert.deepEqual(now.problems, [])
      // Let what was cut settle: no timer of a retry, nothing more than before the stream.
      await new Promise((r) => setTimeout(r, 100))
      const left = resources()
      assert.ok(
        (left.get('Timeout') ?? 0) <= (before.get('Timeout') ?? 0),
        `timers left: ${JSON.stringify([...left])} against ${JSON.stringify([...before])}`,
      )
    })
  }
})
