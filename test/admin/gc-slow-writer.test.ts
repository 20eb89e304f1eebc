/**
 * gc beside a writer whose checkpoint takes longer than the grace period (a slow stream:
 * `put -` from a pipe for hours): the objects it sent ahead look like an abandoned
 * attempt's. Whatever the cleaner does with them, the writer must never publish a
 * checkpoint pointing into deleted objects.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { decodeInodeObject, INODE_KEY, parseKey, segmentKey } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect, readAll } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { AfterList } from '../helpers/wrapped-store.js'

const KiB = 1024
const HOUR = 3_600_000
const settings = { ...smallSettings, streamSegmentBytes: 32 * KiB, rollForwardAfterMs: 0 }

/** Makes every segment object of `cno` look `ms` older (their LastModified, which gc goes by). */
function age(store: MemoryStore, cno: number, ms: number): void {
  const objects = (store as unknown as { bucket: { objects: Map<string, { modifiedMs: number }> } }).bucket.objects
  for (const [key, o] of objects) {
    const k = parseKey(key)
    if (k?.kind === 'segment' && k.cno === cno) o.modifiedMs -= ms
  }
}

describe('gc beside a writer slower than the grace period', () => {
  it('a writer still sending ahead after the grace period keeps all it sent: it publishes, and the checkpoint reads back', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, settings)
    await f.write(0, pattern(0, 4 * KiB, 1))
    assert.equal((await f.flush()).cno, 1)
    await f.close()

    const data = pattern(0, 300 * KiB, 2)
    const w = await SegmentFile.open(store, settings)
    await w.write(0, data.subarray(0, 150 * KiB))
    await w.settle()
    // Two hours into the stream, and still going: its first objects are past the grace
    // period, the one it sent last is not.
    age(store, 2, 2 * HOUR)
    await w.write(150 * KiB, data.subarray(150 * KiB))
    await w.settle()
    const r = await gc(store)
    assert.deepEqual(r.deletedKeys, [], 'nothing of the attempt in progress goes')
    assert.ok(r.youngObjects > 0)
    const t = await w.flush()
    await w.close()
    assert.equal(t.cno, 2)
    assert.ok((await readAll(store)).equals(data))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
    // Once the writer has stopped and the grace period passed, an abandoned attempt goes whole.
    const stopped = await SegmentFile.open(store, settings)
    await stopped.write(0, pattern(0, 150 * KiB, 3))
    await stopped.settle()
    await stopped.close()
    age(store, 3, 2 * HOUR)
    const attempt = (await gc(store, { dryRun: true })).deletedKeys.filter((k) => parseKey(k)?.kind === 'segment')
    assert.ok(attempt.length > 0 && attempt.every((k) => k.startsWith('0000000003.')), attempt.join(' '))
  })

  it('a writer still sending ahead under a number another writer has published since keeps all it sent: it publishes on top', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, settings)
    await f.write(0, pattern(0, 4 * KiB, 1))
    assert.equal((await f.flush()).cno, 1)
    await f.close()

    // Both writers take number 2 for their next checkpoint: the other one publishes it first.
    const w = await SegmentFile.open(store, settings)
    const other = await SegmentFile.open(store, settings)
    await other.write(0, pattern(0, 8 * KiB, 3))
    assert.equal((await other.flush()).cno, 2)
    await other.close()
    const data = pattern(0, 300 * KiB, 2)
    await w.write(0, data.subarray(0, 150 * KiB))
    await w.settle()
    const first = (await collect(store.list('0000000002.'))).map((e) => e.key).filter((k) => k !== segmentKey(2, 0))
    assert.ok(first.length > 0, 'objects were sent ahead under number 2')
    // Two hours into the stream, and still going: its first objects are past the grace
    // period, the one it sent last is not.
    age(store, 2, 2 * HOUR)
    await w.write(150 * KiB, data.subarray(150 * KiB))
    await w.settle()
    const r = await gc(store)
    assert.deepEqual(r.deletedKeys, [], 'nothing of the writer in progress goes')
    // The conflict moves it onto checkpoint 2; it publishes its whole view on top.
    const t = await w.flush()
    await w.close()
    assert.ok(t.cno > 2, `published ${t.cno}`)
    assert.ok((await readAll(store)).equals(data))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })

  it('a later checkpoint whose sent-ahead objects gc deleted is not published: ERR_CONFLICT, the published one stands', async () => {
    const store = new MemoryStore()
    const first = pattern(0, 4 * KiB, 1)
    const f = await SegmentFile.create(store, settings)
    await f.write(0, first)
    assert.equal((await f.flush()).cno, 1)
    await f.close()

    const w = await SegmentFile.open(store, settings)
    await w.write(0, pattern(0, 200 * KiB, 2))
    await w.settle()
    const sent: string[] = []
    for await (const e of store.list('0000000002.')) sent.push(e.key)
    assert.ok(sent.length > 0, 'objects were sent ahead under checkpoint 2')
    // The writer has been at it for two hours: its objects are past gc's grace (1 hour).
    age(store, 2, 2 * HOUR)
    const r = await gc(store)
    assert.deepEqual(r.deletedKeys, sent, 'gc takes them for an abandoned attempt')

    await rejectsCode(
      w.flush(),
      'ERR_CONFLICT',
      /checkpoint 2 was not published: objects it stored before its part 0 were deleted/,
    )
    // And stays so: the block map still points into the objects that are gone.
    await rejectsCode(w.flush(), 'ERR_CONFLICT', /were deleted/)
    await w.close().catch(() => undefined)

    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1, 'nothing published')
    assert.equal(await store.head(segmentKey(2, 0)), undefined, 'no part 0 left for a roll-forward')
    assert.ok((await readAll(store)).equals(first))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })
})

/**
 * A conflict moves the writer onto the other writer's newer checkpoint, numbered above
 * the objects it sent ahead: those objects are no longer an attempt's (their number has a
 * part 0) nor reached by a checkpoint gc keeps, so a cleaner takes them once they are past
 * the grace period. The flush that publishes on top must still look for them.
 */
describe('gc beside a slow writer that lost a conflict', () => {
  /** Checkpoint 1; a writer on it that sent objects ahead under 2; another writer that then published 3. */
  async function slowWriterBehind(store: ObjectStore, conflictPolicy: 'retry' | 'fail'): Promise<SegmentFile> {
    const f = await SegmentFile.create(store, settings)
    await f.write(0, pattern(0, 4 * KiB, 1))
    assert.equal((await f.flush()).cno, 1)
    await f.close()
    const w = await SegmentFile.open(store, { ...settings, conflictPolicy })
    await w.write(0, pattern(0, 200 * KiB, 2))
    await w.settle()
    const other = await SegmentFile.open(store, settings)
    await other.write(0, pattern(0, 8 * KiB, 3))
    assert.equal((await other.flush()).cno, 3, 'the other writer passes over the number in use')
    await other.close()
    return w
  }

  /** Hours later, gc: what the writer sent ahead under number 2 is past the grace period, and deleted. */
  async function ageAndCollect(store: MemoryStore, sent: readonly string[]): Promise<void> {
    age(store, 2, 2 * HOUR)
    const r = await gc(store)
    assert.ok(
      sent.every((k) => r.deletedKeys.includes(k)),
      `gc deleted ${r.deletedKeys.join(' ')}`,
    )
  }

  async function sentUnder(store: ObjectStore, cno: number): Promise<string[]> {
    const keys: string[] = []
    for await (const e of store.list(`${segmentKey(cno, 0).slice(0, 10)}.`)) keys.push(e.key)
    return keys.filter((k) => k !== segmentKey(cno, 0))
  }

  it("'fail', then gc, then a second flush: ERR_CONFLICT, the other writer's checkpoint stands", async () => {
    const store = new MemoryStore()
    const w = await slowWriterBehind(store, 'fail')
    await rejectsCode(w.flush(), 'ERR_CONFLICT', /another writer got there first/)
    // Hours later: what it sent ahead is past the grace period, and nothing kept reaches it.
    const sent = await sentUnder(store, 2)
    assert.ok(sent.length > 0)
    await ageAndCollect(store, sent)
    await rejectsCode(w.flush(), 'ERR_CONFLICT', /objects it stored before its part 0 were deleted/)
    await w.close().catch(() => undefined)
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 3, 'nothing published over it')
    assert.ok((await readAll(store)).equals(pattern(0, 8 * KiB, 3)))
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })

  it("'retry', gc between its look at its objects and the retry: ERR_CONFLICT, nothing published", async () => {
    const inner = new MemoryStore()
    const store = new AfterList(inner)
    const w = await slowWriterBehind(store, 'retry')
    const sent = await sentUnder(inner, 2)
    assert.ok(sent.length > 0)
    // The flush's one LIST (its objects all there), then the cleaner, before the inode write meets the conflict.
    store.afterList = async () => {
      await ageAndCollect(inner, sent)
    }
    await rejectsCode(w.flush(), 'ERR_CONFLICT', /objects it stored before its part 0 were deleted/)
    assert.equal(store.afterList, undefined, 'the hook ran')
    await w.close().catch(() => undefined)
    assert.equal(decodeInodeObject(await inner.get(INODE_KEY)).cno, 3, 'nothing published over it')
    assert.ok((await readAll(inner)).equals(pattern(0, 8 * KiB, 3)))
    assert.deepEqual((await verifyCheckpoint(inner)).problems, [])
  })
})
