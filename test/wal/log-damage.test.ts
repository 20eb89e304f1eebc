/**
 * A log file damaged as local state gets damaged: torn at every byte of its last record
 * (a crash in the middle of an append), a bit flipped in a record in the middle, a record
 * whose lengths no writer logs. No damaged record, nor any after it, is ever applied.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { crc32 } from '../../lib/util/crc32.js'
import { WalLog, type WalRecord, walFileName } from '../../lib/wal/log.js'
import { rejectsCode } from '../helpers/assert.js'
import { walDirs } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-waldamage-')

/** Opens the log at `dir`, collecting the replayed records. */
async function openLog(dir: string) {
  const replayed: WalRecord[] = []
  const opened = await WalLog.open(dir, 7, (r) => void replayed.push(r))
  return { ...opened, replayed }
}

function bytes(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n)
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff
  return b
}

/** Each record as text: a write's bytes as hex (a 64 MiB one as its CRC). */
function normal(rs: WalRecord[]): string[] {
  return rs.map((r) => {
    if (r.kind !== 'write') return JSON.stringify(r)
    const data = r.data.byteLength > 4096 ? `crc ${crc32(r.data)}` : Buffer.from(r.data).toString('hex')
    return `write ${r.seq} at ${r.offset}: ${data}`
  })
}

/** A write, a zeroes and a truncate, from `seq` on: what a replay gives back. */
async function appendSome(log: WalLog, seq: number): Promise<WalRecord[]> {
  const data = bytes(300, seq)
  await log.appendWrite(1000, data)
  await log.appendZeroes(500, 8192)
  await log.appendTruncate(4321)
  return [
    { kind: 'write', seq, offset: 1000, data },
    { kind: 'zeroes', seq: seq + 1, offset: 500, length: 8192 },
    { kind: 'truncate', seq: seq + 2, size: 4321 },
  ]
}

/**
 * A log in a new folder: records 1–3 (appendSome), a write of `payload` at 3000 as record 4,
 * at byte `at` of the file, then records 5–7. `before`: what a replay of records 1–3 gives.
 */
async function logAroundRecord(
  payload: Uint8Array,
): Promise<{ dir: string; path: string; at: number; before: WalRecord[] }> {
  const dir = await walDir()
  const { log } = await openLog(dir)
  const before = await appendSome(log, 1)
  const at = log.size
  await log.appendWrite(3000, payload)
  await appendSome(log, 5)
  await log.close()
  return { dir, path: join(dir, walFileName(1)), at, before }
}

/** Writes the CRC of the record at `at` again, as a writer would have: the record checks. */
function recrc(b: Buffer, at: number): void {
  const payloadLen = b.readUInt32LE(at + 32)
  b.writeUInt32LE(crc32(b.subarray(at + 40, at + 40 + payloadLen), crc32(b.subarray(at, at + 36))), at + 36)
}

describe('a damaged WAL file', () => {
  it('torn at every byte of its last record, whatever its kind: the whole records before it are replayed, the tail cut', async () => {
    const lasts: Array<[string, (log: WalLog) => Promise<void>]> = [
      ['write', (log) => log.appendWrite(40_000, bytes(200, 3))],
      ['zeroes', (log) => log.appendZeroes(100, 5000)],
      ['truncate', (log) => log.appendTruncate(77)],
      ['begin', (log) => log.appendBegin()],
    ]
    for (const [kind, appendLast] of lasts) {
      const dir = await walDir()
      const { log } = await openLog(dir)
      const want = await appendSome(log, 1)
      const before = log.size
      await appendLast(log)
      const end = log.size
      await log.close()
      const path = join(dir, walFileName(1))
      const whole = await fs.readFile(path)
      // A group's begin, even whole, opens a group never committed: it is cut too.
      for (let cut = before + 1; cut <= (kind === 'begin' ? end : end - 1); cut++) {
        await fs.writeFile(path, whole.subarray(0, cut))
        const r = await openLog(dir)
        await r.log.close()
        assert.deepEqual(normal(r.replayed), normal(want), `${kind} cut at ${cut}`)
        assert.equal(r.generations[0]?.cutBytes, cut - before, `${kind} cut at ${cut}`)
        assert.ok(
          r.generations[0]?.cutReason?.includes(`${path} at byte ${before} (record 4)`),
          r.generations[0]?.cutReason,
        )
        assert.equal((await fs.stat(path)).size, before, `${kind} cut at ${cut}: the tail is cut off`)
      }
    }
  })

  it("torn at every byte of an atomic group's commit: the group is cut whole, the records before it replayed", async () => {
    const dir = await walDir()
    const { log } = await openLog(dir)
    const want = await appendSome(log, 1)
    const begin = log.size
    await log.appendBegin()
    const inGroup = await appendSome(log, 5)
    const commit = log.size
    await log.appendCommit()
    const end = log.size
    await log.close()
    const path = join(dir, walFileName(1))
    const whole = await fs.readFile(path)
    for (let cut = commit; cut <= end; cut++) {
      await fs.writeFile(path, whole.subarray(0, cut))
      const r = await openLog(dir)
      await r.log.close()
      if (cut === end) {
        assert.deepEqual(normal(r.replayed), normal([...want, ...inGroup]), 'the whole log')
        assert.equal(r.generations[0]?.cutBytes, 0)
        continue
      }
      assert.deepEqual(normal(r.replayed), normal(want), `cut at ${cut}`)
      assert.match(r.generations[0]?.cutReason ?? '', new RegExp(`at byte ${begin} \\(record 4\\): an atomic group`))
      assert.equal((await fs.stat(path)).size, begin, `cut at ${cut}: the group is cut off`)
    }
  })

  it('torn in a 64 MiB record (a large write is logged in 64 MiB pieces): the records before it are replayed', async () => {
    const dir = await walDir()
    const { log } = await openLog(dir)
    const want = await appendSome(log, 1)
    const before = log.size
    const piece = Buffer.alloc(64 * 1024 * 1024, 0x5a)
    await log.appendWrite(0, piece)
    const end = log.size
    await log.close()
    const path = join(dir, walFileName(1))
    const whole = `${path}.whole`
    await fs.copyFile(path, whole)
    for (const cut of [before + 1, before + 39, before + 40, before + 41, before + 40 + 2 ** 25, end - 1, end]) {
      await fs.copyFile(whole, path)
      await fs.truncate(path, cut)
      const r = await openLog(dir)
      await r.log.close()
      const expected = cut === end ? [...want, { kind: 'write' as const, seq: 4, offset: 0, data: piece }] : want
      assert.deepEqual(normal(r.replayed), normal(expected), `cut at ${cut}`)
      assert.equal(r.generations[0]?.cutBytes, end === cut ? 0 : cut - before, `cut at ${cut}`)
      assert.equal((await fs.stat(path)).size, cut === end ? end : before)
    }
    await fs.rm(whole)
  })

  it('a bit flipped anywhere in a record in the middle: neither it nor any after it is applied; the cut names the file and byte', async () => {
    const { dir, path, at, before: want } = await logAroundRecord(bytes(24, 9))
    const whole = await fs.readFile(path)
    for (let i = at; i < at + 40 + 24; i++) {
      for (let bit = 0; bit < 8; bit++) {
        const b = Buffer.from(whole)
        b[i] = (b[i] ?? 0) ^ (1 << bit)
        await fs.writeFile(path, b)
        const r = await openLog(dir)
        await r.log.close()
        const what = `byte ${i - at} of the record, bit ${bit}`
        assert.deepEqual(normal(r.replayed), normal(want), what)
        assert.ok(r.generations[0]?.cutReason?.startsWith(`${path} at byte ${at} (record 4): `), what)
        assert.equal(r.generations[0]?.cutBytes, whole.length - at, what)
      }
    }
  })

  it('a checked record with lengths no writer logs fails the open with ERR_CORRUPT naming the file, byte and record; the log is kept', async () => {
    const cases: Array<[string, (b: Buffer, at: number) => void, RegExp]> = [
      [
        'a write longer than its payload',
        (b, at) => b.writeBigUInt64LE(2n ** 40n, at + 24),
        /write of 1099511627776 bytes with a 10-byte payload/,
      ],
      [
        'a write of 2^53 bytes',
        (b, at) => b.writeBigUInt64LE(2n ** 53n, at + 24),
        /write at 3000 of 9007199254740992 bytes, past any file/,
      ],
      [
        'a length of 2^64 - 1',
        (b, at) => b.writeBigUInt64LE(2n ** 64n - 1n, at + 24),
        /of 18446744073709551615 bytes, past any file/,
      ],
      [
        'an offset and a length past 2^53 together',
        (b, at) => b.writeBigUInt64LE(2n ** 53n - 5n, at + 16),
        /write at 9007199254740987 of 10 bytes, past any file/,
      ],
      [
        'a zeroes record with a payload',
        (b, at) => b.writeUInt8(2, at + 4),
        /zeroes of 10 bytes with a 10-byte payload/,
      ],
    ]
    for (const [name, damage, message] of cases) {
      const { dir, path, at } = await logAroundRecord(bytes(10, 1))
      const b = await fs.readFile(path)
      damage(b, at)
      recrc(b, at)
      await fs.writeFile(path, b)
      const err = await rejectsCode(
        WalLog.open(dir, 7, () => {}),
        'ERR_CORRUPT',
        message,
      )
      assert.ok(err.message.includes(`${path} at byte ${at} (record 4)`), `${name}: ${err.message}`)
      assert.ok((await fs.readFile(path)).equals(b), `${name}: the log is kept as it was`)
    }
  })
})
