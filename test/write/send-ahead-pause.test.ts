/**
 * Sending ahead pauses after objects failed in a row (a failing store is not sent more
 * than it can take); once the store takes objects again it goes on, so the writer does
 * not wait for a partial segment at every crossing of the dirty limit until the flush.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { readPublished } from '../helpers/containers.js'
import { FailingStore, type FailRule } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import type { CallInfo } from '../helpers/wrapped-store.js'

const KiB = 1024
const MiB = 1024 * KiB

const SEGMENT_KEY = /^\d+\.\d+$/

/**
 * Counts the segment objects opened (a PutObject or CreateMultipartUpload each, failed
 * ones too) and calls `tooMany` at the `limit`th more: a test that would loop without end
 * fails instead.
 */
class CountingStore extends FailingStore {
  opened = 0
  tooMany = () => {}
  constructor(
    inner: MemoryStore,
    private readonly limit: number,
    rules: FailRule[],
  ) {
    super(inner, rules)
  }
  protected override around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if ((call.op === 'put' || call.op === 'createMultipart') && SEGMENT_KEY.test(call.key)) {
      if (++this.opened === this.limit) this.tooMany()
    }
    return super.around(call, run)
  }
}

describe('sending ahead after objects failed in a row', () => {
  it('goes on once a partial segment is stored: appends then wait for no more partial segments', async () => {
    const inner = new MemoryStore('send-ahead-pause')
    const store = new FailingStore(inner, [
      { ops: ['put', 'createMultipart', 'uploadPart'], key: /^\d+\.\d+$/, nth: 1, times: 8, mode: 'error' },
    ])
    // Objects of 16 KiB sent whole, a 48 KiB dirty limit.
    const f = await SegmentFile.create(store, { ...smallSettings, streamSegmentBytes: 16 * KiB })
    let at = 0
    const append = async () => {
      await f.write(at, pattern(at, 4 * KiB, 1))
      at += 4 * KiB
    }
    // The first objects sent ahead fail (sending ahead pauses), and the partial segments
    // written at the limit then, until the store takes objects again.
    for (let i = 0; i < 64; i++) {
      await append().catch((err) => {
        if (!StreamSegmentError.is(err, 'ERR_STORE')) throw err
        at += 4 * KiB
      })
    }
    assert.equal(store.calls.filter((c) => c.outcome === 'failed').length, 8)
    const before = f.partials
    for (let i = 0; i < 512; i++) await append()
    // Sent ahead, 2 MiB of appends keep under the limit (none, without failures before).
    assert.ok(f.partials - before <= 1, `${f.partials - before} partial segments waited for after the store recovered`)
    await f.flush()
    await f.close()
    assert.ok((await readPublished(inner)).bytes.equals(Buffer.from(pattern(0, at, 1))))
  })

  // Within one write, sending ahead went on sending objects after it should have paused:
  // each failed, its blocks were unsent again, the next object took them, until every part
  // number of the checkpoint was used (16383 objects) and the write failed with ERR_STATE,
  // or without end once a checkpoint goes on under a new number (the store's count stops it).
  // Whole objects, a write step (a quarter of the dirty limit) of more objects than are sent at once.
  for (const [how, settings] of [
    ['as pieces of multipart objects', { streamSegmentBytes: 64 * KiB }],
    ['whole', { streamSegmentBytes: 16 * KiB, dataCacheDirtyMaxBytesThreshold: 256 * KiB }],
  ] as const) {
    it(`stops within a write once objects sent ${how} fail in a row: the write fails with the store's error`, async () => {
      const store = new CountingStore(new MemoryStore('send-ahead-failing'), 1000, [
        { ops: ['put', 'createMultipart', 'uploadPart'], key: SEGMENT_KEY, mode: 'error' },
      ])
      const f = await SegmentFile.create(store, { ...smallSettings, ...settings })
      store.tooMany = () => f.abort(StreamSegmentError.aborted(`${store.opened} objects opened`))
      await assert.rejects(f.write(0, pattern(0, 4 * MiB, 1)), (err) => StreamSegmentError.is(err, 'ERR_STORE'))
      // Three objects fail before the pause, with at most as many more in flight then (the
      // uploader's three requests), then the partial segment at the dirty limit fails the write.
      assert.ok(store.opened <= 8, `${store.opened} objects opened by one write to a failing store`)
      // The flush fails too (each object it needs sent once).
      await assert.rejects(f.flush(), (err) => StreamSegmentError.is(err, 'ERR_STORE'))
      await f.close()
    })
  }
})
