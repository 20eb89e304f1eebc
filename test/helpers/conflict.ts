/**
 * Two real writers on one container (two handles that share nothing but the store):
 * the conflict policies, and a race of two flushes whose objects collide.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { ObjectStore } from '../../lib/store/types.js'
import type { FlushTiming } from '../../lib/write/flush.js'
import { pattern } from './pattern.js'

const KiB = 1024
const MiB = 1024 * KiB

async function contents(store: ObjectStore): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  return Buffer.from(await f.read(0, f.size))
}

export function runConflictTests(name: string, make: () => Promise<ObjectStore>, settings: Partial<Settings> = {}) {
  describe(`two writers: ${name}`, () => {
    it("conflictPolicy 'fail': the second publisher gets ERR_CONFLICT, keeps its data, and a second flush publishes it", async () => {
      const store = await make()
      const base = await SegmentFile.create(store, settings)
      await base.write(0, pattern(0, 100 * KiB, 1))
      await base.flush()
      const a = await SegmentFile.open(store, { ...settings, conflictPolicy: 'fail' })
      const b = await SegmentFile.open(store, { ...settings, conflictPolicy: 'fail' })
      await a.write(0, pattern(0, 50 * KiB, 2))
      await b.write(10 * KiB, pattern(10 * KiB, 50 * KiB, 3))
      assert.equal((await a.flush()).cno, 2)
      await assert.rejects(b.flush(), (err) => StreamSegmentError.is(err, 'ERR_CONFLICT'))
      assert.deepEqual(await contents(store), Buffer.concat([pattern(0, 50 * KiB, 2), pattern(50 * KiB, 50 * KiB, 1)]))
      // B still holds its write and, asked again, publishes on top of A (last writer wins).
      assert.deepEqual(Buffer.from(await b.read(10 * KiB, 50 * KiB)), pattern(10 * KiB, 50 * KiB, 3))
      const t = await b.flush()
      assert.ok(t.cno > 2, `cno ${t.cno}`)
      const want = Buffer.concat([
        pattern(0, 10 * KiB, 1),
        pattern(10 * KiB, 50 * KiB, 3),
        pattern(60 * KiB, 40 * KiB, 1),
      ])
      assert.deepEqual(await contents(store), want)
    })

    it("conflictPolicy 'retry' (default): the last writer wins, under a new checkpoint number", async () => {
      const store = await make()
      const base = await SegmentFile.create(store, settings)
      await base.write(0, pattern(0, 100 * KiB, 1))
      await base.flush()
      const a = await SegmentFile.open(store, settings)
      const b = await SegmentFile.open(store, settings)
      await a.write(0, pattern(0, 50 * KiB, 2))
      await b.write(10 * KiB, pattern(10 * KiB, 50 * KiB, 3))
      assert.equal((await a.flush()).cno, 2)
      const t = await b.flush()
      assert.equal(t.conflicts, 1)
      assert.ok(t.cno > 2, `cno ${t.cno}`)
      const want = Buffer.concat([
        pattern(0, 10 * KiB, 1),
        pattern(10 * KiB, 50 * KiB, 3),
        pattern(60 * KiB, 40 * KiB, 1),
      ])
      assert.deepEqual(await contents(store), want)
    })

    it('two writers creating one container at once: one wins, the other publishes after it; no mix', async () => {
      const store = await make()
      const a = await SegmentFile.create(store, settings)
      const b = await SegmentFile.create(store, settings)
      await a.write(0, pattern(0, 3 * MiB, 4))
      await b.write(0, pattern(0, 2 * MiB, 5))
      const [ta, tb] = await Promise.all([a.flush(), b.flush()])
      assert.notEqual(ta.cno, tb.cno)
      const last = ta.cno > tb.cno ? pattern(0, 3 * MiB, 4) : pattern(0, 2 * MiB, 5)
      assert.deepEqual(await contents(store), last)
      // Every published checkpoint is whole: the older one opens and reads as its writer wrote it.
      const older = await SegmentFile.open(store, { readOnly: true, cno: Math.min(ta.cno, tb.cno) })
      const first = ta.cno < tb.cno ? pattern(0, 3 * MiB, 4) : pattern(0, 2 * MiB, 5)
      assert.deepEqual(Buffer.from(await older.read(0, older.size)), first)
    })

    it("two writers sending ahead on one number at once, policy 'fail': one publishes, the other is ERR_CONFLICT, nothing of it in the winner's objects", async () => {
      const piece = settings.segmentMpuChunkSize ?? 16 * MiB
      // Objects of two pieces, filled as they are written: the writers' claims collide
      // under the number both took, and each moves on at its first collision.
      const ahead = {
        ...settings,
        conflictPolicy: 'fail' as const,
        streamSegmentBytes: 2 * piece,
        dataCacheDirtyMaxBytesThreshold: 16 * piece,
        segmentBufferSize: 16 * piece,
      }
      const store = await make()
      const base = await SegmentFile.create(store, ahead)
      await base.write(0, pattern(0, 100 * KiB, 1))
      await base.flush()
      await base.close()
      const a = await SegmentFile.open(store, ahead)
      const b = await SegmentFile.open(store, ahead)
      const size = 7 * piece + 12 * KiB
      const step = piece / 4
      for (let at = 0; at < size; at += step) {
        const n = Math.min(step, size - at)
        await a.write(at, pattern(at, n, 6))
        await b.write(at, pattern(at, n, 7))
      }
      const results = await Promise.allSettled([a.flush(), b.flush()])
      const won = results.findIndex((r) => r.status === 'fulfilled')
      assert.ok(won >= 0, 'one of them published')
      const t = (results[won] as PromiseFulfilledResult<FlushTiming>).value
      assert.ok(t.streamSentBytes >= 2 * piece, `${t.streamSentBytes} bytes sent ahead`)
      const lost = results[1 - won] as PromiseSettledResult<unknown>
      assert.equal(lost.status, 'rejected')
      assert.ok(StreamSegmentError.is(lost.reason, 'ERR_CONFLICT'), String(lost.reason))
      assert.deepEqual(await contents(store), pattern(0, size, won === 0 ? 6 : 7))
      assert.deepEqual((await verifyCheckpoint(store)).problems, [])
      const first = await SegmentFile.open(store, { readOnly: true, cno: 1 })
      assert.deepEqual(Buffer.from(await first.read(0, first.size)), pattern(0, 100 * KiB, 1))
      await Promise.all([a.close(), b.close(), first.close()])
    })
  })
}
