/**
 * The checkpoint numbers above the published one that abandoned attempts took: found by
 * one listing taken up after the published number, however many there are, and skipped
 * by the next checkpoint.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { firstFreeCno, numbersTaken } from '../../lib/container/listing.js'
import { findCompleted } from '../../lib/container/resume.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeInodeObject, INODE_KEY, segmentKey } from '../../lib/format/index.js'
import { MAX_CNO } from '../../lib/format/pointer.js'
import { fileState, OPEN_SIGNAL, SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { smallSettings } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { CountingStore } from '../helpers/resume.js'

/** A container with checkpoint 1 published and the numbers `taken` used by abandoned parts (no part 0). */
async function withAbandoned(taken: number[]): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 8192, 1))
  await f.flush()
  await f.close()
  for (const cno of taken) {
    await store.put(segmentKey(cno, 1), new Uint8Array(100))
    await store.put(segmentKey(cno, 2), new Uint8Array(0))
  }
  return store
}

async function collect(store: MemoryStore, from: number) {
  const out: Array<[number, string[]]> = []
  for await (const { cno, objects } of numbersTaken(store, from)) out.push([cno, [...objects.keys()]])
  return out
}

describe('numbers taken above the published checkpoint', () => {
  it('are every number objects use from the first on, each with its objects, past the unused ones', async () => {
    const store = await withAbandoned([2, 3, 5, 9])
    await store.put('0000000003.x', new Uint8Array(1)) // not a segment key: passed over
    assert.deepEqual(await collect(store, 2), [
      [2, [segmentKey(2, 1), segmentKey(2, 2)]],
      [3, [segmentKey(3, 1), segmentKey(3, 2)]],
      [5, [segmentKey(5, 1), segmentKey(5, 2)]],
      [9, [segmentKey(9, 1), segmentKey(9, 2)]],
    ])
    // A writer's number is above every one taken: 4 and 6 to 8 lie below objects of 5 and 9.
    assert.equal(await firstFreeCno(store, 2), 10)
    assert.equal(await firstFreeCno(store, 4), 10)
    assert.equal(await firstFreeCno(store, 6), 10)
    assert.equal(await firstFreeCno(store, 10), 10)
    assert.deepEqual(await collect(store, 10), [])
    // Checkpoint 1 itself, when asked from 1.
    assert.deepEqual(
      (await collect(store, 1)).map(([cno]) => cno),
      [1, 2, 3, 5, 9],
    )
  })

  it('a writer opening a container with 300 abandoned numbers lists it once, and its checkpoint skips them', async () => {
    const taken = Array.from({ length: 300 }, (_, i) => i + 2)
    const store = await withAbandoned(taken)
    const counting = new CountingStore(store)
    const w = await SegmentFile.open(counting, { ...smallSettings, rollForwardAfterMs: 0 })
    assert.equal(w.cno, 1)
    assert.equal(counting.requests.list, 1, `${counting.requests.list} LIST requests`)
    await w.write(0, pattern(0, 4096, 2))
    assert.equal((await w.flush()).cno, 302, 'the numbers taken are skipped')
    await w.close()
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 302)
    // A resume's look for completed objects lists them once too.
    const before = counting.requests.list ?? 0
    const found = await findCompleted(
      counting,
      { size: 1, mtimeMs: 1, blockSize: 4096, pieceSize: 65536 },
      {
        publishedCno: 1,
      },
    )
    assert.equal(found.size, 0)
    assert.equal((counting.requests.list ?? 0) - before, 1)
  })

  it('past the last checkpoint number, a writer is refused as having no numbers left; a reader opens', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    fileState(f).skipTo(MAX_CNO - 1) // as if every number below had been used
    await f.write(0, pattern(0, 8192, 1))
    assert.equal((await f.flush()).cno, MAX_CNO - 1)
    await f.write(0, pattern(0, 4096, 2))
    assert.equal((await f.flush()).cno, MAX_CNO, 'the last number')
    const noneLeft = (err: unknown) =>
      StreamSegmentError.is(err, 'ERR_STATE') && /no checkpoint numbers are left/.test(err.message)
    // The handle that published it has no number for its next checkpoint.
    await assert.rejects(
      (async () => {
        await f.write(0, pattern(0, 4096, 3))
        await f.flush()
      })(),
      noneLeft,
    )
    await f.close()
    const want = Buffer.from(pattern(0, 8192, 1))
    want.set(pattern(0, 4096, 2), 0)
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.equal(r.cno, MAX_CNO)
    assert.ok(Buffer.from(await r.read(0, 8192)).equals(want))
    await r.close()
    await assert.rejects(SegmentFile.open(store, smallSettings), noneLeft)
    // Nor may a writer build on an older checkpoint: its next one would need a number too.
    await assert.rejects(SegmentFile.open(store, { ...smallSettings, cno: MAX_CNO - 1 }), noneLeft)
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, MAX_CNO)
  })

  it("an open interrupted while it looks above the published checkpoint says so, not the store's bare 'list aborted'", async () => {
    const store = await withAbandoned([2, 3])
    const stop = new AbortController()
    stop.abort()
    const said = (err: unknown) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), String(err))
      assert.match(err.message, /interrupted while looking for the checkpoint numbers taken from 2 on/)
      return true
    }
    await assert.rejects(collect2(numbersTaken(store, 2, stop.signal)), said)
    await assert.rejects(
      SegmentFile.open(store, { ...smallSettings, [OPEN_SIGNAL]: stop.signal } as typeof smallSettings),
      said,
    )
  })
})

async function collect2(numbers: AsyncIterable<unknown>): Promise<void> {
  for await (const _ of numbers) {
    // Only the look, to its end or its failure.
  }
}
