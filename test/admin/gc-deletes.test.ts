/**
 * gc whose deletions fail or are interrupted part-way: part 0s go before any data part of
 * their checkpoints, even when a store deletes only some keys of a batch; the error says
 * how far the deletions came; the next run finishes the job.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { removeContainer } from '../../lib/admin/remove.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { parseKey, segmentKey } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore, RequestOptions } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024
const settings = { ...smallSettings, streamSegmentBytes: 32 * KiB, rollForwardAfterMs: 0 }

/** Checkpoints 1 to 3, each a rewrite of several objects: with keep 1, 1 and 2 are garbage. */
async function threeCheckpoints(): Promise<{ store: MemoryStore; content: Buffer[] }> {
  const store = new MemoryStore()
  const content: Buffer[] = []
  for (let i = 1; i <= 3; i++) {
    const f = i === 1 ? await SegmentFile.create(store, settings) : await SegmentFile.open(store, settings)
    const bytes = Buffer.from(pattern(0, 150 * KiB, i))
    await f.truncate(0)
    await f.write(0, bytes)
    assert.equal((await f.flush()).cno, i)
    await f.close()
    content.push(bytes)
  }
  return { store, content }
}

async function keys(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) out.push(e.key)
  return out
}

/** Every checkpoint whose part 0 is still stored reads back whole (an openable checkpoint has its data). */
async function openableReadBack(store: ObjectStore, content: Buffer[]): Promise<void> {
  for (let cno = 1; cno <= content.length; cno++) {
    if ((await store.head(segmentKey(cno, 0))) === undefined) continue
    const f = await SegmentFile.open(store, { cno, readOnly: true })
    try {
      assert.ok(Buffer.from(await f.read(0, f.size)).equals(content[cno - 1] as Buffer), `checkpoint ${cno} reads back`)
    } finally {
      await f.close()
    }
  }
}

/**
 * A store whose multi-key deletes fail key by key as S3's DeleteObjects can (SlowDown,
 * InternalError for some keys): it deletes every key of the batch but the part 0s, then
 * fails naming them.
 */
function partOfEachBatch(store: MemoryStore): ObjectStore {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'delete') {
        return async (keys: string | readonly string[], options?: RequestOptions) => {
          const list = typeof keys === 'string' ? [keys] : keys
          const failed = list.filter((k) => k.endsWith('.0'))
          await target.delete(
            list.filter((k) => !failed.includes(k)),
            options,
          )
          if (failed.length > 0)
            throw StreamSegmentError.store(`${failed.length} keys failed, first ${failed[0]}: SlowDown`)
        }
      }
      const v = Reflect.get(target, prop, target)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
}

describe('gc whose deletions fail part-way', () => {
  it('a store that deletes only part of a batch never leaves a part 0 whose data parts are gone', async () => {
    const { store, content } = await threeCheckpoints()
    const garbage = (await gc(store, { graceMs: 0, dryRun: true })).deletedKeys
    assert.ok(garbage.includes(segmentKey(2, 0)) && garbage.includes(segmentKey(2, 1)), garbage.join(' '))
    const err = await rejectsCode(gc(partOfEachBatch(store), { graceMs: 0 }), 'ERR_STORE')
    await openableReadBack(store, content)
    assert.match(err.message, /gc: deleted 0 of the \d+ objects/)
    for (const cno of [1, 2]) assert.ok((await store.head(segmentKey(cno, 0))) !== undefined, `${cno}.0 stays`)
    // rm deletes in the same order.
    await assert.rejects(removeContainer(partOfEachBatch(store)))
    await openableReadBack(store, content)
  })

  it('a delete that fails on its second batch: the error says what was deleted, part 0s first; a second run finishes', async () => {
    const { store, content } = await threeCheckpoints()
    const before = await keys(store)
    const garbage = (await gc(store, { graceMs: 0, dryRun: true })).deletedKeys
    const part0s = garbage.filter((k) => k.endsWith('.0'))
    assert.deepEqual(part0s, [segmentKey(1, 0), segmentKey(2, 0)])
    const failing = new FailingStore(store, [{ ops: ['delete'], nth: 2, mode: 'error' }])
    await rejectsCode(
      gc(failing, { graceMs: 0 }),
      'ERR_STORE',
      new RegExp(
        `gc: deleted 2 of the ${garbage.length} objects it found to delete .*injected failure.*a later gc deletes the rest`,
      ),
    )
    assert.deepEqual(
      await keys(store),
      before.filter((k) => !part0s.includes(k)),
      'the part 0s went, the rest stayed',
    )
    await openableReadBack(store, content)
    const again = await gc(store, { graceMs: 0 })
    assert.deepEqual(
      again.deletedKeys,
      garbage.filter((k) => !part0s.includes(k)),
    )
    assert.deepEqual(
      (await keys(store)).filter((k) => parseKey(k)?.kind === 'segment').map((k) => parseKey(k)),
      (await keys(store)).filter((k) => k.startsWith('0000000003.')).map((k) => parseKey(k)),
      'only checkpoint 3 is left',
    )
    await openableReadBack(store, content)
  })

  it('interrupted after the first batch: ERR_ABORTED saying what was deleted; a second run finishes', async () => {
    const { store, content } = await threeCheckpoints()
    const garbage = (await gc(store, { graceMs: 0, dryRun: true })).deletedKeys
    const ac = new AbortController()
    await rejectsCode(
      gc(store, {
        graceMs: 0,
        signal: ac.signal,
        onProgress: (p) => {
          if (p.phase === 'delete' && p.deletedObjects > 0) ac.abort()
        },
      }),
      'ERR_ABORTED',
      new RegExp(`gc: deleted 2 of the ${garbage.length} objects`),
    )
    await openableReadBack(store, content)
    const again = await gc(store, { graceMs: 0 })
    assert.equal(again.deletedObjects, garbage.length - 2)
    await openableReadBack(store, content)
  })
})

describe('removeContainer stopped part-way', () => {
  it('interrupted after the part 0s: ERR_ABORTED saying what was deleted and what was not; a second run finishes', async () => {
    const { store } = await threeCheckpoints()
    const segments = (await keys(store)).filter((k) => parseKey(k)?.kind === 'segment')
    const part0s = segments.filter((k) => k.endsWith('.0')).length
    const ac = new AbortController()
    await rejectsCode(
      removeContainer(store, {
        signal: ac.signal,
        onProgress: (p) => {
          if (p.deletedObjects > 0) ac.abort()
        },
      }),
      'ERR_ABORTED',
      new RegExp(
        `^mem://[^:]*: removeContainer: deleted ${part0s} of the ${segments.length} segment objects \\(part 0s first; some of the batch that failed may be gone too\\), not the inode, then: delete aborted; removing it again deletes the rest$`,
      ),
    )
    assert.equal((await keys(store)).length, segments.length + 1 - part0s, 'the part 0s went, the rest stayed')
    const again = await removeContainer(store)
    assert.equal(again.deletedObjects, segments.length + 1 - part0s)
    assert.deepEqual(await keys(store), [])
  })

  it('failing on the inode: the error says every segment object went, the inode maybe not', async () => {
    const { store } = await threeCheckpoints()
    const segments = (await keys(store)).filter((k) => parseKey(k)?.kind === 'segment').length
    const failing = new FailingStore(store, [{ ops: ['delete'], key: /^inode$/, mode: 'error' }])
    await rejectsCode(
      removeContainer(failing),
      'ERR_STORE',
      new RegExp(
        `removeContainer: deleted the ${segments} segment objects, the inode maybe not, then: .*injected failure.*; removing it again deletes the rest$`,
      ),
    )
    assert.deepEqual(await keys(store), ['inode'])
    assert.equal((await removeContainer(store)).deletedObjects, 1)
  })
})
