/**
 * A container's first checkpoint has no inode until it is published, so removing the
 * container while it is written (rm) takes its objects for an abandoned attempt's and
 * deletes them; the inode write, create-only, does not see it. The writer looks before
 * that write: an object the checkpoint points into that is gone fails the flush (or the
 * background publish) with ERR_CONFLICT, naming it, and nothing is published.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { removeContainer } from '../../lib/admin/remove.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { INODE_KEY, parseKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/** Runs `onPart0` once, as soon as the first part 0 is stored (its put or the completion of its upload). */
class AfterPart0 extends WrappedStore {
  private fired = false

  constructor(
    inner: ObjectStore,
    private readonly onPart0: () => Promise<void>,
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const result = await run()
    const stored = call.op === 'put' || call.op === 'completeMultipart'
    if (stored && !this.fired && parseKey(call.key)?.kind === 'segment' && call.key.endsWith('.0')) {
      this.fired = true
      await this.onPart0()
    }
    return result
  }
}

/** Refuses every LIST while `refusing()` says so (ERR_STORE). */
class FailingLists extends WrappedStore {
  constructor(
    inner: ObjectStore,
    private readonly refusing: () => boolean,
  ) {
    super(inner)
  }

  protected around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'list' && this.refusing()) return Promise.reject(StreamSegmentError.store('LIST refused'))
    return run()
  }
}

async function segmentKeys(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) if (parseKey(e.key)?.kind === 'segment') out.push(e.key)
  return out
}

/** Deletes one object sent ahead of part 0 (a data part or a partial segment). */
async function deleteOneSentAhead(store: ObjectStore): Promise<string> {
  const sent = (await segmentKeys(store)).filter((key) => !key.endsWith('.0'))
  assert.ok(sent.length > 0, 'objects sent ahead of part 0')
  const key = sent[0] as string
  await store.delete(key)
  return key
}

describe("a container's first checkpoint whose objects are removed while it is written", () => {
  for (const call of ['flush', 'publish'] as const) {
    it(`an object sent ahead deleted before the inode write: ${call}() is ERR_CONFLICT naming it, no inode`, async () => {
      const inner = new MemoryStore(`first-removed-${call}`)
      let deleted = ''
      const store = new AfterPart0(inner, async () => {
        deleted = await deleteOneSentAhead(inner)
      })
      const f = await SegmentFile.create(store, smallSettings)
      // Past the dirty threshold: most of it leaves as partial segments before part 0.
      await f.write(0, pattern(0, 200_000, 1))
      const err = await rejectsCode(f[call](), 'ERR_CONFLICT', /removed while it was written/)
      assert.ok(err.message.includes(deleted), `${err.message} names ${deleted}`)
      assert.equal(await inner.head(INODE_KEY), undefined)
      assert.deepEqual(
        (await segmentKeys(inner)).filter((key) => key.endsWith('.0')),
        [],
        'its part 0 is deleted',
      )
      // And again: the handle's map still points into the deleted object.
      await rejectsCode(f.flush(), 'ERR_CONFLICT', /removed while it was written/)
      assert.equal(await inner.head(INODE_KEY), undefined)
      await f.close().catch(() => undefined)
    })
  }

  it('the look fails (a failing LIST): the flush fails with it, part 0 is deleted, the next flush publishes', async () => {
    const inner = new MemoryStore('first-look-fails')
    let failLists = false
    const store = new FailingLists(inner, () => failLists)
    const failing = new AfterPart0(store, async () => {
      failLists = true
    })
    const f = await SegmentFile.create(failing, smallSettings)
    const data = pattern(0, 200_000, 3)
    await f.write(0, data)
    await rejectsCode(f.flush(), 'ERR_STORE', /LIST refused/)
    assert.equal(await inner.head(INODE_KEY), undefined)
    assert.deepEqual(
      (await segmentKeys(inner)).filter((key) => key.endsWith('.0')),
      [],
      'its part 0 is deleted',
    )
    failLists = false
    await f.flush()
    await f.close()
    assert.deepEqual(await readPublished(inner), { cno: 1, bytes: data })
  })

  it('removeContainer run while part 0 is stored: the flush is ERR_CONFLICT, the container stays gone', async () => {
    const inner = new MemoryStore('first-removed-rm')
    let removed = 0
    const store = new AfterPart0(inner, async () => {
      removed = (await removeContainer(inner)).deletedObjects
    })
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 300_000, 2))
    await rejectsCode(f.flush(), 'ERR_CONFLICT', /removed while it was written/)
    assert.ok(removed > 1, `rm deleted part 0 and the objects sent ahead (${removed})`)
    assert.equal(await inner.head(INODE_KEY), undefined)
    assert.deepEqual(await segmentKeys(inner), [])
    await f.close().catch(() => undefined)
  })
})
