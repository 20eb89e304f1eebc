/**
 * createStreamSegmentReadStream: ranges (end inclusive), older checkpoints, backpressure
 * within the read-ahead bound, abort and destroy while GETs hang, errors as
 * StreamSegmentErrors, options checked before any request.
 */
import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import { buildContainer, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

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
    ]
    for (const [start, end] of cases) {
      const got = await drain(createStreamSegmentReadStream({ store: small, start, end, readGetMaxBytes: 8 * KiB }))
      const s = Math.min(start ?? 0, latest.length)
      const e = Math.max(s, Math.min(end === undefined ? latest.length : end + 1, latest.length))
      assert.ok(got.equals(latest.subarray(s, e)), `range ${start}-${end}`)
    }
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

  it('the AbortSignal aborts GETs that hang: ERR_ABORTED, promptly', async () => {
    const store = new FailingStore(big, [{ ops: ['get'], key: /^\d{10}\.\d+$/, mode: 'hang' }])
    const ac = new AbortController()
    const rs = createStreamSegmentReadStream({ store, signal: ac.signal })
    setTimeout(() => ac.abort(new Error('stop')), 50)
    await within(rejectsCode(drain(rs), 'ERR_ABORTED'), 2000, 'abort')
    assert.ok(store.count('get', 'hung') >= 1)
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
