/**
 * What a replay skips and what it applies, when the log and the container's history part:
 * a background publish that failed (or whose number another writer took), a flush whose
 * process died before it started a new log, a log left empty on an old checkpoint, a
 * container removed and made again, and an older checkpoint opened with a log.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { crc32 } from '../../lib/util/crc32.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-walhist-')

async function text(f: SegmentFile): Promise<string> {
  return (await contents(f)).toString('latin1')
}

/** The latest checkpoint's content, as a new reader sees it, and its number. */
async function published(store: MemoryStore): Promise<{ cno: number; text: string }> {
  const r = await SegmentFile.open(store, { readOnly: true })
  try {
    return { cno: r.cno, text: await text(r) }
  } finally {
    await r.close()
  }
}

/** A container whose checkpoint 1 holds `content`, made without a log. */
async function container(name: string, content: string): Promise<MemoryStore> {
  const store = new MemoryStore(name)
  const c = await SegmentFile.create(store)
  await c.write(0, Buffer.from(content))
  await c.flush()
  await c.close()
  return store
}

/** Another writer (no log) writes `data` at `offset` and publishes; returns the checkpoint. */
async function otherWriter(store: MemoryStore, offset: number, data: string): Promise<number> {
  const b = await SegmentFile.open(store)
  try {
    await b.write(offset, Buffer.from(data))
    return (await b.flush()).cno
  } finally {
    await b.close()
  }
}

/** Every object of the store deleted: the container is gone. */
async function removeContainer(store: MemoryStore): Promise<void> {
  const keys: string[] = []
  for await (const e of store.list()) keys.push(e.key)
  await store.delete(keys)
}

describe('WAL replay and the container history', () => {
  it('a background publish that lost to another writer: its records are replayed, however far that writer went since', async () => {
    const store = await container('hist-lost', '.'.repeat(20))
    const dir = await walDir()
    const a = await SegmentFile.open(store, { wal: { dir } })
    await a.write(0, Buffer.from('AAAA'))
    assert.equal(await otherWriter(store, 15, 'B1'), 2)
    // A's publish takes number 3, starts a log file based on it, and fails at the inode.
    await rejectsCode(a.publish(), 'ERR_CONFLICT')
    await a.write(10, Buffer.from('CC'))
    // The other writer goes past number 3 (taken by A's part 0, never published).
    assert.equal(await otherWriter(store, 17, 'B2'), 4)
    await a.close() // the log is kept, as when the process dies
    assert.deepEqual(
      (await inspectWal(dir)).generations.map((g) => [g.baseCno, g.records]),
      [
        [1, 1],
        [3, 1],
      ],
    )

    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.deepEqual({ records: g.walReplay?.records, skipped: g.walReplay?.skipped }, { records: 2, skipped: 0 })
    assert.equal(await text(g), 'AAAA......CC...B1B2.', 'both acknowledged writes, on top of the other writer')
    await g.close()
    assert.deepEqual(await published(store), { cno: 5, text: 'AAAA......CC...B1B2.' })
  })

  it("a background publish whose number another writer then published: that checkpoint is not this writer's, nothing is skipped", async () => {
    const inner = await container('hist-taken', '.'.repeat(20))
    const store = new FailingStore(inner)
    const dir = await walDir()
    const a = await SegmentFile.open(store, { wal: { dir } })
    await a.write(0, Buffer.from('AAAA'))
    // Part 0 of checkpoint 2 fails to upload: the log file after it is based on 2, which
    // stays free, and the other writer publishes its own checkpoint 2.
    store.addRule({ ops: ['put'], key: /^0000000002\.0$/, nth: 1 })
    await rejectsCode(a.publish(), 'ERR_STORE', /injected failure/)
    assert.equal(await otherWriter(inner, 15, 'B1'), 2)
    await a.write(10, Buffer.from('CC'))
    await a.close()
    assert.deepEqual(
      (await inspectWal(dir)).generations.map((g) => g.baseCno),
      [1, 2],
    )

    const g = await SegmentFile.open(inner, { wal: { dir } })
    assert.deepEqual({ records: g.walReplay?.records, skipped: g.walReplay?.skipped }, { records: 2, skipped: 0 })
    assert.equal(await text(g), 'AAAA......CC...B1...')
    await g.close()
  })

  it('a background publish that landed before the process died: the records it holds are skipped, the rest replayed', async () => {
    const inner = await container('hist-landed', '.'.repeat(20))
    const store = new FailingStore(inner)
    const dir = await walDir()
    const a = await SegmentFile.open(store, { wal: { dir } })
    await a.write(0, Buffer.from('AAAA'))
    store.addRule({ ops: ['put'], key: /^inode$/, mode: 'hang' })
    const landed = a.publish()
    await a.write(10, Buffer.from('CC')) // in the log file the publish started
    // The log as it is once the publish landed, had the process died before the old file went.
    const copy = `${dir}-copy`
    await fs.cp(dir, copy, { recursive: true })
    store.clearRules()
    store.release()
    assert.equal((await landed).cno, 2)
    await a.close()
    await fs.rm(dir, { recursive: true })
    await fs.rename(copy, dir)
    await fs.rm(join(dir, '.lock'), { recursive: true, force: true })
    // Another writer publishes on top: what it changed must stay.
    assert.equal(await otherWriter(inner, 2, 'bb'), 3)

    // The record left applies on checkpoint 2, overtaken by checkpoint 3: 'fail' keeps it.
    await rejectsCode(
      SegmentFile.open(inner, { wal: { dir }, conflictPolicy: 'fail' }),
      'ERR_CONFLICT',
      /checkpoint 2, and checkpoint 3 was published since/,
    )
    const g = await SegmentFile.open(inner, { wal: { dir } })
    assert.deepEqual({ records: g.walReplay?.records, skipped: g.walReplay?.skipped }, { records: 1, skipped: 1 })
    assert.equal(await text(g), 'AAbb......CC........', "the other writer's bb stays")
    await g.close()
  })

  for (const conflictPolicy of ['fail', 'retry'] as const) {
    it(`a flush that published, then the process died before a new log; another writer published on top (${conflictPolicy}): nothing is applied again`, async () => {
      const store = new MemoryStore(`hist-died-${conflictPolicy}`)
      const dir = await walDir()
      const a = await SegmentFile.create(store, { wal: { dir } })
      await a.write(0, Buffer.from('v1..'))
      await a.flush()
      await a.write(0, Buffer.from('A-v2'))
      // The log as the flush left it had the process died once the inode landed.
      const copy = `${dir}-copy`
      await fs.cp(dir, copy, { recursive: true })
      assert.equal((await a.flush()).cno, 2)
      await a.close()
      await fs.rm(dir, { recursive: true })
      await fs.rename(copy, dir)
      await fs.rm(join(dir, '.lock'), { recursive: true, force: true })
      assert.equal(await otherWriter(store, 0, 'B-v3'), 3)

      const g = await SegmentFile.open(store, { wal: { dir }, conflictPolicy })
      assert.deepEqual(
        { records: g.walReplay?.records, skipped: g.walReplay?.skipped, baseCno: g.walReplay?.baseCno },
        { records: 0, skipped: 1, baseCno: undefined },
        'the record found in checkpoint 2 counts as skipped, not applied',
      )
      assert.equal(g.cno, 3, 'nothing published: checkpoint 2 holds the record')
      assert.equal(await text(g), 'B-v3')
      await g.close()
      assert.deepEqual(await published(store), { cno: 3, text: 'B-v3' })
      const h = await SegmentFile.open(store, { wal: { dir }, conflictPolicy })
      assert.equal(h.walReplay?.records, 0, 'the log was started afresh')
      await h.close()
    })
  }

  it('an empty log left on an older checkpoint moves to the published one: what is logged next is replayed', async () => {
    const store = new MemoryStore('hist-empty')
    const dir = await walDir()
    const a = await SegmentFile.create(store, { wal: { dir } })
    await a.write(0, Buffer.from('AAAA'))
    await a.flush()
    await a.close() // the log: empty, on checkpoint 1
    assert.equal(await otherWriter(store, 0, 'BBBB'), 2)
    const b = await SegmentFile.open(store, { wal: { dir }, conflictPolicy: 'fail' })
    assert.equal(b.walReplay?.records, 0)
    await b.write(4, Buffer.from('CC'))
    await b.close()
    assert.deepEqual(
      (await inspectWal(dir)).generations.map((g) => [g.baseCno, g.records]),
      [[2, 1]],
    )
    const g = await SegmentFile.open(store, { wal: { dir }, conflictPolicy: 'fail' })
    assert.equal(await text(g), 'BBBBCC')
    assert.equal(g.cno, 3)
    await g.close()
  })

  it('an empty log of a container removed and made again moves to the new one', async () => {
    const store = new MemoryStore('hist-empty-remade')
    const dir = await walDir()
    const a = await SegmentFile.create(store, { wal: { dir } })
    for (const s of ['A', 'B', 'C']) {
      await a.write(0, Buffer.from(s))
      await a.flush()
    }
    await a.close() // the log: empty, on checkpoint 3
    await removeContainer(store)
    await sleep(2) // another creation time
    const n = await SegmentFile.create(store)
    await n.write(0, Buffer.from('new'))
    await n.flush()
    await n.close()
    const b = await SegmentFile.open(store, { wal: { dir } })
    await b.write(3, Buffer.from('-data'))
    await b.close()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.equal(await text(g), 'new-data')
    await g.close()
  })

  it('a log of a container removed and made again is refused and kept, even once the new one passed its checkpoint', async () => {
    const store = new MemoryStore('hist-remade')
    const dir = await walDir()
    const a = await SegmentFile.create(store, { wal: { dir } })
    await a.write(0, Buffer.from('old-1'))
    await a.flush()
    await a.write(0, Buffer.from('old-2'))
    await a.flush()
    await a.write(0, Buffer.from('OLDHISTORY')) // logged on checkpoint 2, never published
    await a.close()
    await removeContainer(store)
    await sleep(2) // another creation time
    const n = await SegmentFile.create(store)
    for (const s of ['new-1', 'new-2', 'new-3 fresh content']) {
      await n.write(0, Buffer.from(s))
      await n.flush()
    }
    await n.close()
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_CONFLICT',
      /written on checkpoint 2 of another container .* removed and made again since; the log is kept/,
    )
    assert.deepEqual(await published(store), { cno: 3, text: 'new-3 fresh content' })
    assert.equal((await inspectWal(dir)).records, 1, 'the log is kept')
  })

  it('a log written by an earlier build (file header version 1, no creation time) is replayed', async () => {
    const store = new MemoryStore('hist-v1')
    const dir = await walDir()
    const a = await SegmentFile.create(store, { wal: { dir } })
    await a.write(0, Buffer.from('base'))
    await a.flush()
    await a.write(0, Buffer.from('BA'))
    await a.close()
    // The same file as version 1 wrote it: a 40-byte header, then the records.
    const path = join(dir, 'wal-0000000002.log')
    const v2 = await fs.readFile(path)
    const h = Buffer.alloc(40)
    v2.copy(h, 0, 0, 32)
    h.writeUInt32LE(1, 8)
    h.writeUInt32LE(crc32(h.subarray(0, 32)), 32)
    await fs.writeFile(path, Buffer.concat([h, v2.subarray(48)]))
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.equal(await text(g), 'BAse')
    await g.close()
  })

  it('a writer with a log opens the latest checkpoint only', async () => {
    const store = new MemoryStore('hist-cno')
    const dir = await walDir()
    const c = await SegmentFile.create(store)
    await c.write(0, Buffer.from('version-ONE'))
    await c.flush()
    await c.write(0, Buffer.from('VERSION-TWO, longer'))
    await c.flush()
    await c.close()
    await rejectsCode(
      SegmentFile.open(store, { cno: 1, wal: { dir } }),
      'ERR_INVALID_ARGUMENT',
      /a writer with a log opens the latest checkpoint, not checkpoint 1/,
    )
    await assert.rejects(fs.stat(dir), { code: 'ENOENT' }, 'no log was made')
    const r = await SegmentFile.open(store, { cno: 1 })
    assert.equal(await text(r), 'version-ONE', 'without a log, cno still opens')
    await r.close()
  })
})
