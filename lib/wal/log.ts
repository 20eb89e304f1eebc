/**
 * The write-ahead log: a local, append-only record of the writes made since a checkpoint,
 * so that a process that dies before the next checkpoint is published loses nothing that
 * was acknowledged.
 *
 * What it guarantees:
 * - An append resolves only once its record is in the file, and with `sync: 'always'` only
 *   once the file is fsynced: appends waiting together share one fsync (group commit).
 *   With `'interval'` the file is fsynced at most `intervalMs` after an append (the loss
 *   window on a machine crash; a process crash loses nothing), with `'none'` never by us.
 * - Every record carries its sequence number, the checkpoint its file builds on and a
 *   CRC-32 over its header and payload. The scan at open stops at the first record that is
 *   torn (the file ends inside it), fails its CRC, or breaks the sequence; that record and
 *   everything after it are cut off (the file is truncated there, and fsynced before any
 *   record is appended) and the cut is reported.
 *   Nothing after a bad record is ever returned. A file older than the newest was fsynced
 *   whole before the next one started: bad bytes there are cut only when the next file
 *   follows on from them (a write that failed, then a switch); otherwise they are damage
 *   to acknowledged records, and the open fails with ERR_CORRUPT, the log kept.
 * - A log is a series of files, one per generation (`rotate()` starts the next, when a
 *   publish takes a snapshot); `dropBefore()` deletes the generations a publish made
 *   durable. `reset()` starts the next with a mark that voids every older one (their
 *   records are published, or discarded), then deletes them: a process that dies in
 *   between leaves them to the next open, which deletes them unread. Files are read back
 *   in generation order.
 * - A file system failure is the library's error naming the file (ERR_STORE for a full or
 *   failing disk). A write that fails takes no sequence number and what it left is cut
 *   before the next one, or before the next file is started (left in a file that is not
 *   the newest, it would cut off every newer one at the next open), so the log goes on
 *   once the disk has room again; a failed fsync stops every later append (what reached
 *   the disk is unknown) until `reset()`; with `sync: 'always'` the records it was for are
 *   cut, as their calls reject. A switch to a new file that fails is done again before
 *   the next append.
 *
 * File layout (little-endian):
 *
 *   file header, version 2: 48 bytes (a version 1 file, still read, is 40 bytes: after the
 *   first seq, its crc32 of bytes 0..32 and 4 zero bytes)
 *   +--------+---------+------------+----------+-----------+---------+-------+-------+
 *   | magic  | version | generation | base cno | first seq | ctimeMs | flags | crc32 |
 *   | 8 B    | u32     | u32        | u64      | u64       | u64     | u32   | u32   |
 *   +--------+---------+------------+----------+-----------+---------+-------+-------+
 *   record, 40-byte header then the payload
 *   +-------+------+----------+-----+--------+--------+-------------+-------+---------+
 *   | magic | kind | reserved | seq | offset | length | payload len | crc32 | payload |
 *   | u32   | u8   | 3 B zero | u64 | u64    | u64    | u32         | u32   |         |
 *   +-------+------+----------+-----+--------+--------+-------------+-------+---------+
 *
 * ctimeMs is the creation time of the container the base checkpoint is of (its inodes'
 * ctimeMs), 0 when unknown: a container removed and made again at the same place has
 * another, and its writer refuses the log. flags bit 0 (RESET): every older file is void.
 * The file header CRC covers the bytes before it (0..44; 0..32 in version 1); a record's
 * CRC covers bytes 0..36 of its header, then its payload. Sequence numbers run on across generations. `write` records carry
 * the bytes (payload length = length), `zeroes` none, `truncate` none (offset = new size),
 * `begin` and `commit` (kinds 4 and 5, an atomic group's bounds) none, offset and length 0.
 */
import { promises as fs } from 'node:fs'
import { basename, join } from 'node:path'
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import { localFileError, mkdirsDurable, syncDir, writeFully } from '../util/local-fs.js'
import { printableLog } from '../util/shell-words.js'
import { describeValue } from '../util/typed-arrays.js'

// The log's messages go with its file's (docs/logging.md).
const log = printableLog(debug('stream-segment:file'))

export type WalSync = 'always' | 'interval' | 'none'

export type WalRecord =
  | { kind: 'write'; seq: number; offset: number; data: Uint8Array }
  | { kind: 'zeroes'; seq: number; offset: number; length: number }
  | { kind: 'truncate'; seq: number; size: number }

/** What the scan at open found in one generation's file. */
export interface WalGeneration {
  generation: number
  baseCno: number
  path: string
  records: number
  /** Bytes of whole, checked records (after the file header). */
  bytes: number
  /** Bytes cut off the end (a torn or bad record and all after it); 0 when clean. */
  cutBytes: number
  /** Why the scan stopped early, when it did. */
  cutReason?: string
  /** Records of an atomic group never committed, left in an older file and not applied. */
  passedOver?: number
}

/** Files removed whole at open: they followed a cut, broke the sequence, or were torn in their header. */
export interface WalDropped {
  paths: string[]
  bytes: number
  reason: string
}

export interface WalOpened {
  log: WalLog
  /** The generations replayed, oldest first (a cut one ends the list). */
  generations: WalGeneration[]
  dropped?: WalDropped
}

export interface WalLogOptions {
  sync?: WalSync
  /** The container's creation time (its inodes' ctimeMs), written in the header of every file made. */
  ctimeMs?: number
  /** With `sync: 'interval'` only (refused with another mode): the longest time an appended record waits for its fsync. */
  intervalMs?: number
  /** Tests: called before each fsync. */
  onSync?: () => void
}

const FILE_MAGIC = Buffer.from('SSWALv1\n', 'latin1')
/** A version 1 file's header: no ctimeMs. */
const FILE_HEADER_V1 = 40
/** The header of the files this build makes (version 2). */
const FILE_HEADER = 48
const VERSION = 2
/** File header flag: every older file is void (made by reset()). */
const FLAG_RESET = 1
const RECORD_MAGIC = 0x52_4c_41_57 // "WALR" read little-endian
const RECORD_HEADER = 40
/** A payload this large is a torn or hostile length, not a record (writes are split below it). */
export const MAX_RECORD_PAYLOAD = 256 * 1024 * 1024
const KINDS = ['write', 'zeroes', 'truncate', 'begin', 'commit'] as const
const FILE_RE = /^wal-(\d{10})\.log$/

/** `sync` and `intervalMs`, as `open` takes them (checked there, and by the `wal` option's check). */
export function checkWalLogOptions(o: Pick<WalLogOptions, 'sync' | 'intervalMs'>): void {
  const { sync, intervalMs: ms } = o
  if (sync !== undefined && !['always', 'interval', 'none'].includes(sync)) {
    throw StreamSegmentError.invalidArgument(`wal.sync is ${describeValue(sync)}: use 'always', 'interval' or 'none'`)
  }
  if (ms !== undefined && !(Number.isInteger(ms) && ms >= 1 && ms <= 60_000)) {
    throw StreamSegmentError.invalidArgument(`wal.intervalMs is ${describeValue(ms)}: an integer from 1 to 60000`)
  }
  // Taken without a word, it would promise a loss window the mode does not keep.
  if (ms !== undefined && sync !== 'interval') {
    const mode = sync === undefined ? "'always' (the default)" : `'${sync}'`
    throw StreamSegmentError.invalidArgument(
      `wal.intervalMs (${ms}) is for wal.sync 'interval', and wal.sync is ${mode}: give sync 'interval', or no intervalMs`,
    )
  }
}

/** Whether `name` is a log file's (`wal-<generation, 10 digits>.log`). */
export function isWalFileName(name: string): boolean {
  return FILE_RE.test(name)
}

export function walFileName(generation: number): string {
  return `wal-${String(generation).padStart(10, '0')}.log`
}

export interface WalFileHeader {
  generation: number
  baseCno: number
  firstSeq: number
  /** The creation time of the container the base checkpoint is of; 0 when unknown (a version 1 file). */
  ctimeMs: number
  /** The header's length: where the records start. */
  bytes: number
  /** Made by reset(): every older file is void (its records were published, or discarded). */
  reset: boolean
}

function encodeFileHeader(h: Omit<WalFileHeader, 'bytes'>): Buffer {
  const b = Buffer.alloc(FILE_HEADER)
  FILE_MAGIC.copy(b, 0)
  b.writeUInt32LE(VERSION, 8)
  b.writeUInt32LE(h.generation, 12)
  b.writeBigUInt64LE(BigInt(h.baseCno), 16)
  b.writeBigUInt64LE(BigInt(h.firstSeq), 24)
  b.writeBigUInt64LE(BigInt(h.ctimeMs), 32)
  b.writeUInt32LE(h.reset ? FLAG_RESET : 0, 40)
  b.writeUInt32LE(crc32(b.subarray(0, 44)), 44)
  return b
}

function decodeFileHeader(b: Buffer, path: string): WalFileHeader {
  if (b.length < FILE_HEADER_V1) {
    throw StreamSegmentError.corrupt(
      `${path}: ${b.length} bytes, a log starts with ${FILE_HEADER_V1} (version 1) or ${FILE_HEADER} (version 2)`,
    )
  }
  if (!b.subarray(0, 8).equals(FILE_MAGIC))
    throw StreamSegmentError.corrupt(`${path}: not a stream-segment log (bad magic)`)
  const version = b.readUInt32LE(8)
  if (version !== 1 && version !== VERSION)
    throw StreamSegmentError.unsupported(`${path}: log version ${version}, this build reads 1 and ${VERSION}`)
  const bytes = version === 1 ? FILE_HEADER_V1 : FILE_HEADER
  if (b.length < bytes) {
    throw StreamSegmentError.corrupt(`${path}: ${b.length} bytes, a version ${version} log starts with ${bytes}`)
  }
  const crcAt = version === 1 ? 32 : 44
  const crc = crc32(b.subarray(0, crcAt))
  if (crc !== b.readUInt32LE(crcAt)) {
    throw StreamSegmentError.corrupt(`${path}: file header CRC ${b.readUInt32LE(crcAt)} != computed ${crc}`)
  }
  // A header that checks but that no writer makes: read as it stands, it would name the
  // next file made after one the log uses (replacing it, or sorting before it), or lose
  // precision in Number() (a sequence that no longer counts, a header this build cannot
  // write again).
  const generation = b.readUInt32LE(12)
  const named = FILE_RE.exec(basename(path))
  if (named !== null && Number(named[1]) !== generation) {
    throw StreamSegmentError.corrupt(
      `${path}: the header is of generation ${generation}, the file's name says ${named[1]}`,
    )
  }
  const field = (name: string, at: number): number => {
    const v = b.readBigUInt64LE(at)
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw StreamSegmentError.corrupt(`${path}: ${name} ${v}, past 2^53`)
    return Number(v)
  }
  return {
    generation,
    baseCno: field('base checkpoint', 16),
    firstSeq: field('first record', 24),
    ctimeMs: version === 1 ? 0 : field('creation time', 32),
    bytes,
    reset: version !== 1 && (b.readUInt32LE(40) & FLAG_RESET) !== 0,
  }
}

/**
 * Whether a file whose header does not check was torn while it was being made: its header
 * is written and fsynced before any record goes in, so such a file is no longer than a
 * header, or never reached the disk at all (zeros throughout). A header of zeros with
 * anything after it is not that: the records after it were appended once the header was
 * durable. Any other bad header is damage to a file that may hold acknowledged records:
 * ERR_CORRUPT, and the file is kept.
 */
async function tornHeader(path: string): Promise<boolean> {
  const fh = await fs.open(path, 'r')
  try {
    const size = (await fh.stat()).size
    if (size <= FILE_HEADER) return true
    // Read in steps up to the first byte that is not zero: in a damaged file that is at
    // the header or the first record, so only a file of zeros is read whole.
    for (let at = 0; at < size; at += ZERO_SCAN_BYTES) {
      const b = await readAt(fh, at, Math.min(ZERO_SCAN_BYTES, size - at))
      if (b.length === 0) break
      if (!b.every((byte) => byte === 0)) return false
    }
    return true
  } finally {
    await fh.close()
  }
}

/** The step tornHeader reads a file in. */
const ZERO_SCAN_BYTES = 64 * 1024

/** A failure of the file system on the log's file or folder `path`, as the library's error naming it. */
function fsError(err: unknown, path: string, doing: string): Error {
  return localFileError(err, path, `WAL ${path}: ${doing}`)
}

function encodeRecordHeader(kind: number, seq: number, offset: number, length: number, payload: Uint8Array): Buffer {
  const h = Buffer.alloc(RECORD_HEADER)
  h.writeUInt32LE(RECORD_MAGIC, 0)
  h.writeUInt8(kind, 4)
  h.writeBigUInt64LE(BigInt(seq), 8)
  h.writeBigUInt64LE(BigInt(offset), 16)
  h.writeBigUInt64LE(BigInt(length), 24)
  h.writeUInt32LE(payload.byteLength, 32)
  h.writeUInt32LE(crc32(payload, crc32(h.subarray(0, 36))), 36)
  return h
}

/** Reads `length` bytes at `position`; fewer when the file ends first. */
async function readAt(fh: fs.FileHandle, position: number, length: number): Promise<Buffer> {
  const b = Buffer.allocUnsafe(length)
  let got = 0
  while (got < length) {
    const { bytesRead } = await fh.read(b, got, length - got, position + got)
    if (bytesRead === 0) break
    got += bytesRead
  }
  return b.subarray(0, got)
}

/** Where a record starts: its byte in the file, its sequence number, the records before it. */
interface Position {
  at: number
  seq: number
  records: number
}

/**
 * Walks the records of an open log file from `from`, checking each, up to `until` (a byte
 * position, exclusive) or the first bad record, calling `onRecord` for each whole one.
 */
async function walk(
  fh: fs.FileHandle,
  path: string,
  size: number,
  from: Position,
  until: number,
  onRecord: (kind: (typeof KINDS)[number], r: WalRecord | undefined, at: Position) => void | Promise<void>,
): Promise<{ end: Position; cutReason?: string }> {
  let { at, seq, records } = from
  let cutReason: string | undefined
  while (at < until) {
    const h = await readAt(fh, at, RECORD_HEADER)
    const where = `${path} at byte ${at} (record ${seq})`
    if (h.length < RECORD_HEADER) {
      cutReason = `${where}: torn header, ${h.length} of ${RECORD_HEADER} bytes`
      break
    }
    const kind = KINDS[h.readUInt8(4) - 1]
    const payloadLen = h.readUInt32LE(32)
    if (h.readUInt32LE(0) !== RECORD_MAGIC || kind === undefined || payloadLen > MAX_RECORD_PAYLOAD) {
      cutReason = `${where}: not a record (magic, kind ${h.readUInt8(4)} or payload length ${payloadLen})`
      break
    }
    if (at + RECORD_HEADER + payloadLen > size) {
      cutReason = `${where}: torn payload, ${size - at - RECORD_HEADER} of ${payloadLen} bytes`
      break
    }
    const payload = await readAt(fh, at + RECORD_HEADER, payloadLen)
    const crc = crc32(payload, crc32(h.subarray(0, 36)))
    if (crc !== h.readUInt32LE(36)) {
      cutReason = `${where}: CRC ${h.readUInt32LE(36)} != computed ${crc}`
      break
    }
    const gotSeq = Number(h.readBigUInt64LE(8))
    const bigOffset = h.readBigUInt64LE(16)
    const bigLength = h.readBigUInt64LE(24)
    const offset = Number(bigOffset)
    const length = Number(bigLength)
    if (gotSeq !== seq) {
      cutReason = `${where}: sequence ${gotSeq}, expected ${seq}`
      break
    }
    if (bigOffset + bigLength > BigInt(Number.MAX_SAFE_INTEGER)) {
      // A whole, checked record no writer logged (no file reaches 2^53 bytes, and Number()
      // would round it): the log is corrupt there, not torn. Nothing is cut: the records
      // after it check too, and the log is kept for whoever looks at it.
      throw StreamSegmentError.corrupt(
        `${where}: ${kind} at ${bigOffset} of ${bigLength} bytes, past any file (2^53 bytes)`,
      )
    }
    if ((kind === 'write' && length !== payloadLen) || (kind !== 'write' && payloadLen !== 0)) {
      // Checked, so not torn either: no writer logs a length its payload does not have.
      throw StreamSegmentError.corrupt(`${where}: ${kind} of ${length} bytes with a ${payloadLen}-byte payload`)
    }
    const r: WalRecord | undefined =
      kind === 'write'
        ? { kind, seq, offset, data: payload }
        : kind === 'zeroes'
          ? { kind, seq, offset, length }
          : kind === 'truncate'
            ? { kind, seq, size: offset }
            : undefined
    await onRecord(kind, r, { at, seq, records })
    at += RECORD_HEADER + payloadLen
    seq++
    records++
  }
  return { end: { at, seq, records }, ...(cutReason === undefined ? {} : { cutReason }) }
}

/**
 * Reads one generation's records in order, calling `apply` for each whole, checked one,
 * and (unless `repair` is false) truncates the file after the last of them. Returns what
 * it found.
 *
 * Records of an atomic group (`begin` … `commit`) are applied once its commit is read
 * (read a second time from the file then, not held in memory). A group without its commit
 * (the writer died inside it) is not applied: in the newest file (`last`) the file is cut
 * at its `begin`, so records appended later do not join it; in an older one (a writer
 * that rolled back inside a group, then rotated) its records are passed over.
 */
export async function scanGeneration(
  path: string,
  apply: (r: WalRecord, h: WalFileHeader) => void | Promise<void>,
  repair = true,
  last = true,
): Promise<WalGeneration & { nextSeq: number; openGroup?: Position }> {
  const fh = await fs.open(path, repair ? 'r+' : 'r')
  try {
    const size = (await fh.stat()).size
    const header = decodeFileHeader(await readAt(fh, 0, FILE_HEADER), path)
    const { generation, baseCno } = header
    /** The first `begin` (records from it on wait to be applied), and the `begin` of the group still open. */
    let firstBegin: Position | undefined
    let open: Position | undefined
    // A whole, checked record the file refuses (an offset past its largest size) was never
    // logged by a writer, whose calls are checked first: the log is corrupt there.
    const replay = async (r: WalRecord, at: Position) => {
      try {
        await apply(r, header)
      } catch (err) {
        if (!StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT')) throw err
        throw StreamSegmentError.corrupt(
          `${path} at byte ${at.at} (record ${at.seq}): a ${r.kind} record the file cannot take: ${err.message}`,
          err,
        )
      }
    }
    const scan = await walk(
      fh,
      path,
      size,
      { at: header.bytes, seq: header.firstSeq, records: 0 },
      size,
      async (kind, r, at) => {
        if (kind === 'begin') {
          firstBegin ??= at
          open ??= at
        } else if (kind === 'commit') open = undefined
        else if (firstBegin === undefined && r !== undefined) await replay(r, at)
      },
    )
    // From the first `begin` on, every record in a committed group or outside any, up to the
    // group still open: applied now, read a second time.
    if (firstBegin !== undefined) {
      await walk(fh, path, size, firstBegin, open?.at ?? scan.end.at, async (_, r, at) => {
        if (r !== undefined) await replay(r, at)
      })
    }
    let { end, cutReason } = scan
    if (open !== undefined && last) {
      cutReason = groupCutReason(path, open, end, cutReason)
      end = open
    }
    const cutAt = end.at
    if (cutAt < size && repair) {
      // Durable before anything is appended: a cut a machine crash undid, once records went
      // in at `cutAt`, leaves what it cut behind them, and whole records there with the next
      // sequence numbers would replay (a group's, never committed, without its begin).
      await fh.truncate(cutAt)
      await fh.sync()
    }
    return {
      generation,
      baseCno,
      path,
      records: end.records,
      bytes: cutAt - header.bytes,
      cutBytes: size - cutAt,
      ...(cutReason === undefined ? {} : { cutReason }),
      ...(open !== undefined && !last ? { passedOver: end.records - open.records, openGroup: open } : {}),
      nextSeq: end.seq,
    }
  } finally {
    await fh.close()
  }
}

/** Why a file is cut at `open`, the `begin` of a group never committed, the file's records ending at `end`. */
function groupCutReason(path: string, open: Position, end: Position, after: string | undefined): string {
  const group = `${path} at byte ${open.at} (record ${open.seq}): an atomic group that was never committed (${end.records - open.records} records)`
  return after === undefined ? group : `${group}; after it, ${after}`
}

/** A log file's header (it must be whole and check). */
export async function readFileHeader(path: string): Promise<WalFileHeader> {
  const fh = await fs.open(path, 'r')
  try {
    return decodeFileHeader(await readAt(fh, 0, FILE_HEADER), path)
  } finally {
    await fh.close()
  }
}

/**
 * The generations in `dir`, oldest first. Anything but a regular file under a log file's
 * name is ERR_CORRUPT naming it: opened, a FIFO would wait for a writer, in a thread no
 * signal reaches (the process could not even exit).
 */
export async function listGenerations(dir: string): Promise<{ generation: number; path: string }[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return []
    throw fsError(err, dir, 'reading the folder')
  })
  const out: { generation: number; path: string }[] = []
  for (const e of entries) {
    const m = FILE_RE.exec(e.name)
    if (m === null) continue
    const path = join(dir, e.name)
    // A link, or a file system that does not give the type: what it leads to.
    const regular = e.isFile() || (!e.isDirectory() && (await fs.stat(path).catch(() => undefined))?.isFile() === true)
    if (!regular) throw StreamSegmentError.corrupt(`${path}: not a regular file, as a log file is`)
    out.push({ generation: Number(m[1]), path })
  }
  return out.sort((a, b) => a.generation - b.generation)
}

/**
 * The generations in `dir` a replay reads, oldest first, and those older than the newest
 * file reset() made (`void`: their records were published or discarded; left when the
 * process died before it deleted them). A header that cannot be read is left to the
 * replay's own checks.
 */
export async function liveGenerations(
  dir: string,
): Promise<{ live: { generation: number; path: string }[]; void: { generation: number; path: string }[] }> {
  const files = await listGenerations(dir)
  for (let i = files.length - 1; i > 0; i--) {
    const h = await readFileHeader((files[i] as { path: string }).path).catch(() => undefined)
    if (h?.reset) return { live: files.slice(i), void: files.slice(0, i) }
  }
  return { live: files, void: [] }
}

/**
 * The log's writing end: appends to the newest generation. Made by `WalLog.open` after the
 * caller has replayed what `scan` returned.
 */
export class WalLog {
  readonly dir: string
  readonly sync: WalSync
  readonly intervalMs: number
  #fh: fs.FileHandle
  #generation: number
  #baseCno: number
  #ctimeMs: number
  /** Where the current file's records start (its header's length). */
  #headerBytes: number
  #size: number
  /** The sequence number of the next record written: taken when it is written, so a record that fails takes none. */
  #seq: number
  /** Appends run one after the other, in sequence order. */
  #tail: Promise<void> = Promise.resolve()
  /** Appended but not yet fsynced; their waiters (with `'always'`). */
  #unsynced: { resolve: () => void; reject: (err: unknown) => void }[] = []
  #syncing = false
  #timer: NodeJS.Timeout | undefined
  /** An fsync failed: what reached the disk is unknown, so nothing more is appended (until `reset()`). */
  #failed: unknown
  /** A write failed part way: what it left past `#size` is cut before the next record is written. */
  #torn = false
  /**
   * With `sync: 'always'`, the end of the records whose fsync succeeded (every call before
   * them resolved): when an fsync fails, the records after it, whose calls reject, are cut.
   */
  #synced: { size: number; seq: number }
  /** A switch to a new file (rotate, reset) that failed: made before the next append, which fails while it cannot be. */
  #pending: { reset: boolean; baseCno: number; ctimeMs: number } | undefined
  #onSync: (() => void) | undefined

  private constructor(dir: string, fh: fs.FileHandle, h: WalFileHeader, size: number, seq: number, o: WalLogOptions) {
    this.dir = dir
    this.sync = o.sync ?? 'always'
    this.intervalMs = o.intervalMs ?? 100
    this.#fh = fh
    this.#generation = h.generation
    this.#baseCno = h.baseCno
    this.#ctimeMs = h.ctimeMs
    this.#headerBytes = h.bytes
    this.#size = size
    this.#seq = seq
    this.#synced = { size, seq }
    this.#onSync = o.onSync
  }

  /**
   * Replays every generation in `dir` in order through `apply` (cutting torn tails), then
   * opens the log for appending: to the newest generation, or to a new one on `baseCno`
   * when the directory holds none. The directory is made when missing.
   */
  static async open(
    dir: string,
    baseCno: number,
    apply: (r: WalRecord, h: WalFileHeader) => void | Promise<void>,
    options: WalLogOptions = {},
  ): Promise<WalOpened> {
    checkWalLogOptions(options)
    let at = dir
    try {
      await mkdirsDurable(dir, (parent, err) => log('WAL %s: %s cannot be fsynced (%s)', dir, parent, err.message))
      const { live: files, void: gone } = await liveGenerations(dir)
      for (const f of gone) {
        at = f.path
        await fs.rm(f.path, { force: true })
      }
      const { generations, dropped, nextSeq: seq } = await followGenerations(files, apply, true)
      // What does not follow on goes: replayed later, it would apply on top of missing records.
      for (const path of dropped?.paths ?? []) {
        at = path
        await fs.rm(path)
      }
      // Gone for good only once the folder is fsynced, as dropBefore does: a dropped file back
      // after a crash may follow on once records are appended to the one before it, and replay.
      if (gone.length > 0 || dropped !== undefined) {
        at = dir
        await syncDir(dir)
      }
      const last = generations.at(-1)
      const replayed = generations.map(({ header: _, ...g }) => g)
      if (last === undefined) {
        const gen = (files.at(-1)?.generation ?? 0) + 1
        const made = await WalLog.#create(dir, gen, baseCno, seq, options)
        return { log: made, generations: replayed, ...(dropped ? { dropped } : {}) }
      }
      at = last.path
      const fh = await fs.open(last.path, 'r+')
      const size = last.header.bytes + last.bytes
      const kept = new WalLog(dir, fh, last.header, size, seq, options)
      return { log: kept, generations: replayed, ...(dropped ? { dropped } : {}) }
    } catch (err) {
      throw fsError(err, at, 'opening the log')
    }
  }

  static async #create(dir: string, gen: number, base: number, seq: number, o: WalLogOptions): Promise<WalLog> {
    const h = { generation: gen, baseCno: base, firstSeq: seq, ctimeMs: o.ctimeMs ?? 0, reset: false }
    const fh = await createFile(dir, h)
    return new WalLog(dir, fh, { ...h, bytes: FILE_HEADER }, FILE_HEADER, seq, o)
  }

  get generation(): number {
    return this.#generation
  }
  get baseCno(): number {
    return this.#baseCno
  }
  /** The creation time of the container the current file's base checkpoint is of (0: unknown). */
  get ctimeMs(): number {
    return this.#ctimeMs
  }
  /** The sequence number the next record gets. */
  get nextSeq(): number {
    return this.#seq
  }
  /** Bytes in the current generation's file. */
  get size(): number {
    return this.#size
  }
  /**
   * Whether a reset() that failed (its new file could not be made) is still to be made: it
   * is made before the next append, and every record logged before it is void (published,
   * or given up).
   */
  get resetPending(): boolean {
    return this.#pending?.reset === true
  }
  /** Whether the current generation's file holds records. */
  get holdsRecords(): boolean {
    return this.#size > this.#headerBytes
  }

  appendWrite(offset: number, data: Uint8Array): Promise<void> {
    if (data.byteLength > MAX_RECORD_PAYLOAD) {
      return Promise.reject(
        StreamSegmentError.invalidArgument(
          `a log record holds at most ${MAX_RECORD_PAYLOAD} bytes, got ${data.byteLength}`,
        ),
      )
    }
    return this.#append(1, offset, data.byteLength, data)
  }
  appendZeroes(offset: number, length: number): Promise<void> {
    return this.#append(2, offset, length, new Uint8Array(0))
  }
  appendTruncate(size: number): Promise<void> {
    return this.#append(3, size, 0, new Uint8Array(0))
  }
  /** Opens an atomic group: the records up to its commit are replayed only if the commit is logged. */
  appendBegin(): Promise<void> {
    return this.#append(4, 0, 0, new Uint8Array(0))
  }
  appendCommit(): Promise<void> {
    return this.#append(5, 0, 0, new Uint8Array(0))
  }

  #append(kind: number, offset: number, length: number, payload: Uint8Array): Promise<void> {
    // A reset still pending voids the file whose fsync failed: once made, the log goes on.
    const stopped = () => this.#failed !== undefined && this.#pending?.reset !== true
    if (stopped()) return Promise.reject(this.#failed)
    const written = this.#tail.then(async () => {
      if (stopped()) throw this.#failed
      await this.#switchNow()
      // The sequence number is taken here, once every record before this one is written or
      // has failed: a record that fails leaves no gap a replay would stop at.
      const seq = this.#seq
      const at = this.#size
      try {
        if (this.#torn) {
          // Durable before this record goes in at `at`, as the open's cut: were the cut lost
          // in a machine crash, the failed record's rest would follow this one, its payload's
          // bytes read as the next records.
          await this.#fh.truncate(at)
          await this.#fh.sync()
          this.#torn = false
        }
        const header = encodeRecordHeader(kind, seq, offset, length, payload)
        const n = RECORD_HEADER + payload.byteLength
        let done = (await this.#fh.writev([header, payload], at)).bytesWritten
        while (done < n) {
          // A short write (a full disk, a signal): write the rest, or fail with what the OS says.
          const rest =
            done < RECORD_HEADER
              ? Buffer.concat([header.subarray(done), payload])
              : payload.subarray(done - RECORD_HEADER)
          const { bytesWritten } = await this.#fh.write(rest, 0, rest.byteLength, at + done)
          if (bytesWritten === 0)
            throw StreamSegmentError.store(`${this.#path()}: wrote ${done} of ${n} bytes at ${at}`)
          done += bytesWritten
        }
        this.#size += n
        this.#seq++
      } catch (err) {
        this.#torn = true
        throw fsError(err, this.#path(), `appending record ${seq} at byte ${at}`)
      }
    })
    this.#tail = written.catch(() => undefined)
    return written.then(() => this.#durable())
  }

  #durable(): Promise<void> {
    if (this.sync === 'none') return Promise.resolve()
    if (this.sync === 'interval') {
      this.#timer ??= setTimeout(() => {
        this.#timer = undefined
        this.#syncNow().catch(() => {}) // sticky in #failed; the next append rejects
      }, this.intervalMs)
      return Promise.resolve()
    }
    // A record written while an fsync failed: none is waited for again, and the record is cut.
    if (this.#failed !== undefined) return Promise.reject(this.#failed)
    const done = new Promise<void>((resolve, reject) => this.#unsynced.push({ resolve, reject }))
    if (!this.#syncing) this.#syncNow().catch(() => {})
    return done
  }

  /** One fsync for every append that finished before it starts; repeats while more wait. */
  async #syncNow(): Promise<void> {
    this.#syncing = true
    try {
      while (this.#unsynced.length > 0 || this.sync === 'interval') {
        // The file of these appends: a switch to a new file may come while the fsync runs.
        const fh = this.#fh
        const waiters = this.#unsynced.splice(0)
        const upTo = { size: this.#size, seq: this.#seq }
        try {
          this.#onSync?.()
          await fh.sync()
        } catch (err) {
          // A file a switch left behind: rotate() fsynced it before it switched, reset()
          // dropped it with its records; its failure says nothing of the log.
          if (fh !== this.#fh) {
            for (const w of waiters) w.resolve()
            if (this.sync === 'interval') break
            continue
          }
          this.#failed ??= StreamSegmentError.store(`${this.#path()}: fsync failed`, err)
          // Those that came while it ran too: nothing fsyncs for them now.
          for (const w of [...waiters, ...this.#unsynced.splice(0)]) w.reject(this.#failed)
          this.#cutUnsynced()
          throw this.#failed
        }
        if (fh === this.#fh) this.#synced = upTo
        for (const w of waiters) w.resolve()
        if (this.sync === 'interval') break
      }
    } finally {
      this.#syncing = false
    }
  }

  /**
   * With `sync: 'always'`, after an fsync that failed: cuts the records after the last
   * fsynced one (their calls rejected), once the appends under way are written, so that no
   * later open replays a change its caller was told failed. The cut is fsynced: nothing is
   * appended to this file again, but until a reset() voids it, a machine crash that undid
   * the cut would bring those records back to the next open. A cut, or its fsync, that the
   * disk refuses too is logged: those records then may stay.
   */
  #cutUnsynced(): void {
    if (this.sync !== 'always') return
    const fh = this.#fh
    const done = this.#tail.then(async () => {
      const { size, seq } = this.#synced
      if (fh !== this.#fh || this.#size <= size) return
      try {
        await fh.truncate(size)
        this.#size = size
        this.#seq = seq
        this.#torn = false
        await fh.sync()
      } catch (err) {
        log('%s: cutting the records whose fsync failed at byte %d: %s', this.#path(), size, err)
      }
    })
    this.#tail = done
  }

  /** Waits for every append so far, then fsyncs (whatever the sync mode). */
  async flush(): Promise<void> {
    await this.#tail
    if (this.#failed !== undefined) throw this.#failed
    try {
      this.#onSync?.()
      await this.#fh.sync()
    } catch (err) {
      this.#failed ??= StreamSegmentError.store(`${this.#path()}: fsync failed`, err)
      throw this.#failed
    }
  }

  /**
   * Starts the next generation on `baseCno` (the checkpoint a publish in progress will
   * make), of the container made at `ctimeMs` (by default the current file's): records
   * appended from now on go there. Returns the generation just closed. When
   * the new file cannot be made the switch is left pending (made before the next append,
   * which fails while it cannot be: no record goes to the old file) and the error thrown.
   */
  async rotate(baseCno: number, ctimeMs = this.#ctimeMs): Promise<number> {
    // After a reset that is still pending, the current file holds nothing to keep.
    if (this.#pending?.reset !== true) await this.flush()
    const old = this.#generation
    await this.#queueSwitch({ reset: this.#pending?.reset ?? false, baseCno, ctimeMs })
    return old
  }

  /**
   * Starts the next generation on `baseCno`, of the container made at `ctimeMs` (by
   * default the current file's), marked as voiding every older one (their records are
   * published, or discarded), then deletes those: no record of theirs comes back, whenever
   * the process dies. When the new file cannot be made, this is done again before the next
   * append (which fails while it cannot be), and the error thrown.
   */
  async reset(baseCno: number, ctimeMs = this.#ctimeMs): Promise<void> {
    await this.#queueSwitch({ reset: true, baseCno, ctimeMs })
  }

  /**
   * Voids every record logged, for a writer that gives them up (a rollback, a close
   * without them): `reset()`, or, when its new file cannot be made (a full disk), every
   * file removed: the void ones, then the others newest first (what is left of them, if
   * the process dies in between, is a start of the log, as a crash before would have
   * left). The reset stays pending then: the next append makes its file first (and fails
   * while it cannot be), so the log goes on from there. Throws the reset's error when
   * neither can be done (the reset still pending).
   */
  async discard(baseCno: number, ctimeMs = this.#ctimeMs): Promise<void> {
    try {
      await this.reset(baseCno, ctimeMs)
    } catch (err) {
      log('%s: no new log file to void the records (%s): removing the files', this.dir, (err as Error)?.message ?? err)
      try {
        // Void files first: once the newest file that voids them is gone they would count again.
        const { live, void: gone } = await liveGenerations(this.dir)
        for (const g of [...gone, ...live.reverse()]) await fs.rm(g.path, { force: true })
        await syncDir(this.dir)
      } catch (rmErr) {
        log('%s: removing the log files: %s', this.dir, (rmErr as Error)?.message ?? rmErr)
        throw err
      }
    }
  }

  /** Sets the switch to make, once every append before it is written, and makes it. */
  async #queueSwitch(to: { reset: boolean; baseCno: number; ctimeMs: number }): Promise<void> {
    const done = this.#tail.then(() => {
      this.#pending = to
      return this.#switchNow()
    })
    this.#tail = done.catch(() => undefined)
    await done
  }

  /** Makes the switch pending, if any: the next generation's file, where appends go from now on. */
  async #switchNow(): Promise<void> {
    const to = this.#pending
    if (to === undefined) return
    if (this.#torn && !to.reset) {
      // What a failed write left would read as a torn record in a file that is no longer
      // the newest: the open cuts it there and drops every newer file with their records.
      try {
        await this.#fh.truncate(this.#size)
        await this.#fh.sync()
      } catch (err) {
        throw fsError(err, this.#path(), `cutting a torn record at byte ${this.#size}`)
      }
      this.#torn = false
    }
    const gen = this.#generation + 1
    const fh = await createFile(this.dir, {
      generation: gen,
      baseCno: to.baseCno,
      firstSeq: this.#seq,
      ctimeMs: to.ctimeMs,
      reset: to.reset,
    })
    // The interval's fsync is of the file being left: rotate() fsynced it, reset() dropped it.
    clearTimeout(this.#timer)
    this.#timer = undefined
    const old = this.#fh
    this.#fh = fh
    this.#generation = gen
    this.#baseCno = to.baseCno
    this.#ctimeMs = to.ctimeMs
    this.#headerBytes = FILE_HEADER
    this.#size = FILE_HEADER
    this.#synced = { size: FILE_HEADER, seq: this.#seq }
    this.#torn = false
    // A failed fsync was of a file gone now, with its records.
    if (to.reset) this.#failed = undefined
    this.#pending = undefined
    await old.close().catch((err) => log('%s: closing the previous log file: %s', this.dir, err))
    // Void already: one left (a disk that fails) goes at the next open.
    if (to.reset) await this.dropBefore(gen).catch((err) => log('%s: void log files left: %s', this.dir, err))
  }

  /** Deletes every generation older than `generation` (their checkpoint is published). */
  async dropBefore(generation: number): Promise<void> {
    for (const g of await listGenerations(this.dir)) {
      if (g.generation < generation) {
        await fs.rm(g.path, { force: true }).catch((err) => {
          throw fsError(err, g.path, 'removing the file')
        })
      }
    }
    await syncDir(this.dir).catch((err) => {
      throw fsError(err, this.dir, 'syncing the folder')
    })
  }

  /** Closes the file once every append so far is written, and fsynced (an fsync that fails is thrown). */
  async close(): Promise<void> {
    clearTimeout(this.#timer)
    this.#timer = undefined
    try {
      await this.flush()
    } finally {
      await this.#fh.close().catch((err) => log('%s: closing the log file: %s', this.dir, err))
    }
  }

  #path(): string {
    return join(this.dir, walFileName(this.#generation))
  }
}

/**
 * Makes a generation's file, its header durable before it is used. On failure the file is
 * removed (its name is the next attempt's), and the error names it. A file left by an
 * attempt that could not remove it (no record ever went in) is replaced.
 */
async function createFile(dir: string, header: Omit<WalFileHeader, 'bytes'>): Promise<fs.FileHandle> {
  const path = join(dir, walFileName(header.generation))
  let fh: fs.FileHandle | undefined
  try {
    await fs.rm(path, { force: true })
    fh = await fs.open(path, 'wx')
    await writeFully(fh, [encodeFileHeader(header)], 0)
    await fh.sync()
    await syncDir(dir)
    return fh
  } catch (err) {
    if (fh !== undefined) {
      await fh.close().catch(() => undefined)
      await fs.rm(path, { force: true }).catch(() => undefined)
    }
    throw fsError(err, path, 'making the file')
  }
}

/** The headers of the generations in `dir`, oldest first (a newest file torn in its header is left out). */
export async function readHeaders(dir: string): Promise<WalFileHeader[]> {
  const files = (await liveGenerations(dir)).live
  const out: WalFileHeader[] = []
  for (const [i, f] of files.entries()) {
    try {
      out.push(await readFileHeader(f.path))
    } catch (err) {
      if (!(StreamSegmentError.is(err, 'ERR_CORRUPT') && i === files.length - 1 && (await tornHeader(f.path)))) {
        throw fsError(err, f.path, 'reading its header')
      }
    }
  }
  return out
}

/** What a WAL folder holds, read without changing it (`stream-segment inspect DIR`). */
export interface WalReport {
  dir: string
  generations: Array<WalGeneration & { firstSeq: number }>
  /** Records a replay would consider (before skipping those already published; not those of a group never committed). */
  records: number
  /** Bytes of write payload in them. */
  payloadBytes: number
  /** Files the next open removes whole, unread (as `WalOpened.dropped`). */
  dropped?: WalDropped
}

/** Reads the folder as `WalLog.open` would, file by file, without changing it. */
export async function inspectWalFiles(dir: string): Promise<WalReport> {
  let records = 0
  let payloadBytes = 0
  const files = (await liveGenerations(dir)).live
  const { generations, dropped } = await followGenerations(
    files,
    (r) => {
      records++
      if (r.kind === 'write') payloadBytes += r.data.byteLength
    },
    false,
  )
  return {
    dir,
    generations: generations.map(({ header, ...g }) => ({ ...g, firstSeq: header.firstSeq })),
    records,
    payloadBytes,
    ...(dropped ? { dropped } : {}),
  }
}

/**
 * The live files, oldest first, as far as they follow on: each one's header read (the
 * newest may be torn inside it, a crash while it was made) and its records scanned through
 * `apply` (`repair`: a torn tail cut, as the open does). A file that does not take up where
 * the previous one ended would apply on top of missing records: it and every later file
 * are `dropped`, unread (the caller removes them or says so), and the file before them,
 * the newest now, is cut at a group it left open (cutOpenGroup). An older file cut where
 * the next does not take up is ERR_CORRUPT (cutOlder).
 */
async function followGenerations(
  files: ReadonlyArray<{ path: string }>,
  apply: (r: WalRecord, h: WalFileHeader) => void | Promise<void>,
  repair: boolean,
): Promise<{
  generations: Array<WalGeneration & { header: WalFileHeader }>
  dropped?: WalDropped
  nextSeq: number
}> {
  const generations: Array<WalGeneration & { header: WalFileHeader; openGroup?: Position }> = []
  let seq = 1
  for (const [i, { path }] of files.entries()) {
    const last = i === files.length - 1
    const previous = generations.at(-1)
    let h: WalFileHeader | undefined
    let broken: string | undefined
    try {
      h = await readFileHeader(path)
    } catch (err) {
      if (!(StreamSegmentError.is(err, 'ERR_CORRUPT') && last && (await tornHeader(path)))) {
        throw fsError(err, path, 'reading its header')
      }
      broken = err.message
    }
    if (previous !== undefined && h !== undefined && h.firstSeq !== seq) {
      broken = `${path}: starts at record ${h.firstSeq}, the previous file ended before ${seq}`
    }
    if (broken !== undefined || h === undefined) {
      const rest = files.slice(i)
      let bytes = 0
      for (const f of rest) bytes += (await fs.stat(f.path)).size
      // The file before becomes the newest: records are appended to it next.
      if (previous !== undefined) seq = await cutOpenGroup(previous, seq, repair)
      const dropped = { paths: rest.map((f) => f.path), bytes, reason: broken ?? path }
      return { generations: generations.map(withoutGroup), dropped, nextSeq: seq }
    }
    const header = h
    // A file older than the newest is cut only once the newer one is found to follow on.
    const { nextSeq, openGroup, ...g } = await scanGeneration(
      path,
      (r) => apply(r, header),
      repair && last,
      last,
    ).catch((err) => {
      throw fsError(err, path, repair ? 'replaying it' : 'reading it')
    })
    if (!last && g.cutBytes > 0) {
      await cutOlder(path, g, nextSeq, files[i + 1]?.path as string, i + 1 === files.length - 1, repair)
    }
    generations.push({ ...g, header, ...(openGroup === undefined ? {} : { openGroup }) })
    seq = nextSeq
  }
  return { generations: generations.map(withoutGroup), nextSeq: seq }
}

/** A generation as followGenerations tells it: where a group it passed over begins is its own business. */
function withoutGroup({ openGroup: _, ...g }: WalGeneration & { header: WalFileHeader; openGroup?: Position }) {
  return g
}

/**
 * A file scanned as older than the newest that is the newest now (the files after it
 * dropped), `nextSeq` following its last record: a group it left open (passed over, not
 * applied) is cut at its `begin`, as in the newest file (scanGeneration), and the cut
 * fsynced (`repair`; else `g` only says so). Left, the records appended next would join the
 * group, and be cut with it by the next open, or a later commit would close it and apply
 * its records. Returns the sequence number that follows the file's records now.
 */
async function cutOpenGroup(
  g: WalGeneration & { header: WalFileHeader; openGroup?: Position },
  nextSeq: number,
  repair: boolean,
): Promise<number> {
  const open = g.openGroup
  if (open === undefined) return nextSeq
  const end = { at: g.header.bytes + g.bytes, seq: nextSeq, records: g.records }
  if (repair) await cutDurably(g.path, open.at, `cutting an atomic group never committed at byte ${open.at}`)
  g.cutReason = groupCutReason(g.path, open, end, g.cutReason)
  g.cutBytes += end.at - open.at
  g.bytes = open.at - g.header.bytes
  g.records = open.records
  delete g.passedOver
  return open.seq
}

/** Cuts the file at `at`, and fsyncs it: durable before anything is appended there. */
async function cutDurably(path: string, at: number, doing: string): Promise<void> {
  let fh: fs.FileHandle | undefined
  try {
    fh = await fs.open(path, 'r+')
    await fh.truncate(at)
    await fh.sync()
  } catch (err) {
    throw fsError(err, path, doing)
  } finally {
    await fh?.close().catch(() => undefined)
  }
}

/**
 * A file older than the newest that does not end on a whole record (`g`, scanned up to
 * record `nextSeq`): it was fsynced before the next file started, so its bad bytes are
 * either what a write that failed left (it took no sequence number: the next file starts
 * at `nextSeq`, or is the newest and was torn while it was made), cut then (`repair`), or
 * damage to records that were acknowledged, as were those of the newer files: ERR_CORRUPT
 * naming the file and byte, and the log is kept as it is.
 */
async function cutOlder(
  path: string,
  g: WalGeneration,
  nextSeq: number,
  next: string,
  nextIsNewest: boolean,
  repair: boolean,
): Promise<void> {
  const h = await readFileHeader(next).catch(() => undefined)
  const torn = h === undefined && nextIsNewest && (await tornHeader(next).catch(() => false))
  if (h === undefined ? !torn : h.firstSeq !== nextSeq) {
    const then = h === undefined ? '' : `, and ${next} starts at record ${h.firstSeq}`
    throw StreamSegmentError.corrupt(
      `${g.cutReason}: a file older than the newest, fsynced whole before the next one started${then}; the log is kept`,
    )
  }
  if (!repair) return
  // Durable before the open returns. When the newest file was torn in its header, it is
  // dropped and records are appended to this one at `at`: a cut a machine crash undid would
  // leave what it cut behind them, to be read as following on (as for the newest file's
  // cut, scanGeneration). When the next file follows on, nothing goes in here again and an
  // undone cut is only found and made again by the next open, but the repair is rare.
  const at = (await fs.stat(path)).size - g.cutBytes
  await cutDurably(path, at, `cutting a torn record at byte ${at}`)
}
