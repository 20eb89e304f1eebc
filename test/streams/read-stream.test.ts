/**
 * createStreamSegmentReadStream: ranges (end inclusive), older checkpoints, backpressure
 * within the read-ahead bound, abort and destroy while GETs hang, errors as
 * StreamSegmentErrors, options checked before any request.
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { pieceStats } from '../../lib/util/piece-pool.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import { buildContainer, copyStore, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

/** Resolves once `store` holds a hung call (polled; `within` bounds the wait). */
async function hungOnce(store: FailingStore): Promise<void> {
  while (store.calls.every((c) => c.outcome !== 'hung')) await new Promise((r) => setTimeout(r, 5))
}

/** Resolves when `rs` has closed. */
const closed = (rs: { once(event: 'close', f: () => void): unknown }) =>
  new Promise<void>((r) => rs.once('close', () => r()))

const KiB = 1024
const MiB = 1024 * KiB

describe('createStreamSegmentReadStream', () => {
  const small = new MemoryStore()
  let refs: Map<number, Buffer>
  const big = new MemoryStore()
  const bigRef = pattern(0, 24 * MiB + 1000, 9)
  before(async () => {
    refs = await buildContainer(small)
    const f = await SegmentFile.create(big, { dataCacheDirtyMaxBytesThreshold: 4 * MiB })
    for (let at = 0; at < bigRef.length; at += MiB) await f.write(at, bigRef.subarray(at, at + MiB))
    assert.ok((await f.flush()).objects >= 5)
  })

  it('reads every checkpoint whole, and ranges with an inclusive end, clipped to the file', async () => {
    for (const [cno, ref] of refs) {
      assert.ok((await drain(createStreamSegmentReadStream({ store: small, cno }))).equals(ref), `checkpoint ${cno}`)
    }
    const latest = refs.get(Math.max(...refs.keys())) as Buffer
    const cases: Array<[number | undefined, number | undefined]> = [
      [0, 0],
      [4095, 4096],
      [1000, 300_000],
      [300 * KiB, undefined],
      [undefined, 12_345],
      [latest.length - 1, latest.length + 100],
      [latest.length, undefined],
      [latest.length + 5, latest.length + 10],
      // fs.createReadStream's own default end: to the end of the file
      [0, Number.POSITIVE_INFINITY],
      [latest.length - 10, Number.POSITIVE_INFINITY],
    ]
    for (const [start, end] of cases) {
      const got = await drain(createStreamSegmentReadStream({ store: small, start, end, readGetMaxBytes: 8 * KiB }))
      const s = Math.min(start ?? 0, latest.length)
      const e = Math.max(s, Math.min(end === undefined ? latest.length : end + 1, latest.length))
      assert.ok(got.equals(latest.subarray(s, e)), `range ${start}-${end}`)
    }
  })

  it('a stream closed keeps its timing, but not the summaries its reader cached', async () => {
    const rs = createStreamSegmentReadStream({ store: big })
    const closed = new Promise<void>((resolve) => rs.once('close', () => resolve()))
    assert.ok((await drain(rs)).equals(bigRef))
    await closed
    const reader = (rs as unknown as { reader: { objects: { objects: Map<string, unknown> } } }).reader
    assert.equal(reader.objects.objects.size, 0)
    assert.ok((rs.timing?.requests.data ?? 0) > 0, 'the timing is still told')
  })

  it('works in a node pipeline and reports its timing', async () => {
    const rs = createStreamSegmentReadStream({ url: 'mem://', store: undefined, start: 0 } as never)
    await rejectsCode(drain(rs), 'ERR_NOT_FOUND', /no container/)
    const chunks: Buffer[] = []
    const rs2 = createStreamSegmentReadStream({ store: big })
    await pipeline(
      rs2,
      new Writable({
        write(c, _e, cb) {
          chunks.push(c)
          cb()
        },
      }),
    )
    assert.ok(Buffer.concat(chunks).equals(bigRef))
    assert.equal(rs2.bytesRead, bigRef.length)
    assert.equal(rs2.timing?.bytes.data, Math.ceil(bigRef.length / 4096) * 4096)
  })

  it('backpressure: a paused consumer holds the read-ahead at readAheadBytes', async () => {
    const store = new ThrottledStore(big, { latencyMs: 1, bandwidth: Number.POSITIVE_INFINITY })
    const rs = createStreamSegmentReadStream({
      store,
      readGetMaxBytes: MiB,
      readAheadBytes: 4 * MiB,
      highWaterMark: 256 * KiB,
    })
    const it = rs[Symbol.asyncIterator]()
    let consumed = 0
    for (let i = 0; i < 3; i++) consumed += ((await it.next()).value as Uint8Array).byteLength
    await new Promise((r) => setTimeout(r, 200))
    const fetched = rs.timing?.bytes.data ?? 0
    assert.ok(
      fetched - consumed <= 4 * MiB + 2 * MiB,
      `${(fetched - consumed) / MiB} MiB fetched ahead of the consumer, bound 4 MiB + a GET + the buffer`,
    )
    assert.ok(fetched - consumed >= 2 * MiB, 'fetches ahead of the consumer')
    let rest = 0
    for (;;) {
      const r = await it.next()
      if (r.done) break
      rest += (r.value as Uint8Array).byteLength
    }
    assert.equal(consumed + rest, bigRef.length)
  })

  it('a stream left early gives the pieces it fetched ahead back to be read into again', async () => {
    // The directory store reads GETs into pooled pieces (util/piece-pool.ts): those of the
    // runs queued ahead of the consumer, and of the one being handed over, must go back
    // when a consumer breaks out, not be left to the collector, or every stream ended early
    // (a client gone mid-download) takes its read-ahead out of the pool.
    const dir = await mkdtemp(join(tmpdir(), 'ss-read-stream-'))
    try {
      const store = new DirectoryStore(dir)
      await copyStore(big, store)
      await drain(createStreamSegmentReadStream({ store })) // fills the pool
      const before = pieceStats().keptBytes
      const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: 2 * MiB, readAheadBytes: 16 * MiB })
      const gone = closed(rs)
      for await (const chunk of rs) {
        // Once the read-ahead is out: 1 MiB of the first window, then the runs after it.
        if ((rs.timing?.bytes.data ?? 0) >= 12 * MiB && (chunk as Uint8Array).byteLength > 0) break
        await new Promise((r) => setTimeout(r, 1))
      }
      await within(gone, 2000, 'close')
      // GETs still in flight give theirs back when they come.
      const deadline = Date.now() + 2000
      while (pieceStats().keptBytes < before - 2 * MiB && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10))
      const lost = before - pieceStats().keptBytes
      assert.ok(
        lost <= 2 * MiB,
        `${lost / MiB} MiB of pieces not given back (at most a GET's lost to an aborted summary read)`,
      )
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('the AbortSignal aborts GETs that hang: ERR_ABORTED, promptly', async () => {
    const store = new FailingStore(big, [{ ops: ['get'], key: /^\d{10}\.\d+$/, mode: 'hang' }])
    const ac = new AbortController()
    const rs = createStreamSegmentReadStream({ store, signal: ac.signal })
    setTimeout(() => ac.abort(new Error('stop')), 50)
    await within(rejectsCode(drain(rs), 'ERR_ABORTED'), 2000, 'abort')
    assert.ok(store.count('get', 'hung') >= 1)
  })

  it('a stream stopped while GETs that do not hear the abort are out gives their pieces back when they answer', async () => {
    // A custom store may neither hear a request's signal nor refuse a request once it has
    // fired: its late answers, and GETs the stream starts after the stop, must not leave
    // pool pieces in a queue nobody empties.
    class DeafDirectory extends DirectoryStore {
      /** GETs not answered yet, and when the last one was started. */
      out = 0
      lastStart = 0
      private async deaf<T>(call: () => Promise<T>): Promise<T> {
        this.out++
        this.lastStart = Date.now()
        try {
          await new Promise((r) => setTimeout(r, 20))
          return await call()
        } finally {
          this.out--
        }
      }
      override getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
        return this.deaf(() => super.getChunks(key, { ...options, signal: undefined }))
      }
      override get(key: string, options?: GetOptions): Promise<Uint8Array> {
        return this.deaf(() => super.get(key, { ...options, signal: undefined }))
      }
    }
    const dir = await mkdtemp(join(tmpdir(), 'ss-read-stream-'))
    try {
      const store = new DeafDirectory(dir)
      const f = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 4 * MiB })
      for (let at = 0; at < bigRef.length; at += MiB) await f.write(at, bigRef.subarray(at, at + MiB))
      await f.flush()
      await f.close()
      const out = pieceStats().out
      const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: MiB, readAheadBytes: 8 * MiB })
      const gone = closed(rs)
      const it = rs[Symbol.asyncIterator]()
      await it.next()
      await it.next()
      rs.destroy()
      await within(gone, 2000, 'close')
      // Settled: no GET out, none started for 200 ms (a GET started after the stop counts too).
      const deadline = Date.now() + 3000
      while ((store.out > 0 || Date.now() - store.lastStart < 200) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 10))
      }
      assert.equal(store.out, 0, 'every GET answered')
      await new Promise((r) => setImmediate(r))
      assert.equal(pieceStats().out - out, 0, 'pieces of GETs answered after the stop not given back')
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('destroy() mid-stream stops the reads and closes, with nothing left unhandled', async () => {
    const store = new ThrottledStore(big, { latencyMs: 20, bandwidth: 100 * MiB })
    const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: MiB })
    const it = rs[Symbol.asyncIterator]()
    await it.next()
    const closed = new Promise<void>((r) => rs.once('close', () => r()))
    rs.destroy()
    await within(closed, 2000, 'close')
    await new Promise((r) => setTimeout(r, 100))
  })

  it('the AbortSignal or destroy() while the checkpoint is opened ends the open at once', async () => {
    // The inode's GET hangs until its request is aborted, as a stalled link's would: nothing
    // but the open's own signal can end it, and streamx holds destroy() until the open ends.
    const stalled = () => new FailingStore(small, [{ ops: ['get', 'head'], key: /^inode$/, mode: 'hang' }])

    const bySignal = stalled()
    const ac = new AbortController()
    const rs = createStreamSegmentReadStream({ store: bySignal, signal: ac.signal })
    const rsClosed = closed(rs)
    const drained = rejectsCode(drain(rs), 'ERR_ABORTED', /read of .* aborted/)
    await within(hungOnce(bySignal), 2000, 'the open')
    ac.abort(new Error('stop'))
    await within(drained, 2000, 'abort during the open')
    await within(rsClosed, 2000, 'close')
    assert.equal(rs.file, undefined)
    assert.equal(bySignal.count('get', 'hung'), 1)

    const byDestroy = stalled()
    const rs2 = createStreamSegmentReadStream({ store: byDestroy })
    const gone = closed(rs2)
    const drained2 = drain(rs2).then(
      () => assert.fail('a destroyed stream ended'),
      (err) => err,
    )
    await within(hungOnce(byDestroy), 2000, 'the open')
    rs2.destroy()
    await within(gone, 2000, 'close after destroy() during the open')
    assert.ok((await within(drained2, 2000, 'the consumer')) instanceof Error)

    const byError = stalled()
    const rs3 = createStreamSegmentReadStream({ store: byError })
    const drained3 = rejectsCode(drain(rs3), 'ERR_STORE', /gone/)
    await within(hungOnce(byError), 2000, 'the open')
    rs3.destroy(StreamSegmentError.store('gone'))
    await within(drained3, 2000, 'destroy(err) during the open')
  })

  it('leaves no listener on a shared AbortSignal once its streams have closed', async () => {
    // A long-lived signal (a server's shutdown signal) given to many streams: a listener
    // left behind holds its stream, and 11 of them draw MaxListenersExceededWarning.
    const ac = new AbortController()
    const latest = refs.get(Math.max(...refs.keys())) as Buffer
    for (let i = 0; i < 12; i++) {
      const rs = createStreamSegmentReadStream({ store: small, signal: ac.signal, start: i * 1000, end: i * 1000 + 99 })
      const done = closed(rs)
      assert.ok((await drain(rs)).equals(latest.subarray(i * 1000, i * 1000 + 100)))
      await within(done, 2000, `stream ${i} closed`)
    }
    // Failed, destroyed mid-stream and destroyed before it opened.
    const failed = createStreamSegmentReadStream({ store: small, signal: ac.signal, cno: 99 })
    const failedClosed = closed(failed)
    await rejectsCode(drain(failed), 'ERR_NOT_FOUND')
    const mid = createStreamSegmentReadStream({ store: big, signal: ac.signal, readGetMaxBytes: MiB })
    const midClosed = closed(mid)
    await mid[Symbol.asyncIterator]().next()
    mid.destroy()
    const unopened = createStreamSegmentReadStream({ store: small, signal: ac.signal })
    const unopenedClosed = closed(unopened)
    unopened.destroy()
    await within(Promise.all([failedClosed, midClosed, unopenedClosed]), 2000, 'close')
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    // A stream still open keeps its listener, and the signal still ends it.
    const open = createStreamSegmentReadStream({ store: big, signal: ac.signal })
    await open[Symbol.asyncIterator]().next()
    assert.equal(getEventListeners(ac.signal, 'abort').length, 1)
    const openClosed = closed(open)
    ac.abort()
    await within(openClosed, 2000, 'close on abort')
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
  })

  it('a store error or corruption fails the stream with its code', async () => {
    const failing = new FailingStore(big, [{ ops: ['get'], key: /^\d{10}\.[1-9]/, nth: 3 }])
    await rejectsCode(drain(createStreamSegmentReadStream({ store: failing })), 'ERR_STORE', /injected/)
    const bad = new MemoryStore()
    for await (const e of big.list('')) {
      const b = Buffer.from(await big.get(e.key))
      if (e.key.endsWith('.2')) b[5000] = (b[5000] as number) ^ 1
      await bad.put(e.key, b)
    }
    await rejectsCode(
      drain(createStreamSegmentReadStream({ store: bad })),
      'ERR_CORRUPT',
      /\.2: block \d+ at offset 4096 has CRC-32 0x[0-9a-f]{8}, the summary says 0x[0-9a-f]{8}/,
    )
  })

  it('an abandoned or unknown checkpoint is ERR_NOT_FOUND naming it', async () => {
    await rejectsCode(drain(createStreamSegmentReadStream({ store: small, cno: 99 })), 'ERR_NOT_FOUND', /checkpoint 99/)
    const s = new MemoryStore()
    for await (const e of small.list('')) if (e.key !== '0000000002.0') await s.put(e.key, await small.get(e.key))
    await rejectsCode(drain(createStreamSegmentReadStream({ store: s, cno: 2 })), 'ERR_NOT_FOUND', /checkpoint 2/)
  })

  it('bad options throw ERR_INVALID_ARGUMENT before any request', () => {
    const bad: Array<Record<string, unknown>> = [
      {},
      { url: 'mem://x', store: small },
      { store: small, start: -1 },
      { store: small, end: 1.5 },
      { store: small, start: Number.POSITIVE_INFINITY },
      { store: small, end: Number.NEGATIVE_INFINITY },
      { store: small, end: Number.NaN },
      { store: small, start: 10, end: 5 },
      { store: small, cno: 0 },
      { store: small, cno: '2' },
      { store: small, readGetMaxBytes: 0 },
      { store: small, readMaxConcurrency: 1000 },
      { store: small, readAheadBytes: -1 },
      { url: 'ftp://x/y' },
    ]
    for (const o of bad) {
      assert.throws(
        () => createStreamSegmentReadStream(o as never),
        (e: unknown) => StreamSegmentError.is(e, 'ERR_INVALID_ARGUMENT'),
        JSON.stringify(Object.keys(o)),
      )
    }
  })
})
