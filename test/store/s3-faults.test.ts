/**
 * The write and read paths on radosgw through a fault-injecting proxy
 * (test/helpers/fault-proxy.ts): throttling, server errors, resets before and after the
 * request landed, bodies cut or truncated, short stalls, and bytes flipped in GET bodies.
 *
 * - At FAULT_RATE (default 5 %) of every request, a file of FAULT_MIB (default 256; the
 *   headline figure is 1024) is written in several flushes (objects sent ahead in
 *   multipart pieces) and by a write stream; every checkpoint reads back exactly through
 *   the proxy and directly, no wrong byte is ever returned, and no multipart upload is
 *   left open. The counts of requests, faults by kind, errors that reached the caller and
 *   retries are printed.
 * - With every request refused (503), a flush and a read fail within their deadline and
 *   the published checkpoint stays as it was.
 * - An answer lost after its request landed, on each kind of write request: the flush
 *   publishes once, and no multipart upload is left open.
 * - FlushTiming.retries and ReadTiming.retries count the retries of their own call.
 * - A GetObject body cut (or truncated) mid-answer is retried to the right bytes.
 *
 * FAULT_KINDS (comma-separated) chooses the kinds injected at FAULT_RATE (default all but
 * the long stalls, `stall` and `stallBody`, which s3-timeouts.test.ts injects one by one);
 * FAULT_IDLE_TIMEOUT_MS the clients' idle timeout (default 2000).
 *
 * FAULT_SEED replays a run's choices (requests arrive in varying order, so only roughly).
 * Fails, never skips, without the S3 server (s3-env).
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { describe, test } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { S3Store, S3StoreOptions } from '../../lib/store/s3.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import {
  FAULT_KINDS,
  type FaultKind,
  type FaultProxy,
  type FaultStats,
  faultSeed,
  NO_STALL_KINDS,
  rangeLength,
  useFaultProxy,
} from '../helpers/fault-proxy.js'
import { fillBlocks } from '../helpers/pattern.js'
import { s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024
const BLOCK = 4096

function envNumber(name: string, fallback: number): number {
  const v = process.env[name]
  if (v === undefined || v === '') return fallback
  const n = Number(v)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}=${v} is not a non-negative number`)
  return n
}

const FAULT_MIB = envNumber('FAULT_MIB', 256)
const FAULT_RATE = envNumber('FAULT_RATE', 0.05)
/** The kinds injected at FAULT_RATE (comma-separated; default every kind but the long stalls). */
const FAULT_KINDS_USED: readonly FaultKind[] = (() => {
  const v = process.env.FAULT_KINDS
  if (v === undefined || v === '') return NO_STALL_KINDS
  const kinds = v.split(',').map((k) => k.trim())
  for (const k of kinds)
    if (!(FAULT_KINDS as readonly string[]).includes(k)) throw new Error(`FAULT_KINDS: unknown kind ${k}`)
  return kinds as FaultKind[]
})()
/** The idle timeout of the clients through the proxy: below a long stall, above a short one (`delay`). */
const IDLE_TIMEOUT_MS = envNumber('FAULT_IDLE_TIMEOUT_MS', 2000)
/** Tries a caller makes of one call before the test gives up. */
const CALLER_TRIES = 5

/** Objects sent ahead as multipart uploads of 5 MiB pieces, within the streaming profile's limits. */
const SETTINGS: Partial<Settings> = {
  streamSegmentBytes: 16 * MiB,
  segmentMpuChunkSize: 5 * MiB,
  segmentMpuMaxConcurrency: 4,
  dataCacheDirtyMaxBytesThreshold: 96 * MiB,
  segmentBufferSize: 96 * MiB,
}

/** One write of patterned blocks: the bytes of [offset, offset + length) are fillBlocks(…, seed). */
interface Write {
  offset: number
  length: number
  seed: number
}

/** What a checkpoint holds: the writes that made it, in order (later ones win). */
interface Checkpoint {
  cno: number
  size: number
  writes: Write[]
  sha: string
}

/** The bytes [pos, pos + len) of a file made of `writes` (zeros where none wrote). */
function expectedBytes(writes: readonly Write[], pos: number, len: number): Buffer {
  const a = Math.floor(pos / BLOCK) * BLOCK
  const b = Math.ceil((pos + len) / BLOCK) * BLOCK
  const out = Buffer.alloc(b - a)
  for (const w of writes) {
    const s = Math.max(a, w.offset)
    const e = Math.min(b, w.offset + w.length)
    if (s < e) fillBlocks(out.subarray(s - a, e - a), s, w.seed)
  }
  return out.subarray(pos - a, pos - a + len)
}

function expectedSha(writes: readonly Write[], size: number): string {
  const h = createHash('sha256')
  for (let at = 0; at < size; at += 16 * MiB) h.update(expectedBytes(writes, at, Math.min(16 * MiB, size - at)))
  return h.digest('hex')
}

function sizeOf(writes: readonly Write[]): number {
  return Math.max(0, ...writes.map((w) => w.offset + w.length))
}

/** A failure that reached the caller (the library's retries could not hide it). */
interface Surfaced {
  phase: string
  code: string
  message: string
}

/** Runs `fn` as a caller would: again after a StreamSegmentError that may pass, at most CALLER_TRIES times. */
async function persist<T>(surfaced: Surfaced[], phase: string, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn()
    } catch (err) {
      assert.ok(StreamSegmentError.is(err), `${phase}: not a StreamSegmentError: ${(err as Error)?.stack ?? err}`)
      surfaced.push({ phase, code: err.code, message: err.message })
      // A block that fails its CRC after a byte was damaged on the way is ERR_CORRUPT (not
      // retryable by its code): reading it again is what a caller does about that.
      if (attempt >= CALLER_TRIES || !(err.retryable || err.code === 'ERR_CORRUPT')) throw err
    }
  }
}

/**
 * Reads checkpoint `cp` whole through a read stream, resuming after a failure where it
 * stopped; every chunk is compared with what the checkpoint holds as it arrives (a wrong
 * byte is never returned), and the SHA-256 of the whole with the reference.
 */
async function readBack(
  store: ObjectStore,
  cp: Checkpoint,
  surfaced: Surfaced[],
  label: string,
  byCno = true,
): Promise<{ retries: number; ms: number }> {
  const t0 = performance.now()
  const hash = createHash('sha256')
  let pos = 0
  let retries = 0
  for (let attempt = 1; ; attempt++) {
    const rs = createStreamSegmentReadStream({ store, start: pos, ...(byCno && { cno: cp.cno }) })
    try {
      for await (const chunk of rs) {
        const c = chunk as Uint8Array
        const want = expectedBytes(cp.writes, pos, c.byteLength)
        if (!want.equals(c)) {
          let at = 0
          while (at < c.byteLength && c[at] === want[at]) at++
          assert.fail(`${label}: checkpoint ${cp.cno}: wrong byte returned at ${pos + at}`)
        }
        hash.update(c)
        pos += c.byteLength
      }
      assert.equal(rs.size, cp.size, `${label}: checkpoint ${cp.cno} size`)
      retries += rs.timing?.retries ?? 0
      break
    } catch (err) {
      retries += rs.timing?.retries ?? 0
      if (err instanceof assert.AssertionError) throw err
      assert.ok(StreamSegmentError.is(err), `${label}: not a StreamSegmentError: ${(err as Error)?.stack ?? err}`)
      surfaced.push({ phase: `${label} read`, code: err.code, message: err.message })
      if (attempt >= CALLER_TRIES || !(err.retryable || err.code === 'ERR_CORRUPT')) throw err
    }
  }
  assert.equal(pos, cp.size, `${label}: checkpoint ${cp.cno}: bytes read`)
  assert.equal(hash.digest('hex'), cp.sha, `${label}: checkpoint ${cp.cno}: SHA-256 differs from the reference`)
  return { retries, ms: performance.now() - t0 }
}

async function openUploads(store: S3Store): Promise<string[]> {
  const open: string[] = []
  for await (const u of store.listMultipart('')) open.push(`${u.key} ${u.uploadId}`)
  return open
}

function summary(s: FaultStats): string {
  const kinds = Object.entries(s.faults)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ')
  return `${s.requests} requests, ${s.faulted} faults (${kinds || 'none'}; ${s.landed} after the request landed, ${s.flipSkipped} flips with nothing to flip, ${s.upstreamErrors} not forwarded)`
}

function byCode(surfaced: readonly Surfaced[]): string {
  const counts = new Map<string, number>()
  for (const s of surfaced) counts.set(`${s.phase} ${s.code}`, (counts.get(`${s.phase} ${s.code}`) ?? 0) + 1)
  return [...counts].map(([k, n]) => `${k} ×${n}`).join(', ') || 'none'
}

describe('S3 through a fault-injecting proxy', () => {
  let proxy: FaultProxy
  const seed = faultSeed()
  const proxied = useFaultProxy({ seed }, (started) => {
    proxy = started
  })

  /** An S3Store on the test bucket whose requests go through the proxy. */
  const proxiedStore = (prefix: string, options: Partial<S3StoreOptions> = {}, idleTimeoutMs = IDLE_TIMEOUT_MS) =>
    proxied(prefix, options, idleTimeoutMs)

  test(`${FAULT_MIB} MiB written in 4 flushes and a write stream, and read back, at a ${FAULT_RATE * 100} % fault rate`, async () => {
    const prefix = uniquePrefix('faults')
    const direct = await s3TestStore(prefix)
    // Writes and reads on stores of their own, so that each store's retries are its own.
    const store = await proxiedStore(prefix)
    const readStore = await proxiedStore(prefix)
    const surfaced: Surfaced[] = []
    const writeSurfaced: Surfaced[] = []
    const flushRetries: number[] = []
    const readRetries: number[] = []
    proxy.resetStats()
    proxy.setRate(FAULT_RATE, FAULT_KINDS_USED)
    const t0 = performance.now()

    // Four rounds, each appending a quarter and (after the first) overwriting 3 MiB
    // written before, each published by a flush.
    const total = Math.max(4, Math.round(FAULT_MIB / 4)) * 4 * MiB
    const quarter = total / 4
    const writes: Write[] = []
    const checkpoints: Checkpoint[] = []
    const f = await persist(writeSurfaced, 'create', () => SegmentFile.create(store, SETTINGS))
    let rnd = seed
    const next = (n: number) => {
      rnd = (Math.imul(rnd, 1103515245) + 12345) >>> 0
      return rnd % n
    }
    for (let round = 0; round < 4; round++) {
      const start = round * quarter
      for (let at = start; at < start + quarter; at += MiB) {
        const b = Buffer.allocUnsafe(MiB)
        fillBlocks(b, at, round + 1)
        await persist(writeSurfaced, 'write', () => f.write(at, b))
      }
      writes.push({ offset: start, length: quarter, seed: round + 1 })
      if (round > 0) {
        const length = 3 * MiB
        const offset = next((start - length) / BLOCK) * BLOCK
        const b = Buffer.allocUnsafe(length)
        fillBlocks(b, offset, 100 + round)
        await persist(writeSurfaced, 'write', () => f.write(offset, b))
        writes.push({ offset, length, seed: 100 + round })
      }
      const timing = await persist(writeSurfaced, 'flush', () => f.flush())
      flushRetries.push(timing.retries)
      const cp = {
        cno: timing.cno,
        size: sizeOf(writes),
        writes: [...writes],
        sha: expectedSha(writes, sizeOf(writes)),
      }
      assert.equal(f.size, cp.size)
      checkpoints.push(cp)
      // The checkpoint just published, read back through the proxy (the latest, not by number).
      const r = await readBack(readStore, cp, surfaced, 'proxy', false)
      readRetries.push(r.retries)
    }
    await f.close()
    assert.deepEqual(
      checkpoints.map((c) => c.cno),
      checkpoints.map((_, i) => (checkpoints[0] as Checkpoint).cno + i),
      'one checkpoint per flush',
    )
    const writeMs = performance.now() - t0

    // Random reads through a SegmentFile, through the proxy.
    const last = checkpoints.at(-1) as Checkpoint
    const retries0 = readStore.retries
    const reader = await persist(surfaced, 'open', () => SegmentFile.open(readStore, { readOnly: true }))
    assert.equal(reader.cno, last.cno)
    for (let i = 0; i < 24; i++) {
      const length = 1 + next(4 * MiB)
      const offset = next(last.size - length + 1)
      const got = await persist(surfaced, 'SegmentFile.read', () => reader.read(offset, length))
      assert.ok(
        expectedBytes(last.writes, offset, length).equals(got),
        `SegmentFile.read(${offset}, ${length}) differs`,
      )
    }
    await reader.close()
    const fileReadRetries = readStore.retries - retries0

    // A write stream replaces the content with a quarter of new bytes (its own checkpoint).
    const wsWrites: Write[] = [{ offset: 0, length: quarter, seed: 50 }]
    const wsTiming = await persist(writeSurfaced, 'write stream', async () => {
      const ws = createStreamSegmentWriteStream({ store, ...SETTINGS })
      const source = Readable.from(
        (function* () {
          for (let at = 0; at < quarter; at += MiB) {
            const b = Buffer.allocUnsafe(MiB)
            fillBlocks(b, at, 50)
            yield b
          }
        })(),
      )
      await pipeline(source, ws)
      assert.ok(ws.flushTiming !== undefined)
      return ws.flushTiming
    })
    flushRetries.push(wsTiming.retries)
    const wsCp = { cno: wsTiming.cno, size: quarter, writes: wsWrites, sha: expectedSha(wsWrites, quarter) }
    assert.ok(wsCp.cno > last.cno)
    readRetries.push((await readBack(readStore, wsCp, surfaced, 'proxy', false)).retries)
    const faultStats = proxy.stats()
    proxy.setRate(0)
    const faultMs = performance.now() - t0

    // Every checkpoint again, by number, without the proxy.
    const t1 = performance.now()
    for (const cp of [...checkpoints, wsCp]) await readBack(direct, cp, surfaced, 'direct')
    const directMs = performance.now() - t1
    const open = await openUploads(direct)

    const all = [...writeSurfaced, ...surfaced]
    console.log(
      `# faults: seed ${seed}, rate ${FAULT_RATE} of ${FAULT_KINDS_USED.join(' ')}, idle timeout ${IDLE_TIMEOUT_MS} ms, ${total / MiB} MiB in 4 flushes + ${quarter / MiB} MiB by a write stream: ` +
        summary(faultStats),
    )
    console.log(`# faults: requests by op ${JSON.stringify(faultStats.byOp)}`)
    console.log(`# faults: by op and kind ${JSON.stringify(faultStats.faultsByOp)}`)
    console.log(
      `# faults: errors that reached the caller: ${all.length} (${byCode(all)})${all.map((s) => `\n#   ${s.phase}: ${s.code}: ${s.message}`).join('')}`,
    )
    console.log(
      `# faults: FlushTiming.retries ${JSON.stringify(flushRetries)}, ReadTiming.retries ${JSON.stringify(readRetries)}, ` +
        `SegmentFile.read retries ${fileReadRetries}; store.retries: writes ${store.retries}, reads ${readStore.retries}`,
    )
    console.log(
      `# faults: write + read through the proxy ${(faultMs / 1000).toFixed(1)} s (writes ${(writeMs / 1000).toFixed(1)} s), direct reads ${(directMs / 1000).toFixed(1)} s`,
    )

    const lostCreates = Object.entries(faultStats.faultsByOp)
      .filter(([k]) => /^CreateMultipartUpload (lost|cut|truncate|stallBody)$/.test(k))
      .reduce((n, [, v]) => n + v, 0)
    assert.deepEqual(
      open,
      [],
      `multipart uploads left open under the prefix (${lostCreates} CreateMultipartUpload answers were lost after the upload was created)`,
    )
    assert.ok(faultStats.faulted > 0, 'no fault was injected')
    // Only a byte damaged on the way may reach a caller (as ERR_CORRUPT, never as bytes);
    // everything else the library's retries absorb.
    const unexpected = all.filter((s) => s.code !== 'ERR_CORRUPT')
    assert.deepEqual(unexpected, [], 'failures other than a damaged byte reached the caller')
    assert.ok(
      all.length <= faultStats.faults.flip,
      `${all.length} ERR_CORRUPT for ${faultStats.faults.flip} bytes flipped`,
    )
    const retried = flushRetries.reduce((a, b) => a + b, 0) + readRetries.reduce((a, b) => a + b, 0) + fileReadRetries
    assert.ok(retried > 0, 'faults were injected but no retry was counted')
  })

  test('every request refused (503): a flush and a read fail within the deadline; the published checkpoint stays', async () => {
    const prefix = uniquePrefix('faults-all')
    const direct = await s3TestStore(prefix)
    const deadlineMs = 3000
    const store = await proxiedStore(prefix, { deadlineMs, retryBaseMs: 10, retryMaxMs: 200, maxRetries: 10_000 })
    const quick = await proxiedStore(prefix, { deadlineMs, retryBaseMs: 10, retryMaxMs: 50 })
    proxy.setRate(0)
    const small = { ...SETTINGS, streamSegmentBytes: 0 }
    const f = await SegmentFile.create(store, small)
    const first: Write[] = [{ offset: 0, length: 6 * MiB, seed: 7 }]
    const b1 = Buffer.allocUnsafe(6 * MiB)
    fillBlocks(b1, 0, 7)
    await f.write(0, b1)
    const t1 = await f.flush()
    const cp1: Checkpoint = { cno: t1.cno, size: 6 * MiB, writes: first, sha: expectedSha(first, 6 * MiB) }
    const b2 = Buffer.allocUnsafe(6 * MiB)
    fillBlocks(b2, 6 * MiB, 8)
    await f.write(6 * MiB, b2)
    const reader = await SegmentFile.open(store, { readOnly: true })

    proxy.resetStats()
    proxy.setRate(1, ['slowdown'])
    const timed = async (p: Promise<unknown>) => {
      const t0 = performance.now()
      try {
        await p
      } catch (err) {
        return { err, ms: performance.now() - t0 }
      }
      assert.fail('succeeded with every request refused')
    }
    const flushed = await timed(f.flush())
    const streamed = await timed(
      (async () => {
        for await (const _ of createStreamSegmentReadStream({ store })) {
          // nothing arrives
        }
      })(),
    )
    const read = await timed(reader.read(3 * MiB, 4096))
    const quickRead = await timed(quick.get('inode'))
    const stats = proxy.stats()
    proxy.setRate(0)
    const outcome = (name: string, x: { err: unknown; ms: number }) =>
      `${name}: ${(x.err as StreamSegmentError)?.code} after ${Math.round(x.ms)} ms`
    console.log(
      `# all refused (deadline ${deadlineMs} ms): ${outcome('flush', flushed)}, ${outcome('read stream', streamed)}, ` +
        `${outcome('SegmentFile.read', read)}, ${outcome('get with maxRetries 6', quickRead)}; ${summary(stats)}, store.retries ${store.retries}`,
    )
    for (const [name, x] of [
      ['flush', flushed],
      ['read stream', streamed],
      ['SegmentFile.read', read],
    ] as const) {
      assert.ok(StreamSegmentError.is(x.err), `${name}: not a StreamSegmentError: ${x.err}`)
      assert.ok(['ERR_STORE', 'ERR_TIMEOUT'].includes(x.err.code), `${name}: ${x.err.code}: ${x.err.message}`)
      assert.ok(
        x.ms <= deadlineMs * 1.2,
        `${name} failed after ${Math.round(x.ms)} ms, past the ${deadlineMs} ms deadline`,
      )
    }
    assert.equal(StreamSegmentError.is(flushed.err) && flushed.err.code, 'ERR_TIMEOUT')
    assert.ok(StreamSegmentError.is(quickRead.err, 'ERR_STORE'), `get with maxRetries 6: ${quickRead.err}`)
    assert.match((quickRead.err as Error).message, /SlowDown/)
    assert.ok(quickRead.ms < deadlineMs, `get with maxRetries 6 took ${Math.round(quickRead.ms)} ms`)
    assert.equal(stats.requests, stats.faults.slowdown, 'every request refused')

    // The checkpoint published before is intact, read directly; nothing newer was published.
    const latest = await SegmentFile.open(direct, { readOnly: true })
    assert.equal(latest.cno, cp1.cno)
    await latest.close()
    await readBack(direct, cp1, [], 'direct', false)
    // The handle stays usable: once the store answers, the next flush publishes both writes.
    const t2 = await f.flush()
    const both: Write[] = [...first, { offset: 6 * MiB, length: 6 * MiB, seed: 8 }]
    assert.ok(t2.cno > cp1.cno)
    await readBack(
      direct,
      { cno: t2.cno, size: 12 * MiB, writes: both, sha: expectedSha(both, 12 * MiB) },
      [],
      'direct',
    )
    await f.close()
    await reader.close()
    assert.deepEqual(await openUploads(direct), [], 'multipart uploads left open after the flush that failed')
  })

  test('an answer lost after the request landed, on each kind of write: published once, no upload left open', async () => {
    const failures: string[] = []
    const seen: string[] = []
    proxy.setRate(0)
    for (const op of ['PutObject', 'CreateMultipartUpload', 'UploadPart', 'CompleteMultipartUpload', 'HeadObject']) {
      const prefix = uniquePrefix(`faults-lost-${op}`)
      const direct = await s3TestStore(prefix)
      const store = await proxiedStore(prefix)
      proxy.resetStats()
      // Twice: a data object sent ahead, and the flush's own objects.
      proxy.inject('lost', (r) => r.op === op)
      proxy.inject('lost', (r) => r.op === op)
      const size = 40 * MiB
      const writes: Write[] = [{ offset: 0, length: size, seed: 11 }]
      try {
        const f = await SegmentFile.create(store, SETTINGS)
        for (let at = 0; at < size; at += MiB) {
          const b = Buffer.allocUnsafe(MiB)
          fillBlocks(b, at, 11)
          await f.write(at, b)
        }
        const timing = await f.flush()
        await f.close()
        await readBack(direct, { cno: timing.cno, size, writes, sha: expectedSha(writes, size) }, [], 'direct')
        const lost = proxy.stats().faults.lost
        const open = await openUploads(direct)
        seen.push(
          `${op}: ${lost} answers lost, cno ${timing.cno}, FlushTiming.retries ${timing.retries}, ${open.length} uploads open`,
        )
        if (lost !== 2) failures.push(`${op}: ${lost} answers lost`)
        if (timing.cno !== 1) failures.push(`${op}: published as checkpoint ${timing.cno}`)
        if (open.length > 0) failures.push(`${op}: uploads left open: ${open.join('; ')}`)
      } catch (err) {
        seen.push(`${op}: failed: ${(err as Error).message}`)
        failures.push(`${op}: ${(err as StreamSegmentError).code ?? ''}: ${(err as Error).message}`)
      }
    }
    console.log(`# answers lost after landing:\n#   ${seen.join('\n#   ')}`)
    assert.deepEqual(failures, [])
  })

  test('FlushTiming.retries and ReadTiming.retries count their own retries', async () => {
    const prefix = uniquePrefix('faults-count')
    await s3TestStore(prefix)
    const store = await proxiedStore(prefix)
    proxy.setRate(0)
    // The store retried before the file was opened: not this file's retries.
    proxy.inject('slowdown', (r) => r.op === 'HeadObject')
    assert.equal(await store.head('nothing'), undefined)
    assert.equal(store.retries, 1)
    const f = await SegmentFile.create(store, SETTINGS)
    const b = Buffer.allocUnsafe(MiB)
    fillBlocks(b, 0, 12)
    await f.write(0, b)
    const t1 = await f.flush()
    await f.write(0, b)
    proxy.inject('internal', (r) => r.op === 'PutObject')
    proxy.inject('reset', (r) => r.op === 'PutObject')
    const t2 = await f.flush()
    await f.close()
    const rs = createStreamSegmentReadStream({ store })
    proxy.inject('cut', (r) => r.op === 'GetObject' && r.range !== undefined && (rangeLength(r) ?? 0) >= MiB)
    for await (const _ of rs) {
      // drained
    }
    const fresh = createStreamSegmentReadStream({ store })
    for await (const _ of fresh) {
      // drained
    }
    console.log(
      `# retries counted: store ${store.retries}, FlushTiming ${t1.retries} then ${t2.retries}, ReadTiming ${rs.timing?.retries} then ${fresh.timing?.retries}`,
    )
    assert.equal(t2.retries, 2, 'the second flush retried twice')
    assert.equal(rs.timing?.retries, 1, 'ReadTiming.retries')
    assert.equal(fresh.timing?.retries, 0, 'ReadTiming.retries of a read that retried nothing')
    assert.equal(t1.retries, 0, 'FlushTiming.retries of a flush that retried nothing (the store had retried before)')
  })

  test('a GetObject body cut or truncated mid-answer is retried to the right bytes', async () => {
    const prefix = uniquePrefix('faults-cut')
    const direct = await s3TestStore(prefix)
    const size = 24 * MiB
    const writes: Write[] = [{ offset: 0, length: size, seed: 9 }]
    const f = await SegmentFile.create(direct, SETTINGS)
    for (let at = 0; at < size; at += MiB) {
      const b = Buffer.allocUnsafe(MiB)
      fillBlocks(b, at, 9)
      await f.write(at, b)
    }
    const { cno } = await f.flush()
    await f.close()
    const cp: Checkpoint = { cno, size, writes, sha: expectedSha(writes, size) }
    proxy.setRate(0)
    const bigGet = (r: { op: string; range: string | undefined }) =>
      r.op === 'GetObject' && (rangeLength(r as Parameters<typeof rangeLength>[0]) ?? 0) >= MiB
    for (const kind of ['cut', 'truncate'] as const) {
      // A data GET of a read stream.
      const store = await proxiedStore(prefix)
      proxy.resetStats()
      proxy.inject(kind, bigGet)
      const surfaced: Surfaced[] = []
      const { retries } = await readBack(store, cp, surfaced, `${kind} stream`)
      assert.deepEqual(surfaced, [])
      assert.equal(proxy.stats().faults[kind], 1, `the ${kind} was not injected`)
      assert.equal(retries, 1, 'ReadTiming.retries')
      // A whole object by S3Store.get.
      let key = ''
      let largest = 0
      for await (const e of direct.list('')) if (e.size > largest) [key, largest] = [e.key, e.size]
      assert.ok(largest > MiB, 'a data object')
      const want = Buffer.from(await direct.get(key))
      proxy.resetStats()
      proxy.inject(kind, (r) => r.op === 'GetObject' && r.key.endsWith(key))
      const before = store.retries
      const got = await store.get(key)
      assert.ok(want.equals(got), `${kind}: S3Store.get returned other bytes`)
      assert.equal(proxy.stats().faults[kind], 1)
      assert.equal(store.retries - before, 1, 'store.retries')
    }
  })
})
