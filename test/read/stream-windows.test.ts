/**
 * The read stream plans its range a window at a time, each walked while the GETs of the
 * one before run. A window that fails to plan (a node read failing) fails the stream:
 * the pieces before it may come out, nothing after it ever does (no gap, no wrong byte).
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

const MiB = 1024 * 1024

describe('read stream windows', () => {
  it('a window whose walk fails fails the stream; every byte pushed before is right, none after', async () => {
    const inner = new MemoryStore()
    const size = 48 * MiB
    const f = await SegmentFile.create(inner, { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB })
    const want = Buffer.alloc(size)
    for (let at = 0; at < size; at += MiB) {
      const b = pattern(at, MiB, 7)
      b.copy(want, at)
      await f.write(at, b)
    }
    const { objects } = await f.flush()
    await f.close()
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
