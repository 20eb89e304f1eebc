/**
 * The read stream plans its range a window at a time, each walked while the GETs of the
 * one before run, the second beside the first. A window that fails to plan (a node read
 * failing) fails the stream: the pieces before it may come out, nothing after it ever
 * does (no gap, no wrong byte).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024

/** Holds every GET of a data part's object until `open` is called; `held` names them as they come. */
class GateStore extends WrappedStore {
  held: string[] = []
  private opened = false
  private waiting: Array<() => void> = []

  open(): void {
    this.opened = true
    for (const go of this.waiting.splice(0)) go()
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'get' && /^\d{10}\.[1-9]\d*$/.test(call.key) && !this.opened) {
      this.held.push(call.key)
      await new Promise<void>((go) => this.waiting.push(go))
    }
    return run()
  }
}

/** A file of `size` bytes in objects of ~3 MiB, and its bytes. */
async function stored(size: number): Promise<{ inner: MemoryStore; want: Buffer; objects: number }> {
  const inner = new MemoryStore()
  const f = await SegmentFile.create(inner, { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB })
  const want = Buffer.alloc(size)
  for (let at = 0; at < size; at += MiB) {
    const b = pattern(at, MiB, 7)
    b.copy(want, at)
    await f.write(at, b)
  }
  const { objects } = await f.flush()
  await f.close()
  return { inner, want, objects }
}

describe('read stream windows', () => {
  it("reads the second window's leaves beside the first's, before any of them has come", async () => {
    const { inner, want, objects } = await stored(24 * MiB)
    assert.ok(objects >= 8, `${objects} objects`)
    const store = new GateStore(inner)
    // Windows of 1 MiB, then 3 MiB (one GET short of the read-ahead), then 4 MiB.
    const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: MiB, readMaxConcurrency: 4 })
    const chunks: Buffer[] = []
    const drained = (async () => {
      for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
    })()
    // Held, nothing of a data part has come: the first window's leaf read (and its data GET,
    // on a guess) are out, and so are the second window's leaf reads, of other objects.
    const deadline = Date.now() + 5000
    while (new Set(store.held).size < 2 && Date.now() < deadline) await sleep(5)
    const keys = [...new Set(store.held)]
    store.open()
    await drained
    assert.ok(keys.length >= 2, `only ${keys.join(', ')} read before the first window's leaf came`)
    assert.ok(Buffer.concat(chunks).equals(want), 'the bytes read back')
    // The walk beside the first window reads nothing twice: one node read per object
    // (part 0's index, each data part's leaf span), as one walk of the whole range makes.
    const t = rs.timing
    assert.ok(t !== undefined)
    assert.equal(t.requests.meta, objects, `meta reads ${t.requests.meta}, ${objects} objects`)
  })

  it('a window whose walk fails fails the stream; every byte pushed before is right, none after', async () => {
    const size = 48 * MiB
    const { inner, want, objects } = await stored(size)
    assert.ok(objects >= 16, `${objects} objects`)
    for (const part of [3, 6, 9]) {
      // The first read of object `part` is its leaf span: it fails, in a window planned
      // while the GETs of the windows before it run.
      const store = new FailingStore(inner, [
        { ops: ['get'], key: new RegExp(`^0000000001\\.${part}$`), nth: 1, mode: 'error' },
      ])
      const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: MiB, readMaxConcurrency: 2 })
      let pos = 0
      let failure: unknown
      try {
        for await (const chunk of rs) {
          const c = chunk as Uint8Array
          assert.ok(
            Buffer.from(c).equals(want.subarray(pos, pos + c.byteLength)),
            `part ${part}: wrong bytes at ${pos}`,
          )
          pos += c.byteLength
          await sleep(3) // a slow consumer: pieces wait in the queue when the window fails
        }
      } catch (err) {
        failure = err
      }
      assert.ok(StreamSegmentError.is(failure, 'ERR_STORE'), `part ${part}: ${failure} after ${pos} of ${size} bytes`)
      assert.ok(pos < size, `part ${part}: the whole file came out`)
      assert.ok(
        store.calls.some((c) => c.outcome === 'failed'),
        `part ${part}: the failure was injected`,
      )
    }
  })
})
