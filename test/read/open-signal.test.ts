/**
 * SegmentFile.open's `signal`: it aborts the open's requests and the open rejects with
 * ERR_ABORTED (the signal's reason as cause), at once even when a request does not hear
 * it (a custom store's), whose handle, if the open then gives one, is closed. It is the
 * open's alone: the handle's later calls do not hear it, and the open lets go of it.
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectInfo, RequestOptions } from '../../lib/store/types.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/** Once armed, its GETs and HEADs wait: until their signal fires (`deaf` false), or until release(), heedless of it. */
class SlowStore extends WrappedStore {
  armed = true
  deaf = false
  requests = 0
  held = 0
  private wake: Array<() => void> = []

  override get(key: string, options?: GetOptions): Promise<Uint8Array> {
    return this.slow(options?.signal, () =>
      this.inner.get(key, this.deaf ? { ...options, signal: undefined } : options),
    )
  }

  override head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    return this.slow(options?.signal, () =>
      this.inner.head(key, this.deaf ? { ...options, signal: undefined } : options),
    )
  }

  private async slow<T>(signal: AbortSignal | undefined, run: () => Promise<T>): Promise<T> {
    this.requests++
    if (!this.armed) return run()
    this.held++
    await new Promise<void>((resolve, reject) => {
      this.wake.push(resolve)
      if (!this.deaf) signal?.addEventListener('abort', () => reject(signal.reason), { once: true })
    })
    return run()
  }

  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }

  release(): void {
    this.armed = false
    for (const w of this.wake.splice(0)) w()
  }
}

async function heldOne(store: SlowStore): Promise<void> {
  while (store.held === 0) await new Promise((r) => setTimeout(r, 2))
}

function abortedWith(reason: unknown) {
  return (err: unknown) => {
    assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), `rejected with ${String(err)}`)
    assert.match(err.message, /^SegmentFile\.open of mem:\/\/.* aborted$/)
    assert.equal(err.cause, reason)
    return true
  }
}

describe('SegmentFile.open with a signal', async () => {
  const base = new MemoryStore()
  const ref = pattern(0, 200 * 1024, 9)
  const f = await SegmentFile.create(base)
  await f.write(0, ref)
  await f.flush()
  await f.close()
  const kinds = { writer: {}, reader: { readOnly: true }, 'reader of a cno': { readOnly: true, cno: 1 } }

  for (const [kind, options] of Object.entries(kinds)) {
    it(`${kind}: a signal fired already: ERR_ABORTED, no request made`, async () => {
      const store = new SlowStore(base)
      const reason = new Error('no longer wanted')
      await assert.rejects(
        SegmentFile.open(store, { ...options, signal: AbortSignal.abort(reason) }),
        abortedWith(reason),
      )
      assert.equal(store.requests, 0)
    })

    it(`${kind}: fired while a request waits: that request is aborted, ERR_ABORTED`, async () => {
      const store = new SlowStore(base)
      const ac = new AbortController()
      const open = SegmentFile.open(store, { ...options, signal: ac.signal })
      await heldOne(store)
      ac.abort('stop')
      await assert.rejects(within(open, 2000, 'the aborted open'), abortedWith('stop'))
      assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    })
  }

  it('fired while a request that does not hear it waits: ERR_ABORTED at once; the handle it gives later is closed', async (t) => {
    const store = new SlowStore(base)
    store.deaf = true
    const closes = t.mock.method(SegmentFile.prototype, 'close')
    const ac = new AbortController()
    const open = SegmentFile.open(store, { readOnly: true, signal: ac.signal })
    await heldOne(store)
    ac.abort('stop')
    await assert.rejects(within(open, 2000, 'the aborted open'), abortedWith('stop'))
    assert.equal(closes.mock.callCount(), 0)
    store.release()
    const closed = async () => {
      while (closes.mock.callCount() === 0) await new Promise((r) => setTimeout(r, 5))
    }
    await within(closed(), 2000, 'the handle opened late closing')
    assert.equal(closes.mock.callCount(), 1)
  })

  it("not fired: the open goes as without it; the handle's calls do not hear it", async () => {
    const store = new SlowStore(base)
    store.armed = false
    const ac = new AbortController()
    const file = await SegmentFile.open(store, { readOnly: true, signal: ac.signal })
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
    ac.abort()
    assert.deepEqual(Buffer.from(await file.read(0, 4096)), ref.subarray(0, 4096))
    await file.close()
  })

  it('refuses a signal that is none, before any request', async () => {
    const store = new SlowStore(base)
    await assert.rejects(SegmentFile.open(store, { signal: 'x' as never }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'))
      assert.match(err.message, /^SegmentFile\.open: signal must be an AbortSignal, got string/)
      return true
    })
    assert.equal(store.requests, 0)
  })
})
