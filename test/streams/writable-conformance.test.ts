/**
 * The write stream keeps Node's Writable contract: the SAME assertions run against
 * `fs.createWriteStream` (the reference) and against ours, on the directory store and on
 * radosgw. Where ours legitimately differs from a file, the assertion says so with
 * `subject.ours`:
 *   - 'finish' waits for the commit: before it, a reader sees nothing (the file shows
 *     bytes as soon as they are written);
 *   - an error or a destroy publishes nothing (the file keeps what was written);
 *   - ours emits 'flush' (the FlushTiming) just before 'finish'.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import * as fs from 'node:fs'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Writable } from 'node:stream'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream, type StreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { FailingStore } from '../helpers/failing-store.js'
import { s3TestStore } from '../helpers/s3-env.js'

const KiB = 1024
const MiB = 1024 * KiB

interface Target {
  ws: Writable
  /** What a reader sees now: the file's bytes, or the published checkpoint's; undefined when there is none. */
  contents(): Promise<Buffer | undefined>
  /** Multipart uploads left open (0 for a file). */
  openUploads(): Promise<number>
}

interface OpenOptions {
  highWaterMark?: number
  /** Every write that reaches storage fails (a 1 MiB write does, for ours). */
  failWrites?: boolean
}

interface Subject {
  name: string
  ours: boolean
  open(o?: OpenOptions): Promise<Target>
}

const dirs: string[] = []
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'ss-conformance-'))
  dirs.push(d)
  return d
}
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const reference: Subject = {
  name: 'fs.createWriteStream (reference)',
  ours: false,
  async open(o = {}) {
    const path = join(tempDir(), 'file')
    const injected = (cb: (err: Error) => void) => cb(Object.assign(new Error('EIO: injected'), { code: 'EIO' }))
    const failing = {
      ...fs,
      write: (...args: unknown[]) => injected(args.at(-1) as (err: Error) => void),
      writev: (...args: unknown[]) => injected(args.at(-1) as (err: Error) => void),
    }
    const ws = fs.createWriteStream(path, {
      highWaterMark: o.highWaterMark,
      ...(o.failWrites ? { fs: failing as never } : {}),
    })
    return {
      ws,
      contents: () => fs.promises.readFile(path).catch(() => undefined),
      openUploads: async () => 0,
    }
  },
}

function ours(name: string, makeStore: () => Promise<ObjectStore>): Subject {
  return {
    name,
    ours: true,
    async open(o = {}) {
      const inner = await makeStore()
      const store = o.failWrites ? new FailingStore(inner, [{ ops: ['put', 'createMultipart', 'uploadPart'] }]) : inner
      // A dirty limit under 1 MiB: a 1 MiB write must store partial segments before it returns.
      const settings = o.failWrites ? { dataCacheDirtyMaxBytesThreshold: 256 * KiB } : {}
      const ws = createStreamSegmentWriteStream({ store, highWaterMark: o.highWaterMark, ...settings })
      return {
        ws,
        async contents() {
          const f = await SegmentFile.open(inner, { readOnly: true }).catch((err) => {
            if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
            throw err
          })
          if (f === undefined) return undefined
          const bytes = Buffer.from(await f.read(0, f.size))
          await f.close()
          return bytes
        },
        async openUploads() {
          let n = 0
          for await (const _ of inner.listMultipart()) n++
          return n
        },
      }
    },
  }
}

const SUBJECTS: Subject[] = [
  reference,
  ours('ours on the directory store', async () => new DirectoryStore(tempDir())),
  ours('ours on radosgw', () => s3TestStore()),
]

/** Records the lifecycle events in order ('error' handled: the test inspects it). */
function record(ws: Writable): string[] {
  const seen: string[] = []
  for (const e of ['finish', 'close', 'error', 'flush']) ws.on(e, () => seen.push(e))
  return seen
}

/** Resolves when 'close' has been emitted (or at once if it has). */
function closed(ws: Writable): Promise<void> {
  // Not events.once: it rejects on 'error', which these tests inspect.
  return ws.closed ? Promise.resolve() : new Promise((r) => ws.once('close', () => r()))
}

/** A write callback that counts its calls and keeps the errors passed. */
function callback(): { cb: (err?: Error | null) => void; calls: (Error | null | undefined)[] } {
  const calls: (Error | null | undefined)[] = []
  return { cb: (err) => void calls.push(err), calls }
}

for (const s of SUBJECTS) {
  describe(`Writable contract: ${s.name}`, () => {
    it("write(chunk, cb) calls cb once per write, in order; 'finish' then 'close'; writableFinished false until then", async () => {
      const { ws, contents } = await s.open()
      const seen = record(ws)
      const order: number[] = []
      const cbs = [0, 1, 2, 3].map(() => callback())
      for (const [i, c] of cbs.entries()) {
        ws.write(Buffer.alloc(1000, i + 1), (err) => {
          order.push(i)
          c.cb(err)
        })
      }
      assert.equal(ws.writableEnded, false)
      ws.end()
      assert.equal(ws.writableEnded, true)
      assert.equal(ws.writableFinished, false, 'not finished right after end()')
      if (s.ours) assert.equal(await contents(), undefined, 'ours: nothing is visible before the commit')
      let publishedAtFinish: Promise<Buffer | undefined> | undefined
      ws.on('finish', () => {
        assert.equal(ws.writableFinished, true)
        publishedAtFinish = contents()
      })
      await closed(ws)
      for (const c of cbs)
        assert.ok(c.calls.length === 1 && c.calls[0] == null, `each cb once, without an error: ${c.calls}`)
      assert.deepEqual(order, [0, 1, 2, 3])
      // Ours emits 'flush' (the FlushTiming) just before 'finish'; a file has no such event.
      assert.deepEqual(seen, s.ours ? ['flush', 'finish', 'close'] : ['finish', 'close'])
      const expected = Buffer.concat([1, 2, 3, 4].map((v) => Buffer.alloc(1000, v)))
      // Ours: 'finish' comes after the commit, so what a reader sees at 'finish' is all of it.
      assert.deepEqual(await publishedAtFinish, expected)
      assert.deepEqual(await contents(), expected)
      assert.equal(ws.errored, null)
      assert.equal(ws.destroyed, true, 'autoDestroy after finish')
    })

    it("a failed write: the error to its cb, 'error' emitted, errored set, 'close' after it, no 'finish'", async () => {
      const { ws, contents, openUploads } = await s.open({ failWrites: true })
      const seen = record(ws)
      const c = callback()
      let emitted: Error | undefined
      ws.on('error', (err) => {
        emitted = err
      })
      ws.write(Buffer.alloc(MiB, 7), c.cb)
      await closed(ws)
      assert.equal(c.calls.length, 1, 'cb called once')
      const err = c.calls[0]
      assert.ok(err instanceof Error, `cb got ${err}`)
      assert.equal(emitted, err, "'error' carries the same error")
      assert.equal(ws.errored, err)
      assert.equal(ws.destroyed, true)
      assert.deepEqual(seen, ['error', 'close'])
      if (s.ours) {
        assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
        assert.equal(await contents(), undefined, 'ours: nothing published')
        assert.equal(await openUploads(), 0)
      }
    })

    it("writableLength and writableNeedDrain follow highWaterMark; 'drain' once the queue empties", async () => {
      const hwm = 16
      const { ws } = await s.open({ highWaterMark: hwm })
      assert.equal(ws.writableHighWaterMark, hwm)
      const drains: number[] = []
      ws.on('drain', () => drains.push(ws.writableLength))
      assert.equal(ws.write(Buffer.alloc(10)), true, 'under the mark')
      assert.equal(ws.writableLength, 10)
      assert.equal(ws.writableNeedDrain, false)
      assert.equal(ws.write(Buffer.alloc(10)), false, 'at or over the mark')
      assert.equal(ws.writableLength, 20)
      assert.equal(ws.writableNeedDrain, true)
      await once(ws, 'drain')
      assert.equal(ws.writableLength, 0)
      assert.equal(ws.writableNeedDrain, false)
      assert.deepEqual(drains, [0])
      ws.end()
      await closed(ws)
      assert.equal(ws.errored, null)
    })

    it('cork()/uncork(): writes wait while corked, then go as one batch (_writev)', async () => {
      const { ws, contents } = await s.open()
      const batches: number[] = []
      const target = ws as unknown as { _writev: (chunks: unknown[], cb: unknown) => void }
      const writev = target._writev.bind(ws)
      target._writev = (chunks, cb) => {
        batches.push(chunks.length)
        writev(chunks, cb)
      }
      // Let the stream open first, so that corking alone holds the writes back.
      await new Promise((r) => setTimeout(r, 50))
      ws.cork()
      assert.equal(ws.writableCorked, 1)
      const cbs = [1, 2, 3].map(() => callback())
      for (const [i, c] of cbs.entries()) ws.write(Buffer.alloc(100, i + 1), c.cb)
      await new Promise((r) => setTimeout(r, 50))
      assert.deepEqual(
        cbs.map((c) => c.calls.length),
        [0, 0, 0],
        'no write done while corked',
      )
      assert.equal(ws.writableLength, 300)
      ws.uncork()
      assert.equal(ws.writableCorked, 0)
      ws.end()
      await closed(ws)
      assert.deepEqual(batches, [3], 'one batch of three')
      for (const c of cbs) assert.ok(c.calls.length === 1 && c.calls[0] == null, String(c.calls))
      assert.deepEqual(await contents(), Buffer.concat([1, 2, 3].map((v) => Buffer.alloc(100, v))))
    })

    it("strings with encodings ('hex', 'base64', 'utf8', the default encoding), and end(chunk, encoding, cb)", async () => {
      const { ws, contents } = await s.open()
      const endCb = callback()
      ws.write('deadbeef', 'hex')
      ws.write('aGVsbG8gd29ybGQ=', 'base64')
      ws.write('héllo wörld ✓', 'utf8')
      ws.setDefaultEncoding('latin1')
      ws.write('ÿþ')
      ws.end('00ff', 'hex', endCb.cb)
      await closed(ws)
      assert.equal(endCb.calls.length, 1, 'end cb called once')
      assert.ok(endCb.calls[0] == null, `end cb without an error: ${endCb.calls[0]}`)
      const expected = Buffer.concat([
        Buffer.from('deadbeef', 'hex'),
        Buffer.from('hello world'),
        Buffer.from('héllo wörld ✓', 'utf8'),
        Buffer.from('ÿþ', 'latin1'),
        Buffer.from([0, 255]),
      ])
      assert.deepEqual(await contents(), expected)
    })

    it('Uint8Arrays that are not Buffers, views at an offset included; end(chunk, cb)', async () => {
      const { ws, contents } = await s.open()
      const backing = new Uint8Array(64).map((_, i) => i)
      const view = new Uint8Array(backing.buffer, 10, 20) // bytes 10..29
      const plain = new Uint8Array([200, 201, 202])
      assert.equal(Buffer.isBuffer(view), false)
      const c = callback()
      ws.write(plain, c.cb)
      ws.write(view)
      let finishedAtEndCb: boolean | undefined
      ws.end(new Uint8Array([255]), () => {
        finishedAtEndCb = ws.writableFinished
      })
      await closed(ws)
      assert.ok(c.calls.length === 1 && c.calls[0] == null, String(c.calls))
      assert.equal(finishedAtEndCb, true, "end's cb runs once finished")
      assert.deepEqual(await contents(), Buffer.from([200, 201, 202, ...backing.subarray(10, 30), 255]))
    })

    it('zero-length chunks, a DataView and another typed array at odd offsets: their bytes, or ERR_INVALID_ARG_TYPE', async () => {
      const { ws, contents } = await s.open()
      const backing = new Uint8Array(64).map((_, i) => 100 + i)
      const others = [new DataView(backing.buffer, 3, 5), new Uint16Array(backing.buffer, 10, 3)]
      const c = callback()
      ws.write(Buffer.alloc(0))
      ws.write('', c.cb)
      ws.write(new Uint8Array(backing.buffer, 1, 2))
      // Node's Writable takes any ArrayBufferView as its bytes where it takes more than Uint8Arrays
      // (newer Node 20 releases); before, it throws ERR_INVALID_ARG_TYPE in the call.
      const taken: Uint8Array[] = []
      for (const v of others) {
        try {
          ws.write(v)
          taken.push(new Uint8Array(v.buffer, v.byteOffset, v.byteLength))
        } catch (err) {
          assert.equal((err as NodeJS.ErrnoException).code, 'ERR_INVALID_ARG_TYPE')
        }
      }
      ws.end(new Uint8Array(0))
      await closed(ws)
      assert.ok(c.calls.length === 1 && c.calls[0] == null, String(c.calls))
      assert.equal(ws.errored, null)
      assert.deepEqual(await contents(), Buffer.concat([backing.subarray(1, 3), ...taken]))
    })

    it('write after end(): ERR_STREAM_WRITE_AFTER_END to the cb and as the error', async () => {
      const { ws, contents } = await s.open()
      const seen = record(ws)
      ws.write(Buffer.from('kept?'))
      ws.end()
      const c = callback()
      assert.equal(ws.write(Buffer.from('late'), c.cb), false)
      await closed(ws)
      await new Promise((r) => setImmediate(r))
      assert.equal(c.calls.length, 1)
      assert.equal((c.calls[0] as NodeJS.ErrnoException)?.code, 'ERR_STREAM_WRITE_AFTER_END')
      assert.equal(ws.errored, c.calls[0])
      assert.ok(seen.includes('error'), String(seen))
      assert.ok(!seen.includes('finish'), 'no finish after the error')
      assert.equal(seen.at(-1), 'close')
      // The error destroys the stream: the file keeps what it wrote before (here it may not
      // even have opened); ours publishes nothing.
      const now = await contents()
      if (s.ours) assert.equal(now, undefined)
      else assert.ok(now === undefined || Buffer.from('kept?').subarray(0, now.length).equals(now), String(now))
    })

    it("write after 'finish': ERR_STREAM_WRITE_AFTER_END to the cb; what was committed stays", async () => {
      const { ws, contents } = await s.open()
      ws.end(Buffer.from('done'))
      await closed(ws)
      const c = callback()
      ws.write(Buffer.from('late'), c.cb)
      await new Promise((r) => setImmediate(r))
      assert.equal(c.calls.length, 1)
      assert.equal((c.calls[0] as NodeJS.ErrnoException)?.code, 'ERR_STREAM_WRITE_AFTER_END')
      assert.deepEqual(await contents(), Buffer.from('done'))
    })

    it("destroy(err) mid-write: 'error' with err, then 'close'; every cb called once; ours publishes nothing", async () => {
      const { ws, contents, openUploads } = await s.open()
      const seen = record(ws)
      const write = (i: number) => {
        const c = callback()
        return { c, done: new Promise<void>((r) => ws.write(Buffer.alloc(MiB, i), (err) => r(c.cb(err)))) }
      }
      // 20 MiB taken in, one write at a time: for ours, past the 16 MiB sent ahead as an object.
      const before = []
      for (let i = 0; i < 20; i++) {
        const w = write(i)
        before.push(w.c)
        await w.done
      }
      const inFlight = write(20)
      const busy = s.ours ? (ws as StreamSegmentWriteStream).progress : undefined
      const boom = new Error('producer gave up')
      ws.destroy(boom)
      assert.equal(ws.destroyed, true)
      const late = write(21)
      await closed(ws)
      await Promise.all([inFlight.done, late.done])
      assert.deepEqual(seen, ['error', 'close'])
      assert.equal(ws.errored, boom)
      for (const c of before) assert.ok(c.calls.length === 1 && c.calls[0] == null, String(c.calls))
      assert.equal(inFlight.c.calls.length, 1, 'the write under way: cb called once')
      assert.equal(late.c.calls.length, 1)
      assert.equal((late.c.calls[0] as NodeJS.ErrnoException)?.code, 'ERR_STREAM_DESTROYED')
      if (s.ours) {
        // The file's write completes; ours aborts the write under way, which fails.
        assert.ok(inFlight.c.calls[0] instanceof Error, `the write under way failed: ${inFlight.c.calls[0]}`)
        assert.ok(
          (busy?.requests ?? 0) + (busy?.requestsInFlight ?? 0) > 0,
          `uploads under way: ${JSON.stringify(busy)}`,
        )
        assert.equal(await contents(), undefined, 'ours: nothing published')
        assert.equal(await openUploads(), 0, 'ours: no open multipart upload')
      } else {
        assert.ok(((await contents())?.length ?? 0) >= 20 * MiB, 'the file keeps what was written')
      }
    })
  })
}
