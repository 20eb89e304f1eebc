/**
 * gc beside writers that publish while it runs. A complete checkpoint built on the
 * published inode is one a writer opening the container rolls forward to: gc keeps it
 * (swept, the roll-forward would publish a checkpoint whose objects are gone). A checkpoint
 * published just after gc's listing must not hide the published part 0 from the walk of
 * the checkpoints superseded lately: gc reads the inode before it lists, and the second
 * look at the inode stops it. A candidate whose header comes damaged in one answer (a bit
 * flipped on the way) is read again, and kept.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { AfterList, type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

async function publish(store: MemoryStore, bytes: Buffer): Promise<number> {
  const f = await SegmentFile.open(store).catch(() => SegmentFile.create(store))
  await f.write(0, bytes)
  const { cno } = await f.flush()
  await f.close()
  return cno
}

/**
 * Flips the last byte of `key`'s first GET answer whose bytes hold a header magic (a bit
 * flipped on the way): its CRC then fails once.
 */
class FlipHeaderOnce extends WrappedStore {
  flipped = 0
  constructor(
    inner: MemoryStore,
    readonly key: string,
  ) {
    super(inner)
  }
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const result = await run()
    if (call.op !== 'get' || call.key !== this.key || this.flipped > 0) return result
    const bytes = Buffer.from(result as Uint8Array)
    if (bytes.indexOf('SSEGTAIL') < 0) return result
    bytes[bytes.length - 1] = (bytes[bytes.length - 1] as number) ^ 0x10
    this.flipped++
    return bytes as unknown as T
  }
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms))

describe('gc beside writers', () => {
  for (const damaged of [false, true]) {
    const what = damaged
      ? 'keeps a roll-forward candidate whose header was damaged in one answer: it is read again'
      : 'keeps a complete checkpoint built on the published inode: the next writer rolls forward to it, whole'
    it(what, async () => {
      const inner = new MemoryStore(`gc-roll-forward-${damaged ? 'flipped' : 'candidate'}`)
      const a = pattern(0, 300_000, 1)
      const b = pattern(0, 400_000, 2)
      assert.equal(await publish(inner, a), 1)
      const inodeOfOne = Buffer.from(await inner.get('inode'))
      assert.equal(await publish(inner, b), 2)
      // Checkpoint 2's writer "died" between its part 0 and its inode write.
      await inner.put('inode', inodeOfOne)
      assert.deepEqual(await readPublished(inner), { cno: 1, bytes: a })

      const store = damaged ? new FlipHeaderOnce(inner, '0000000002.0') : inner
      const r = await gc(store, { graceMs: 0 })
      if (store instanceof FlipHeaderOnce) assert.equal(store.flipped, 1, "a read of 2's header was damaged")
      assert.deepEqual(r.kept, [1, 2])
      assert.ok(!r.deletedKeys.some((k) => k.startsWith('0000000002.')), r.deletedKeys.join(' '))
      const w = await SegmentFile.open(inner, { rollForwardAfterMs: 0 })
      assert.equal(w.cno, 2, 'rolled forward')
      await w.close()
      assert.deepEqual(await readPublished(inner), { cno: 2, bytes: b })
    })
  }

  it('keeps a chain of complete checkpoints each built on the one before, from the published inode: the roll-forward publishes them all', async () => {
    const inner = new MemoryStore('gc-roll-forward-chain')
    const a = pattern(0, 300_000, 1)
    assert.equal(await publish(inner, a), 1)
    const inodeOfOne = Buffer.from(await inner.get('inode'))
    assert.equal(await publish(inner, pattern(0, 400_000, 2)), 2)
    // 3 replaces every byte of 2: nothing of it is reached from 1 or 2.
    const c = pattern(0, 400_000, 3)
    assert.equal(await publish(inner, c), 3)
    // The inode as it was at 1 (restored): a writer opening rolls forward to 2, then to 3.
    await inner.put('inode', inodeOfOne)
    const r = await gc(inner, { graceMs: 0 })
    assert.deepEqual(r.kept, [1, 2, 3])
    assert.ok(!r.deletedKeys.some((k) => k.startsWith('0000000003.')), r.deletedKeys.join(' '))
    const w = await SegmentFile.open(inner, { rollForwardAfterMs: 0 })
    assert.equal(w.cno, 3, 'rolled forward twice')
    await w.close()
    assert.deepEqual(await readPublished(inner), { cno: 3, bytes: c })
  })

  it('a checkpoint published just after the listing: a writer opened on one superseded lately still publishes', async () => {
    const inner = new MemoryStore('gc-publish-after-list')
    const graceMs = 300
    const one = pattern(0, 200_000, 3)
    assert.equal(await publish(inner, one), 1)
    await sleep(graceMs + 100) // checkpoint 1's objects are past the grace period
    const w = await SegmentFile.open(inner) // a writer opened on 1
    // 2 and 3 replace every byte: nothing of 1 is reached from them.
    assert.equal(await publish(inner, pattern(0, 200_000, 4)), 2) // 1 superseded just now
    const store = new AfterList(inner)
    store.afterList = async () => {
      await publish(inner, pattern(0, 200_000, 5)) // 3, between gc's listing and what follows
    }
    const r = await gc(store, { graceMs })
    assert.equal(store.afterList, undefined, 'the hook ran')
    assert.ok(!r.deletedKeys.some((k) => k.startsWith('0000000001.')), `deleted ${r.deletedKeys.join(' ')}`)
    // The writer's view is checkpoint 1 plus its write; on the conflict it publishes that whole.
    const mine = pattern(0, 50_000, 6)
    await w.write(0, mine)
    const { cno } = await w.flush()
    await w.close()
    const expected = Buffer.concat([mine, one.subarray(mine.length)])
    assert.deepEqual(await readPublished(inner), { cno, bytes: expected })
  })
})
