import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { crc32 } from '../../lib/util/crc32.js'
import { listGenerations, WalLog, type WalLogOptions, type WalRecord, walFileName } from '../../lib/wal/log.js'
import { checkWalOptions, inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

async function freshDir(): Promise<string> {
  const d = await fs.mkdtemp(join(tmpdir(), 'ss-wal-'))
  roots.push(d)
  return join(d, 'wal') // made by open
}

/** Opens the log at `dir`, collecting the replayed records. */
async function openLog(dir: string, base = 7, options: WalLogOptions = {}) {
  const replayed: WalRecord[] = []
  const bases: number[] = []
  const opened = await WalLog.open(
    dir,
    base,
    (r, h) => {
      replayed.push(r)
      bases.push(h.baseCno)
    },
    options,
  )
  return { ...opened, replayed, bases }
}

function bytes(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n)
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff
  return b
}

/** Appends a fixed mix of records; returns what a replay must give back. */
async function appendMix(log: WalLog, count: number, firstSeq = 1): Promise<WalRecord[]> {
  const want: WalRecord[] = []
  for (let i = 0; i < count; i++) {
    const seq = firstSeq + i
    if (i % 5 === 3) {
      await log.appendZeroes(i * 4096, 8192)
      want.push({ kind: 'zeroes', seq, offset: i * 4096, length: 8192 })
    } else if (i % 5 === 4) {
      await log.appendTruncate(i * 1000 + 1)
      want.push({ kind: 'truncate', seq, size: i * 1000 + 1 })
    } else {
      const data = bytes(100 + i * 13, i)
      await log.appendWrite(i * 512, data)
      want.push({ kind: 'write', seq, offset: i * 512, data })
    }
  }
  return want
}

function normal(rs: WalRecord[]) {
  return rs.map((r) => (r.kind === 'write' ? { ...r, data: Buffer.from(r.data).toString('hex') } : r))
}

describe('WAL log', () => {
  it('replays every record in order, with its bytes, and appends on after reopening', async () => {
    const dir = await freshDir()
    const first = await openLog(dir, 7)
    assert.deepEqual(first.replayed, [])
    assert.equal(first.log.baseCno, 7)
    const want = await appendMix(first.log, 12)
    await first.log.close()

    const second = await openLog(dir, 99) // the base of an existing log is its own
    assert.deepEqual(normal(second.replayed), normal(want))
    assert.deepEqual(new Set(second.bases), new Set([7]))
    assert.equal(second.generations.length, 1)
    assert.equal(second.generations[0]?.records, 12)
    assert.equal(second.generations[0]?.cutBytes, 0)
    assert.equal(second.log.nextSeq, 13)
    const more = await appendMix(second.log, 3, 13)
    await second.log.close()

    const third = await openLog(dir)
    assert.deepEqual(normal(third.replayed), normal([...want, ...more]))
    await third.log.close()
  })

  it('cut at every byte of its last record, recovers exactly the whole records before it', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const want = await appendMix(log, 4)
    const before = log.size
    await log.appendWrite(40_000, bytes(300, 9))
    const end = log.size
    await log.close()
    const path = join(dir, walFileName(1))
    const whole = await fs.readFile(path)
    assert.equal(whole.length, end)
    for (let cut = before; cut < end; cut++) {
      await fs.writeFile(path, whole.subarray(0, cut))
      const r = await openLog(dir)
      assert.deepEqual(normal(r.replayed), normal(want), `cut at ${cut}`)
      assert.equal(r.generations[0]?.cutBytes, cut - before, `cut at ${cut}`)
      assert.equal(r.generations[0]?.cutBytes === 0, cut === before)
      if (cut > before) assert.match(r.generations[0]?.cutReason ?? '', /torn/)
      await r.log.close()
      assert.equal((await fs.stat(path)).size, before, `the torn tail is cut off (cut at ${cut})`)
    }
    // The log goes on from the last whole record.
    const r = await openLog(dir)
    await r.log.appendTruncate(5)
    await r.log.close()
    const again = await openLog(dir)
    assert.deepEqual(normal(again.replayed), normal([...want, { kind: 'truncate', seq: 5, size: 5 }]))
    await again.log.close()
  })

  it('stops at a record that fails its CRC, and applies nothing after it', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const want = await appendMix(log, 3)
    const at = log.size
    await appendMix(log, 5, 4)
    await log.close()
    const path = join(dir, walFileName(1))
    const b = await fs.readFile(path)
    b[at + 40 + 10] = (b[at + 40 + 10] ?? 0) ^ 0x20 // a payload byte of record 4
    await fs.writeFile(path, b)
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal(want))
    assert.match(r.generations[0]?.cutReason ?? '', new RegExp(`at byte ${at} \\(record 4\\): CRC`))
    assert.equal(r.generations[0]?.cutBytes, b.length - at)
    await r.log.close()
  })

  it('a checked record whose offset is past any file (2^53 bytes and more) fails the open; the log is kept', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    await appendMix(log, 2)
    const at = log.size
    await log.appendWrite(0, bytes(10, 1))
    await appendMix(log, 2, 4)
    await log.close()
    const path = join(dir, walFileName(1))
    const b = await fs.readFile(path)
    b.writeBigUInt64LE(2n ** 53n, at + 16) // record 3's offset, its CRC made again: it checks
    b.writeUInt32LE(crc32(b.subarray(at + 40, at + 50), crc32(b.subarray(at, at + 36))), at + 36)
    await fs.writeFile(path, b)
    await assert.rejects(
      WalLog.open(dir, 7, () => {}),
      (err) =>
        StreamSegmentError.is(err, 'ERR_CORRUPT') &&
        err.message.includes(`${path} at byte ${at} (record 3): write at 9007199254740992 of 10 bytes, past any file`),
    )
    assert.ok((await fs.readFile(path)).equals(b), 'the log is kept as it was')
  })

  it('a checked file header no writer makes (a generation other than its name says, a number past 2^53) fails the open; the log is kept', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    await appendMix(log, 2)
    await log.close()
    const path = join(dir, walFileName(1))
    const whole = await fs.readFile(path)
    const rewrite = async (field: number, value: bigint, width: 4 | 8) => {
      const b = Buffer.from(whole)
      if (width === 4) b.writeUInt32LE(Number(value), field)
      else b.writeBigUInt64LE(value, field)
      b.writeUInt32LE(crc32(b.subarray(0, 44)), 44) // made again: the header checks
      await fs.writeFile(path, b)
      return b
    }
    // The generation field says 2 in the file named 1: the next file made (2) would replace
    // a name the log uses, or sort before a file it follows.
    let b = await rewrite(12, 2n, 4)
    await rejectsCode(
      WalLog.open(dir, 7, () => {}),
      'ERR_CORRUPT',
      /wal-0000000001\.log: .*generation 2/,
    )
    assert.ok((await fs.readFile(path)).equals(b), 'the log is kept as it was')
    for (const [name, field] of [
      ['base checkpoint', 16],
      ['first record', 24],
      ['creation time', 32],
    ] as const) {
      b = await rewrite(field, 2n ** 64n - 1n, 8)
      await rejectsCode(
        WalLog.open(dir, 7, () => {}),
        'ERR_CORRUPT',
        new RegExp(`wal-0000000001\\.log: ${name} 18446744073709551615`),
      )
      assert.ok((await fs.readFile(path)).equals(b), 'the log is kept as it was')
    }
    await fs.writeFile(path, whole)
    const again = await openLog(dir)
    assert.equal(again.replayed.length, 2)
    await again.log.close()
  })

  it('a checked record the file refuses fails the open with ERR_CORRUPT naming the file and the record', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    await appendMix(log, 2)
    const at = log.size
    await log.appendWrite(2 ** 50, bytes(10, 1))
    await log.close()
    const refuse = (r: WalRecord) => {
      if (r.kind === 'write' && r.offset >= 2 ** 40)
        throw StreamSegmentError.invalidArgument(`offset ${r.offset}: too large`)
    }
    await assert.rejects(
      WalLog.open(dir, 7, refuse),
      (err) =>
        StreamSegmentError.is(err, 'ERR_CORRUPT') &&
        err.message.includes(
          `${join(dir, walFileName(1))} at byte ${at} (record 3): a write record the file cannot take`,
        ) &&
        err.message.includes('offset 1125899906842624: too large'),
    )
  })

  it('refuses a hostile payload length as a record, without reading it', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const want = await appendMix(log, 2)
    const at = log.size
    await log.appendWrite(0, bytes(10, 1))
    await log.close()
    const path = join(dir, walFileName(1))
    const b = await fs.readFile(path)
    b.writeUInt32LE(0xffff_fff0, at + 32)
    await fs.writeFile(path, b)
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal(want))
    assert.match(r.generations[0]?.cutReason ?? '', /not a record .*payload length 4294967280/)
    await r.log.close()
  })

  it('rotates: sequence numbers run on, each generation keeps its base, dropBefore removes the published', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir, 3)
    const a = await appendMix(log, 4)
    assert.equal(await log.rotate(4), 1)
    const b = await appendMix(log, 3, 5)
    await log.close()

    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal([...a, ...b]))
    assert.deepEqual(r.bases, [3, 3, 3, 3, 4, 4, 4])
    assert.deepEqual(
      r.generations.map((g) => [g.generation, g.baseCno, g.records]),
      [
        [1, 3, 4],
        [2, 4, 3],
      ],
    )
    await r.log.dropBefore(2)
    await r.log.close()
    assert.deepEqual(
      (await listGenerations(dir)).map((g) => g.generation),
      [2],
    )
    const s = await openLog(dir)
    assert.deepEqual(normal(s.replayed), normal(b))
    assert.equal(s.log.nextSeq, 8)
    await s.log.close()
  })

  it('atomic groups: a committed one is replayed with what surrounds it, one never committed is cut off', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const before = await appendMix(log, 3)
    await log.appendBegin() // seq 4
    const inGroup = await appendMix(log, 4, 5)
    await log.appendCommit() // seq 9
    const after = await appendMix(log, 2, 10)
    const whole = log.size
    await log.appendBegin() // seq 12
    await appendMix(log, 3, 13)
    await log.close()

    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal([...before, ...inGroup, ...after]), 'the open group is not replayed')
    const g = r.generations[0]
    assert.equal(g?.records, 11)
    assert.match(g?.cutReason ?? '', /record 12\): an atomic group that was never committed \(4 records\)/)
    assert.equal((await fs.stat(join(dir, walFileName(1)))).size, whole, 'the file is cut at the open group')
    // Records appended now do not join the group that was cut.
    await r.log.appendTruncate(77)
    await r.log.close()
    const again = await openLog(dir)
    assert.deepEqual(
      normal(again.replayed),
      normal([...before, ...inGroup, ...after, { kind: 'truncate', seq: 12, size: 77 }]),
    )
    await again.log.close()
  })

  it('an atomic group is cut whole wherever the writer died inside it, and only then', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const want = await appendMix(log, 2)
    const atBegin = log.size
    await log.appendBegin()
    await appendMix(log, 3, 4)
    const atCommit = log.size
    await log.appendCommit()
    const end = log.size
    await log.close()
    const path = join(dir, walFileName(1))
    const full = await fs.readFile(path)
    for (let cut = atBegin; cut <= end; cut++) {
      await fs.writeFile(path, full.subarray(0, cut))
      const r = await openLog(dir)
      if (cut === end) assert.equal(r.replayed.length, 5, 'committed: every record')
      else {
        assert.deepEqual(normal(r.replayed), normal(want), `cut at ${cut} (commit at ${atCommit})`)
        assert.equal((await fs.stat(path)).size, atBegin, `cut at ${cut}: the file ends before the group`)
      }
      await r.log.close()
    }
  })

  it('an older file with a group never committed (rolled back, then rotated) is passed over, the next one kept', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir, 3)
    const a = await appendMix(log, 2)
    await log.appendBegin()
    await appendMix(log, 2, 4)
    await log.rotate(3)
    const b = await appendMix(log, 2, 6)
    await log.close()
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal([...a, ...b]))
    assert.deepEqual(
      r.generations.map((g) => [g.generation, g.records, g.cutBytes, g.passedOver]),
      [
        [1, 5, 0, 3],
        [2, 2, 0, undefined],
      ],
    )
    await r.log.close()
  })

  it('an older file with a group never committed becomes the newest when the files after it are dropped: it is cut at the group, and what is appended then is replayed', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir, 3)
    const a = await appendMix(log, 2)
    await log.appendBegin() // record 3, never committed
    await appendMix(log, 2, 4)
    await log.rotate(3)
    await log.close()
    // The next file torn in its header (a crash while it was made): dropped, and the log
    // goes on in the first one, whose group was never committed.
    await fs.writeFile(join(dir, walFileName(2)), Buffer.from('SSWAL'))
    const seen = await inspectWal(dir)
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal(a))
    assert.deepEqual(r.dropped?.paths, [join(dir, walFileName(2))])
    assert.deepEqual(
      r.generations.map((g) => [g.generation, g.records, g.passedOver]),
      [[1, 2, undefined]],
    )
    assert.match(
      r.generations[0]?.cutReason ?? '',
      /wal-0000000001\.log at byte \d+ \(record 3\): an atomic group that was never committed/,
    )
    assert.deepEqual(
      seen.generations.map((g) => [g.generation, g.records, g.passedOver, g.cutReason]),
      r.generations.map((g) => [g.generation, g.records, g.passedOver, g.cutReason]),
      'inspect tells what the open does',
    )
    // Appended after the cut: neither inside the group that was never committed, nor
    // closing it with a later commit.
    await r.log.appendWrite(0, bytes(10, 9))
    await r.log.appendBegin()
    await r.log.appendZeroes(100, 5)
    await r.log.appendCommit()
    await r.log.close()
    const again = await openLog(dir)
    assert.deepEqual(normal(again.replayed), [
      ...normal(a),
      { kind: 'write', seq: 3, offset: 0, data: Buffer.from(bytes(10, 9)).toString('hex') },
      { kind: 'zeroes', seq: 5, offset: 100, length: 5 },
    ])
    await again.log.close()
  })

  it('drops a generation that does not follow on from the one before, and every later one', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const a = await appendMix(log, 2)
    await log.rotate(8)
    await appendMix(log, 2, 3)
    await log.rotate(9)
    await appendMix(log, 2, 5)
    await log.close()
    await fs.rm(join(dir, walFileName(2)))
    const seen = await inspectWal(dir)
    assert.equal(seen.records, a.length, 'the records of the file dropped are not counted')
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal(a))
    assert.match(r.dropped?.reason ?? '', /starts at record 5, the previous file ended before 3/)
    assert.deepEqual(r.dropped, seen.dropped)
    assert.deepEqual(
      (await listGenerations(dir)).map((g) => g.generation),
      [1],
    )
    await r.log.close()
  })

  it('a record damaged in a file older than the newest fails the open with ERR_CORRUPT naming the file and byte; the log is kept', async () => {
    // Such a file was fsynced whole before the next one started: a bad record there is
    // damage, and the records after it (and in the newer files) were acknowledged.
    const dir = await freshDir()
    const { log } = await openLog(dir)
    await appendMix(log, 2)
    await log.rotate(8)
    await appendMix(log, 2, 3)
    await log.close()
    const path = join(dir, walFileName(1))
    const b = await fs.readFile(path)
    b[48 + 40 + 5] = (b[48 + 40 + 5] ?? 0) ^ 1 // in the first record's payload
    await fs.writeFile(path, b)
    const files = async () =>
      Promise.all((await listGenerations(dir)).map(async (g) => [g.generation, await fs.readFile(g.path)]))
    const before = await files()
    await rejectsCode(
      openLog(dir),
      'ERR_CORRUPT',
      new RegExp(`${path} at byte 48 \\(record 1\\): CRC .*; the log is kept`),
    )
    assert.deepEqual(await files(), before, 'no file cut, none removed')
  })

  it('a torn record left at the end of a file older than the newest (a failed write, then a new file) is cut; the newer files are replayed', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const a = await appendMix(log, 2)
    await log.rotate(8)
    const b = await appendMix(log, 2, 3)
    await log.close()
    // What a write that failed part way left, had the new file been started over it.
    const path = join(dir, walFileName(1))
    const size = (await fs.stat(path)).size
    await fs.appendFile(path, Buffer.from('WALR\x01\0\0\0torn', 'latin1'))
    const r = await openLog(dir)
    await r.log.close()
    assert.deepEqual(normal(r.replayed), normal([...a, ...b]))
    assert.equal(r.dropped, undefined)
    assert.equal((await fs.stat(path)).size, size, 'the torn record is cut')
  })

  it('a newest file torn inside its header is dropped and the log goes on', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    const a = await appendMix(log, 2)
    await log.close()
    await fs.writeFile(join(dir, walFileName(2)), Buffer.from('SSWAL'))
    // Inspected first: the folder as the open will find it, unchanged.
    const seen = await inspectWal(dir)
    assert.equal(seen.records, 2)
    assert.deepEqual(seen.dropped?.paths, [join(dir, walFileName(2))])
    assert.match(seen.dropped?.reason ?? '', /wal-0000000002\.log: 5 bytes, a log starts with 40/)
    const r = await openLog(dir)
    assert.deepEqual(normal(r.replayed), normal(a))
    assert.deepEqual(r.dropped, seen.dropped)
    await r.log.appendZeroes(0, 1)
    await r.log.close()
    const again = await openLog(dir)
    assert.equal(again.replayed.length, 3)
    await again.log.close()
  })

  it("sync 'always' shares one fsync between appends waiting together; 'none' never syncs", async () => {
    const dir = await freshDir()
    let syncs = 0
    const { log } = await openLog(dir, 1, { sync: 'always', onSync: () => syncs++ })
    await Promise.all(Array.from({ length: 64 }, (_, i) => log.appendWrite(i, bytes(1000, i))))
    assert.ok(syncs >= 1 && syncs < 64, `${syncs} fsyncs for 64 appends made together`)
    const before = syncs
    await log.appendZeroes(0, 1)
    assert.equal(syncs, before + 1, 'an append alone gets its own fsync before it resolves')
    await log.close()

    let none = 0
    const n = await openLog(await freshDir(), 1, { sync: 'none', onSync: () => none++ })
    await appendMix(n.log, 10)
    assert.equal(none, 0)
    await n.log.close() // close syncs once
    assert.equal(none, 1)
  })

  it("sync 'interval' resolves at once and syncs within the interval", async () => {
    let syncs = 0
    const { log } = await openLog(await freshDir(), 1, { sync: 'interval', intervalMs: 20, onSync: () => syncs++ })
    await appendMix(log, 5)
    assert.equal(syncs, 0)
    await new Promise((r) => setTimeout(r, 200))
    assert.equal(syncs, 1, 'one fsync for the appends of one interval')
    await log.close()
  })

  it('rejects bad options with what was wrong', async () => {
    await rejectsCode(
      WalLog.open(await freshDir(), 1, () => {}, { sync: 'often' as never }),
      'ERR_INVALID_ARGUMENT',
      /wal.sync is string "often"/,
    )
    await rejectsCode(
      WalLog.open(await freshDir(), 1, () => {}, { intervalMs: 0 }),
      'ERR_INVALID_ARGUMENT',
      /wal.intervalMs is number 0/,
    )
  })

  it('refuses intervalMs with a sync mode that does not use it, naming the option and the mode', async () => {
    const cases: Array<[Parameters<typeof WalLog.open>[3], RegExp]> = [
      [
        { sync: 'always', intervalMs: 50 },
        /^wal\.intervalMs \(50\) is for wal\.sync 'interval', and wal\.sync is 'always'/,
      ],
      [
        { sync: 'none', intervalMs: 50 },
        /^wal\.intervalMs \(50\) is for wal\.sync 'interval', and wal\.sync is 'none'/,
      ],
      [
        { intervalMs: 50 },
        /^wal\.intervalMs \(50\) is for wal\.sync 'interval', and wal\.sync is 'always' \(the default\)/,
      ],
    ]
    for (const [options, message] of cases) {
      const dir = await freshDir()
      await rejectsCode(
        WalLog.open(dir, 1, () => {}, options),
        'ERR_INVALID_ARGUMENT',
        message,
      )
      // The `wal` option of a handle or a stream, checked before its folder is touched.
      assert.throws(
        () => checkWalOptions({ dir, ...options }),
        (e) => StreamSegmentError.is(e, 'ERR_INVALID_ARGUMENT') && message.test(e.message),
      )
      await assert.rejects(fs.stat(dir), { code: 'ENOENT' })
    }
    // With 'interval' it is taken.
    const { log } = await WalLog.open(await freshDir(), 1, () => {}, { sync: 'interval', intervalMs: 50 })
    assert.equal(log.intervalMs, 50)
    await log.close()
  })

  it('a file that is not a log fails the open with ERR_CORRUPT, naming it', async () => {
    const dir = await freshDir()
    const { log } = await openLog(dir)
    await log.rotate(2)
    await log.close()
    const path = join(dir, walFileName(1))
    const b = await fs.readFile(path)
    b[20] = (b[20] ?? 0) ^ 1
    await fs.writeFile(path, b)
    await rejectsCode(
      WalLog.open(dir, 1, () => {}),
      'ERR_CORRUPT',
      /wal-0000000001.log: file header CRC/,
    )
  })
})
