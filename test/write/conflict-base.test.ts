/**
 * A conflict moves a writer onto what another writer published, and its retry publishes
 * its own view on top: a view that still points into the checkpoint it was built on. When
 * that base is gone (a cleaner dropped it once it was superseded, or the container was
 * removed), publishing would make a checkpoint no one can read: the flush (or a background
 * publish) refuses with ERR_CONFLICT, and the container keeps what it had. So it does when the container was
 * removed and made again (its objects have the old names), and a reader of the removed
 * one is refused the new one's objects; a writer that lost the race to create the
 * container still puts its view on top.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeInodeObject, encodeInodeObject } from '../../lib/format/inode.js'
import { INODE_KEY, parseKey, segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const OLD = pattern(0, 200_000, 1)
const REWRITE = pattern(0, 200_000, 2)
const PATCH = pattern(4096, 4096, 3)

/** The published checkpoint, or undefined when there is none. */
function published(store: ObjectStore): Promise<{ cno: number; bytes: Buffer } | undefined> {
  return readPublished(store).catch(() => undefined)
}

async function keys(store: MemoryStore, prefix: string): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list(prefix)) out.push(e.key)
  return out
}

/** Checkpoint 1 holding OLD, and a writer opened on it with a 4 KiB patch not yet flushed (conflictPolicy 'retry' unless given). */
async function writerOnOld(store: MemoryStore, settings: Partial<Settings> = {}): Promise<SegmentFile> {
  const f = await SegmentFile.create(store, settings)
  await f.write(0, OLD)
  await f.flush()
  await f.close()
  const w = await SegmentFile.open(store, { conflictPolicy: 'retry', ...settings })
  await w.write(4096, PATCH)
  return w
}

describe('a conflict whose base is gone', () => {
  for (const call of ['flush', 'publish'] as const) {
    it(`the base's objects deleted after another writer superseded it: ${call}() is ERR_CONFLICT, nothing published`, async () => {
      const store = new MemoryStore(`base-gone-${call}`)
      const w1 = await writerOnOld(store)
      const w2 = await SegmentFile.open(store)
      await w2.write(0, REWRITE)
      await w2.flush()
      await w2.close()
      // What a cleaner keeping only the latest checkpoint deletes: checkpoint 1's objects.
      await store.delete(await keys(store, '0000000001.'))
      await rejectsCode(w1[call](), 'ERR_CONFLICT', /0000000001\.\d+, which .* is gone/)
      await rejectsCode(w1.flush(), 'ERR_CONFLICT', /is gone/) // and again: the handle stays on its base
      await w1.close()
      assert.deepEqual(await published(store), { cno: 2, bytes: REWRITE })
    })
  }

  it('a checkpoint published meanwhile, above this one, dropped by a cleaner: the retry publishes on top', async () => {
    const store = new MemoryStore('between-gone')
    const w1 = await writerOnOld(store, smallSettings)
    // Sent early, under checkpoint 2: the other writer's numbers start above it.
    await w1.write(200_000, pattern(200_000, 100_000, 4))
    const w2 = await SegmentFile.open(store, smallSettings)
    for (const seed of [5, 6, 7]) {
      await w2.write(0, pattern(0, 4096, seed))
      await w2.flush()
    }
    await w2.close()
    // What a cleaner keeping the latest two checkpoints deletes: checkpoint 3's part 0.
    await store.delete(segmentKey(3, 0))
    const t = await w1.flush()
    await w1.close()
    assert.equal(t.conflicts, 1)
    const expected = Buffer.concat([OLD, pattern(200_000, 100_000, 4)])
    PATCH.copy(expected, 4096)
    assert.deepEqual(await published(store), { cno: t.cno, bytes: expected })
  })

  it('the base still there: the retry publishes on top, and it reads back', async () => {
    const store = new MemoryStore('base-kept')
    const w1 = await writerOnOld(store)
    const w2 = await SegmentFile.open(store)
    await w2.write(0, REWRITE)
    await w2.flush()
    await w2.close()
    const t = await w1.flush()
    await w1.close()
    assert.equal(t.conflicts, 1)
    const expected = Buffer.from(OLD)
    PATCH.copy(expected, 4096)
    assert.deepEqual(await published(store), { cno: t.cno, bytes: expected })
  })

  for (const call of ['flush', 'publish'] as const) {
    it(`the container removed while a writer publishes: ${call}() is ERR_CONFLICT with either policy, no container made again`, async () => {
      for (const conflictPolicy of ['retry', 'fail'] as const) {
        const store = new MemoryStore(`removed-${call}-${conflictPolicy}`)
        const w = await writerOnOld(store, { conflictPolicy })
        await store.delete(await keys(store, '')) // rm
        await rejectsCode(w[call](), 'ERR_CONFLICT', /inode is gone/)
        await rejectsCode(w.flush(), 'ERR_CONFLICT', /inode is gone/) // and again
        await w.close()
        assert.deepEqual(await keys(store, 'inode'), [], conflictPolicy)
        assert.equal(await published(store), undefined, conflictPolicy)
      }
    })
  }
})

/** Removes everything of the container in `store`, then makes it again with `bytes`, as another writer would. */
async function remake(store: MemoryStore, bytes: Buffer, settings: Partial<Settings> = {}): Promise<void> {
  await store.delete(await keys(store, '')) // rm
  await new Promise((resolve) => setTimeout(resolve, 5)) // a later creation time
  const g = await SegmentFile.create(store, settings)
  await g.write(0, bytes)
  await g.flush()
  await g.close()
}

describe('a container removed and made again at the same place', () => {
  for (const call of ['flush', 'publish'] as const) {
    it(`a writer on the removed one: its ${call}() is ERR_CONFLICT with either policy, the new container kept as it is`, async () => {
      for (const conflictPolicy of ['retry', 'fail'] as const) {
        const store = new MemoryStore(`remade-${call}-${conflictPolicy}`)
        const w = await writerOnOld(store, { conflictPolicy })
        await remake(store, REWRITE)
        // Its objects have the names of the removed one's, which the writer's block map names.
        assert.ok((await keys(store, '0000000001.')).length > 0)
        await rejectsCode(w[call](), 'ERR_CONFLICT', /removed and made again meanwhile/)
        await rejectsCode(w.flush(), 'ERR_CONFLICT', /removed and made again meanwhile/) // and again
        await w.close()
        assert.deepEqual(await published(store), { cno: 1, bytes: REWRITE }, conflictPolicy)
      }
    })
  }

  it('one made again with a creation time past what a Date holds (a crafted inode): ERR_CONFLICT naming the time, not a RangeError', async () => {
    const store = new MemoryStore('remade-far-ctime')
    const w = await writerOnOld(store, { conflictPolicy: 'retry' })
    await remake(store, REWRITE)
    const inode = decodeInodeObject(await store.get(INODE_KEY))
    await store.put(INODE_KEY, encodeInodeObject({ ...inode, ctimeMs: Number.MAX_SAFE_INTEGER }))
    await rejectsCode(w.flush(), 'ERR_CONFLICT', /made again meanwhile \(at 9007199254740991 ms \(not a date\)/)
    await w.close()
  })

  for (const format of ['stream', 'parted'] as const) {
    it(`a reader of the removed one (${format}): ERR_NOT_FOUND, never the new container’s bytes`, async () => {
      const store = new MemoryStore(`remade-reader-${format}`)
      // Data parts, index nodes and part 0 alike: 256 KiB in objects of at most 64 KiB.
      const settings = { ...smallSettings, format }
      const before = pattern(0, 256 * 1024, 5)
      const f = await SegmentFile.create(store, settings)
      await f.write(0, before)
      await f.flush()
      await f.close()
      const whole = await SegmentFile.open(store, { readOnly: true })
      const small = await SegmentFile.open(store, { readOnly: true })
      // A read stream opens on its first read: this one on the removed container.
      const stream = createStreamSegmentReadStream({
        store,
        readGetMaxBytes: 16 * 1024,
        readMaxConcurrency: 1,
        readAheadBytes: 0,
      })
      const chunks: Buffer[] = []
      const next = stream[Symbol.asyncIterator]()
      chunks.push((await next.next()).value as Buffer)
      await remake(store, pattern(0, 256 * 1024, 6), settings)
      assert.ok((await keys(store, '0000000001.')).length > 2, 'the new container has objects of the same names')
      const foreign = /0000000001\.\d+: is of another container, made at .*removed and made again/
      await rejectsCode(whole.read(0, whole.size), 'ERR_NOT_FOUND', foreign)
      await rejectsCode(small.read(100_000, 4096), 'ERR_NOT_FOUND', foreign)
      // Its next objects are missing or another container's: it fails, whichever it meets first.
      await assert.rejects(
        (async () => {
          for (let r = await next.next(); !r.done; r = await next.next()) chunks.push(r.value as Buffer)
        })(),
        (err) => StreamSegmentError.is(err, 'ERR_NOT_FOUND'),
      )
      // Whatever came before the failure is the removed container's.
      const got = Buffer.concat(chunks)
      assert.ok(got.equals(before.subarray(0, got.length)))
      await whole.close()
      await small.close()
    })
  }

  it('two writers racing to create it: the loser’s view goes on top of the winner’s, and reads back', async () => {
    const store = new MemoryStore('creation-race')
    // The loser made first, its data sent ahead: those objects carry its own creation time.
    const loser = await SegmentFile.create(store, { conflictPolicy: 'retry', streamSegmentBytes: 1024 * 1024 })
    const sent = pattern(0, 3 * 1024 * 1024, 4)
    await loser.write(0, sent)
    await new Promise((resolve) => setTimeout(resolve, 5))
    const winner = await SegmentFile.create(store)
    await winner.write(0, REWRITE)
    await winner.flush()
    await winner.close()
    const t = await loser.flush()
    await loser.close()
    assert.equal(t.conflicts, 1)
    const inode = (await readObjectHeader(store, t.cno, 0)).header.inode
    const ctimes = new Set<number>()
    for (const key of await keys(store, '')) {
      const k = parseKey(key)
      if (k?.kind === 'segment' && k.cno <= t.cno)
        ctimes.add((await readObjectHeader(store, k.cno, k.part)).header.inode.ctimeMs)
    }
    assert.ok(ctimes.size > 1 && [...ctimes].some((c) => c < inode.ctimeMs), 'objects made before the container')
    assert.deepEqual(await published(store), { cno: t.cno, bytes: sent })
  })
})

it('a checkpoint’s modification time never goes below the one it is built on (a writer whose clock is behind)', async (t) => {
  const store = new MemoryStore('mtime-behind')
  const f = await SegmentFile.create(store)
  await f.write(0, OLD)
  const first = await f.flush()
  await f.close()
  const before = (await readObjectHeader(store, first.cno, 0)).header.inode.mtimeMs
  t.mock.timers.enable({ apis: ['Date'], now: before - 60_000 })
  const w = await SegmentFile.open(store)
  await w.write(4096, PATCH)
  const second = await w.flush()
  await w.close()
  t.mock.timers.reset()
  assert.equal((await readObjectHeader(store, second.cno, 0)).header.inode.mtimeMs, before)
})
