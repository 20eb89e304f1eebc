/**
 * A write or writeZeroes that starts or ends inside a stored block reads that block first,
 * and that read may fail: the call then changes nothing, and with a WAL logs nothing, so
 * that no later open replays a change the caller was told failed.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const KiB = 1024

/** The calls that fail: each covers one stored block in part, the one at 48 KiB (4 KiB blocks). */
const cases = [
  ['a write ending inside a stored block', (f: SegmentFile) => f.write(40 * KiB, Buffer.alloc(10 * KiB + 100, 7))],
  [
    'a write starting inside a stored block',
    (f: SegmentFile) => f.write(50 * KiB + 100, Buffer.alloc(14 * KiB - 100, 7)),
  ],
  ['a write inside one stored block', (f: SegmentFile) => f.write(50 * KiB + 100, Buffer.alloc(100, 7))],
  ['a writeZeroes ending inside a stored block', (f: SegmentFile) => f.writeZeroes(40 * KiB, 10 * KiB + 100)],
  ['a writeZeroes starting inside a stored block', (f: SegmentFile) => f.writeZeroes(50 * KiB + 100, 14 * KiB - 100)],
] as const

/** A container of 100 KiB flushed, and a handle opened on it, its store failing the next GET of data once. */
async function opened(wal: { dir: string } | undefined) {
  const inner = new MemoryStore()
  const store = new FailingStore(inner)
  const first = Buffer.from(pattern(0, 100 * KiB, 1))
  const f0 = await SegmentFile.create(store, { ...smallSettings, wal })
  await f0.write(0, first)
  await f0.flush()
  await f0.close()
  const f = await SegmentFile.open(store, { ...smallSettings, wal })
  // Every map node loaded first: the GET that fails is the data block's.
  assert.ok((await contents(f)).equals(first))
  store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error', nth: 1 })
  return { store, f, first }
}

describe('a write or writeZeroes whose read of a partly covered stored block fails', () => {
  const walDir = walDirs('ss-partfail-')
  for (const [what, call] of cases) {
    it(`${what}: the handle does not change`, async () => {
      const { store, f, first } = await opened(undefined)
      await rejectsCode(call(f), 'ERR_STORE')
      assert.equal(store.count('get', 'failed'), 1, 'the GET that failed')
      assert.equal(f.size, first.length)
      assert.ok((await contents(f)).equals(first))
      assert.equal(f.dirtyBytes, 0)
      await f.close()
    })

    it(`${what}, with a WAL: it is not logged, so the next open does not replay it`, async () => {
      const dir = await walDir()
      const { store, f, first } = await opened({ dir })
      await rejectsCode(call(f), 'ERR_STORE')
      assert.equal(store.count('get', 'failed'), 1, 'the GET that failed')
      const want = Buffer.from(first)
      want.write('after', 90 * KiB)
      await f.write(90 * KiB, Buffer.from('after'))
      assert.ok((await contents(f)).equals(want))
      await f.close() // the log keeps what was not flushed
      const g = await SegmentFile.open(store, { ...smallSettings, wal: { dir } })
      assert.equal(g.walReplay?.records, 1, 'records replayed')
      assert.ok((await contents(g)).equals(want), 'the replay applied the call that failed')
      await g.close()
    })
  }
})

describe('with a WAL, a write that fails before it changes anything', () => {
  const walDir = walDirs('ss-partfail-')

  it('over stored blocks whose map leaves are not loaded, one failing: not logged, nothing applied', async () => {
    const dir = await walDir()
    const store = new FailingStore(new MemoryStore())
    const first = Buffer.from(pattern(0, 100 * KiB, 1))
    const f0 = await SegmentFile.create(store, { ...smallSettings, wal: { dir } })
    await f0.write(0, first)
    await f0.flush()
    await f0.close()
    // Fresh: no leaf loaded. Four entries a leaf: the write spans several; the second
    // node read fails (one leaf applied first, before the fix).
    const f = await SegmentFile.open(store, { ...smallSettings, wal: { dir } })
    store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error', nth: 2 })
    await rejectsCode(f.write(0, Buffer.alloc(64 * KiB, 7)), 'ERR_STORE')
    assert.equal(store.count('get', 'failed'), 1, 'the GET that failed')
    assert.equal(f.dirtyBytes, 0, 'nothing applied')
    assert.ok((await contents(f)).equals(first))
    await f.close()
    const g = await SegmentFile.open(store, { ...smallSettings, wal: { dir } })
    assert.equal(g.walReplay?.records, 0, 'records replayed')
    assert.ok((await contents(g)).equals(first), 'the replay applied the write that failed')
    await g.close()
  })

  it('larger than one 64 MiB piece, its last piece ending in a stored block: the pieces before it stay, logged', async () => {
    const MiB = 1024 * KiB
    const dir = await walDir()
    const store = new FailingStore(new MemoryStore())
    // One block of data stored past 64 MiB; holes before it.
    const f0 = await SegmentFile.create(store, { wal: { dir } })
    await f0.write(64 * MiB + 4 * KiB, Buffer.alloc(4 * KiB, 1))
    await f0.flush()
    await f0.close()
    const f = await SegmentFile.open(store, { wal: { dir } })
    store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error' })
    // The first piece, [0, 64 MiB), is whole blocks over holes; the second ends inside the stored block.
    await rejectsCode(f.write(0, Buffer.alloc(64 * MiB + 4 * KiB + 100, 7)), 'ERR_STORE')
    store.clearRules()
    const want = Buffer.alloc(64 * MiB + 8 * KiB)
    want.fill(7, 0, 64 * MiB)
    want.fill(1, 64 * MiB + 4 * KiB)
    assert.ok((await contents(f)).equals(want), 'the first piece applied, the second not')
    await f.close()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1, 'records replayed')
    assert.ok((await contents(g)).equals(want), 'the replay differs from the handle')
    await g.close()
  })
})

describe('a write in steps ending inside a block dirty when it starts', () => {
  const walDir = walDirs('ss-partfail-')
  it('takes its bytes as they were then: a partial segment storing it meanwhile makes the write read nothing', async () => {
    const store = new FailingStore(new MemoryStore())
    const first = Buffer.from(pattern(0, 200 * KiB, 1))
    // With a WAL nothing is sent ahead: past the dirty limit, partial segments are written.
    const f = await SegmentFile.create(store, { ...smallSettings, wal: { dir: await walDir() } })
    await f.write(0, first)
    await f.flush()
    assert.ok((await contents(f)).equals(first)) // every map node loaded
    const want = Buffer.from(first)
    // Block 12 dirty, and 40 KiB more: the write's first step (12 KiB steps) passes the
    // 48 KiB dirty limit, and what is stored then stores block 12 too.
    for (const [at, bytes] of [
      [50 * KiB, Buffer.alloc(100, 2)],
      [120 * KiB, Buffer.alloc(40 * KiB, 3)],
    ] as const) {
      await f.write(at, bytes)
      bytes.copy(want, at)
    }
    store.addRule({ ops: ['get'], key: /^\d+\.\d+$/, mode: 'error' })
    const last = Buffer.alloc(50 * KiB + 50, 4)
    await f.write(0, last)
    last.copy(want, 0)
    assert.ok(f.partials > 0, 'partial segments written during the write')
    assert.equal(store.count('get', 'failed'), 0, 'reads of stored data')
    store.clearRules()
    assert.ok((await contents(f)).equals(want))
    await f.close()
  })
})
