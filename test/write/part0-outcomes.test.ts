/**
 * What a failed or interrupted checkpoint leaves behind, in both formats: a new container
 * whose first inode write fails must still publish on the next flush; a part 0 whose
 * upload failed, or was cut by an abort, must never be rolled forward by a later writer
 * once the handle has let its changes go.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024
const FIRST = pattern(0, 10_000, 1)
const SECOND = pattern(0, 10_000, 2)
const FORMATS = ['stream', 'parted'] as const

describe('a new container whose first inode write fails', () => {
  for (const format of FORMATS) {
    for (const mode of ['error', 'lose-answer'] as const) {
      const outcome = mode === 'error' ? 'did not land' : 'landed, its answer lost'
      it(`${format}: the write ${outcome}; the next flush publishes`, async () => {
        const inner = new MemoryStore(`first-inode-${format}-${mode}`)
        const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, nth: 1, mode }])
        const f = await SegmentFile.create(store, { format })
        await f.write(0, FIRST)
        await rejectsCode(f.flush(), 'ERR_STORE')
        const t = await f.flush()
        assert.deepEqual(Buffer.from(await f.read(0, f.size)), FIRST)
        await f.close()
        assert.deepEqual(await readPublished(inner), { cno: t.cno, bytes: FIRST })
      })
    }

    it(`${format}: the first background publish's inode write fails; the next publish lands`, async () => {
      const inner = new MemoryStore(`first-inode-publish-${format}`)
      const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, nth: 1, mode: 'error' }])
      const f = await SegmentFile.create(store, { format })
      await f.write(0, FIRST)
      await rejectsCode(f.publish(), 'ERR_STORE')
      const t = await f.publish()
      await f.close()
      assert.deepEqual(await readPublished(inner), { cno: t.cno, bytes: FIRST })
    })
  }

  it("with conflictPolicy 'fail', a lost write that landed: a conflict, then the next flush publishes", async () => {
    const inner = new MemoryStore('first-inode-fail')
    const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, nth: 1, mode: 'lose-answer' }])
    const f = await SegmentFile.create(store, { conflictPolicy: 'fail' })
    await f.write(0, FIRST)
    await rejectsCode(f.flush(), 'ERR_STORE')
    // The container holds the lost write's checkpoint; the handle learns it at the inode.
    await rejectsCode(f.flush(), 'ERR_CONFLICT', /another writer got there first/)
    const t = await f.flush()
    await f.close()
    assert.deepEqual(await readPublished(inner), { cno: t.cno, bytes: FIRST })
  })
})

/**
 * A store on which one request (the first `op` on a key matching `key` once armed) is on the wire:
 * the caller's signal makes it give up at once, but the request reaches the inner store
 * only when `land()` is called, whatever the caller did (a server that had the request
 * already). `started` resolves once that request was made.
 */
class LateStore extends WrappedStore {
  private gate: (() => Promise<void>) | undefined
  private startedNow!: () => void
  readonly started = new Promise<void>((resolve) => {
    this.startedNow = resolve
  })
  private armed = false

  constructor(
    inner: ObjectStore,
    private readonly op: StoreOp,
    private readonly key: RegExp,
  ) {
    super(deaf(inner))
  }

  /** From now on, the next matching request is the one held. */
  arm(): void {
    this.armed = true
  }

  /** Lets the request through to the inner store; resolves once it is carried out. */
  land(): Promise<void> {
    return this.gate?.() ?? Promise.resolve()
  }

  protected around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (!this.armed || call.op !== this.op || !this.key.test(call.key)) return run()
    this.armed = false
    return new Promise<T>((resolve, reject) => {
      this.gate = () => {
        const done = run()
        done.then(resolve, reject)
        return done.then(
          () => undefined,
          () => undefined,
        )
      }
      call.signal?.addEventListener(
        'abort',
        () => reject(StreamSegmentError.aborted(`${call.op} ${call.key} aborted (it lands all the same)`)),
        { once: true },
      )
      this.startedNow()
    })
  }
}

/** `inner` ignoring every request's signal: a request sent is carried out. */
function deaf(inner: ObjectStore): ObjectStore {
  const strip = (arg: unknown) => {
    if (typeof arg !== 'object' || arg === null || !('signal' in arg)) return arg
    const { signal: _, ...rest } = arg as { signal?: AbortSignal }
    return rest
  }
  return new Proxy(inner, {
    get(target, name) {
      const value = Reflect.get(target, name, target)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => value.apply(target, args.map(strip))
    },
  })
}

/** The container as a later writer finds it: opened with roll-forward at once, then read. */
async function afterRollForward(inner: ObjectStore): Promise<{ cno: number; bytes: Buffer }> {
  const g = await SegmentFile.open(inner, { rollForwardAfterMs: 0 })
  await g.close()
  return readPublished(inner)
}

/**
 * A handle on `inner` with checkpoint 1 (FIRST) published and SECOND written over it, whose
 * next part 0 PutObject lands but loses its answer (or has it come past its deadline).
 */
async function lostAnswerNext(
  inner: ObjectStore,
  format: (typeof FORMATS)[number],
  mode: 'lose-answer' | 'late' = 'lose-answer',
  settings: { rollForwardAfterMs?: number } = {},
): Promise<SegmentFile> {
  const store = new FailingStore(inner)
  const f = await SegmentFile.create(store, { format, ...settings })
  await f.write(0, FIRST)
  await f.flush()
  await f.write(0, SECOND)
  store.addRule({ ops: ['put'], key: /\.0$/, nth: 1, mode })
  return f
}

describe('a part 0 whose checkpoint was not published is never rolled forward', () => {
  for (const format of FORMATS) {
    it(`${format}: part 0 landed with its answer lost, then a rollback`, async () => {
      const inner = new MemoryStore(`lost-part0-${format}`)
      const f = await lostAnswerNext(inner, format)
      await rejectsCode(f.flush(), 'ERR_STORE', /lost answer/)
      await f.rollback()
      await f.close()
      assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
    })

    it(`${format}: part 0 landed with its answer lost; the next flush of the handle publishes`, async () => {
      const inner = new MemoryStore(`lost-part0-again-${format}`)
      const f = await lostAnswerNext(inner, format)
      await rejectsCode(f.flush(), 'ERR_STORE', /lost answer/)
      const t = await f.flush()
      await f.close()
      assert.deepEqual(await afterRollForward(inner), { cno: t.cno, bytes: SECOND })
    })

    for (const call of ['flush', 'publish'] as const) {
      for (const end of ['rollback', 'close'] as const) {
        it(`${format}: part 0 landed past its deadline (${call}: ERR_TIMEOUT, left), then a ${end} deletes it`, async () => {
          const inner = new MemoryStore(`late-part0-${call}-${end}-${format}`)
          const f = await lostAnswerNext(inner, format, 'late')
          await rejectsCode(f[call](), 'ERR_TIMEOUT', /past|deadline/)
          assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'], 'left by the failed upload')
          if (end === 'rollback') await f.rollback()
          await f.close()
          assert.deepEqual(await partZeros(inner), ['0000000001.0'])
          assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
        })
      }
    }

    it(`${format}: part 0 landed past its deadline, the rollback's delete of it fails: the close deletes it`, async () => {
      const inner = new MemoryStore(`late-part0-delete-fails-${format}`)
      const store = new FailingStore(inner)
      const f = await SegmentFile.create(store, { format })
      await f.write(0, FIRST)
      await f.flush()
      await f.write(0, SECOND)
      store.addRule({ ops: ['put'], key: /\.0$/, nth: 1, mode: 'late' })
      store.addRule({ ops: ['delete'], key: /\.0$/, nth: 1, mode: 'error' })
      await rejectsCode(f.flush(), 'ERR_TIMEOUT', /past|deadline/)
      await f.rollback()
      assert.equal(store.count('delete', 'failed'), 1)
      assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'], 'left by the failed delete')
      await f.close()
      assert.deepEqual(await partZeros(inner), ['0000000001.0'], 'deleted by the close')
      assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
    })

    for (const end of ['rollback', 'close'] as const) {
      it(`${format}: part 0 landed past its deadline and may be old enough to roll forward: another writer publishes it, and the ${end} leaves it`, async () => {
        const inner = new MemoryStore(`late-part0-rolled-${end}-${format}`)
        // rollForwardAfterMs 0: any part 0 of a failed upload may have been rolled forward.
        const f = await lostAnswerNext(inner, format, 'late', { rollForwardAfterMs: 0 })
        await rejectsCode(f.flush(), 'ERR_TIMEOUT', /past|deadline/)
        assert.deepEqual(await afterRollForward(inner), { cno: 2, bytes: SECOND }, 'rolled forward by another writer')
        if (end === 'rollback') await f.rollback()
        await f.close()
        assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'])
        assert.deepEqual(await readPublished(inner), { cno: 2, bytes: SECOND })
      })
    }

    it(`${format}: part 0 landed past its deadline, then the next flush publishes: nothing left to roll forward`, async () => {
      const inner = new MemoryStore(`late-part0-then-flush-${format}`)
      const f = await lostAnswerNext(inner, format, 'late')
      await rejectsCode(f.flush(), 'ERR_TIMEOUT')
      const t = await f.flush()
      await f.close()
      assert.deepEqual(await afterRollForward(inner), { cno: t.cno, bytes: SECOND })
    })

    it(`${format}: a background publish whose part 0 landed with its answer lost, then a rollback`, async () => {
      const inner = new MemoryStore(`lost-part0-publish-${format}`)
      const f = await lostAnswerNext(inner, format)
      await rejectsCode(f.publish(), 'ERR_STORE', /lost answer/)
      await f.rollback()
      await f.close()
      assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
    })

    for (const [op, what, call] of [
      ['put', 'PutObject', 'flush'],
      ['completeMultipart', 'multipart completion', 'flush'],
      ['put', 'PutObject', 'publish'],
    ] as const) {
      it(`${format}: abort() while part 0's ${what} is on the wire, which lands afterwards (${call})`, async () => {
        const inner = new MemoryStore(`late-part0-${op}-${call}-${format}`)
        const store = new LateStore(inner, op, /\.0$/)
        // 4 KiB pieces: part 0 (three data blocks, a node, its header) goes up as a multipart upload.
        const pieces = op === 'put' ? {} : { segmentMpuChunkSize: 4096, segmentMaxObjectBytes: 4 * MiB }
        const f = await SegmentFile.create(store, { format, ...pieces })
        await f.write(0, FIRST)
        await f.flush()
        await f.write(0, SECOND)
        store.arm()
        const flushed = (call === 'flush' ? f.flush() : f.publish()).then(
          () => 'resolved',
          (err: unknown) => err,
        )
        await within(store.started, 2_000, `part 0's ${what}`)
        f.abort(new Error('stop'))
        await new Promise((resolve) => setTimeout(resolve, 50))
        await store.land()
        assert.notEqual(await within(flushed, 5_000, 'the aborted flush'), 'resolved')
        await f.close()
        // Nothing was published, and no part 0 is left for a later writer to publish.
        assert.deepEqual(await partZeros(inner), ['0000000001.0'])
        assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
      })
    }
  }
})

async function partZeros(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) if (e.key.endsWith('.0')) out.push(e.key)
  return out
}

/** An abort waits 100 ms, not 10 s, for the answer of a request that decides what is published. */
const waitShort = hooks({ abortWaitMs: 100 })

describe('an abort whose wait for an answer runs out', () => {
  for (const format of FORMATS) {
    // publish()'s outcome reaches the caller as it is; flush()'s passes SegmentFile's run(),
    // which answers an aborted handle's calls with the abort's error but for this one.
    for (const call of ['publish', 'flush'] as const) {
      it(`${format}: the inode write never answers: ${call}() is ERR_ABORTED saying the outcome is unknown, part 0 kept`, async () => {
        const inner = new MemoryStore(`hung-inode-${call}-${format}`)
        const store = new FailingStore(inner)
        const f = await SegmentFile.create(store, { format, ...waitShort })
        await f.write(0, FIRST)
        await f.flush()
        await f.write(0, SECOND)
        store.addRule({ ops: ['put'], key: /^inode$/, nth: 1, mode: 'hang' })
        const flushed = call === 'flush' ? f.flush() : f.publish()
        flushed.catch(() => undefined)
        while (store.count('put', 'hung') === 0) await new Promise((resolve) => setTimeout(resolve, 5))
        const reason = new Error('stop')
        f.abort(reason)
        const err = await rejectsCode(
          within(flushed, 2_000, 'the aborted flush'),
          'ERR_ABORTED',
          /checkpoint 2: aborted while its inode write was under way, which did not answer within 100 ms: whether the checkpoint was published is unknown; its part 0 \(0000000002\.0\) is kept/,
        )
        // The abort's own error (which carries the reason given to abort()) is the cause.
        assert.equal((err.cause as Error).cause, reason)
        await f.close()
        assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'])
      })
    }

    it(`${format}: part 0's PutObject never answers: the abort waits a bounded time`, async () => {
      const inner = new MemoryStore(`hung-part0-${format}`)
      const store = new FailingStore(inner)
      const f = await SegmentFile.create(store, { format, ...waitShort })
      await f.write(0, FIRST)
      await f.flush()
      await f.write(0, SECOND)
      store.addRule({ ops: ['put'], key: /\.0$/, nth: 1, mode: 'hang' })
      const flushed = f.flush()
      flushed.catch(() => undefined)
      while (store.count('put', 'hung') === 0) await new Promise((resolve) => setTimeout(resolve, 5))
      f.abort(new Error('stop'))
      await rejectsCode(within(flushed, 2_000, 'the aborted flush'), 'ERR_ABORTED')
      await within(f.close(), 2_000, 'close() after abort()')
      assert.deepEqual(await afterRollForward(inner), { cno: 1, bytes: FIRST })
    })
  }
})
