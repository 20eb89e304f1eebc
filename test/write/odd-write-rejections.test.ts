/**
 * The write calls against a store outside the contract whose requests reject with a value
 * that is no Error (`undefined`, a string): write, writeRef, writeZeroes, truncate, flush
 * and publish reject with ERR_STORE naming the call (or the request) and the
 * container and showing what was thrown, the value as `cause`, as the read calls do
 * (test/read/odd-rejections.test.ts). It is a store failure like any other: the handle
 * stays usable, and once the store answers, the same call and a flush publish exactly what
 * was written (settle, which waits for the objects sent ahead, resolves: their blocks go
 * again). A BlockSource of the caller's that rejects with such a value is ERR_STORE saying so (the
 * source's own words), its value as `cause`.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import type { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { BlockSource } from '../../lib/state/dirty-tier.js'
import { openedOver, readAll } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024
const SIZE = 200 * KiB

/** Once armed, its calls `op` (on keys matching `key`) reject with `thrown`; other calls pass. */
class OddStore extends WrappedStore {
  armed = false
  op: StoreOp = 'put'
  key: RegExp = /./
  thrown: unknown
  /** Calls that were failed. */
  failed = 0

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (!this.armed || call.op !== this.op || !this.key.test(call.key)) return run()
    this.failed++
    throw this.thrown
  }
}

/** A source whose bytes are the pattern's, or whose reads reject with `thrown` once armed. */
class OddSource implements BlockSource {
  armed = false
  constructor(
    readonly bytes: Buffer,
    readonly thrown: unknown,
  ) {}

  async read(position: number, length: number): Promise<Uint8Array> {
    if (this.armed) throw this.thrown
    return this.bytes.subarray(position, position + length)
  }
}

/** ERR_STORE saying the value thrown, which is its cause; `url` named. */
function storeFailure(thrown: 'undefined' | 'string', url: string, what: string) {
  return (err: unknown) => {
    assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `${what}: rejected with ${String(err)}`)
    assert.ok(err.message.includes(url), `${what}: ${err.message} names no ${url}`)
    assert.match(err.message, thrown === 'undefined' ? /undefined/ : /"?disk on fire"?/)
    assert.equal(err.cause, thrown === 'string' ? 'disk on fire' : undefined)
    return true
  }
}

interface Case {
  /** The call meeting the failure; a write is made again once the store answers (a flush follows). */
  call: string
  op: StoreOp
  key?: RegExp
  settings?: Partial<Settings>
  /** Before the store fails: changes of the model's (`ref`) written into `f`. */
  before?: (f: SegmentFile, ref: Buffer) => Promise<void>
  run: (f: SegmentFile, ref: Buffer) => Promise<unknown>
}

const unsent = { streamSegmentBytes: 0 }
const sentAhead = { streamSegmentBytes: 16 * KiB }

/** Writes `n` bytes at `at` into `f` and the model. */
function put(f: SegmentFile, ref: Buffer, at: number, n: number, seed: number): Promise<void> {
  const bytes = pattern(at, n, seed)
  bytes.copy(ref, at)
  return f.write(at, bytes)
}

const cases: Case[] = [
  // The old bytes of a partial block are read first (GET).
  { call: 'write', op: 'get', run: (f, ref) => put(f, ref, 20 * KiB + 5, 100, 2) },
  {
    call: 'writeZeroes',
    op: 'get',
    run: async (f, ref) => {
      await f.writeZeroes(10 * KiB + 5, 100)
      ref.fill(0, 10 * KiB + 5, 10 * KiB + 105)
    },
  },
  {
    call: 'truncate',
    op: 'get',
    run: async (f, ref) => {
      await f.truncate(SIZE - 100)
      ref.fill(0, SIZE - 100)
    },
  },
  // Past the dirty limit, the write waits for partial segments.
  ...(['createMultipart', 'uploadPart', 'completeMultipart'] as const).map(
    (op): Case => ({ call: 'write', op, settings: unsent, run: (f, ref) => put(f, ref, 0, 120 * KiB, 3) }),
  ),
  ...(['put', 'createMultipart', 'uploadPart', 'completeMultipart'] as const).flatMap((op): Case[] =>
    (['flush', 'publish'] as const).map((call) => ({
      call,
      op,
      // A write of a few blocks: part 0 is small enough for one PutObject unless it holds them.
      settings: unsent,
      before: (f, ref) => put(f, ref, op === 'put' ? 4 * KiB : 0, op === 'put' ? 4 * KiB : 40 * KiB, 5),
      run: (f) => (call === 'flush' ? f.flush() : f.publish()),
    })),
  ),
  // The inode written, If-Match.
  ...(['flush', 'publish'] as const).map(
    (call): Case => ({
      call,
      op: 'put',
      key: /^inode$/,
      settings: unsent,
      before: (f, ref) => put(f, ref, 0, 40 * KiB, 6),
      run: (f) => (call === 'flush' ? f.flush() : f.publish()),
    }),
  ),
]

/** A writer on `store` (failing as it is told) over a container holding the model (`ref`, SIZE bytes). */
function opened(settings: Partial<Settings>, thrown: unknown) {
  return openedOver(settings, SIZE, (base) => Object.assign(new OddStore(base), { thrown }))
}

describe('write calls whose store rejects with no Error', () => {
  for (const thrown of ['undefined', 'string'] as const) {
    const value = thrown === 'string' ? 'disk on fire' : undefined
    for (const c of cases) {
      const name = `${c.call}, ${c.op}${c.key ? ` of ${c.key.source}` : ''} failing (${thrown})`
      it(`${name}: ERR_STORE, its value the cause; the handle stays usable`, async () => {
        const { base, store, f, ref } = await opened({ ...smallSettings, ...c.settings }, value)
        store.op = c.op
        store.key = c.key ?? /./
        await c.before?.(f, ref)
        store.armed = true
        await assert.rejects(c.run(f, Buffer.from(ref)), storeFailure(thrown, base.url, name))
        assert.ok(store.failed > 0, `${name}: no ${c.op} failed`)
        store.armed = false
        if (c.call !== 'flush' && c.call !== 'publish') await c.run(f, ref)
        // After an inode write that failed, its outcome unknown, a publish meets a conflict
        // (flush.ts, commitPointUnknown); the flush publishes on top.
        await f.flush()
        await f.close()
        assert.deepEqual(await readAll(base), ref.subarray(0, f.size))
      })
    }

    // settle waits for the objects sent ahead, whose failures are the store's: it resolves,
    // and their blocks go again.
    for (const op of ['put', 'createMultipart', 'uploadPart', 'completeMultipart'] as const) {
      it(`settle, ${op} of the objects sent ahead failing (${thrown}): resolves; the blocks go again`, async () => {
        // Objects sent ahead go in one PutObject, or in 8 KiB pieces.
        const pieces = { segmentMpuChunkSize: op === 'put' ? 32 * KiB : 8 * KiB }
        const { base, store, f, ref } = await opened({ ...smallSettings, ...sentAhead, ...pieces }, value)
        store.op = op
        store.key = /^[^i]/ // not the inode
        store.armed = true
        await put(f, ref, 0, 40 * KiB, 4)
        await f.settle()
        assert.ok(store.failed > 0, `settle: no ${op} failed`)
        store.armed = false
        await f.flush()
        await f.close()
        assert.deepEqual(await readAll(base), ref)
      })
    }

    it(`writeRef, the source and then the store failing (${thrown}): ERR_STORE, the value the cause`, async () => {
      const { base, store, f, ref } = await opened({ ...smallSettings, ...unsent }, value)
      store.op = 'get'
      const source = new OddSource(pattern(0, 64 * KiB, 7), value)
      // Its head is a partial block: read from the source, the block's old bytes from the store.
      source.armed = true
      await assert.rejects(f.writeRef(1000, 40 * KiB, source, 1000), (err) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
        assert.match(err.message, /^block source: reading \d+ bytes at 1000 failed/)
        assert.equal(err.cause, value)
        return true
      })
      source.armed = false
      store.armed = true
      await assert.rejects(f.writeRef(1000, 40 * KiB, source, 1000), storeFailure(thrown, base.url, 'writeRef'))
      store.armed = false
      await f.writeRef(1000, 40 * KiB, source, 1000)
      source.bytes.copy(ref, 1000, 1000, 1000 + 40 * KiB)
      await f.flush()
      await f.close()
      assert.deepEqual(await readAll(base), ref)
    })
  }

  it('a rejection with an Error is passed on as it is', async () => {
    const error = new TypeError('a store of its own kind')
    for (const op of ['createMultipart', 'get'] as const) {
      const { store, f } = await opened({ ...smallSettings, ...unsent }, error)
      store.op = op
      store.armed = true
      const call = op === 'get' ? f.truncate(SIZE - 100) : f.write(0, pattern(0, 120 * KiB, 3))
      await assert.rejects(call, (err) => err === error)
      store.armed = false
      await f.close()
    }
  })
})
