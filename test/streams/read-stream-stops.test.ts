/**
 * The read stream against stores outside the contract: a GET that rejects with a value
 * that is no Error (`undefined`, a string), and a GET that never answers and does not
 * hear its signal (a directory store blocked in a read of a hung network mount). The
 * stream still fails with one 'error' and then 'close', never ends as if complete, and
 * `destroy()` or the signal still closes it.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream, type StreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024

/** Its first GET is held until `release()`, then answered: it never hears its signal. Other calls pass. */
class HeldStore extends WrappedStore {
  held = 0
  private wake: () => void = () => {}
  private readonly released = new Promise<void>((r) => {
    this.wake = r
  })

  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    if (this.held++ > 0) return super.get(key, options)
    await this.released
    return this.inner.get(key, { ...options, signal: undefined })
  }

  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }

  release(): void {
    this.wake()
  }
}

/** Its `nth` GET (1-based) and every one after it do `what`; the others pass through. */
class OddStore extends WrappedStore {
  gets = 0
  /** GETs that were given no answer. */
  stalled = 0
  constructor(
    inner: ObjectStore,
    private readonly nth: number,
    private readonly what: 'reject-undefined' | 'reject-string' | 'deaf-hang',
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op !== 'get' || ++this.gets < this.nth) return run()
    if (this.what === 'reject-undefined') throw undefined
    if (this.what === 'reject-string') throw 'disk on fire'
    this.stalled++
    return new Promise<T>(() => {}) // no answer, whatever its signal says
  }
}

interface Outcome {
  events: string[]
  errors: unknown[]
  bytes: number
}

/** Reads `rs` to its close (within 5 s), noting its events in order. */
function outcome(rs: StreamSegmentReadStream): Promise<Outcome> {
  const o: Outcome = { events: [], errors: [], bytes: 0 }
  rs.on('data', (c) => {
    o.bytes += (c as Uint8Array).byteLength
  })
  rs.on('end', () => o.events.push('end'))
  rs.on('error', (e: unknown) => {
    o.events.push('error')
    o.errors.push(e)
  })
  return within(
    new Promise<Outcome>((resolve) =>
      rs.on('close', () => {
        o.events.push('close')
        resolve(o)
      }),
    ),
    5000,
    'the stream closing',
  )
}

describe('read stream against a store outside the contract', async () => {
  const base = new MemoryStore()
  const ref = pattern(0, 2 * 1024 * KiB + 100, 3)
  const f = await SegmentFile.create(base)
  await f.write(0, ref)
  await f.flush()
  await f.close()
  const options = { readGetMaxBytes: 64 * KiB, readMaxConcurrency: 2, readAheadBytes: 128 * KiB }

  for (const what of ['reject-undefined', 'reject-string'] as const) {
    for (const nth of [1, 2, 4]) {
      it(`GET ${nth} rejects with no Error (${what}): 'error' once (ERR_STORE), then 'close', never 'end'`, async () => {
        const store = new OddStore(base, nth, what)
        const o = await outcome(createStreamSegmentReadStream({ store, ...options }))
        assert.deepEqual(o.events, ['error', 'close'], `events ${o.events}`)
        assert.ok(StreamSegmentError.is(o.errors[0], 'ERR_STORE'), `error ${String(o.errors[0])}`)
        assert.match((o.errors[0] as Error).message, what === 'reject-string' ? /disk on fire/ : /undefined/)
        assert.ok(o.bytes < ref.length)
      })
    }
  }

  for (const nth of [1, 3]) {
    const stage = nth === 1 ? 'during the open' : 'mid-read'
    it(`a GET that never answers nor hears its signal, ${stage}: destroy() closes the stream`, async () => {
      const store = new OddStore(base, nth, 'deaf-hang')
      const rs = createStreamSegmentReadStream({ store, ...options })
      const done = outcome(rs)
      while (store.stalled === 0) await new Promise((r) => setTimeout(r, 5))
      rs.destroy()
      const o = await done
      assert.deepEqual(o.events, ['close'])
    })

    it(`a GET that never answers nor hears its signal, ${stage}: the signal ends the stream with ERR_ABORTED`, async () => {
      const store = new OddStore(base, nth, 'deaf-hang')
      const ac = new AbortController()
      const rs = createStreamSegmentReadStream({ store, signal: ac.signal, ...options })
      const done = outcome(rs)
      while (store.stalled === 0) await new Promise((r) => setTimeout(r, 5))
      ac.abort()
      const o = await done
      assert.deepEqual(o.events, ['error', 'close'])
      assert.ok(StreamSegmentError.is(o.errors[0], 'ERR_ABORTED'))
    })
  }

  it('an open that finishes after destroy() (its GET did not hear the abort): the handle it gives is closed', async (t) => {
    const store = new HeldStore(base)
    const opened: SegmentFile[] = []
    const open = SegmentFile.open.bind(SegmentFile)
    t.mock.method(SegmentFile, 'open', async (...args: Parameters<typeof SegmentFile.open>) => {
      const f = await open(...args)
      opened.push(f)
      return f
    })
    const rs = createStreamSegmentReadStream({ store, ...options })
    const done = outcome(rs)
    while (store.held === 0) await new Promise((r) => setTimeout(r, 5))
    rs.destroy()
    assert.deepEqual((await done).events, ['close'])
    store.release()
    const closed = async () => {
      while (opened.length === 0 || !fileState(opened[0] as SegmentFile).signal.aborted) {
        await new Promise((r) => setTimeout(r, 5))
      }
    }
    await within(closed(), 2000, 'the handle opened after destroy() closing')
    assert.equal(opened.length, 1)
    await assert.rejects((opened[0] as SegmentFile).read(0, 1), (err) => StreamSegmentError.is(err, 'ERR_STATE'))
    assert.equal(rs.file, undefined, 'the stream took no handle after it closed')
  })
})
