import assert from 'node:assert/strict'
import { promises as fs, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { dropSlabs, keptSlabBytes } from '../../lib/state/slab-pool.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { crc32 } from '../../lib/util/crc32.js'
import { WalLog, walFileName } from '../../lib/wal/log.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-walfile-')

async function published(store: MemoryStore | FailingStore): Promise<Buffer> {
  const r = await SegmentFile.open(store, { readOnly: true })
  try {
    return await contents(r)
  } finally {
    await r.close()
  }
}

describe('SegmentFile with a WAL', () => {
  it('a bad streamSegmentBytes is refused by create, not replaced by the 0 a log implies', async () => {
    // Nothing is sent ahead with a log; the value given is still checked, as open checks it.
    for (const open of [SegmentFile.create, SegmentFile.open]) {
      await rejectsCode(
        open(new MemoryStore(), { wal: { dir: await walDir() }, streamSegmentBytes: 'lots' as never }),
        'ERR_INVALID_ARGUMENT',
        /setting streamSegmentBytes = "lots"/,
      )
    }
  })

  it('what was written and never flushed is replayed and published by the next open', async () => {
    const store = new MemoryStore('wal-a')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 10_000))
    await f.flush()
    await f.write(5_000, pattern(5_000, 20_000, 2))
    await f.writeZeroes(100, 300)
    await f.truncate(22_000)
    const want = await contents(f)
    await f.close() // discards the unflushed state in memory; the log keeps it
    assert.notDeepEqual(await published(store), want)

    const seen = await inspectWal(dir)
    assert.deepEqual(
      { container: seen.container, records: seen.records, payloadBytes: seen.payloadBytes, lockedBy: seen.lockedBy },
      { container: 'mem://wal-a', records: 3, payloadBytes: 20_000, lockedBy: undefined },
    )
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal((await inspectWal(dir)).lockedBy?.pid, process.pid)
    assert.deepEqual({ records: g.walReplay?.records, skipped: g.walReplay?.skipped }, { records: 3, skipped: 0 })
    assert.equal(g.cno, 2, 'the replay was published at open')
    assert.deepEqual(await contents(g), want)
    await g.close()
    assert.deepEqual(await published(store), want)

    const h = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(h.walReplay?.records, 0, 'a published replay is not replayed again')
    await h.close()
  })

  it('a write or writeZeroes of no bytes logs nothing; a log that holds one (written before) replays it as written: the file grows to its offset', async () => {
    const store = new MemoryStore('wal-empty')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 100))
    await f.flush()
    await f.write(10_000, new Uint8Array(0))
    await f.writeZeroes(20_000, 0)
    assert.equal(f.size, 100)
    assert.equal((await inspectWal(dir)).records, 0, 'nothing logged')
    await f.close()

    // Such records meant growth when they were logged: an existing log keeps its meaning.
    const { log } = await WalLog.open(dir, 1, () => assert.fail('the log holds nothing yet'))
    await log.appendWrite(10_000, new Uint8Array(0))
    await log.appendZeroes(20_000, 0)
    await log.close()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 2)
    assert.deepEqual({ cno: g.cno, size: g.size }, { cno: 2, size: 20_000 })
    const want = Buffer.alloc(20_000)
    want.set(pattern(0, 100))
    assert.deepEqual(await contents(g), want)
    await g.close()
  })

  it('a logged write or writeZeroes of no bytes at an offset past the largest file fails the open with ERR_CORRUPT; the log is kept', async () => {
    for (const kind of ['write', 'writeZeroes'] as const) {
      const store = new MemoryStore(`wal-empty-far-${kind}`)
      const dir = await walDir()
      const f = await SegmentFile.create(store, { wal: { dir } })
      await f.write(0, pattern(0, 100))
      await f.flush()
      await f.close()
      // No writer logs one (its call is checked first): the file would grow past 2^32 blocks.
      const { log } = await WalLog.open(dir, 1, () => assert.fail('the log holds nothing yet'))
      if (kind === 'write') await log.appendWrite(2 ** 50, new Uint8Array(0))
      else await log.appendZeroes(2 ** 50, 0)
      await log.close()
      const path = join(dir, walFileName(2))
      const logged = await fs.readFile(path)
      await rejectsCode(
        SegmentFile.open(store, { wal: { dir } }),
        'ERR_CORRUPT',
        new RegExp(
          `wal-0000000002\\.log at byte 48 \\(record \\d+\\): a ${kind === 'write' ? 'write' : 'zeroes'} record the file cannot take: ${kind}: offset 1125899906842624 is past the largest file`,
        ),
      )
      assert.ok((await fs.readFile(path)).equals(logged), 'the log is kept as it was')
      assert.deepEqual(await published(store), pattern(0, 100), 'nothing was published')
    }
  })

  it('nothing is sent ahead with a WAL: the objects are written by the flush', async () => {
    const store = new FailingStore(new MemoryStore('wal-g'))
    const f = await SegmentFile.create(store, { wal: { dir: await walDir() }, streamSegmentBytes: 1024 * 1024 })
    assert.equal(f.settings.streamSegmentBytes, 0)
    const atOpen = store.calls.length
    for (let at = 0; at < 3 * 1024 * 1024; at += 256 * 1024) await f.write(at, pattern(at, 256 * 1024))
    await f.settle()
    assert.deepEqual(store.calls.slice(atOpen), [], 'no request between the open and the flush')
    await f.flush()
    assert.ok(
      store.calls.some((c) => c.op === 'put' && c.key.endsWith('.0')),
      'the flush wrote part 0',
    )
    await f.close()
  })

  it('a flush that publishes empties the log; rollback discards it', async () => {
    const store = new MemoryStore('wal-b')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 5_000))
    await f.flush()
    await f.write(0, pattern(0, 5_000, 9))
    await f.rollback()
    await f.close()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0)
    assert.deepEqual(await contents(g), pattern(0, 5_000))
    await g.close()
  })

  it('refuses what it cannot log, a second writer, and a log of another container', async () => {
    const store = new MemoryStore('wal-c')
    const dir = await walDir()
    await rejectsCode(SegmentFile.create(store, { wal: { dir: '' } }), 'ERR_INVALID_ARGUMENT', /wal: \{ dir \}/)
    // A path the file system cannot take is a wrong option, refused before any folder is touched.
    await rejectsCode(
      SegmentFile.create(store, { wal: { dir: `${dir}\0x` } }),
      'ERR_INVALID_ARGUMENT',
      /wal\.dir .*: a path holds no NUL byte/,
    )
    const f = await SegmentFile.create(store, { wal: { dir } })
    await rejectsCode(
      f.writeRef(0, 4096, { read: async () => new Uint8Array(4096) } as never),
      'ERR_INVALID_ARGUMENT',
      /with a WAL, write by value/,
    )
    await f.write(0, pattern(0, 100))
    await f.flush()
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_STATE', /in use by another writer/)
    await rejectsCode(SegmentFile.open(store, { wal: { dir }, readOnly: true }), 'ERR_INVALID_ARGUMENT', /read-only/)
    await f.close()
    const other = new MemoryStore('wal-other')
    await rejectsCode(
      SegmentFile.create(other, { wal: { dir } }),
      'ERR_INVALID_ARGUMENT',
      /belongs to the container at mem:\/\/wal-c/,
    )
  })

  it('a relative dir is the folder under the working directory at open, wherever the process goes after', async () => {
    const store = new MemoryStore('wal-relative')
    const dir = await walDir()
    // Another container's log, in a folder of the same name under another directory.
    const other = new MemoryStore('wal-relative-other')
    const otherDir = await walDir()
    const o = await SegmentFile.create(other, { wal: { dir: otherDir } })
    await o.flush()
    await o.write(0, Buffer.from('theirs'))
    await o.close()
    const cwd = process.cwd()
    process.chdir(dirname(dir))
    try {
      const f = await SegmentFile.create(store, { wal: { dir: 'wal' } })
      await f.write(0, Buffer.from('base'))
      process.chdir(dirname(otherDir))
      await f.flush() // starts the log afresh: in the folder opened, not in the other
      await f.write(0, Buffer.from('one'))
      await f.close()
    } finally {
      process.chdir(cwd)
    }
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.deepEqual(await contents(g), Buffer.from('onee'))
    await g.close()
    const h = await SegmentFile.open(other, { wal: { dir: otherDir } })
    assert.equal(h.walReplay?.records, 1, "the other container's log is whole")
    assert.deepEqual(await contents(h), Buffer.from('theirs'))
    await h.close()
  })

  it('a log whose checkpoint was published before the process died is not published again', async () => {
    const store = new MemoryStore('wal-d')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 8_000))
    await f.flush()
    await f.write(1_000, pattern(1_000, 3_000, 5))
    // The log as it was just before the flush: as if the process died once the inode
    // landed, before the log was rotated.
    const copy = `${dir}-copy`
    await fs.cp(dir, copy, { recursive: true })
    await f.flush()
    await f.close()
    await fs.rm(dir, { recursive: true })
    await fs.rename(copy, dir)
    await fs.rm(join(dir, '.lock'), { recursive: true, force: true })

    const g = await SegmentFile.open(store, { wal: { dir }, conflictPolicy: 'fail' })
    assert.deepEqual(
      { records: g.walReplay?.records, skipped: g.walReplay?.skipped, baseCno: g.walReplay?.baseCno },
      { records: 0, skipped: 1, baseCno: undefined },
      'found in checkpoint 2: skipped, not applied',
    )
    assert.equal(g.cno, 2, 'no new checkpoint: checkpoint 2 holds the record already')
    assert.equal((await g.flush()).objects, 0)
    await g.close()
  })

  it('a log built on a checkpoint the container never published (made again since) is refused and kept', async () => {
    const store = new MemoryStore('wal-remade')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    for (let i = 0; i < 3; i++) {
      await f.write(0, pattern(i, 8_000))
      await f.flush()
    }
    await f.write(0, pattern(9, 4_000)) // logged on checkpoint 3, never flushed
    await f.close()
    // The container is removed and made again at the same place: its checkpoint 1 is new.
    const keys: string[] = []
    for await (const e of store.list()) keys.push(e.key)
    await store.delete(keys)
    const g = await SegmentFile.create(store)
    await g.write(0, pattern(5, 2_000))
    await g.flush()
    await g.close()
    const before = await published(store)
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_CONFLICT',
      /checkpoint 3, which .* never published \(its latest is 1\)/,
    )
    assert.deepEqual(await published(store), before, 'nothing was published')
    assert.equal((await inspectWal(dir)).records, 1, 'the log is kept')
  })

  it("a log overtaken by another writer: conflictPolicy 'fail' keeps it, 'retry' publishes it on top", async () => {
    const store = new MemoryStore('wal-e')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 8_000))
    await f.flush()
    await f.write(0, pattern(0, 1_000, 3))
    await f.close()
    const other = await SegmentFile.open(store)
    await other.write(4_000, pattern(4_000, 6_000, 4))
    await other.flush()
    const theirs = await contents(other)
    await other.close()

    await rejectsCode(
      SegmentFile.open(store, { wal: { dir }, conflictPolicy: 'fail' }),
      'ERR_CONFLICT',
      /published since by another writer \(the log is kept\)/,
    )
    assert.deepEqual(await published(store), theirs)
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    const want = Buffer.from(theirs)
    pattern(0, 1_000, 3).copy(want, 0)
    assert.deepEqual(await contents(g), want)
    assert.equal(g.cno, 3)
    await g.close()
  })

  it('a store failing the publish at open leaves the log whole; the next open publishes it', async () => {
    const inner = new MemoryStore('wal-f')
    const dir = await walDir()
    const f = await SegmentFile.create(inner, { wal: { dir } })
    await f.write(0, pattern(0, 6_000))
    await f.flush()
    await f.write(2_000, pattern(2_000, 2_000, 7))
    const want = await contents(f)
    await f.close()
    const failing = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }])
    await rejectsCode(SegmentFile.open(failing, { wal: { dir }, conflictRetries: 0 }), 'ERR_STORE')
    const g = await SegmentFile.open(inner, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.deepEqual(await contents(g), want)
    await g.close()
    assert.deepEqual(await published(inner), want)
  })

  it('an open whose replay fails closes what it had opened: the handle gives its memory back, no file is left open, the folder is free', async () => {
    const store = new MemoryStore('wal-replay-fails')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 6_000))
    await f.flush()
    await f.write(0, Buffer.from('one'))
    await f.write(10, Buffer.from('0123456789'))
    await f.close()
    // The second record of the newest file names bytes past any file, its CRC made again:
    // the replay applies the first, then fails with ERR_CORRUPT.
    const path = join(dir, walFileName(2))
    const b = await fs.readFile(path)
    const at = 48 + 40 + 3
    b.writeBigUInt64LE(2n ** 53n, at + 16)
    b.writeUInt32LE(crc32(b.subarray(at + 40, at + 50), crc32(b.subarray(at, at + 36))), at + 36)
    await fs.writeFile(path, b)
    const fds = () => readdirSync('/proc/self/fd').length
    dropSlabs()
    const before = fds()
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_CORRUPT', /past any file/)
    assert.equal(fds(), before, 'no file handle is left open')
    // A handle closed gives its dirty tier's memory back (state/slab-pool.ts); one left open keeps it.
    assert.ok(keptSlabBytes() > 0, 'the handle the replay wrote into was closed')
    // The folder is free: the next open fails on the record again, not on the lock.
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_CORRUPT', /past any file/)
    assert.ok((await fs.readFile(path)).equals(b), 'the log is kept as it was')
  })
})
