/**
 * A writer's WAL folder: the log (log.ts) and what ties it to one container and one writer.
 *
 * - One writer at a time: the folder is locked (the directory store's lock, which sees a
 *   holder that died) for as long as the log is open; a second writer gets ERR_STATE.
 * - One container: the folder records the container's URL when first used, and a writer
 *   of another container is refused (ERR_INVALID_ARGUMENT), so a log is never replayed
 *   into the wrong file.
 * - What to replay: generations are rotated only after the checkpoint they built was
 *   published, so a generation followed by one based on the published checkpoint (or a
 *   later one) is already in it and is skipped. What is left applies on top of the
 *   published checkpoint; when its base is older, either this writer's publish landed and
 *   the process died before rotating, or another writer published: the caller tells them
 *   apart (replaying is idempotent: a checkpoint that already holds the records is left
 *   unchanged by them).
 */
import { promises as fs } from 'node:fs'
import { join } from 'node:path'
import { StreamSegmentError } from '../errors.js'
import { acquireLock, parseJson } from '../util/local-fs.js'
import { describeValue } from '../util/typed-arrays.js'
import {
  inspectWalFiles,
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
  /** With sync 'interval': the longest an appended record waits for its fsync (ms, default 100). */
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

const BINDING = 'container'
const LOCK = '.lock'

export interface OpenedWal {
  log: WalLog
  replay: WalReplay
  release(): Promise<void>
}

export function checkWalOptions(o: WalOptions): void {
  if (o === null || typeof o !== 'object' || typeof o.dir !== 'string' || o.dir === '') {
    throw StreamSegmentError.invalidArgument(`wal: { dir } must name a folder, got ${JSON.stringify(o)}`)
  }
}

/**
 * Locks and opens the WAL at `o.dir` for the container at `url` whose published
 * checkpoint is `publishedCno`, calling `apply` for each record to replay, in order.
 */
export async function openWal(
  o: WalOptions,
  url: string,
  publishedCno: number,
  apply: (r: WalRecord) => Promise<void>,
): Promise<OpenedWal> {
  checkWalOptions(o)
  await fs.mkdir(o.dir, { recursive: true }).catch((err: NodeJS.ErrnoException) => {
    const why = `WAL ${o.dir}: the folder cannot be made (${err.code ?? err.message})`
    // A file where the folder should be, or a place this process may not write: the option is wrong.
    if (['EEXIST', 'ENOTDIR', 'EACCES', 'EPERM', 'EROFS', 'ENAMETOOLONG'].includes(err.code ?? '')) {
      throw StreamSegmentError.invalidArgument(why)
    }
    throw StreamSegmentError.store(why, err)
  })
  const lock = await acquireLock(join(o.dir, LOCK), o.dir, `WAL ${o.dir}`, 0).catch((err) => {
    throw StreamSegmentError.state(`WAL ${o.dir} is in use by another writer`, err)
  })
  try {
    const bound = await fs.readFile(join(o.dir, BINDING), 'utf8').catch(() => undefined)
    if (bound !== undefined && bound !== url) {
      throw StreamSegmentError.invalidArgument(`WAL ${o.dir} belongs to the container at ${bound}, not ${url}`)
    }
    if (bound === undefined) await fs.writeFile(join(o.dir, BINDING), url)
    const headers = await readHeaders(o.dir)
    const skip = new Set(
      headers
        .filter((_, i) => headers.slice(i + 1).some((later) => later.baseCno <= publishedCno))
        .map((h) => h.generation),
    )
    let records = 0
    let skipped = 0
    let baseCno: number | undefined
    const opened = await WalLog.open(
      o.dir,
      publishedCno,
      async (r, h) => {
        if (skip.has(h.generation)) {
          skipped++
          return
        }
        baseCno ??= h.baseCno
        records++
        await apply(r)
      },
      { ...(o.sync ? { sync: o.sync } : {}), ...(o.intervalMs !== undefined ? { intervalMs: o.intervalMs } : {}) },
    )
    const replay: WalReplay = { records, skipped, baseCno, generations: opened.generations }
    if (opened.dropped) replay.dropped = opened.dropped
    return { log: opened.log, replay, release: () => lock.release() }
  } catch (err) {
    await lock.release()
    throw err
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
  const container = await fs.readFile(join(dir, BINDING), 'utf8').catch(() => undefined)
  const owner = (await fs.readdir(join(dir, LOCK)).catch(() => [] as string[])).find((n) => n.startsWith('owner-'))
  let lockedBy: { pid: number; host: string } | undefined
  if (owner !== undefined) {
    const text = await fs.readFile(join(dir, LOCK, owner), 'utf8').catch(() => '')
    const o = parseJson<{ pid?: unknown; host?: unknown }>(text)
    lockedBy = { pid: Number(o?.pid ?? Number.NaN), host: String(o?.host ?? 'unknown') }
  }
  return { ...(await inspectWalFiles(dir)), container, lockedBy }
}
