/**
 * SegmentFile.create's `signal`, as open's: it aborts the create's requests (the HEAD of the
 * commit point, the LIST of numbers taken, the publish of what a WAL replays) and the create
 * rejects with ERR_ABORTED (the signal's reason as cause), at once even when a request does
 * not hear it (a custom store's). A handle such a create gives later is closed, its WAL's
 * folder released; nothing is left published. The handle's own calls do not hear it.
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { describe, it } from 'node:test'
import { hasInode } from '../../lib/container/inode.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { Body, ListOptions, ObjectInfo, PutOptions, RequestOptions } from '../../lib/store/types.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { walDirs } from '../helpers/wal-dirs.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

/**
 * Its calls `op` wait once `held` names them: until their signal fires, or (`deaf`: the
 * signal not heard, nor passed on) until release().
 */
class HoldStore extends WrappedStore {
  held = new Set<StoreOp>()
  deaf = false
  requests = 0
  waiting = 0
  /** Calls held that their signal cut. */
  cut = 0
  private wake: Array<() => void> = []

  override head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    return super.head(key, this.deaf ? { ...options, signal: undefined } : options)
  }

  override list(prefix?: string, options?: ListOptions) {
    return super.list(prefix, this.deaf ? { ...options, signal: undefined } : options)
  }

  override put(key: string, body: Body, options?: PutOptions) {
    return super.put(key, body, this.deaf ? { ...options, signal: undefined } : options)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    this.requests++
    if (!this.held.has(call.op)) return run()
    this.waiting++
    await new Promise<void>((resolve, reject) => {
      this.wake.push(resolve)
      const { signal } = call
      const onAbort = () => {
        this.cut++
        reject(signal?.reason)
      }
      if (signal?.aborted) onAbort()
      else signal?.addEventListener('abort', onAbort, { once: true })
    })
    return run()
  }

  release(): void {
    this.held.clear()
    for (const w of this.wake.splice(0)) w()
  }
}

async function waitingOne(store: HoldStore): Promise<void> {
  while (store.waiting === 0) await new Promise((r) => setTimeout(r, 2))
}

function abortedWith(reason: unknown) {
  return (err: unknown) => {
    assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), `rejected with ${String(err)}`)
    assert.match(err.message, /^SegmentFile\.create in mem:\/\/.* aborted$/)
    assert.equal(err.cause, reason)
    return true
  }
}

/** Resolves once `dir`'s log is free again: a create with it no longer meets the lock (ERR_STATE). */
async function walFreed(store: MemoryStore, dir: string): Promise<void> {
  for (;;) {
    try {
      const f = await SegmentFile.create(store, { wal: { dir } })
      await f.close()
      return
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_STATE')) throw err
      await new Promise((r) => setTimeout(r, 5))
    }
  }
}

describe('SegmentFile.create with a signal', () => {
  const walDir = walDirs('ss-create-signal-')

  it('a signal fired already: ERR_ABORTED, no request made', async () => {
    const store = new HoldStore(new MemoryStore())
    const reason = new Error('no longer wanted')
    await assert.rejects(SegmentFile.create(store, { signal: AbortSignal.abort(reason) }), abortedWith(reason))
    assert.equal(store.requests, 0)
  })

  for (const op of ['head', 'list'] as const) {
    it(`fired while its ${op} waits: that request is aborted, ERR_ABORTED; the signal let go`, async () => {
      const store = new HoldStore(new MemoryStore())
      store.held.add(op)
      const ac = new AbortController()
      const create = SegmentFile.create(store, { signal: ac.signal })
      await waitingOne(store)
      ac.abort('stop')
      await assert.rejects(within(create, 2000, 'the aborted create'), abortedWith('stop'))
      assert.equal(store.cut, 1)
      assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    })
  }

  it('fired while a request that does not hear it waits: ERR_ABORTED at once; the handle it gives later is closed, its WAL released', async (t) => {
    const base = new MemoryStore()
    const store = new HoldStore(base)
    store.deaf = true
    store.held.add('list')
    const dir = await walDir()
    const closes = t.mock.method(SegmentFile.prototype, 'close')
    const ac = new AbortController()
    const create = SegmentFile.create(store, { wal: { dir }, signal: ac.signal })
    await waitingOne(store)
    ac.abort('stop')
    await assert.rejects(within(create, 2000, 'the aborted create'), abortedWith('stop'))
    assert.equal(closes.mock.callCount(), 0)
    store.release()
    await within(walFreed(base, dir), 2000, 'the log of the handle created late released')
    assert.ok(closes.mock.callCount() >= 1)
    assert.equal(await hasInode(base), false)
  })

  it('fired while the publish of what its WAL replays waits: ERR_ABORTED, nothing published, the log kept and released', async () => {
    const base = new MemoryStore()
    const dir = await walDir()
    const ref = pattern(0, 40 * 1024, 3)
    // A create whose writer died before its first flush: its log holds the write.
    const first = await SegmentFile.create(base, { wal: { dir } })
    await first.write(0, ref)
    await first.close()
    const store = new HoldStore(base)
    store.held.add('put')
    const ac = new AbortController()
    const create = SegmentFile.create(store, { wal: { dir }, signal: ac.signal })
    await waitingOne(store)
    ac.abort('stop')
    await assert.rejects(within(create, 2000, 'the aborted create'), abortedWith('stop'))
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    store.release()
    // Released once the handle is closed; the next create (ERR_CONFLICT had the aborted one
    // published) replays the log and publishes it.
    let again: SegmentFile | undefined
    await within(
      (async () => {
        for (;;) {
          try {
            again = await SegmentFile.create(base, { wal: { dir } })
            return
          } catch (err) {
            if (!StreamSegmentError.is(err, 'ERR_STATE')) throw err
            await new Promise((r) => setTimeout(r, 5))
          }
        }
      })(),
      2000,
      'the log released',
    )
    const f = again as SegmentFile
    assert.equal(f.walReplay?.records, 1)
    assert.deepEqual(Buffer.from(await f.read(0, f.size)), ref)
    await f.close()
  })

  it("not fired: the create goes as without it; the handle's calls do not hear it", async () => {
    const base = new MemoryStore()
    const store = new HoldStore(base)
    const ac = new AbortController()
    const f = await SegmentFile.create(store, { signal: ac.signal })
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    ac.abort()
    await f.write(0, pattern(0, 8192, 1))
    await f.flush()
    await f.close()
    assert.equal(await hasInode(base), true)
  })

  it('refuses a signal that is none, before any request', async () => {
    const store = new HoldStore(new MemoryStore())
    await assert.rejects(SegmentFile.create(store, { signal: 'x' as never }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'))
      assert.match(err.message, /^SegmentFile\.create: signal must be an AbortSignal, got string/)
      return true
    })
    assert.equal(store.requests, 0)
  })
})
