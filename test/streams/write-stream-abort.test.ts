/**
 * The write stream's end when something stops it, and what the caller is told is what
 * readers see, now and later. While it opens the container: the open's requests are aborted
 * with the stream, and an input that had ended is not taken for a finish. While its flush
 * runs: an abort before the inode write publishes nothing, not even through a later
 * writer's roll-forward or a WAL replay; an abort that meets the inode write under way waits
 * for its answer and reports it; a destroy without an error after the input ended is not
 * taken for a finish.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { finished, pipeline } from 'node:stream/promises'
import { after, describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { StreamSegmentError, Upload } from '../../lib/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

async function tempDir(): Promise<string> {
  const d = await fs.mkdtemp(join(tmpdir(), 'ss-stream-abort-'))
  roots.push(d)
  return d
}

/** A store that runs `before` ahead of each call and `after` once the call has answered. */
class HookedStore extends WrappedStore {
  before: (call: CallInfo) => void | Promise<void> = () => undefined
  after: (call: CallInfo) => void | Promise<void> = () => undefined
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    await this.before(call)
    const result = await run()
    await this.after(call)
    return result
  }
}

const OLD = pattern(0, 50_000, 7)
const NEW = pattern(0, 300_000, 8)
const PART0 = /^\d{10}\.0$/

/** A container holding OLD as its checkpoint 1. */
async function containerWithOld(store: ObjectStore): Promise<void> {
  const f = await SegmentFile.create(store)
  await f.write(0, OLD)
  await f.flush()
  await f.close()
}

/** What a writer that opens the container sees, rolling forward any complete checkpoint at once. */
async function afterWriterOpen(store: ObjectStore): Promise<{ cno: number; bytes: Buffer }> {
  const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
  await w.close()
  return readPublished(store)
}

async function keys(store: MemoryStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list()) out.push(e.key)
  return out
}

/** A promise that never settles unless `signal` aborts; then it rejects with the abort's reason. */
function heldUntilAborted(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((_, reject) => {
    signal?.addEventListener('abort', () => reject(signal.reason), { once: true })
  })
}

describe('the write stream stopped while it opens the container', () => {
  it('end() then destroy() before the flush started: ERR_ABORTED, not a finish, and nothing published', async () => {
    const store = new MemoryStore('destroy-ended-at-once')
    await containerWithOld(store)
    const ws = createStreamSegmentWriteStream({ store })
    ws.end(NEW)
    ws.destroy()
    await rejectsCode(finished(ws), 'ERR_ABORTED', /destroyed before the commit/)
    assert.equal(ws.flushTiming, undefined)
    assert.deepEqual(await afterWriterOpen(store), { cno: 1, bytes: OLD })
  })

  it('a pipeline whose source ended while the open waits on the store, then destroy(): rejects, nothing published', async () => {
    const inner = new MemoryStore('destroy-ended-opening')
    await containerWithOld(inner)
    const store = new HookedStore(inner)
    let ws: ReturnType<typeof createStreamSegmentWriteStream> | undefined
    let held = false
    store.before = async (call) => {
      if (call.key !== 'inode' || held) return
      held = true
      // The source has ended by now (one chunk); the stream is still opening.
      setTimeout(() => ws?.destroy(), 50)
      await new Promise((done) => setTimeout(done, 200))
    }
    ws = createStreamSegmentWriteStream({ store })
    await rejectsCode(pipeline(Readable.from([NEW]), ws), 'ERR_ABORTED', /destroyed/)
    assert.ok(held)
    assert.equal(ws.writableFinished, false)
    assert.deepEqual(await afterWriterOpen(inner), { cno: 1, bytes: OLD })
  })

  for (const how of ['destroy()', 'destroy(err)', 'the signal'] as const) {
    it(`${how} while the open's request to the inode is stalled: the request is aborted, the stream closes at once`, async () => {
      const inner = new MemoryStore(`destroy-open-stalled-${how}`)
      await containerWithOld(inner)
      const store = new HookedStore(inner)
      let stalled: CallInfo | undefined
      store.before = (call) => {
        if (call.key !== 'inode' || stalled !== undefined) return
        stalled = call
        return heldUntilAborted(call.signal)
      }
      const ac = new AbortController()
      const ws = createStreamSegmentWriteStream({ store, signal: ac.signal })
      const ended = finished(ws)
      ws.write(NEW)
      await new Promise((done) => setTimeout(done, 50))
      assert.ok(stalled, 'the open has asked for the inode')
      const mine = new Error('stop here')
      if (how === 'destroy()') ws.destroy()
      else if (how === 'destroy(err)') ws.destroy(mine)
      else ac.abort()
      const outcome = await within(
        ended.then(
          () => 'finished',
          (err: unknown) => err,
        ),
        2000,
        `the stream's end after ${how}`,
      )
      const code = (outcome as { code?: unknown }).code
      if (how === 'destroy()') assert.equal(code, 'ERR_STREAM_PREMATURE_CLOSE', String(outcome))
      else if (how === 'destroy(err)') assert.equal(outcome, mine)
      else assert.ok(StreamSegmentError.is(outcome, 'ERR_ABORTED'), String(outcome))
      assert.equal(stalled.signal?.aborted, true, "the open's request saw the abort")
      assert.deepEqual(await afterWriterOpen(inner), { cno: 1, bytes: OLD })
    })
  }
})

describe('the write stream stopped while its open rolls a checkpoint forward', () => {
  it("the signal while the roll-forward's inode write is stalled: the write is aborted, the stream closes", async () => {
    const inner = new MemoryStore('abort-roll-forward')
    await containerWithOld(inner)
    // Checkpoint 2 complete but unpublished: its writer's inode write failed.
    const failing = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }])
    const w = await SegmentFile.open(failing, { conflictRetries: 0 })
    await w.write(0, NEW)
    await rejectsCode(w.flush(), 'ERR_STORE')
    await w.close()

    const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, mode: 'hang' }])
    const ac = new AbortController()
    const ws = createStreamSegmentWriteStream({ store, signal: ac.signal, rollForwardAfterMs: 0 })
    const ended = finished(ws).then(
      () => 'finished',
      (err: unknown) => err,
    )
    await store.hangOf('put')
    ac.abort(new Error('stop'))
    const outcome = await ended // without the signal on that write, never
    assert.ok(StreamSegmentError.is(outcome, 'ERR_ABORTED'), String(outcome))
    assert.equal(store.calls.find((c) => c.op === 'put')?.signal?.aborted, true)
    assert.equal(ws.file, undefined, 'the open never completed')
    // Nothing lost: the next writer rolls checkpoint 2 forward.
    assert.deepEqual(await afterWriterOpen(inner), { cno: 2, bytes: NEW })
  })
})

describe('the write stream stopped during its flush', () => {
  it('an abort after part 0 is stored and before the inode write: nothing published, part 0 deleted, no roll-forward', async () => {
    const inner = new MemoryStore('abort-part0')
    await containerWithOld(inner)
    const store = new HookedStore(inner)
    const ac = new AbortController()
    store.after = (call) => {
      if (call.op === 'put' && PART0.test(call.key) && call.key !== '0000000001.0') ac.abort(new Error('stop'))
    }
    const ws = createStreamSegmentWriteStream({ store, signal: ac.signal })
    await rejectsCode(pipeline(Readable.from([NEW]), ws), 'ERR_ABORTED')
    assert.equal(ws.flushTiming, undefined)
    assert.deepEqual(await readPublished(inner), { cno: 1, bytes: OLD })
    assert.deepEqual(
      (await keys(inner)).filter((k) => PART0.test(k)),
      ['0000000001.0'],
      'the aborted checkpoint has no part 0',
    )
    assert.deepEqual(await afterWriterOpen(inner), { cno: 1, bytes: OLD }, 'a later writer rolls nothing forward')
  })

  it('an abort that meets the inode write under way waits for it: published, so the stream finishes', async () => {
    const inner = new MemoryStore('abort-inode')
    await containerWithOld(inner)
    const store = new HookedStore(inner)
    const ac = new AbortController()
    store.before = async (call) => {
      if (call.op === 'put' && call.key === 'inode') {
        ac.abort(new Error('stop'))
        await new Promise((r) => setTimeout(r, 50)) // the answer comes after the abort
      }
    }
    const ws = createStreamSegmentWriteStream({ store, signal: ac.signal })
    const flushed: number[] = []
    ws.on('flush', (t) => flushed.push(t.cno))
    await pipeline(Readable.from([NEW]), ws)
    assert.equal(ws.flushTiming?.cno, 2)
    assert.deepEqual(flushed, [2])
    assert.deepEqual(await readPublished(inner), { cno: 2, bytes: NEW })
  })

  it('the same for Upload: abort() while the inode write is under way, and done() resolves with what was published', async () => {
    const inner = new MemoryStore('upload-inode')
    const store = new HookedStore(inner)
    const client = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: NEW } })
    // The container's store, here a memory store instead of s3://b/k (the S3 path: upload-s3.test.ts).
    Object.defineProperty(upload, 'store', { value: store })
    store.before = async (call) => {
      if (call.op === 'put' && call.key === 'inode') {
        void upload.abort()
        await new Promise((r) => setTimeout(r, 50))
      }
    }
    const result = await upload.done()
    assert.equal(result.cno, 1)
    assert.deepEqual(await readPublished(inner), { cno: 1, bytes: NEW })
  })

  it('destroy() without an error once the input ended: ERR_ABORTED, not a finish, and nothing published', async () => {
    const inner = new MemoryStore('destroy-noerr')
    await containerWithOld(inner)
    const store = new HookedStore(inner)
    let ws: ReturnType<typeof createStreamSegmentWriteStream> | undefined
    store.before = (call) => {
      if (call.op === 'put' && PART0.test(call.key) && call.key !== '0000000001.0') ws?.destroy()
    }
    ws = createStreamSegmentWriteStream({ store })
    await rejectsCode(pipeline(Readable.from([NEW]), ws), 'ERR_ABORTED', /destroyed before the commit/)
    await rejectsCode(finished(ws), 'ERR_ABORTED')
    assert.deepEqual(await afterWriterOpen(inner), { cno: 1, bytes: OLD })
  })

  it("destroy() while the inode write is under way and its answer does not come within the wait: ERR_ABORTED saying the outcome is unknown, not 'destroyed before the commit'", async () => {
    const inner = new MemoryStore('destroy-inode-unknown')
    await containerWithOld(inner)
    // The inode write never answers until it is cut (the wait shortened by the test hook).
    const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, mode: 'hang' }])
    const ws = createStreamSegmentWriteStream({ store, ...hooks({ abortWaitMs: 20 }) })
    const ended = pipeline(Readable.from([NEW]), ws)
    await store.hangOf('put')
    ws.destroy()
    await rejectsCode(
      ended,
      'ERR_ABORTED',
      /whether the checkpoint was published is unknown; its part 0 \(0000000002\.0\) is kept/,
    )
    assert.equal(ws.flushTiming, undefined)
    assert.ok(
      (await keys(inner)).includes('0000000002.0'),
      'part 0 kept: a writer opening the container later may publish it, as the error says',
    )
  })

  it('with a WAL: a stream aborted during its flush is not published by the next writer with the folder', async () => {
    const inner = new MemoryStore('wal-abort')
    await containerWithOld(inner)
    const dir = join(await tempDir(), 'wal')
    const store = new HookedStore(inner)
    const ac = new AbortController()
    store.before = (call) => {
      if (call.op === 'put' && PART0.test(call.key) && call.key !== '0000000001.0') ac.abort(new Error('stop'))
    }
    const ws = createStreamSegmentWriteStream({ store, signal: ac.signal, wal: { dir } })
    await rejectsCode(pipeline(Readable.from([NEW]), ws), 'ERR_ABORTED')
    const f = await SegmentFile.open(inner, { wal: { dir }, rollForwardAfterMs: 0 })
    assert.equal(f.walReplay?.records, 0, 'the log holds nothing to replay')
    await f.close()
    assert.deepEqual(await readPublished(inner), { cno: 1, bytes: OLD })
  })

  it("a 'progress' listener that throws before the commit destroys the stream with its error: nothing published, nothing uncaught", async () => {
    const store = new MemoryStore('progress-listener-throws')
    await containerWithOld(store)
    const ws = createStreamSegmentWriteStream({ store })
    const bug = new Error('progress listener bug')
    let calls = 0
    ws.on('progress', () => {
      calls++
      throw bug
    })
    await assert.rejects(pipeline(Readable.from([NEW]), ws), (err) => err === bug)
    assert.equal(calls, 1)
    assert.equal(ws.flushTiming, undefined)
    assert.deepEqual(await afterWriterOpen(store), { cno: 1, bytes: OLD })
  })

  it('Upload: a progress listener that throws makes done() reject with its error (as lib-storage), nothing uncaught', async () => {
    const inner = new MemoryStore('upload-listener')
    const client = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: NEW } })
    Object.defineProperty(upload, 'store', { value: inner })
    const bug = new Error('listener bug')
    upload.on('httpUploadProgress', () => {
      throw bug
    })
    await assert.rejects(upload.done(), (err) => err === bug)
  })

  for (const [name, Body] of [
    ['5 bytes', 'hello'],
    ['12 MiB in 5 MiB parts', pattern(0, 12 * 1024 * 1024, 9)],
  ] as const) {
    it(`Upload of ${name}: the last progress event (all loaded) comes before the commit; a listener that throws there publishes nothing`, async () => {
      const inner = new MemoryStore(`upload-last-event-${name}`)
      const client = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
      const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body }, partSize: 5 * 1024 * 1024 })
      Object.defineProperty(upload, 'store', { value: inner })
      const bug = new Error('listener bug at the last event')
      const seen: number[] = []
      upload.on('httpUploadProgress', (p) => {
        seen.push(p.loaded ?? -1)
        if (p.loaded === p.total) throw bug
      })
      await assert.rejects(upload.done(), (err) => err === bug)
      assert.equal(seen.at(-1), Buffer.byteLength(Body))
      assert.deepEqual(await keys(inner).then((k) => k.filter((x) => x === 'inode')), [], 'no inode: nothing published')
      await rejectsCode(SegmentFile.open(inner, { readOnly: true }), 'ERR_NOT_FOUND')
    })
  }
})
