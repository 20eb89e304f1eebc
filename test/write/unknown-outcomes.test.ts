/**
 * Requests whose outcome the writer cannot know, and requests that never answer: an inode
 * write that landed but whose answer was lost must not leave a handle that believes its
 * old checkpoint is the container's; a store that never answers an abortMultipart must not
 * hold a flush, a rollback or a close once the file is aborted.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'

const FIRST = pattern(0, 100_000, 1)
const SECOND = pattern(0, 100_000, 2)

describe('outcomes the writer cannot know', () => {
  for (const conflictPolicy of ['retry', 'fail'] as const) {
    it(`an inode write that landed with its answer lost, then a rollback: the next flush publishes the handle's view (${conflictPolicy})`, async () => {
      const inner = new MemoryStore(`lost-inode-${conflictPolicy}`)
      const store = new FailingStore(inner)
      const f = await SegmentFile.create(store, { conflictPolicy })
      await f.write(0, FIRST)
      await f.flush()
      await f.write(0, SECOND)
      store.addRule({ ops: ['put'], key: /^inode$/, nth: 1, mode: 'lose-answer' })
      await rejectsCode(f.flush(), 'ERR_STORE', /lost answer/)
      assert.deepEqual((await readPublished(inner)).bytes, SECOND, 'the lost write landed')
      await f.rollback()
      assert.deepEqual(Buffer.from(await f.read(0, f.size)), FIRST)
      // The handle holds FIRST; the container SECOND. A flush must not call that published.
      if (conflictPolicy === 'fail') await rejectsCode(f.flush(), 'ERR_CONFLICT')
      const t = await f.flush()
      await f.close()
      assert.ok(t.cno > 2, `published as checkpoint ${t.cno}`)
      assert.deepEqual(await readPublished(inner), { cno: t.cno, bytes: FIRST })
    })
  }

  it('an abortMultipart that never answers: abort() ends the flush and the close that wait for it', async () => {
    const inner = new MemoryStore('hung-abort')
    // Small pieces: part 0 goes up as a multipart upload; its first piece fails, and the
    // abort of the upload then hangs until its signal fires.
    const store = new FailingStore(inner, [
      { ops: ['uploadPart'], nth: 1, mode: 'error' },
      { ops: ['abortMultipart'], mode: 'hang' },
    ])
    const f = await SegmentFile.create(store, {
      segmentMpuChunkSize: 64 * 1024,
      segmentMaxObjectBytes: 512 * 1024 * 1024,
    })
    await f.write(0, FIRST)
    const flushed = f.flush().then(
      () => 'resolved',
      (err) => err,
    )
    await new Promise((r) => setTimeout(r, 200))
    assert.equal(store.count('abortMultipart', 'hung'), 1, 'the abort hangs')
    f.abort(new Error('stop'))
    const outcome = await within(flushed, 2_000, 'the flush after abort()')
    assert.notEqual(outcome, 'resolved')
    await within(f.close(), 2_000, 'close() after abort()')
  })
})
