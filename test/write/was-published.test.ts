/**
 * A flush whose inode write failed its condition learns whether another writer rolled its
 * checkpoint forward by walking the published chain back (container/inode.ts
 * wasPublished). A part 0 on that chain that is gone (a cleaner dropped the checkpoint)
 * must not be taken for "not published" when the checkpoint may have been: the flush
 * would report a conflict it did not lose ('fail'), or publish its view again on top of
 * what was built on its own checkpoint, undoing the other writer's writes ('retry'). It
 * says that the outcome is unknown instead. A link gone whose successor was stored before
 * this checkpoint's part 0 still proves it was not published: the plain conflict.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { gc } from '../../lib/admin/index.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { readPublished } from '../helpers/containers.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/** Runs `before` once, just ahead of the first write of the `inode` object through it. */
class BeforeInodePut extends WrappedStore {
  constructor(
    inner: ObjectStore,
    private before: (() => Promise<void>) | undefined,
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'put' && call.key === 'inode' && this.before !== undefined) {
      const before = this.before
      this.before = undefined
      await before()
    }
    return await run()
  }
}

const block = (fill: number) => Buffer.alloc(4096, fill)

/** A container whose one block holds `fill`, published as checkpoint 1. */
async function oneBlock(fill: number): Promise<MemoryStore> {
  const inner = new MemoryStore()
  const f = await SegmentFile.create(inner)
  await f.write(0, block(fill))
  await f.flush()
  await f.close()
  return inner
}

/** Another writer writes `fill` over the block and publishes, `times` times. */
async function publishOver(store: ObjectStore, fill: number, times: number, rollForwardAfterMs = 60_000) {
  const r = await SegmentFile.open(store, { rollForwardAfterMs })
  const cnos = [r.cno]
  for (let i = 0; i < times; i++) {
    await r.write(0, block(fill + i))
    cnos.push((await r.flush()).cno)
  }
  await r.close()
  return cnos
}

describe('wasPublished: a part 0 of the published chain gone', () => {
  for (const conflictPolicy of ['fail', 'retry'] as const) {
    it(`checkpoint rolled forward, built on, then the chain above it dropped by gc: the outcome is unknown, never "not published" (${conflictPolicy})`, async () => {
      const inner = await oneBlock(1)
      // While W's part 0 (2, on 1) is stored and its inode write not yet sent: another
      // writer rolls 2 forward, publishes 3 and 4 on it, and a cleaner with no grace period
      // drops 1, 2 and 3 (4 alone reaches what it needs: the one block, in its part 0).
      const w = await SegmentFile.open(
        new BeforeInodePut(inner, async () => {
          assert.deepEqual(await publishOver(inner, 0x30, 2, 0), [2, 3, 4], 'rolled 2 forward, then 3 and 4')
          const g = await gc(inner, { graceMs: 0 })
          assert.deepEqual(g.kept, [4])
          assert.equal(await inner.head(segmentKey(3, 0)), undefined, "3's part 0 is gone")
        }),
        { conflictPolicy },
      )
      await w.write(0, block(2))
      const outcome = await w.flush().then(
        (t) => t,
        (e: unknown) => e,
      )
      await w.close().catch(() => undefined)
      // The other writer's last write, made on top of W's published checkpoint, stays.
      const published = await readPublished(inner)
      assert.deepEqual(
        [published.cno, published.bytes[0]],
        [4, 0x31],
        `the other writer's checkpoint 4 stays published (the flush gave ${outcome instanceof Error ? outcome.message : JSON.stringify(outcome)})`,
      )
      assert.ok(StreamSegmentError.is(outcome), `the flush fails: ${JSON.stringify(outcome)}`)
      assert.match(outcome.message, /whether checkpoint 2 was published is unknown/)
      assert.match(outcome.message, /0000000003\.0/)
    })
  }

  it('a link gone whose successor was stored before this part 0 proves the checkpoint was not published: a plain conflict', async () => {
    const inner = await oneBlock(1)
    const w = await SegmentFile.open(inner, { conflictPolicy: 'fail' }) // its checkpoint will be 2
    // Number 2 taken (as by W's data parts sent ahead): the other writer publishes 3, 4, 5.
    await inner.put(segmentKey(2, 7), block(9))
    assert.deepEqual(await publishOver(inner, 0x30, 3), [1, 3, 4, 5])
    await inner.delete(segmentKey(4, 0)) // a cleaner dropped 4, superseded long ago
    await sleep(5) // W's part 0 stored after 5's, by the store's clock
    await w.write(0, block(2))
    await assert.rejects(w.flush(), (e: unknown) => {
      assert.ok(StreamSegmentError.is(e, 'ERR_CONFLICT'), String(e))
      assert.match(e.message, /checkpoint 2 was not published: another writer got there first/)
      return true
    })
    await w.close().catch(() => undefined)
    assert.deepEqual((await readPublished(inner)).cno, 5)
  })
})
