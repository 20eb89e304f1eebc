/**
 * A conflict moves a writer onto what another writer published, and its retry publishes
 * its own view on top: a view that still points into the checkpoint it was built on. When
 * that base is gone (a cleaner dropped it once it was superseded, or the container was
 * removed), publishing would make a checkpoint no one can read: the flush refuses with
 * ERR_CONFLICT, and the container keeps what it had.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

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

/** Checkpoint 1 holding OLD, and a writer opened on it with a 4 KiB patch not yet flushed. */
async function writerOnOld(store: MemoryStore): Promise<SegmentFile> {
  const f = await SegmentFile.create(store)
  await f.write(0, OLD)
  await f.flush()
  await f.close()
  const w = await SegmentFile.open(store, { conflictPolicy: 'retry' })
  await w.write(4096, PATCH)
  return w
}

describe('a conflict whose base is gone', () => {
  it("the base's objects deleted after another writer superseded it: ERR_CONFLICT, nothing published", async () => {
    const store = new MemoryStore('base-gone')
    const w1 = await writerOnOld(store)
    const w2 = await SegmentFile.open(store)
    await w2.write(0, REWRITE)
    await w2.flush()
    await w2.close()
    // What a cleaner keeping only the latest checkpoint deletes: checkpoint 1's objects.
    await store.delete(await keys(store, '0000000001.'))
    await rejectsCode(w1.flush(), 'ERR_CONFLICT', /0000000001\.\d+, which .* is gone/)
    await rejectsCode(w1.flush(), 'ERR_CONFLICT', /is gone/) // and again: the handle stays on its base
    await w1.close()
    assert.deepEqual(await published(store), { cno: 2, bytes: REWRITE })
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

  it('the container removed while a writer flushes: ERR_CONFLICT with either policy, no container made again', async () => {
    for (const conflictPolicy of ['retry', 'fail'] as const) {
      const store = new MemoryStore(`removed-${conflictPolicy}`)
      const f = await SegmentFile.create(store)
      await f.write(0, OLD)
      await f.flush()
      await f.close()
      const w = await SegmentFile.open(store, { conflictPolicy })
      await w.write(4096, PATCH)
      await store.delete(await keys(store, '')) // rm
      await rejectsCode(w.flush(), 'ERR_CONFLICT', /inode is gone/)
      await w.close()
      assert.deepEqual(await keys(store, 'inode'), [], conflictPolicy)
      assert.equal(await published(store), undefined, conflictPolicy)
    }
  })
})
