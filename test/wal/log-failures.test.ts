/**
 * The log when the local file system fails or surprises it: an interval fsync due while a
 * new file is started, a full disk (a record, a new file, the switch after a flush), a
 * folder this process may not write, a damaged file header.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { promises as fs, constants as fsConstants } from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import { join, sep } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { listGenerations, WalLog, type WalRecord, walFileName } from '../../lib/wal/log.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { contents, loggedHandle, unwatch, walDirs, watchFolderIO } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-walfail-')

/** An error as the OS gives it. */
function osError(code: string, syscall: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: injected, ${syscall}`), { code, syscall, errno: -28 })
}

/** The prototype of every fs.promises FileHandle, to watch or fail its calls. */
async function fileHandleProto(dir: string): Promise<Record<string, (...args: unknown[]) => Promise<unknown>>> {
  await fs.mkdir(dir, { recursive: true })
  const probe = await fs.open(`${dir}${sep}probe`, 'w')
  await probe.close()
  await fs.rm(`${dir}${sep}probe`)
  return Object.getPrototypeOf(probe)
}

async function text(f: SegmentFile): Promise<string> {
  return (await contents(f)).toString('latin1')
}

async function published(store: MemoryStore): Promise<string> {
  const r = await SegmentFile.open(store, { readOnly: true })
  try {
    return await text(r)
  } finally {
    await r.close()
  }
}

/** The records replayed: a write as its bytes' text, any other by its kind. */
function replayedText(replayed: readonly WalRecord[]): string[] {
  return replayed.map((r) => (r.kind === 'write' ? Buffer.from(r.data).toString() : r.kind))
}

/** Opens the log at `dir`, collecting what it replays. */
async function openLog(dir: string, options: Parameters<typeof WalLog.open>[3] = {}) {
  const replayed: WalRecord[] = []
  const opened = await WalLog.open(dir, 1, (r) => void replayed.push(r), options)
  return { ...opened, replayed }
}

/** Makes every fsync of a log file fail (EIO) while `failing` is set (the mock goes with `t`). */
function failSyncs(
  t: TestContext,
  proto: Record<string, (...args: unknown[]) => Promise<unknown>>,
): { failing: boolean } {
  const sync = proto.sync as (...args: unknown[]) => Promise<unknown>
  const state = { failing: true }
  t.mock.method(proto, 'sync', function (this: unknown, ...args: unknown[]) {
    return state.failing ? Promise.reject(osError('EIO', 'fsync')) : sync.apply(this, args)
  })
  return state
}

/**
 * A handle with a log in a new folder: 'base' published, then 'one' written; and a disk
 * where no new log file can be made while `disk.full`, and no log file removed while
 * `disk.stuck` (the mocks go with `t`).
 */
async function baseThenOne(t: TestContext, name: string) {
  const store = new MemoryStore(name)
  const dir = await walDir()
  const f = await loggedHandle(store, dir)
  const disk = { full: true, stuck: false }
  const open = fs.open
  t.mock.method(fs, 'open', (...args: Parameters<typeof fs.open>) =>
    disk.full && args[1] === 'wx' ? Promise.reject(osError('ENOSPC', 'open')) : open(...args),
  )
  const rm = fs.rm
  t.mock.method(fs, 'rm', (...args: Parameters<typeof fs.rm>) =>
    disk.stuck && String(args[0]).endsWith('.log') ? Promise.reject(osError('EIO', 'unlink')) : rm(...args),
  )
  return { store, dir, f, disk }
}

/** A log in a new folder whose first record's fsync failed (the failure sticks: fsync works again after it). */
async function logWithFailedFsync(t: TestContext) {
  const dir = await walDir()
  const proto = await fileHandleProto(`${dir}-probe`)
  const { log } = await openLog(dir)
  const syncs = failSyncs(t, proto)
  await rejectsCode(log.appendWrite(0, Buffer.from('a')), 'ERR_STORE', /fsync failed/)
  syncs.failing = false
  return { dir, log }
}

describe('the WAL when the file system fails', () => {
  it("sync 'interval': a new file started while the interval's fsync is due leaves the log working", async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] })
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    let syncs = 0
    const { log } = await openLog(dir, { sync: 'interval', intervalMs: 50, onSync: () => syncs++ })
    // The log's own file is the one its appends write to.
    const writev = proto.writev as (...args: unknown[]) => Promise<unknown>
    let logFile: { close: () => Promise<void> } | undefined
    t.mock.method(proto, 'writev', function (this: { close: () => Promise<void> }, ...args: unknown[]) {
      logFile ??= this
      return writev.apply(this, args)
    })
    await log.appendWrite(0, Buffer.from('first')) // the interval's fsync is due in 50 ms
    assert.ok(logFile !== undefined)
    // The interval elapses just as rotate() closes the file it leaves (close is the handle's own).
    const close = logFile.close
    t.mock.method(logFile, 'close', () => {
      const closing = close()
      t.mock.timers.tick(50)
      return closing
    })
    await log.rotate(2)
    await log.appendWrite(0, Buffer.from('second'))
    const before = syncs
    t.mock.timers.tick(50)
    await new Promise((r) => setImmediate(r))
    assert.equal(syncs, before + 1, 'the new file is fsynced within the interval')
    await log.close()
    t.mock.restoreAll()
    const again = await openLog(dir)
    assert.deepEqual(replayedText(again.replayed), ['first', 'second'])
    await again.log.close()
  })

  it('a full disk fails the write that does not fit, naming the log file; the handle and the log go on once there is room', async (t) => {
    const store = new MemoryStore('walfail-full')
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    const f = await loggedHandle(store, dir)
    // The disk fills up in the middle of the next record: part of it is written.
    const writev = proto.writev as (...args: unknown[]) => Promise<{ bytesWritten: number }>
    let full = true
    t.mock.method(proto, 'writev', async function (this: unknown, ...args: unknown[]) {
      if (!full) return writev.apply(this, args)
      const [buffers, at] = args as [Buffer[], number]
      await writev.call(this, [Buffer.concat(buffers).subarray(0, 30)], at)
      throw osError('ENOSPC', 'write')
    })
    const err = await rejectsCode(f.write(10, Buffer.alloc(100_000, 0x41)), 'ERR_STORE', /wal-0000000002\.log/)
    assert.equal((err.cause as NodeJS.ErrnoException | undefined)?.code, 'ENOSPC')
    await rejectsCode(f.write(20, Buffer.from('x')), 'ERR_STORE', /ENOSPC/)
    full = false
    await f.write(4, Buffer.from('two'))
    assert.equal(await text(f), 'oneetwo', 'the writes that failed were not applied')
    await f.close()
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 2)
    assert.deepEqual(
      g.walReplay?.generations.map((x) => x.cutBytes),
      [0],
    )
    assert.equal(await text(g), 'oneetwo')
    await g.close()
    assert.equal(await published(store), 'oneetwo')
  })

  it('a flush that published resolves when the log cannot start afresh; the switch is made before the next logged call', async (t) => {
    const { store, dir, f, disk } = await baseThenOne(t, 'walfail-switch')
    const t1 = await f.flush()
    assert.equal(t1.cno, 2, 'published')
    assert.equal(await published(store), 'onee')
    await rejectsCode(f.write(0, Buffer.from('two')), 'ERR_STORE', /making the file/)
    disk.full = false
    await f.write(0, Buffer.from('two'))
    assert.equal((await f.flush()).cno, 3)
    await f.write(0, Buffer.from('3'))
    await f.close()
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.equal(await text(g), '3woe')
    await g.close()
  })

  it('a writer that dies while the switch after its flush is pending leaves nothing to apply again', async (t) => {
    // The new file cannot be made; nor can the old ones be removed: the log keeps the
    // record the flush published.
    const { store, dir, f, disk } = await baseThenOne(t, 'walfail-switch-died')
    disk.stuck = true
    assert.equal((await f.flush()).cno, 2)
    await f.close()
    t.mock.restoreAll()
    assert.equal((await listGenerations(dir)).length, 1, 'the log file with the published record is left')
    // Another writer publishes over the record: the record is not applied again.
    const b = await SegmentFile.open(store)
    await b.write(0, Buffer.from('BBB'))
    await b.flush()
    await b.close()
    const g = await SegmentFile.open(store, { wal: { dir }, conflictPolicy: 'fail' })
    assert.equal(g.cno, 3)
    assert.equal(await text(g), 'BBBe')
    await g.close()
  })

  it("a rollback on a full disk removes the log's files: the next open replays nothing it gave up", async (t) => {
    const { store, dir, f } = await baseThenOne(t, 'walfail-rollback')
    await f.write(10, Buffer.from('two'))
    await f.rollback()
    assert.equal(await text(f), 'base', 'the changes are given up')
    assert.deepEqual(await listGenerations(dir), [], 'nothing is left to replay')
    await f.close()
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0)
    assert.equal(await text(g), 'base')
    await g.close()
    assert.equal(await published(store), 'base')
  })

  it('after a rollback on a full disk the log goes on once there is room, from a new file', async (t) => {
    const { store, dir, f, disk } = await baseThenOne(t, 'walfail-rollback-on')
    await f.rollback()
    await rejectsCode(f.write(0, Buffer.from('X')), 'ERR_STORE', /making the file/)
    disk.full = false
    await f.write(1, Buffer.from('two'))
    assert.equal(await text(f), 'btwo')
    await f.close()
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1, 'the write after the rollback, not those it gave up')
    assert.equal(await text(g), 'btwo')
    await g.close()
    assert.equal(await published(store), 'btwo')
  })

  it('a rollback that can neither start the log afresh nor remove its files says so; close voids the log', async (t) => {
    const { store, dir, f, disk } = await baseThenOne(t, 'walfail-rollback-stuck')
    disk.stuck = true
    const err = await rejectsCode(f.rollback(), 'ERR_STORE', /rollback: .*given up.*log still holds them/)
    assert.match(String((err.cause as Error | undefined)?.message), /wal-0000000003\.log: making the file/)
    assert.equal(await text(f), 'base', 'the handle gave the changes up')
    assert.equal((await listGenerations(dir)).length, 1)
    // The disk still has no room for a new file, but its files can go now.
    disk.stuck = false
    await f.close()
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0, 'what the rollback gave up is not replayed')
    assert.equal(await text(g), 'base')
    await g.close()
  })

  it('a new log file that cannot be made is removed, and made again before the next record', async (t) => {
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    const { log } = await openLog(dir)
    await log.appendWrite(0, Buffer.from('a'))
    let full = true
    for (const name of ['write', 'writev']) {
      const original = proto[name] as (...args: unknown[]) => Promise<unknown>
      t.mock.method(proto, name, function (this: unknown, ...args: unknown[]) {
        return full ? Promise.reject(osError('ENOSPC', 'write')) : original.apply(this, args)
      })
    }
    await rejectsCode(log.rotate(2), 'ERR_STORE', /wal-0000000002\.log: making the file/)
    assert.deepEqual(
      (await listGenerations(dir)).map((g) => g.generation),
      [1],
      'no empty file is left',
    )
    await rejectsCode(log.appendWrite(0, Buffer.from('b')), 'ERR_STORE', /making the file/)
    full = false
    await log.appendWrite(0, Buffer.from('c'))
    assert.equal(log.generation, 2)
    await log.close()
    t.mock.restoreAll()
    const again = await openLog(dir)
    assert.deepEqual(replayedText(again.replayed), ['a', 'c'])
    assert.deepEqual(
      again.generations.map((g) => g.baseCno),
      [1, 2],
    )
    await again.log.close()
  })

  it("a close failing after an open that failed does not replace the open's error", async (t) => {
    const inner = new MemoryStore('walfail-open-close')
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    await (await loggedHandle(inner, dir)).close()
    // The replay's publish fails (the store), then the log's fsync as the open closes it.
    const syncs = failSyncs(t, proto)
    const failingStore = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }])
    await rejectsCode(
      SegmentFile.open(failingStore, { wal: { dir }, conflictRetries: 0 }),
      'ERR_STORE',
      /injected failure: put inode/,
    )
    syncs.failing = false
    t.mock.restoreAll()
    const g = await SegmentFile.open(inner, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1, 'the folder is free, the log kept')
    assert.equal(await text(g), 'onee')
    await g.close()
  })

  it('a folder this process may not write is a wrong option, not another writer', async (t) => {
    const store = new MemoryStore('walfail-ro')
    const dir = await walDir()
    await fs.mkdir(dir, { recursive: true })
    const mkdir = fs.mkdir
    t.mock.method(fs, 'mkdir', (...args: Parameters<typeof fs.mkdir>) =>
      String(args[0]).includes(`${sep}lock-`) ? Promise.reject(osError('EROFS', 'mkdir')) : mkdir(...args),
    )
    syncBuiltinESMExports() // the lock takes fs from node:fs/promises
    try {
      await rejectsCode(
        SegmentFile.create(store, { wal: { dir } }),
        'ERR_INVALID_ARGUMENT',
        new RegExp(
          `WAL ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: its lock cannot be taken: cannot be written as a file \\(EROFS`,
        ),
      )
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.flush()
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_STATE', /in use by another writer/)
    await f.close()
  })

  it("a damaged header of the newest file fails the open with ERR_CORRUPT and keeps the file; a header never written is a torn file's", async () => {
    const store = new MemoryStore('walfail-header')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, Buffer.from('base'))
    await f.flush()
    await f.write(0, Buffer.from('acknowledged-1'))
    await f.write(20, Buffer.from('acknowledged-2'))
    await f.close()
    const path = `${dir}${sep}${walFileName(2)}`
    const whole = await fs.readFile(path)
    const flipped = Buffer.from(whole)
    flipped[20] = (flipped[20] ?? 0) ^ 0x01 // a bit of the base checkpoint
    await fs.writeFile(path, flipped)
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_CORRUPT', /wal-0000000002\.log: file header CRC/)
    assert.ok((await fs.readFile(path)).equals(flipped), 'the file is kept as it was')
    assert.equal(await published(store), 'base')

    // A header of zeros with records after it: the header was fsynced before any record
    // went in, so this is damage to acknowledged records, not a file torn while being made.
    const zeroed = Buffer.from(whole)
    zeroed.fill(0, 0, 48)
    await fs.writeFile(path, zeroed)
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_CORRUPT',
      /wal-0000000002\.log: not a stream-segment log/,
    )
    assert.ok((await fs.readFile(path)).equals(zeroed), 'the file and its records are kept')
    assert.equal(await published(store), 'base')

    // Zeros throughout (the header never written, no record): a file torn while being made.
    await fs.writeFile(path, Buffer.alloc(whole.length))
    const { log, dropped } = await openLog(dir)
    assert.deepEqual(dropped?.paths, [path])
    await log.close()
  })

  it('a failed fsync stops the appends until the log starts afresh', async (t) => {
    const { dir, log } = await logWithFailedFsync(t)
    await rejectsCode(log.appendWrite(0, Buffer.from('b')), 'ERR_STORE', /fsync failed/)
    await log.reset(5)
    await log.appendWrite(0, Buffer.from('c'))
    await log.close()
    t.mock.restoreAll()
    const again = await openLog(dir)
    assert.equal(again.replayed.length, 1)
    assert.equal(again.generations[0]?.baseCno, 5)
    await again.log.close()
  })

  it("sync 'always': a failed fsync rejects every append waiting on it and cuts their records; no open replays them", {
    timeout: 10_000, // before: the append written while the fsync ran waited forever
  }, async (t) => {
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    const { log } = await openLog(dir)
    await log.appendWrite(0, Buffer.from('kept'))
    const kept = log.size
    const sync = proto.sync as (...args: unknown[]) => Promise<unknown>
    let fail: () => void = () => {}
    const failed = new Promise<void>((resolve) => {
      fail = resolve
    })
    let failing = true
    t.mock.method(proto, 'sync', async function (this: unknown, ...args: unknown[]) {
      if (!failing) return sync.apply(this, args)
      await failed
      throw osError('EIO', 'fsync')
    })
    const first = log.appendWrite(4, Buffer.from('lost-1')) // its fsync waits for `fail`
    const second = log.appendWrite(10, Buffer.from('lost-2')) // written while that fsync runs
    while (log.nextSeq < 4) await new Promise((r) => setImmediate(r))
    await new Promise((r) => setImmediate(r))
    fail()
    await rejectsCode(first, 'ERR_STORE', /fsync failed/)
    await rejectsCode(second, 'ERR_STORE', /fsync failed/)
    failing = false
    await rejectsCode(log.appendWrite(0, Buffer.from('later')), 'ERR_STORE', /fsync failed/)
    await rejectsCode(log.close(), 'ERR_STORE', /fsync failed/)
    t.mock.restoreAll()
    assert.equal((await fs.stat(`${dir}${sep}${walFileName(1)}`)).size, kept, 'the records that failed are cut')
    const again = await openLog(dir)
    assert.deepEqual(replayedText(again.replayed), ['kept'])
    assert.deepEqual(
      again.generations.map((g) => g.cutBytes),
      [0],
    )
    await again.log.close()
  })

  it('a write whose fsync failed is not applied, and the next open does not publish it', async (t) => {
    const store = new MemoryStore('walfail-fsync')
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    const f = await loggedHandle(store, dir)
    const syncs = failSyncs(t, proto)
    await rejectsCode(f.write(0, Buffer.from('XX')), 'ERR_STORE', /wal-0000000002\.log: fsync failed/)
    syncs.failing = false
    assert.equal(await text(f), 'onee', 'the write that failed was not applied')
    await rejectsCode(f.close(), 'ERR_STORE', /fsync failed/)
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    assert.equal(await text(g), 'onee')
    await g.close()
    assert.equal(await published(store), 'onee')
  })

  it('a failed fsync, then a reset whose file the full disk refused: the next append makes that file and goes on', async (t) => {
    const { dir, log } = await logWithFailedFsync(t)
    let full = true
    const open = fs.open
    t.mock.method(fs, 'open', (...args: Parameters<typeof fs.open>) =>
      full && args[1] === 'wx' ? Promise.reject(osError('ENOSPC', 'open')) : open(...args),
    )
    await rejectsCode(log.reset(5), 'ERR_STORE', /making the file/)
    assert.equal(log.resetPending, true)
    full = false
    // The reset voids the file whose fsync failed: its failure no longer stops the log.
    await log.appendWrite(0, Buffer.from('c'))
    await log.close()
    t.mock.restoreAll()
    const again = await openLog(dir)
    assert.deepEqual(replayedText(again.replayed), ['c'])
    assert.equal(again.generations[0]?.baseCno, 5)
    await again.log.close()
  })
  it('a record torn by a full disk just before a publish starts the next file is cut from the file it leaves: the records after it are kept', async (t) => {
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    const { log } = await openLog(dir)
    await log.appendWrite(0, Buffer.from('one'))
    // The disk fills up in the middle of the next record: part of it is written.
    const writev = proto.writev as (...args: unknown[]) => Promise<{ bytesWritten: number }>
    let full = true
    t.mock.method(proto, 'writev', async function (this: unknown, ...args: unknown[]) {
      if (!full) return writev.apply(this, args)
      const [buffers, at] = args as [Buffer[], number]
      await writev.call(this, [Buffer.concat(buffers).subarray(0, 50)], at)
      throw osError('ENOSPC', 'write')
    })
    await rejectsCode(log.appendWrite(10, Buffer.alloc(1000, 0x41)), 'ERR_STORE', /ENOSPC/)
    full = false
    // A publish starts the next file before any other record; the process dies before it lands.
    await log.rotate(2)
    await log.appendWrite(3, Buffer.from('two'))
    await log.close()
    t.mock.restoreAll()
    const again = await openLog(dir)
    assert.deepEqual(
      replayedText(again.replayed),
      ['one', 'two'],
      'the acknowledged record in the newer file is replayed',
    )
    assert.equal(again.dropped, undefined)
    assert.deepEqual(
      again.generations.map((g) => g.cutBytes),
      [0, 0],
    )
    await again.log.close()
  })
  it('a full disk while the folder first records its container leaves the folder usable once there is room', async (t) => {
    const store = new MemoryStore('walfail-binding')
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    let full = true
    // The file is made, then the disk has no room for its bytes (whether it is written by
    // path or through a handle).
    const writeFile = fs.writeFile
    t.mock.method(fs, 'writeFile', async (...args: Parameters<typeof fs.writeFile>) => {
      if (!full) return writeFile(...args)
      await writeFile(args[0], '')
      throw osError('ENOSPC', 'write')
    })
    const handleWriteFile = proto.writeFile as (...args: unknown[]) => Promise<unknown>
    t.mock.method(proto, 'writeFile', function (this: unknown, ...args: unknown[]) {
      return full ? Promise.reject(osError('ENOSPC', 'write')) : handleWriteFile.apply(this, args)
    })
    await rejectsCode(SegmentFile.create(store, { wal: { dir } }), 'ERR_STORE', /ENOSPC/)
    full = false
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, Buffer.from('x'))
    await f.flush()
    await f.close()
    t.mock.restoreAll()
    assert.equal(await published(store), 'x')
  })

  it('a file longer than any URL where the folder keeps its container is refused unread, naming it', async () => {
    const dir = await walDir()
    await fs.mkdir(dir, { recursive: true })
    const binding = `${dir}${sep}container`
    await fs.writeFile(binding, '')
    await fs.truncate(binding, 256 * 1024 * 1024) // sparse: read whole, 256 MiB in memory and in the message
    const err = await rejectsCode(
      SegmentFile.create(new MemoryStore('walfail-long-binding'), { wal: { dir } }),
      'ERR_INVALID_ARGUMENT',
      /container: 268435456 bytes, not the record of a container's URL/,
    )
    assert.ok(err.message.length < 1000, 'the message is short')
    assert.equal((await inspectWal(dir)).container, undefined)
  })

  it('a FIFO where the folder keeps its container or a log file fails the open at once, naming it', async () => {
    const store = new MemoryStore('walfail-fifo')
    for (const name of ['container', walFileName(1)]) {
      const dir = await walDir()
      await fs.mkdir(dir, { recursive: true })
      const fifo = `${dir}${sep}${name}`
      execFileSync('mkfifo', [fifo])
      const opening = SegmentFile.create(store, { wal: { dir } })
      try {
        const err = await within(
          opening.then(
            () => undefined,
            (e: unknown) => e,
          ),
          2_000,
          `open with ${name}`,
        )
        assert.ok(StreamSegmentError.is(err), `${name}: ${String(err)}`)
        assert.match(err.message, new RegExp(`${name.replace('.', '\\.')}: not a regular file`))
      } finally {
        // A reader stuck in its open (the bug) is let go by a writer, or the process could not exit.
        const w = await fs.open(fifo, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK).catch(() => undefined)
        await w?.close()
        await opening.then(
          (f) => f.close(),
          () => {},
        )
      }
    }
  })
  it('a tail the open cuts (a torn record, a group never committed) is cut for good before the next record goes in: the file is fsynced after the cut', async (t) => {
    const name = walFileName(1)
    const torn = await walDir()
    {
      const { log } = await openLog(torn)
      await log.appendWrite(0, Buffer.from('a'))
      await log.close()
      await fs.appendFile(join(torn, name), Buffer.alloc(10, 0x57)) // the process died 10 bytes into a record
    }
    // Whole records cut at their begin: were that cut lost in a machine crash once a
    // 40-byte record had gone in where the begin was, the next open would apply the
    // group's writes without their begin, never committed.
    const group = await walDir()
    {
      const { log } = await openLog(group)
      await log.appendWrite(0, Buffer.from('a'))
      await log.appendBegin()
      await log.appendWrite(1, Buffer.from('never'))
      await log.appendWrite(6, Buffer.from('committed'))
      await log.close()
    }
    for (const [dir, cut] of [
      [torn, 10],
      [group, 3 * 40 + 14],
    ] as const) {
      const events = watchFolderIO(t, dir)
      // 'none': no fsync of the library's own follows an append, so none covers the cut.
      const { log, replayed, generations } = await openLog(dir, { sync: 'none' })
      await log.appendTruncate(1)
      await log.close()
      unwatch(t)
      assert.deepEqual(replayedText(replayed), ['a'])
      assert.equal(generations[0]?.cutBytes, cut)
      assertCutSynced(events, name)
    }
  })
  it('what a failed write left is cut for good before the next record goes in at its place: the file is fsynced after the cut', async (t) => {
    const name = walFileName(1)
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    // The disk fills up 30 bytes into a long record; the next record, shorter, goes in at its
    // place. Were that cut lost in a machine crash, what is left of the failed record would
    // follow the new one, and bytes of its payload could read as a record after it.
    const writev = proto.writev as (...args: unknown[]) => Promise<{ bytesWritten: number }>
    let full = false
    t.mock.method(proto, 'writev', async function (this: unknown, ...args: unknown[]) {
      if (!full) return writev.apply(this, args)
      full = false
      const [buffers, at] = args as [Buffer[], number]
      await writev.call(this, [Buffer.concat(buffers).subarray(0, 30)], at)
      throw osError('ENOSPC', 'write')
    })
    const events = watchFolderIO(t, dir)
    const { log } = await openLog(dir, { sync: 'none' })
    await log.appendWrite(0, Buffer.from('a'))
    full = true
    await rejectsCode(log.appendWrite(1, Buffer.alloc(1000, 0x41)), 'ERR_STORE', /ENOSPC/)
    const failed = events.length
    await log.appendTruncate(1)
    await log.close()
    unwatch(t)
    assertCutSynced(events.slice(failed), name)
  })

  it('an older file the open cuts, the newest torn in its header, is cut for good before records go in at its place: the file is fsynced after the cut', async (t) => {
    const name = walFileName(1)
    const dir = await walDir()
    {
      const { log } = await openLog(dir)
      await log.appendWrite(0, Buffer.from('a'))
      await log.close()
    }
    // A machine crash while reset() made the next file (with 'none', nothing had fsynced the
    // file it left): the end of an append torn, the new file's header never on disk. The
    // open drops the newer file, cuts the older one, and appends to it where it cut it: were
    // that cut lost in a crash, what it cut would follow the records appended since.
    await fs.appendFile(join(dir, name), Buffer.alloc(10, 0x57))
    await fs.writeFile(join(dir, walFileName(2)), Buffer.alloc(10))
    const events = watchFolderIO(t, dir)
    const { log, replayed, generations, dropped } = await openLog(dir, { sync: 'none' })
    await log.appendTruncate(1)
    await log.close()
    unwatch(t)
    assert.deepEqual(replayedText(replayed), ['a'])
    assert.equal(generations[0]?.cutBytes, 10)
    assert.deepEqual(dropped?.paths, [join(dir, walFileName(2))])
    assertCutSynced(events, name)
  })

  it("sync 'always': the records whose fsync failed are cut for good: the file is fsynced after the cut", async (t) => {
    const name = walFileName(1)
    const dir = await walDir()
    const proto = await fileHandleProto(`${dir}-probe`)
    // The next fsync fails once (EIO); the cut's own works. Mocked before the log's file is
    // opened: watchFolderIO wraps the handle's fsync as it is then.
    const sync = proto.sync as (...args: unknown[]) => Promise<unknown>
    let failing = false
    t.mock.method(proto, 'sync', function (this: unknown, ...args: unknown[]) {
      if (!failing) return sync.apply(this, args)
      failing = false
      return Promise.reject(osError('EIO', 'fsync'))
    })
    const events = watchFolderIO(t, dir)
    const { log } = await openLog(dir)
    await log.appendWrite(0, Buffer.from('kept'))
    const kept = log.size
    failing = true
    await rejectsCode(log.appendWrite(4, Buffer.from('lost')), 'ERR_STORE', /fsync failed/)
    // Closing waits for the cut (queued after the appends), then fails with the fsync's error.
    await rejectsCode(log.close(), 'ERR_STORE', /fsync failed/)
    unwatch(t)
    assert.equal((await fs.stat(join(dir, name))).size, kept, 'the record whose fsync failed is cut')
    // Until a reset voids the file, a machine crash that undid the cut would bring back a
    // record whose call rejected, for the next open to replay.
    const at = events.lastIndexOf(`truncate ${name}`)
    assert.ok(at >= 0, `the record is cut from ${name}: ${events.join(', ')}`)
    assert.ok(events.indexOf(`fsync ${name}`, at) > at, `${name} is fsynced after the cut: ${events.join(', ')}`)
  })

  it('files the open removes (void ones a reset left, one that does not follow on) are gone for good: the folder is fsynced after', async (t) => {
    // Void: a reset whose removal of the older file failed (a disk that fails) leaves it to the next open.
    const voidDir = await walDir()
    {
      const { log } = await openLog(voidDir)
      await log.appendWrite(0, Buffer.from('a'))
      const rm = fs.rm
      const stuck = t.mock.method(fs, 'rm', (...args: Parameters<typeof fs.rm>) =>
        String(args[0]).endsWith(walFileName(1)) ? Promise.reject(osError('EIO', 'unlink')) : rm(...args),
      )
      await log.reset(1)
      stuck.mock.restore()
      await log.close()
    }
    // Dropped: a newest file torn in its header (a crash while it was made) after a whole one.
    const tornDir = await walDir()
    {
      const { log } = await openLog(tornDir)
      await log.appendWrite(0, Buffer.from('a'))
      await log.close()
      await fs.writeFile(join(tornDir, walFileName(2)), Buffer.alloc(10))
    }
    for (const [dir, removed] of [
      [voidDir, walFileName(1)],
      [tornDir, walFileName(2)],
    ] as const) {
      assert.ok((await fs.readdir(dir)).includes(removed), `${removed} is there before the open`)
      const events = watchFolderIO(t, dir)
      const { log } = await openLog(dir)
      unwatch(t)
      await log.close()
      assert.ok(!(await fs.readdir(dir)).includes(removed), `${removed} removed by the open`)
      const at = events.lastIndexOf(`rm ${removed}`)
      assert.ok(at >= 0, `the open removes ${removed}: ${events.join(', ')}`)
      assert.ok(
        events.indexOf('fsync folder', at) > at,
        `the folder is fsynced after ${removed} is removed: ${events.join(', ')}`,
      )
    }
  })
})

/** In `events` (watchFolderIO's), `name` is cut, then fsynced before the next record is written to it. */
function assertCutSynced(events: readonly string[], name: string): void {
  const at = events.indexOf(`truncate ${name}`)
  assert.ok(at >= 0, `${name} is cut: ${events.join(', ')}`)
  const write = events.indexOf(`write ${name}`, at)
  assert.ok(write > at, `the next record is written to ${name}: ${events.join(', ')}`)
  const sync = events.indexOf(`fsync ${name}`, at)
  assert.ok(
    sync > at && sync < write,
    `${name} is fsynced after the cut, before the next record is written: ${events.join(', ')}`,
  )
}
