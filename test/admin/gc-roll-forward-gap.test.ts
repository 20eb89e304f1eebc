/**
 * gc and the numbers below a checkpoint a writer rolls forward to. A writer opening the
 * container looks at every number above the published one that objects use, past the
 * unused ones, and takes a number above them all for its own checkpoint: a number gc
 * emptied below a complete checkpoint built on the published one (an abandoned attempt
 * deleted after a writer took the number above it) neither stops the roll-forward nor
 * is taken. gc keeps those numbers used all the same while the checkpoint above waits
 * (`heldCnos`): a writer of an earlier version stops at the first unused one.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/index.js'
import { main } from '../../lib/cli.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { fakeOutput } from '../helpers/cli.js'
import { openUploadCount, readPublished } from '../helpers/containers.js'

/** Writes `fill` at 0 through a writer that rolls nothing forward, publishes it, and puts the inode back: a writer that crashed before its inode write. */
async function crashedBeforeInode(store: ObjectStore, fill: number): Promise<number> {
  const published = await store.get('inode')
  const f = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
  try {
    await f.write(0, Buffer.alloc(4096, fill))
    const { cno } = await f.flush()
    await store.put('inode', published)
    return cno
  } finally {
    await f.close()
  }
}

/** A new container in `store` with checkpoint 1 published: 4 KiB of ones. */
async function publishOne(store: ObjectStore): Promise<void> {
  const f = await SegmentFile.create(store)
  await f.write(0, Buffer.alloc(4096, 1))
  assert.equal((await f.flush()).cno, 1)
  await f.close()
}

/** 1 published; an abandoned attempt at 2 (parts only); 3 complete on 1, its publication interrupted. */
async function gapBelowCandidate<S extends ObjectStore = MemoryStore>(
  attempt: (store: S) => Promise<unknown>,
  store: S = new MemoryStore() as ObjectStore as S,
): Promise<S> {
  await publishOne(store)
  await attempt(store)
  assert.equal(await crashedBeforeInode(store, 3), 3, 'the writer skipped the number the attempt took')
  return store
}

/** The writer opening the container next (rolling forward any part 0, whatever its age): the checkpoint it publishes, its bytes, and the number it takes. */
async function nextWriter(store: ObjectStore): Promise<{ cno: number; bytes: Buffer }> {
  const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
  await w.close()
  return readPublished(store)
}

describe('gc: the numbers between the published checkpoint and one a writer rolls forward to', () => {
  it('keeps an old abandoned attempt below the candidate, so the next writer rolls the candidate forward', async () => {
    const store = await gapBelowCandidate((s) => s.put(segmentKey(2, 1), Buffer.alloc(100, 9)))
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual(g.kept, [1, 3])
    assert.deepEqual(g.deletedKeys, [], 'the attempt at 2 is not deleted')
    assert.deepEqual([g.heldCnos, g.heldObjects, g.heldBytes], [[2], 1, 100])
    assert.ok(await store.head(segmentKey(2, 1)))
    const after = await nextWriter(store)
    assert.equal(after.cno, 3, 'the writer rolled forward to 3, not stopped at 2')
    assert.deepEqual(after.bytes, Buffer.alloc(4096, 3))
  })

  it('deletes the attempt once the candidate above it is published', async () => {
    const store = await gapBelowCandidate((s) => s.put(segmentKey(2, 1), Buffer.alloc(100, 9)))
    await gc(store, { graceMs: 0 })
    assert.equal((await nextWriter(store)).cno, 3)
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.published, g.kept, g.dropped], [3, [3], [1]])
    assert.ok(g.deletedKeys.includes(segmentKey(2, 1)), `deleted ${g.deletedKeys}`)
    assert.deepEqual([g.heldCnos, g.heldObjects, g.heldBytes], [[], 0, 0])
    assert.equal(await store.head(segmentKey(2, 1)), undefined)
    assert.deepEqual(await readPublished(store), { cno: 3, bytes: Buffer.alloc(4096, 3) })
  })

  it('deletes the attempt once the candidate above it is superseded (a writer published past it)', async () => {
    const store = await gapBelowCandidate((s) => s.put(segmentKey(2, 1), Buffer.alloc(100, 9)))
    assert.deepEqual((await gc(store, { graceMs: 0 })).heldCnos, [2])
    // A writer that does not roll 3 forward (its part 0 too young for it) publishes 4 on 1.
    const f = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
    await f.write(0, Buffer.alloc(4096, 4))
    assert.equal((await f.flush()).cno, 4)
    await f.close()
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.published, g.kept, g.dropped, g.heldCnos], [4, [4], [1, 3], []])
    assert.ok(g.deletedKeys.includes(segmentKey(2, 1)), `deleted ${g.deletedKeys}`)
    assert.equal(await store.head(segmentKey(2, 1)), undefined)
    assert.deepEqual(await readPublished(store), { cno: 4, bytes: Buffer.alloc(4096, 4) })
  })

  it('keeps the number of an abandoned open upload used: the upload is aborted, its placeholder stays', async () => {
    // A writer that died sending part 1 of 2 as a multipart upload: the create-only claim
    // (an empty placeholder object) is all the number holds.
    const store = await gapBelowCandidate(async (s) => {
      await s.createMultipart(segmentKey(2, 1), { ifNoneMatch: '*' })
    })
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.kept, g.deletedKeys, g.abortedUploads], [[1, 3], [], 1])
    assert.deepEqual([g.heldCnos, g.heldObjects], [[2], 1])
    assert.equal(await openUploadCount(store), 0)
    const after = await nextWriter(store)
    assert.equal(after.cno, 3, 'the writer rolled forward to 3, not stopped at 2')
    assert.deepEqual(after.bytes, Buffer.alloc(4096, 3))
  })

  it('keeps a dropped checkpoint below the candidate whole: its part 0 unreadable, a roll-forward passes over it', async () => {
    const store = await gapBelowCandidate(async (s) => {
      await s.put(segmentKey(2, 1), Buffer.alloc(100, 9))
      await s.put(segmentKey(2, 0), Buffer.alloc(64, 0xee)) // no part 0 a writer would publish
    })
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.kept, g.dropped, g.deletedKeys], [[1, 3], [2], []])
    assert.deepEqual([g.heldCnos, g.heldObjects, g.heldBytes], [[2], 2, 164])
    const after = await nextWriter(store)
    assert.equal(after.cno, 3, 'the writer passed over 2 and rolled forward to 3')
    assert.deepEqual(after.bytes, Buffer.alloc(4096, 3))
  })

  it('keeps the attempts under every candidate of a chain, and the next writer publishes the last', async () => {
    // 2 abandoned, 3 on 1, 4 abandoned, 5 on 3: each publication interrupted.
    const store = await gapBelowCandidate((s) => s.put(segmentKey(2, 1), Buffer.alloc(100, 9)))
    const one = await store.get('inode')
    // 3 rolled forward, an attempt at 4 abandoned, 5 written on 3, then 1 put back.
    assert.equal((await nextWriter(store)).cno, 3)
    await store.put(segmentKey(4, 1), Buffer.alloc(50, 8))
    const f = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
    await f.write(4096, Buffer.alloc(4096, 5))
    assert.equal((await f.flush()).cno, 5)
    await f.close()
    await store.put('inode', one)
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.published, g.kept, g.deletedKeys, g.heldCnos], [1, [1, 3, 5], [], [2, 4]])
    const after = await nextWriter(store)
    assert.equal(after.cno, 5, 'rolled forward to 3, then 5')
    assert.deepEqual(after.bytes, Buffer.concat([Buffer.alloc(4096, 3), Buffer.alloc(4096, 5)]))
  })

  it('gc at the command line says what it kept below the candidate, and why', async (t) => {
    const root = await mkdtemp(join(tmpdir(), 'ss-gc-gap-'))
    t.after(() => rm(root, { recursive: true, force: true }))
    const dir = join(root, 'c')
    await gapBelowCandidate((s) => s.put(segmentKey(2, 1), Buffer.alloc(100, 9)), new DirectoryStore(dir))
    const [out, err] = [fakeOutput(), fakeOutput()]
    assert.equal(await main(['gc', dir, '--grace', '0'], out, err), 0, err.writes.join(''))
    assert.match(
      out.writes.join(''),
      /\nkept 1 unreached object \(100 B\) of number 2, below a checkpoint a writer rolls forward to \(.*\): a gc after that checkpoint is published or superseded deletes them\n$/,
    )
    assert.ok(await new DirectoryStore(dir).head(segmentKey(2, 1)), 'the attempt at 2 is kept')
  })
})

/**
 * 1 published, an old abandoned attempt at 2; a writer opens (taking 3, past the
 * attempt) and, before it sends anything, gc deletes the attempt (nothing above it to keep
 * it for); the writer then stores 3 whole and dies before its inode write. Number 2 is
 * unused now, below a complete checkpoint built on the published one.
 */
async function gcEmptiedBelow<S extends ObjectStore = MemoryStore>(
  store: S = new MemoryStore() as ObjectStore as S,
): Promise<S> {
  await publishOne(store)
  const one = await store.get('inode')
  await store.put(segmentKey(2, 1), Buffer.alloc(100, 9))
  const w = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
  try {
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.kept, g.deletedKeys], [[1], [segmentKey(2, 1)]])
    await w.write(0, Buffer.alloc(4096, 3))
    assert.equal((await w.flush()).cno, 3)
  } finally {
    await w.close()
  }
  await store.put('inode', one)
  return store
}

describe('a number gc emptied below a complete checkpoint whose writer had taken its number', () => {
  for (const name of ['memory', 'directory'] as const) {
    it(`the next writer rolls forward past the unused number, and gc keeps it meanwhile (${name} store)`, async (t) => {
      let made: ObjectStore = new MemoryStore()
      if (name === 'directory') {
        const root = await mkdtemp(join(tmpdir(), 'ss-gc-gap-'))
        t.after(() => rm(root, { recursive: true, force: true }))
        made = new DirectoryStore(join(root, 'c'))
      }
      const store = await gcEmptiedBelow(made)
      assert.equal(await store.head(segmentKey(2, 1)), undefined, 'number 2 is unused')
      const g = await gc(store, { graceMs: 0 })
      assert.deepEqual([g.kept, g.deletedKeys], [[1, 3], []])
      const after = await nextWriter(store)
      assert.equal(after.cno, 3, 'rolled forward past 2 to 3')
      assert.deepEqual(after.bytes, Buffer.alloc(4096, 3))
      // Published now, it stays: the next gc keeps it, and what the writer writes next goes above it.
      assert.deepEqual((await gc(store, { graceMs: 0 })).kept, [3])
      const w = await SegmentFile.open(store)
      await w.write(4096, Buffer.alloc(4096, 4))
      assert.equal((await w.flush()).cno, 4)
      await w.close()
      assert.deepEqual(await readPublished(store), {
        cno: 4,
        bytes: Buffer.concat([Buffer.alloc(4096, 3), Buffer.alloc(4096, 4)]),
      })
    })
  }

  it('a writer that does not roll it forward (too young) takes a number above it, not the unused one below', async () => {
    const store = await gcEmptiedBelow()
    const w = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
    assert.equal(w.cno, 1)
    await w.write(0, Buffer.alloc(4096, 4))
    assert.equal((await w.flush()).cno, 4, 'number 2 lies below objects of 3: not taken')
    await w.close()
    assert.deepEqual(await readPublished(store), { cno: 4, bytes: Buffer.alloc(4096, 4) })
  })
})
