/**
 * A read that fails leaves nothing running: its sibling requests (the other GETs of a
 * scan, the walk made beside a read stream's first window) are aborted, so the failure is
 * reported at once, not after a stalled sibling ends, and no request keeps the process
 * alive after it. The store here fails one GET and holds the others until their signal
 * fires (as a stalled connection does, up to the store's deadline). A scan's requests
 * all listen to its signal: more than ten at once must not make Node warn of a leak.
 */
import assert from 'node:assert/strict'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/**
 * Once armed, GETs of keys `pick` says to fail fail (only once a GET is held, so that it
 * has a sibling, and `failAfter` has settled), GETs it says to hold hang until their
 * signal fires.
 */
class FailOneHoldOthers extends WrappedStore {
  armed = false
  pick: (key: string) => 'fail' | 'hold' | 'pass' = () => 'hold'
  readonly held: CallInfo[] = []
  failed = 0
  failAfter: Promise<unknown> = Promise.resolve()
  private onHeld: () => void = () => {}
  private someHeld = new Promise<void>((r) => {
    this.onHeld = r
  })

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const what = this.armed && call.op === 'get' ? this.pick(call.key) : 'pass'
    if (what === 'fail') {
      await this.someHeld
      await this.failAfter
      this.failed++
      throw StreamSegmentError.store(`injected failure: get ${call.key}`)
    }
    if (what === 'hold') {
      this.held.push(call)
      this.onHeld()
      await new Promise<never>((_, reject) => {
        const abort = () => reject(StreamSegmentError.aborted(`get ${call.key}: aborted while held`))
        if (call.signal?.aborted) abort()
        else call.signal?.addEventListener('abort', abort, { once: true })
      })
    }
    return run()
  }
}

function injected(err: unknown): boolean {
  assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `the injected failure, got ${(err as Error)?.message ?? err}`)
  assert.match((err as Error).message, /injected failure/)
  return true
}

function allHeldAborted(store: FailOneHoldOthers): void {
  assert.ok(store.held.length > 0, 'a GET was held beside the one that failed')
  for (const c of store.held) assert.equal(c.signal?.aborted, true, `held GET of ${c.key} aborted`)
}

const SIZE = 1024 * 1024
const READ = { readGetMaxBytes: 16 * 1024, readMaxConcurrency: 4 }

/**
 * SIZE bytes of pattern 7: `few` objects, each read in several data GETs
 * (readGetMaxBytes); else many small ones (smallSettings), whose leaves a cold walk reads
 * in one round, several at a time.
 */
async function container(few: boolean): Promise<MemoryStore> {
  const store = new MemoryStore()
  const large = { segmentMaxObjectBytes: 512 * 1024, dataCacheDirtyMaxBytesThreshold: 1024 * 1024 }
  const f = await SegmentFile.create(store, { ...smallSettings, ...(few ? large : {}) })
  await f.write(0, pattern(0, SIZE, 7))
  await f.flush()
  await f.close()
  return store
}

/** The data parts (not part 0) of checkpoint 1, in part order. */
async function dataParts(store: ObjectStore): Promise<string[]> {
  const keys: string[] = []
  for await (const e of store.list('')) if (/^0000000001\.[1-9]\d*$/.test(e.key)) keys.push(e.key)
  return keys.sort((a, b) => Number(a.split('.')[1]) - Number(b.split('.')[1]))
}

describe('a read that fails aborts its siblings', () => {
  it('SegmentFile.read: a data GET fails while others are stalled: it rejects at once, the others aborted', async () => {
    const faults = new FailOneHoldOthers(await container(true))
    const f = await SegmentFile.open(faults, { readOnly: true, ...READ })
    assert.ok(Buffer.from(await f.read(0, SIZE)).equals(pattern(0, SIZE, 7))) // nodes and summaries cached
    let first = true
    faults.pick = () => {
      const what = first ? 'fail' : 'hold'
      first = false
      return what
    }
    faults.armed = true // from now on only data GETs: the first fails, the others stall
    await assert.rejects(within(f.read(0, SIZE), 2000, 'the failed read'), injected)
    assert.equal(faults.failed, 1)
    allHeldAborted(faults)
    await f.close()
  })

  it('SegmentFile.read, cold: a leaf read fails beside a stalled one: the stalled one is aborted', async () => {
    const store = await container(false)
    const parts = await dataParts(store)
    assert.ok(parts.length >= 3, `several data parts (${parts})`)
    const faults = new FailOneHoldOthers(store)
    const f = await SegmentFile.open(faults, { readOnly: true, ...READ })
    faults.pick = (key) => (key === parts[0] ? 'fail' : key === parts[1] ? 'hold' : 'pass')
    faults.armed = true
    await assert.rejects(within(f.read(0, SIZE), 2000, 'the failed read'), injected)
    allHeldAborted(faults)
    await f.close()
  })

  it('downloadFile: rejects at once, the stalled GETs aborted, no file left', async () => {
    const store = await container(false)
    const parts = await dataParts(store)
    const faults = new FailOneHoldOthers(store)
    faults.pick = (key) => (key === parts[0] ? 'fail' : key === parts[1] ? 'hold' : 'pass')
    faults.armed = true
    const dir = await mkdtemp(join(tmpdir(), 'ss-siblings-'))
    try {
      const path = join(dir, 'out.bin')
      await assert.rejects(within(downloadFile(faults, path, READ), 2000, 'the failed download'), injected)
      allHeldAborted(faults)
      assert.deepEqual(await readdir(dir), [])
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('read stream: the walk beside the first window fails after that window is consumed: the stalled leaf read beside it is aborted', async () => {
    const store = new MemoryStore()
    const size = 1536 * 1024
    const w = await SegmentFile.create(store, smallSettings)
    await w.write(0, pattern(0, size, 3))
    await w.flush()
    await w.close()
    const parts = await dataParts(store)
    assert.ok(parts.length >= 40, `many small data parts (${parts.length})`)
    // Two objects past the first window (1 MiB, about two thirds of the parts, in file
    // order) and before the last few (which hold index nodes, read on the way to the first
    // leaf): their leaves are read by the walk beside the first window.
    const at = Math.floor(parts.length * 0.85)
    const [fail, hold] = parts.slice(at, at + 2)
    const faults = new FailOneHoldOthers(store)
    faults.pick = (key) => (key === fail ? 'fail' : key === hold ? 'hold' : 'pass')
    // The walk beside fails once the first window is all consumed: nothing is queued, filled
    // or planned then, only that walk's other leaf read is in flight.
    let firstWindowDone: () => void = () => {}
    faults.failAfter = new Promise<void>((r) => {
      firstWindowDone = r
    })
    faults.armed = true
    // One GET a window (1 MiB), no read-ahead: the walk beside the first window is the
    // second window's, the rest of the file.
    const s = createStreamSegmentReadStream({
      store: faults,
      readGetMaxBytes: 1024 * 1024,
      readMaxConcurrency: 4,
      readAheadBytes: 0,
    })
    const got: Buffer[] = []
    let received = 0
    const ended = new Promise<unknown>((resolve) => {
      // The stream's own state says when all it planned is pushed (test only).
      const inside = s as unknown as { queue: unknown[]; planned: unknown[]; handing: unknown }
      s.on('data', (c: unknown) => {
        got.push(c as Buffer)
        received += (c as Buffer).byteLength
        const drained = inside.queue.length === 0 && inside.planned.length === 0 && inside.handing === undefined
        if (received >= 512 * 1024 && drained) firstWindowDone()
      })
      s.on('error', resolve)
      s.on('end', () => resolve(undefined))
    })
    const err = await within(ended, 2000, 'the failed stream')
    injected(err)
    await within(new Promise<void>((r) => (s.destroyed ? r() : s.on('close', () => r()))), 2000, 'close')
    allHeldAborted(faults)
    const bytes = Buffer.concat(got)
    assert.ok(bytes.length >= 512 * 1024 && bytes.length <= 1024 * 1024, `the first window (${bytes.length} bytes)`)
    assert.ok(bytes.equals(pattern(0, bytes.length, 3)), 'the first window is the file')
  })
})

/** Listens on each GET's signal while the GET is in flight, as S3Store does (one listener per request). */
class ListeningStore extends WrappedStore {
  inFlight = 0
  most = 0
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const onAbort = () => {}
    call.signal?.addEventListener('abort', onAbort)
    this.most = Math.max(this.most, ++this.inFlight)
    try {
      await new Promise((resolve) => setTimeout(resolve, 2))
      return await run()
    } finally {
      this.inFlight--
      call.signal?.removeEventListener('abort', onAbort)
    }
  }
}

it('a read with more requests in flight than Node warns about on one signal (10): no MaxListenersExceededWarning', async () => {
  const warnings: Error[] = []
  const onWarning = (w: Error) => {
    if (w.name === 'MaxListenersExceededWarning') warnings.push(w)
  }
  process.on('warning', onWarning)
  try {
    const store = new ListeningStore(await container(true))
    const wide = { readGetMaxBytes: 16 * 1024, readMaxConcurrency: 24 }
    const f = await SegmentFile.open(store, { readOnly: true, ...wide })
    assert.ok(Buffer.from(await f.read(0, SIZE)).equals(pattern(0, SIZE, 7)))
    await f.close()
    assert.ok(store.most > 10, `requests in flight at once: ${store.most}`)
    // The read stream and downloadFile, cold, their opens' requests counted under a signal of their own.
    const chunks: Buffer[] = []
    for await (const c of createStreamSegmentReadStream({ store, ...wide })) chunks.push(c as Buffer)
    assert.ok(Buffer.concat(chunks).equals(pattern(0, SIZE, 7)))
    const dir = await mkdtemp(join(tmpdir(), 'ss-listeners-'))
    try {
      await downloadFile(store, join(dir, 'out.bin'), wide)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(
      warnings.map((w) => w.message),
      [],
    )
  } finally {
    process.off('warning', onWarning)
  }
})

/** Answers every call a turn of the event loop later, as a network does; once armed, the next GET fails. */
class FailNextGet extends WrappedStore {
  armed = false
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    await new Promise((resolve) => setImmediate(resolve))
    if (this.armed && call.op === 'get') {
      this.armed = false
      throw StreamSegmentError.store(`injected failure: get ${call.key}`)
    }
    return run()
  }
}

describe('the call after a read that failed', () => {
  // A sibling aborted by the failure is still on its way when the caller calls again: the
  // new call must make its own request, not take that one's abort (ERR_ABORTED, which no
  // one asked for) as its outcome.
  it('a read, and a truncate that reads its last block: the next call succeeds', async () => {
    const bytes = pattern(0, 4096, 7)
    for (const call of ['read', 'truncate'] as const) {
      const store = new FailNextGet(new MemoryStore())
      const w = await SegmentFile.create(store, smallSettings)
      await w.write(0, bytes)
      await w.flush()
      await w.close()
      const f = await SegmentFile.open(store, { ...smallSettings, readOnly: call === 'read' })
      store.armed = true
      await assert.rejects(call === 'read' ? f.read(0, 4096) : f.truncate(1000), injected)
      assert.ok(Buffer.from(await f.read(0, 4096)).equals(bytes), call)
      await f.close()
    }
  })
})
