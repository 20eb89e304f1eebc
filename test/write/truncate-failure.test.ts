/**
 * A truncate that fails leaves the file as it was: cutting to the middle of a stored
 * block reads that block (its bytes past the new end become zeros), and that read may fail.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const KiB = 1024

describe('a truncate into a stored block whose read fails', () => {
  it('fails, and the file keeps its size and every byte; the truncate done again cuts it', async () => {
    const inner = new MemoryStore('truncate-read-fails')
    const store = new FailingStore(inner)
    const f = await SegmentFile.create(store, smallSettings)
    const first = Buffer.from(pattern(0, 100 * KiB, 1))
    await f.write(0, first)
    await f.flush()
    store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error' })
    await rejectsCode(f.truncate(50 * KiB + 100), 'ERR_STORE')
    store.clearRules()
    assert.equal(f.size, first.length)
    assert.ok(Buffer.from(await f.read(0, f.size)).equals(first), 'the failed truncate changed the bytes')
    await f.flush()
    assert.ok((await readPublished(inner)).bytes.equals(first), 'a flush after it published other bytes')

    await f.truncate(50 * KiB + 100)
    await f.truncate(60 * KiB)
    const want = Buffer.alloc(60 * KiB)
    first.copy(want, 0, 0, 50 * KiB + 100)
    assert.ok(Buffer.from(await f.read(0, f.size)).equals(want))
    await f.flush()
    await f.close()
    assert.ok((await readPublished(inner)).bytes.equals(want))
  })
})

describe('with a WAL, a truncate that fails', () => {
  const walDir = walDirs('ss-truncfail-')
  // Into a stored block (its read fails), and at a block boundary on a handle just opened
  // (the read of the map's leaf the cut descends to fails).
  for (const [where, size] of [
    ['into a stored block', 50 * KiB + 100],
    ['at a block boundary', 48 * KiB],
  ] as const) {
    it(`${where} is not logged: the next open replays the file as it was, and the calls after it`, async () => {
      const inner = new MemoryStore(`truncate-wal-${size}`)
      const store = new FailingStore(inner)
      const dir = await walDir()
      const first = Buffer.from(pattern(0, 100 * KiB, 1))
      const f0 = await SegmentFile.create(store, { ...smallSettings, wal: { dir } })
      await f0.write(0, first)
      await f0.flush()
      await f0.close()
      const f = await SegmentFile.open(store, { ...smallSettings, wal: { dir } })
      store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error' })
      await rejectsCode(f.truncate(size), 'ERR_STORE')
      store.clearRules()
      assert.equal(f.size, first.length)
      const want = Buffer.from(first)
      want.write('after', 90 * KiB)
      await f.write(90 * KiB, Buffer.from('after'))
      assert.ok((await contents(f)).equals(want))
      await f.close() // the log keeps what was not flushed
      const g = await SegmentFile.open(store, { ...smallSettings, wal: { dir } })
      assert.equal(g.size, want.length, 'the replay applied the truncate that failed')
      assert.ok((await contents(g)).equals(want))
      assert.equal(g.walReplay?.records, 1, 'records replayed')
      await g.close()
    })
  }
})
