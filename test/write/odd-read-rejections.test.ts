/**
 * The reads a writer makes while it writes, sends ahead, flushes and gives changes up,
 * against a store outside the contract whose requests reject with a value that is no Error
 * (`undefined`, a string): block-map leaves loaded by random writes into an opened
 * container while objects are sent ahead, the flush's LIST of its own objects, the commit
 * point read again after a conflict, the background publish's LIST of the numbers taken.
 * Each fails its call with ERR_STORE naming the call and the container, the value as
 * `cause`: a store failure like any other (test/write/odd-write-rejections.test.ts has
 * the uploads), never taken for a bug. The handle stays usable, and once the store
 * answers, a flush publishes exactly what was written. `rollback` and `close` give
 * changes up whatever the store does: a request of theirs that fails so (the abort of the
 * object sent ahead, the look at a part 0 left) is logged, and they resolve.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { openedOver, readAll } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024
const SIZE = 1024 * KiB

/**
 * Once armed, every `every`-th of its calls `ops` on keys matching `key` rejects with
 * `thrown`; the others pass. Once `late` is set, the request that makes a part 0 visible
 * (its PutObject or completion) lands, then fails as past its deadline (ERR_TIMEOUT).
 */
class OddStore extends WrappedStore {
  armed = false
  ops: StoreOp[] = ['get']
  key: RegExp = /(?:)/
  every = 1
  thrown: unknown
  late = false
  private seen = 0
  /** The calls failed, as `<op> <key>`. */
  readonly failed: string[] = []

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (this.late && (call.op === 'put' || call.op === 'completeMultipart') && call.key.endsWith('.0')) {
      this.late = false
      await run()
      throw StreamSegmentError.timeout(`${call.key}: no answer before the deadline`)
    }
    if (!this.armed || !this.ops.includes(call.op) || !this.key.test(call.key)) return run()
    if (++this.seen % this.every !== 0) return run()
    this.failed.push(`${call.op} ${call.key}`)
    throw this.thrown
  }
}

/** ERR_STORE naming `call` and the container and saying the value thrown, which is its cause. */
function storeFailure(value: unknown, url: string, call: RegExp) {
  return (err: unknown) => {
    assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
    assert.match(err.message, call)
    assert.ok(err.message.includes(url), `${err.message} names no ${url}`)
    const said = value === undefined ? 'undefined' : JSON.stringify(value)
    assert.ok(err.message.includes(`failed with ${said}, which is not an Error`), err.message)
    assert.equal(err.cause, value)
    return true
  }
}

/** A deterministic sequence of numbers in [0, 1). */
function numbers(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

/** Writes `n` bytes at `at` into `f` and the model. */
async function put(f: SegmentFile, ref: Buffer, at: number, n: number, seed: number): Promise<void> {
  const bytes = pattern(at, n, seed)
  await f.write(at, bytes)
  bytes.copy(ref, at)
}

/** A writer on `store` (failing as it is told) over a container holding the model (`ref`, SIZE bytes). */
function opened(settings: Partial<Settings>, thrown: unknown) {
  return openedOver(settings, SIZE, (base) => Object.assign(new OddStore(base), { thrown }))
}

// Objects sent ahead at 16 KiB (whole, in one PutObject); few block-map nodes kept in memory.
const sentAhead = { ...smallSettings, streamSegmentBytes: 16 * KiB, nodeCacheNodes: 16 }
// Objects sent ahead at 40 KiB in 8 KiB pieces: a multipart object stays open between writes.
const openObject = { ...smallSettings, streamSegmentBytes: 40 * KiB, segmentMpuChunkSize: 8 * KiB }

describe("a writer's reads whose store rejects with no Error", () => {
  for (const value of [undefined, 'disk on fire']) {
    const thrown = value === undefined ? 'undefined' : 'string'

    it(`random writes loading leaves while objects are sent ahead, a GET in three failing (${thrown})`, async () => {
      const { base, store, f, ref } = await opened(sentAhead, value)
      store.key = /^\d+\.\d+$/ // the segment objects: nodes, headers, the old bytes of partial blocks
      store.every = 3
      store.armed = true
      const next = numbers(7)
      const failed: Array<{ at: number; bytes: Buffer }> = []
      for (let i = 0; i < 80; i++) {
        const at = Math.floor(next() * (SIZE - 20 * KiB))
        const bytes = pattern(at, 1 + Math.floor(next() * 20 * KiB), 10 + i)
        try {
          await f.write(at, bytes)
          bytes.copy(ref, at)
        } catch (err) {
          storeFailure(value, base.url, /^write of \d+ bytes at \d+ of /)(err)
          failed.push({ at, bytes })
        }
        // The objects sent ahead so far complete (or fail, their blocks going again): never a bug.
        if (i % 10 === 9) await f.settle()
      }
      assert.ok(failed.length > 0 && failed.length < 80, `${failed.length} of 80 writes failed`)
      store.armed = false
      // Written again once the store answers, in order: what a failed write changed is overwritten.
      for (const { at, bytes } of failed) {
        await f.write(at, bytes)
        bytes.copy(ref, at)
      }
      await f.flush()
      await f.close()
      assert.deepEqual(await readAll(base), ref)
    })

    it(`flush, the LIST of the objects it stored before part 0 failing (${thrown})`, async () => {
      const { base, store, f, ref } = await opened(sentAhead, value)
      // More than the dirty limit: partial segments, then the flush's own data parts.
      for (let i = 0; i < 6; i++) await put(f, ref, i * 150 * KiB, 20 * KiB, 20 + i)
      store.ops = ['list']
      store.armed = true
      await assert.rejects(f.flush(), storeFailure(value, base.url, /^flush of /))
      assert.ok(store.failed.length > 0, 'no LIST failed')
      store.armed = false
      await f.flush()
      await f.close()
      assert.deepEqual(await readAll(base), ref)
    })

    for (const op of ['head', 'get'] as const) {
      for (const call of ['flush', 'publish'] as const) {
        it(`${call} meeting a conflict, the ${op} of the commit point read again failing (${thrown})`, async () => {
          const { base, store, f, ref } = await opened(smallSettings, value)
          // Another writer publishes first: this one's inode write meets a conflict.
          const other = await SegmentFile.open(base, smallSettings)
          await other.write(500 * KiB, pattern(0, 10 * KiB, 30))
          await other.flush()
          await other.close()
          await put(f, ref, 100 * KiB, 10 * KiB, 31)
          store.ops = [op]
          store.key = /^inode$/
          store.armed = true
          await assert.rejects(
            call === 'flush' ? f.flush() : f.publish(),
            storeFailure(value, base.url, new RegExp(`^${call} of `)),
          )
          assert.ok(store.failed.length > 0, `no ${op} failed`)
          store.armed = false
          // Its view goes on top of the other writer's checkpoint (conflictPolicy 'retry').
          await f.flush()
          await f.close()
          assert.deepEqual(await readAll(base), ref)
        })
      }
    }

    it(`publish, the LIST of the numbers taken failing (${thrown})`, async () => {
      const { base, store, f, ref } = await opened(smallSettings, value)
      await put(f, ref, 100 * KiB, 10 * KiB, 40)
      store.ops = ['list']
      store.armed = true
      await assert.rejects(f.publish(), storeFailure(value, base.url, /^publish of /))
      assert.ok(store.failed.length > 0, 'no LIST failed')
      store.armed = false
      await f.publish()
      await f.close()
      assert.deepEqual(await readAll(base), ref)
    })

    for (const end of ['rollback', 'close'] as const) {
      it(`${end} with a multipart object sent ahead open, every request failing (${thrown}): resolves`, async () => {
        const { base, store, f, ref } = await opened(openObject, value)
        const changed = Buffer.from(ref)
        await put(f, changed, 0, 32 * KiB, 50) // 4 pieces of an object of 5: it stays open
        await f.settle()
        store.ops = ['put', 'get', 'head', 'list', 'delete', 'uploadPart', 'completeMultipart', 'abortMultipart']
        store.armed = true
        if (end === 'rollback') await f.rollback()
        else await f.close()
        assert.ok(
          store.failed.some((c) => c.startsWith('abortMultipart ')),
          `the open object was not aborted: ${store.failed}`,
        )
        store.armed = false
        if (end === 'rollback') {
          // The changes are given up; the handle goes on.
          await put(f, ref, 5, 100, 51)
          await f.flush()
          await f.close()
        }
        assert.deepEqual(await readAll(base), ref)
      })

      it(`${end} after a part 0 landed past its deadline, the look at it failing (${thrown}): resolves`, async () => {
        const { base, store, f, ref } = await opened(smallSettings, value)
        await put(f, Buffer.from(ref), 0, 10 * KiB, 60)
        store.late = true
        await assert.rejects(f.flush(), (err) => StreamSegmentError.is(err, 'ERR_TIMEOUT'))
        assert.ok((await base.head('0000000002.0')) !== undefined, 'part 0 landed')
        store.ops = ['get', 'head', 'delete']
        store.armed = true
        if (end === 'rollback') await f.rollback()
        else await f.close()
        assert.deepEqual(store.failed, ['get 0000000002.0'], 'the part 0 left was looked at')
        store.armed = false
        assert.ok((await base.head('0000000002.0')) !== undefined, 'part 0 is left: its delete was never sent')
        if (end === 'rollback') {
          await put(f, ref, 20 * KiB, 100, 61)
          await f.flush()
          await f.close()
        }
        assert.deepEqual(await readAll(base), ref)
      })
    }
  }
})
