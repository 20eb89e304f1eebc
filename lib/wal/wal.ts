/**
 * A writer's WAL folder: the log (log.ts) and what ties it to one container and one writer.
 *
 * - One writer at a time: the folder is locked (the directory store's lock, which sees a
 *   holder that died) for as long as the log is open; a second writer gets ERR_STATE.
 * - One container: the folder records the container's URL when first used, and a writer
 *   of another container is refused (ERR_INVALID_ARGUMENT), so a log is never replayed
 *   into the wrong file.
 * - What to replay: a background publish starts the next generation on the checkpoint it
 *   is about to make, before that checkpoint is published, and the generations before it
 *   are deleted once it lands. So a generation based on checkpoint X says only that a
 *   publish of X, holding every record before it, was started: it may have failed, or
 *   the process died before it landed, and another writer may have published X or later
 *   since. The records before it are skipped only when the caller finds them in X
 *   (`heldBy`: X is in the published history of the container, and holds their effect);
 *   otherwise they are replayed with the rest. What is left applies on top of the
 *   published checkpoint; when its base is older, either this writer's publish landed and
 *   the process died before it started a new log, or another writer published: the
 *   caller tells them apart.
 * - One history: every file records the creation time of its container (`ctimeMs`); a
 *   log of a container removed and made again at the same place is reported (`foreign`).
 */
import { promises as fs } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { checkOptionNames } from '../settings.js'
import {
  acquireLock,
  LOCK_STAGING_PREFIX,
  LOCK_STALE_MS,
  localFileError,
  mkdirsDurable,
  parseJson,
  readRegularText,
  stagingGone,
  syncDir,
} from '../util/local-fs.js'
import { printableLog } from '../util/shell-words.js'
import { describeValue, showValue } from '../util/typed-arrays.js'
import {
  checkWalLogOptions,
  inspectWalFiles,
  isWalFileName,
  readHeaders,
  type WalDropped,
  type WalGeneration,
  WalLog,
  type WalRecord,
  type WalReport,
  type WalSync,
} from './log.js'

export interface WalOptions {
  /** The folder of the log, made when missing; one writer and one container per folder. */
  dir: string
  /** When an append is durable before the call resolves: 'always' (default), 'interval', 'none'. */
  sync?: WalSync
  /** With sync 'interval' only (refused with another mode): the longest an appended record waits for its fsync (ms, default 100). */
  intervalMs?: number
}

/** What the open found in the log and did with it. */
export interface WalReplay {
  /** Records applied on top of the published checkpoint. */
  records: number
  /** Records skipped: their checkpoint was published already. */
  skipped: number
  /** The oldest base checkpoint of the records applied (undefined when none). */
  baseCno: number | undefined
  generations: WalGeneration[]
  dropped?: WalDropped
}

const log = printableLog(debug('stream-segment:file'))

const BINDING = 'container'
/** The most a container's URL takes (a path or a key, and its scheme): a longer record is none, and is not read. */
const MAX_BINDING_BYTES = 64 * 1024
const LOCK = '.lock'
/**
 * A lock staging folder whose taker cannot be checked is removed once this old: it lives
 * only while its taker takes the lock (one attempt, the WAL waits for none), so an hour
 * leaves a taker that stalled (a hung file server, a stopped process) ample time; one
 * later still finds its folder gone, and its open fails.
 */
const STAGING_STALE_MS = 60 * 60_000

export interface OpenedWal {
  log: WalLog
  replay: WalReplay
  /**
   * The creation time of another container at this place that a file of the log is based
   * on (one removed and made again since), if any: then no record was skipped.
   */
  foreign: number | undefined
  release(): Promise<void>
}

/** How the caller replays the log into its file. */
export interface WalReplayer {
  /** Applies a record on top of those applied before it. */
  apply(r: WalRecord): Promise<void>
  /**
   * Whether every record applied since the last `true` is already in checkpoint `cno`
   * (published in this container's history, and holding their effect); when it is, the
   * caller has undone them: they are counted as skipped.
   */
  heldBy(cno: number): Promise<boolean>
}

/**
 * The `wal` option, whole, before the log's folder is touched or any request made: a folder,
 * `sync` and `intervalMs` as WalLog.open takes them, and no other name (a misspelt `sync`
 * would leave the default without a word).
 */
export function checkWalOptions(o: WalOptions): void {
  if (o === null || typeof o !== 'object' || typeof o.dir !== 'string' || o.dir === '') {
    throw StreamSegmentError.invalidArgument(`wal: { dir } must name a folder, got ${showValue(o)}`)
  }
  if (o.dir.includes('\0')) {
    // No file system takes one: the folder could not be made, and that is the option's fault.
    throw StreamSegmentError.invalidArgument(`wal.dir ${JSON.stringify(o.dir)}: a path holds no NUL byte`)
  }
  checkOptionNames('wal', o, ['dir', 'sync', 'intervalMs'])
  checkWalLogOptions(o)
}

/**
 * Makes the folder `dir` and its parents (mkdirs: fs.mkdir's recursive mode never ends
 * where the file system answers ENOENT with the parent there, as /proc does), failing
 * with EEXIST, as that mode does, when something other than a folder is there. Each
 * folder made is fsynced into its parent: else a machine crash may take it back, and the
 * records fsynced in it with it.
 */
async function makeFolder(dir: string): Promise<void> {
  await mkdirsDurable(dir, (parent, err) => log('WAL %s: %s cannot be fsynced (%s)', dir, parent, err.message))
  if (!(await fs.stat(dir)).isDirectory()) {
    throw Object.assign(new Error(`${dir}: not a folder`), { code: 'EEXIST', path: dir })
  }
}

/**
 * Locks and opens the WAL at `o.dir` for the container at `url` whose published
 * checkpoint is `container.cno` (0: none yet), made at `container.ctimeMs` (0 when
 * unknown; recorded in the files made), replaying every record through `replayer`, in
 * order.
 */
export async function openWal(
  o: WalOptions,
  url: string,
  container: { cno: number; ctimeMs: number },
  replayer: WalReplayer,
): Promise<OpenedWal> {
  checkWalOptions(o)
  // Taken from the working directory now: the log makes, removes and unlocks files by
  // path long after, and a process that changed directory meanwhile would do it in
  // another folder (another log's, maybe).
  o = { ...o, dir: resolve(o.dir) }
  await makeFolder(o.dir).catch((err: NodeJS.ErrnoException) => {
    const why = `WAL ${o.dir}: the folder cannot be made (${err.code ?? err.message})`
    // A file where the folder should be, a place this process may not write, or a file
    // system that makes no folders there although the parent exists (ENOENT: /proc): the
    // option is wrong.
    if (['EEXIST', 'ENOTDIR', 'EACCES', 'EPERM', 'EROFS', 'ENAMETOOLONG', 'ENOENT'].includes(err.code ?? '')) {
      throw StreamSegmentError.invalidArgument(why)
    }
    throw StreamSegmentError.store(why, err)
  })
  // Taken and released without an fsync of the folder (acquireLock says why): a crash that
  // undid either ends this writer too, and leaves a lock the next open takes over, or the
  // staging folder the lock was renamed from (sweepStagings takes it).
  const lock = await acquireLock(join(o.dir, LOCK), o.dir, `WAL ${o.dir}`, 0).catch(async (err) => {
    // The lock's own error says a live holder has it (it waited 0 ms). Any other is the
    // file system's: a folder this process may not write is a wrong option, not a writer.
    if (StreamSegmentError.is(err)) throw StreamSegmentError.state(await inUse(o.dir), err)
    throw localFileError(err, o.dir, `WAL ${o.dir}: its lock cannot be taken`)
  })
  try {
    await sweepStagings(o.dir)
    const binding = join(o.dir, BINDING)
    const bound = await readBinding(binding)
    if (bound !== undefined && bound !== url) {
      throw StreamSegmentError.invalidArgument(`WAL ${o.dir} belongs to the container at ${bound}, not ${url}`)
    }
    if (bound === undefined) await bind(binding, url)
    const headers = await readHeaders(o.dir)
    // Only a container that has a checkpoint is told apart: a new one's (made by create())
    // records build on no content, and a log on a checkpoint it never published is refused
    // by the caller all the same.
    const foreign =
      container.ctimeMs === 0 || container.cno === 0
        ? undefined
        : headers.find((h) => h.baseCno !== 0 && h.ctimeMs !== 0 && h.ctimeMs !== container.ctimeMs)?.ctimeMs
    let records = 0
    let skipped = 0
    /** Records applied since the last ones found published (`heldBy`). */
    let pending = 0
    let baseCno: number | undefined
    /** The generation of the last record applied (0: none yet). */
    let lastGen = 0
    // The generations after the last record applied, up to `upTo`, were each started by a
    // publish holding every record before them: is the newest of those checkpoints that
    // holds the records applied since the last check published? Then they are skipped.
    const cross = async (upTo: number) => {
      if (pending === 0 || foreign !== undefined) return
      const started = headers.filter((h) => h.generation > lastGen && h.generation <= upTo).reverse()
      for (const h of started) {
        if (h.baseCno === 0 || h.baseCno > container.cno) continue
        if (await replayer.heldBy(h.baseCno)) {
          skipped += pending
          records -= pending
          pending = 0
          baseCno = undefined
          return
        }
      }
    }
    const opened = await WalLog.open(
      o.dir,
      container.cno,
      async (r, h) => {
        if (h.generation !== lastGen) {
          await cross(h.generation)
          lastGen = h.generation
        }
        baseCno ??= h.baseCno
        records++
        pending++
        await replayer.apply(r)
      },
      {
        ctimeMs: container.ctimeMs,
        ...(o.sync ? { sync: o.sync } : {}),
        ...(o.intervalMs !== undefined ? { intervalMs: o.intervalMs } : {}),
      },
    )
    try {
      await cross(Number.POSITIVE_INFINITY)
    } catch (err) {
      await opened.log.close().catch(() => undefined)
      throw err
    }
    const replay: WalReplay = { records, skipped, baseCno, generations: opened.generations }
    if (opened.dropped) replay.dropped = opened.dropped
    return { log: opened.log, replay, foreign, release: () => lock.release() }
  } catch (err) {
    await lock.release()
    throw err
  }
}

/**
 * Removes the lock staging folders in `dir` whose takers are gone (a process killed while
 * it took the lock leaves one; see acquireLock): each would stay for good, as no other
 * sweep looks here. One of a live taker (another open trying now) stays. One whose taker
 * cannot be checked from here (another machine's, or an earlier boot's: a machine crash
 * that undid the lock's rename brings its staging folder back) goes once it is
 * STAGING_STALE_MS old, by the clock the file system dates files by.
 * The folder is fsynced after, as after every removal in it. All of it is housekeeping:
 * a folder left, or back after a crash, is swept by the next open.
 */
async function sweepStagings(dir: string): Promise<void> {
  const names = await fs.readdir(dir).catch(() => [] as string[])
  let now: number | undefined
  let removed = false
  for (const name of names) {
    if (!name.startsWith(LOCK_STAGING_PREFIX)) continue
    const path = join(dir, name)
    const taker = await stagingGone(path)
    if (taker === false) continue
    if (taker === undefined) {
      now ??= await lockDated(dir)
      const st = await fs.stat(path).catch(() => undefined)
      if (now === undefined || st === undefined || now - st.mtimeMs <= STAGING_STALE_MS) continue
    }
    const gone = await fs.rm(path, { recursive: true, force: true }).then(
      () => true,
      () => false,
    )
    removed ||= gone
  }
  if (removed) await syncDir(dir).catch(() => {})
}

/**
 * The file system's clock now, as it dated the owner file of the lock this open has just
 * taken (written as it took it, then by its heartbeat); undefined when it cannot be read.
 */
async function lockDated(dir: string): Promise<number | undefined> {
  const owner = (await fs.readdir(join(dir, LOCK)).catch(() => [] as string[])).find((n) => n.startsWith('owner-'))
  if (owner === undefined) return undefined
  return (await fs.stat(join(dir, LOCK, owner)).catch(() => undefined))?.mtimeMs
}

/**
 * The URL `binding` records; undefined when there is nothing there. Anything but a regular
 * file is refused, unread (readRegularText opens it without blocking: a FIFO would wait
 * for a writer, in a thread no signal reaches), and so is a file longer than any URL (read
 * whole, it would take its size in memory, and in the error naming it).
 */
async function readBinding(binding: string): Promise<string | undefined> {
  const fail = (err: unknown) => {
    throw localFileError(err, binding, `WAL ${binding}`)
  }
  const st = await fs.stat(binding).catch(() => undefined)
  if (st?.isFile() && st.size > MAX_BINDING_BYTES) {
    throw StreamSegmentError.invalidArgument(
      `WAL ${binding}: ${st.size} bytes, not the record of a container's URL (at most ${MAX_BINDING_BYTES} bytes)`,
    )
  }
  const text = await readRegularText(binding).catch(fail)
  if (text !== undefined || (await fs.stat(binding).catch(() => undefined)) === undefined) return text
  throw StreamSegmentError.invalidArgument(
    `WAL ${binding}: not a regular file, as the folder's record of its container is`,
  )
}

/**
 * Records the container's URL in `binding`, whole or not at all: a file cut short (a full
 * disk, a crash while it was written) would name another container, and the folder would
 * be refused for its own from then on.
 */
async function bind(binding: string, url: string): Promise<void> {
  const staged = `${binding}.tmp`
  try {
    const fh = await fs.open(staged, 'w')
    try {
      await fh.writeFile(url)
      await fh.sync()
    } finally {
      await fh.close()
    }
    await fs.rename(staged, binding)
    await syncDir(dirname(binding))
  } catch (err) {
    await fs.rm(staged, { force: true }).catch(() => undefined)
    throw localFileError(err, binding, `WAL ${binding}`)
  }
}

/**
 * A WAL folder's state, read without changing it: its container, its log, and the lock's
 * holder when the folder is locked (a holder that died leaves its lock until the next open).
 */
export async function inspectWal(
  dir: string,
): Promise<WalReport & { container: string | undefined; lockedBy: { pid: number; host: string } | undefined }> {
  if (typeof dir !== 'string' || dir === '') {
    throw StreamSegmentError.invalidArgument(
      `inspectWal: dir must be a folder's path (a non-empty string), got ${describeValue(dir)}`,
    )
  }
  const st = await fs.stat(dir).catch(() => undefined)
  if (!st?.isDirectory()) throw StreamSegmentError.notFound(`${dir}: no WAL folder here`)
  // A folder no writer has used (a typo'd path, another program's folder): read as a log,
  // it would pass for an empty one. The first open records the container there. A folder
  // that cannot be listed is left to the read below, which says why.
  const names = await fs.readdir(dir).catch(() => undefined)
  if (names !== undefined && !names.some((n) => n === BINDING || n === LOCK || isWalFileName(n))) {
    throw StreamSegmentError.notFound(`${dir}: no write-ahead log here (no ${BINDING} record, no wal-*.log file)`)
  }
  const container = await readBinding(join(dir, BINDING)).catch(() => undefined)
  const lockedBy = await lockHolder(dir)
  return { ...(await inspectWalFiles(dir)), container, lockedBy }
}

/** Who holds the folder's lock, as its owner file says; undefined when it is not locked. */
async function lockHolder(dir: string): Promise<{ pid: number; host: string } | undefined> {
  const owner = (await fs.readdir(join(dir, LOCK)).catch(() => [] as string[])).find((n) => n.startsWith('owner-'))
  if (owner === undefined) return undefined
  const text = await fs.readFile(join(dir, LOCK, owner), 'utf8').catch(() => '')
  const o = parseJson<{ pid?: unknown; host?: unknown }>(text)
  return { pid: Number(o?.pid ?? Number.NaN), host: String(o?.host ?? 'unknown') }
}

/**
 * Why a WAL folder cannot be taken: who holds its lock, and, since the holder may be a
 * lock copied with the folder from another machine (whose process cannot be checked from
 * here), when such a lock is taken over.
 */
async function inUse(dir: string): Promise<string> {
  const holder = await lockHolder(dir)
  const who =
    holder === undefined ? 'holder not known: it may have just released it' : `pid ${holder.pid} on host ${holder.host}`
  return (
    `WAL ${dir} is in use by another writer (${who}); a lock whose holder cannot be checked from here ` +
    `(copied from another machine, or another PID namespace) is taken over once its heartbeat ` +
    `(the owner file's modification time, by the clock the file system dates files by) is over ${LOCK_STALE_MS / 1000} s old`
  )
}
