/**
 * A part 0 stored and then given up before its inode write (a source that changed, an abort
 * before the inode write) is deleted so that no writer opening the container publishes it;
 * but a writer opening the container meanwhile may have published it already (roll-forward:
 * a part 0 is dated by when its upload started, so one whose upload, and what came after it,
 * took `rollForwardAfterMs` is old enough at once). Deleted then, the published checkpoint
 * would lose its part 0. Here `rollForwardAfterMs` 0 makes every part 0 old enough.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished, within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { hooks, smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const FIRST = pattern(0, 10_000, 1)
const SECOND = pattern(0, 10_000, 2)
const FORMATS = ['stream', 'parted'] as const

/** A writer opening the container now, rolling forward any complete part 0 at once. */
async function openAndRollForward(inner: ObjectStore): Promise<void> {
  const g = await SegmentFile.open(inner, { rollForwardAfterMs: 0 })
  await g.close()
}

/** Runs `after` once the next part 0 PutObject (once armed) is stored, before it answers. */
class AfterPart0 extends WrappedStore {
  after: (() => Promise<void>) | undefined
  /** Once set, the next listing calls it and fails as cut by an abort. */
  cutList: (() => void) | undefined
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const cut = this.cutList
    if (cut !== undefined && call.op === 'list') {
      this.cutList = undefined
      cut()
      throw StreamSegmentError.aborted(`list ${call.key}: aborted`)
    }
    const result = await run()
    const after = this.after
    if (after !== undefined && (call.op === 'put' || call.op === 'completeMultipart') && /\.0$/.test(call.key)) {
      this.after = undefined
      await after()
    }
    return result
  }
}

async function partZeros(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) if (e.key.endsWith('.0')) out.push(e.key)
  return out
}

describe('a part 0 given up after another writer may have rolled it forward is kept', () => {
  for (const format of FORMATS) {
    it(`${format}: a source changed, found after another writer published the checkpoint`, async () => {
      const inner = new MemoryStore(`give-up-verify-${format}`)
      const f = await SegmentFile.create(inner, { format, rollForwardAfterMs: 0 })
      await f.write(0, FIRST)
      await f.flush()
      let opened = false
      await f.writeRef(0, SECOND.length, {
        read: async (position, length) => SECOND.subarray(position, position + length),
        verify: async () => {
          // Part 0 is stored: a writer opening the container now publishes it.
          await openAndRollForward(inner)
          opened = true
          throw StreamSegmentError.state('the source changed')
        },
      })
      await rejectsCode(
        f.flush(),
        'ERR_STATE',
        /the source changed; yet checkpoint 2's part 0 \(0000000002\.0\) is kept/,
      )
      assert.ok(opened)
      await f.rollback()
      await f.close()
      assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'])
      assert.deepEqual(await readPublished(inner), { cno: 2, bytes: SECOND })
    })

    it(`${format}: abort() cuts the look at its own objects, after another writer published the checkpoint`, async () => {
      const inner = new MemoryStore(`give-up-list-${format}`)
      const store = new AfterPart0(inner)
      // Data parts before part 0: the flush lists them before its inode write.
      const f = await SegmentFile.create(store, { format, ...smallSettings, rollForwardAfterMs: 0 })
      const first = pattern(0, 256 * 1024, 1)
      const second = pattern(0, 256 * 1024, 2)
      await f.write(0, first)
      await f.flush()
      await f.write(0, second)
      store.after = async () => {
        await openAndRollForward(inner)
        store.cutList = () => f.abort(new Error('stop'))
      }
      await rejectsCode(
        f.flush(),
        'ERR_ABORTED',
        /part 0 was stored; checkpoint 2's part 0 \(0000000002\.0\) is kept: .*whether the checkpoint was published is unknown/,
      )
      await f.close()
      assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'])
      assert.deepEqual(await readPublished(inner), { cno: 2, bytes: second })
    })

    for (const call of ['flush', 'publish'] as const) {
      it(`${format}: abort() after part 0 is stored and another writer published it, before the inode write (${call})`, async () => {
        const inner = new MemoryStore(`give-up-abort-${call}-${format}`)
        const store = new AfterPart0(inner)
        const f = await SegmentFile.create(store, { format, rollForwardAfterMs: 0 })
        await f.write(0, FIRST)
        await f.flush()
        await f.write(0, SECOND)
        store.after = async () => {
          await openAndRollForward(inner)
          f.abort(new Error('stop'))
        }
        await rejectsCode(
          call === 'flush' ? f.flush() : f.publish(),
          'ERR_ABORTED',
          /part 0 was stored; checkpoint 2's part 0 \(0000000002\.0\) is kept: .*whether the checkpoint was published is unknown/,
        )
        await f.close()
        assert.deepEqual(await partZeros(inner), ['0000000001.0', '0000000002.0'])
        assert.deepEqual(await readPublished(inner), { cno: 2, bytes: SECOND })
      })
    }
  }
})

/** Runs `before` ahead of the next inode write (once armed), then lets the write go. */
class BeforeInodeWrite extends WrappedStore {
  before: (() => Promise<void>) | undefined
  /** Once that write is made, reads of the inode never answer (until their signal fires). */
  deafAfter = false
  private deaf = false
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (this.deaf && call.key === 'inode') {
      return new Promise<T>((_, reject) => {
        const signal = call.signal
        if (signal?.aborted) reject(signal.reason)
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true })
      })
    }
    const before = this.before
    if (before !== undefined && call.op === 'put' && call.key === 'inode') {
      this.before = undefined
      await before()
      this.deaf = this.deafAfter
    }
    return run()
  }
}

describe('a stop that meets the inode write, whose checkpoint another writer rolled forward meanwhile', () => {
  for (const format of FORMATS) {
    for (const call of ['flush', 'publish'] as const) {
      it(`${format}: the write fails its condition; ${call}() says the checkpoint is published`, async () => {
        const inner = new MemoryStore(`rolled-then-abort-${call}-${format}`)
        const store = new BeforeInodeWrite(inner)
        const f = await SegmentFile.create(store, { format })
        await f.write(0, FIRST)
        await f.flush()
        await f.write(0, SECOND)
        store.before = async () => {
          await openAndRollForward(inner)
          f.abort(new Error('stop'))
        }
        const t = await (call === 'flush' ? f.flush() : f.publish())
        assert.equal(t.cno, 2)
        await f.close()
        assert.deepEqual(await readPublished(inner), { cno: 2, bytes: SECOND })
      })

      it(`${format}: the inode read again does not answer in time; ${call}() says the outcome is unknown`, async () => {
        const inner = new MemoryStore(`rolled-then-abort-deaf-${call}-${format}`)
        const store = new BeforeInodeWrite(inner)
        const f = await SegmentFile.create(store, { format, ...hooks({ abortWaitMs: 100 }) })
        await f.write(0, FIRST)
        await f.flush()
        await f.write(0, SECOND)
        store.deafAfter = true
        store.before = async () => {
          await openAndRollForward(inner)
          f.abort(new Error('stop'))
        }
        await rejectsCode(
          within(call === 'flush' ? f.flush() : f.publish(), 2_000, 'the aborted flush'),
          'ERR_ABORTED',
          /checkpoint 2: aborted after its inode write failed its condition.*whether a writer rolled the checkpoint forward \(published it\) is unknown/,
        )
        await f.close()
        assert.deepEqual(await readPublished(inner), { cno: 2, bytes: SECOND })
      })
    }
  }
})
