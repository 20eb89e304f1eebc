/**
 * The local file system helpers the directory store, the WAL, export and downloadFile
 * share: the crash-safe folder lock, errno tests, a directory fsync, writing a list of
 * chunks, and what a failure writing a local file becomes.
 *
 * The lock (`acquireLock`) is what makes the directory store's compare-and-swap atomic and
 * keeps a WAL folder to one writer. A holder that crashed is detected at once when it ran
 * on this machine (its process is gone: kill(pid, 0) and /proc, pid reuse and zombies
 * included), within LOCK_STALE_MS otherwise (its heartbeat stops: by the clock the file
 * system dates files by, never the holder's or the waiter's own), and only that holder's
 * lock is ever broken.
 */
import { createHash, randomBytes } from 'node:crypto'
import { constants as fsConstants, type Stats } from 'node:fs'
import * as fs from 'node:fs/promises'
import { hostname } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { printableLog } from './shell-words.js'

const log = printableLog(debug('stream-segment:lock'))

const LOCK_WAIT_MS = 60_000
const LOCK_POLL_MAX_MS = 20
/** A holder touches its lock this often, so that a waiter that cannot see its process can tell it lives. */
const LOCK_HEARTBEAT_MS = 1_000
/** An owner file's first byte (its JSON's opening brace), written again in place as the heartbeat. */
const OWNER_FIRST_BYTE = Buffer.from('{')
/** A lock whose holder's process cannot be checked (another machine or PID namespace) is stale without a heartbeat for this long. */
export const LOCK_STALE_MS = 10_000

export function isCode(err: unknown, code: string): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === code
}

export function isMissing(err: unknown): boolean {
  return isCode(err, 'ENOENT') || isCode(err, 'ENOTDIR')
}

/** Opens whatever is at a path without blocking (a FIFO someone put there) and without writing. */
export const OPEN_PROBE = fsConstants.O_RDONLY | fsConstants.O_NONBLOCK

/** Opens whatever is at `path` with OPEN_PROBE; undefined when there is nothing there, or a folder. */
export async function openProbe(path: string): Promise<fs.FileHandle | undefined> {
  try {
    return await fs.open(path, OPEN_PROBE)
  } catch (err) {
    if (isMissing(err) || isCode(err, 'EISDIR')) return undefined
    throw err
  }
}

/**
 * Opens the local file at `path` to read it, its failures as the library's errors
 * (ERR_NOT_FOUND when there is none, else ERR_INVALID_ARGUMENT naming the errno), and
 * judges what it opened, never what a look at the path found before: a FIFO put in the
 * file's place in between would be opened then. The open is OPEN_PROBE's (O_NONBLOCK):
 * a blocking open of a FIFO waits for a writer, in a thread no signal reaches (the process
 * cannot even exit meanwhile). The flag changes nothing for a regular file's reads, nor a
 * block device's (open(2)). What is there then:
 * - with `regularOnly`, anything but a regular file is closed and refused (ERR_INVALID_ARGUMENT);
 * - a FIFO stays non-blocking: read it through the event loop (a Socket on a descriptor of
 *   it), as the handle's reads would take "no writer yet" for the end of the input;
 * - a character device is opened again through its descriptor (/dev/fd/N: that very
 *   device, whatever the path names now) without O_NONBLOCK, so that its reads wait for
 *   input rather than fail with EAGAIN (a terminal's); where that cannot be done, the
 *   non-blocking handle is returned.
 */
export async function openLocalFile(path: string, regularOnly = false): Promise<fs.FileHandle> {
  const fh = await fs.open(path, OPEN_PROBE).catch((err: NodeJS.ErrnoException) => {
    throw err.code === 'ENOENT'
      ? StreamSegmentError.notFound(`${path}: no such file`, err)
      : StreamSegmentError.invalidArgument(`${path}: cannot open (${err.code ?? err.message})`)
  })
  try {
    // Opened just now: a failing disk, not the caller's argument.
    const st = await fh.stat().catch((err: Error) => {
      throw StreamSegmentError.store(`${path}: its size and times cannot be read (${err?.message ?? err})`, err)
    })
    if (regularOnly && !st.isFile()) {
      throw StreamSegmentError.invalidArgument(
        `${path}: not a regular file (give a stream of it to the write stream instead)`,
      )
    }
    if (!st.isCharacterDevice()) return fh
    const blocking = await fs.open(`/dev/fd/${fh.fd}`, 'r').catch(() => undefined)
    if (blocking === undefined) return fh
    await fh.close()
    return blocking
  } catch (err) {
    await fh.close().catch(() => {})
    throw err
  }
}

/**
 * The text of the regular file at `path`; undefined when there is none, or something else
 * is there (a folder, or a FIFO: opened without blocking, never read).
 */
export async function readRegularText(path: string): Promise<string | undefined> {
  const fh = await openProbe(path)
  return fh === undefined ? undefined : (await statAndText(fh)).text
}

/** What `fh` (opened by openProbe) holds: its status, and its text when it is a regular file; closed after. */
async function statAndText(fh: fs.FileHandle): Promise<{ st: Stats; text: string | undefined }> {
  try {
    const st = await fh.stat()
    return { st, text: st.isFile() ? await fh.readFile('utf8') : undefined }
  } finally {
    await fh.close().catch(() => {})
  }
}

/** A JSON object, or undefined for anything else (bad JSON, an array, null). */
export function parseJson<T>(text: string): T | undefined {
  try {
    const v = JSON.parse(text) as unknown
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as T) : undefined
  } catch {
    return undefined
  }
}

/** Buffers per readv or writev call (the kernel's IOV_MAX is 1024). */
export const IOV_MAX = 1024

/**
 * Writes every byte of `chunks`, in order, with `writev` calls of at most IOV_MAX chunks:
 * from `position` on, or at the file's position when it is undefined. A short write
 * resumes at the first chunk not fully written (only that one is re-sliced), so the cost
 * stays linear in the chunks. A writev that writes nothing fails it with a plain Error, as
 * a failed writev does: the caller names the file or key (localFileError, the directory
 * store's fsError), which a StreamSegmentError would pass through unnamed.
 */
export async function writeFully(fh: fs.FileHandle, chunks: readonly Uint8Array[], position?: number): Promise<void> {
  let total = 0
  for (const c of chunks) total += c.byteLength
  const written = await vectored(chunks, position, (batch, at) => fh.writev(batch, at).then((r) => r.bytesWritten))
  if (written < total) throw new Error(`writev wrote nothing with ${total - written} bytes left`)
}

/**
 * Fills `buffers`, in order, with `readv` calls of at most IOV_MAX buffers from
 * `position` on, as writeFully writes. Returns the bytes read: fewer than the buffers
 * hold when the file ends first. `beforeRead` runs before each call; what it throws
 * fails the read there (a caller's signal that fired: no more is read).
 */
export async function readFully(
  fh: fs.FileHandle,
  buffers: readonly Uint8Array[],
  position: number,
  beforeRead?: () => void,
): Promise<number> {
  return vectored(buffers, position, (batch, at) => {
    beforeRead?.()
    return fh.readv(batch, at).then((r) => r.bytesRead)
  })
}

/**
 * Moves every byte of `chunks` by `io` calls of at most IOV_MAX of them, each resuming
 * where the last stopped (only a chunk done in part is re-sliced); stops when one moves
 * nothing. Returns the bytes moved.
 */
async function vectored(
  chunks: readonly Uint8Array[],
  position: number | undefined,
  io: (batch: Uint8Array[], at: number | undefined) => Promise<number>,
): Promise<number> {
  const rest = chunks.filter((c) => c.byteLength > 0)
  let at = position
  let moved = 0
  let i = 0
  while (i < rest.length) {
    let n = await io(i === 0 && rest.length <= IOV_MAX ? rest : rest.slice(i, i + IOV_MAX), at)
    if (n === 0) break
    moved += n
    if (at !== undefined) at += n
    while (n > 0 && i < rest.length) {
      const c = rest[i] as Uint8Array
      if (n >= c.byteLength) {
        n -= c.byteLength
        i++
      } else {
        rest[i] = c.subarray(n)
        n = 0
      }
    }
  }
  return moved
}

/**
 * `mkdir -p`, keeping the file system's error: a recursive fs.mkdir reports ENOENT when
 * the disk is full or read-only, and retries without end when a folder cannot be made
 * though its parent exists (ENOENT from /proc, say). Here each folder is made at most
 * twice (before and after its parents), and the last failure is thrown. Returns the
 * folders it made, outermost first (a caller that needs them durable fsyncs their parents).
 */
export async function mkdirs(dir: string): Promise<string[]> {
  try {
    await fs.mkdir(dir)
    return [dir]
  } catch (err) {
    if (isCode(err, 'EEXIST')) return []
    if (!isCode(err, 'ENOENT') || dirname(dir) === dir) throw err
  }
  const made = await mkdirs(dirname(dir))
  try {
    await fs.mkdir(dir)
    made.push(dir)
  } catch (err) {
    if (!isCode(err, 'EEXIST')) throw err
  }
  return made
}

/**
 * `mkdirs` of each of `dirs`, then each folder made fsynced into its parent (once per
 * parent): a folder made is there after a machine crash only once its parent is, and with
 * it go the files written in it (a WAL's records, a store's sidecars, fsynced as they may
 * be). A parent this process may not open (EACCES, EPERM: it may write a folder it cannot
 * read) is passed to `denied`, which may throw; other failures throw.
 */
export async function mkdirsDurable(
  dirs: string | readonly string[],
  denied: (parent: string, err: Error) => void,
): Promise<void> {
  const made: string[] = []
  for (const dir of typeof dirs === 'string' ? [dirs] : dirs) made.push(...(await mkdirs(dir)))
  for (const parent of new Set(made.map((f) => dirname(f)))) {
    await syncDir(parent).catch((err) => {
      if (!isCode(err, 'EACCES') && !isCode(err, 'EPERM')) throw err
      denied(parent, err as Error)
    })
  }
}

/** Makes a folder's entries (files made, renamed or removed in it) durable. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await fs.open(dir, 'r')
  try {
    await fh.sync()
  } finally {
    await fh.close()
  }
}

// --- the folder lock ---

/** What a lock says about its holder, so that a waiter can tell whether it still lives. */
interface LockOwner {
  pid: number
  token: string
  host: string
  /** The kernel's boot id: a process of another boot is gone. */
  boot?: string | undefined
  /** The holder's PID namespace: its pid means something here only when it is ours. */
  pidNs?: string | undefined
  /** The holder's start time (clock ticks since boot), so that a reused pid is not taken for it. */
  start?: string | undefined
}

type Identity = Omit<LockOwner, 'token'>

let identity: Promise<Identity> | undefined

function myIdentity(): Promise<Identity> {
  identity ??= (async () => ({
    pid: process.pid,
    host: hostname(),
    boot: await fs.readFile('/proc/sys/kernel/random/boot_id', 'utf8').then(
      (s) => s.trim(),
      () => undefined,
    ),
    pidNs: await fs.readlink('/proc/self/ns/pid').catch(() => undefined),
    start: (await procStat(process.pid))?.start,
  }))()
  return identity
}

/** A process's state letter and start time from /proc (Linux); undefined when there is no such entry. */
async function procStat(pid: number): Promise<{ state: string; start: string } | undefined> {
  const text = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined)
  if (text === undefined) return undefined
  // Fields after the command name (in parentheses, which may hold anything): state is field 3, starttime 22.
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ')
  return f[0] === undefined || f[19] === undefined ? undefined : { state: f[0], start: f[19] }
}

/**
 * Whether a lock's holder still runs: true or false when its process can be checked (this
 * machine, this PID namespace), undefined when it cannot (then its heartbeat tells).
 */
async function holderAlive(owner: LockOwner, me: Identity): Promise<boolean | undefined> {
  if (owner.host !== me.host || owner.boot !== me.boot || owner.pidNs !== me.pidNs) return undefined
  if (owner.pid === me.pid) return owner.start === me.start
  try {
    process.kill(owner.pid, 0)
  } catch (err) {
    if (isCode(err, 'ESRCH')) return false
    if (!isCode(err, 'EPERM')) return undefined
  }
  if (me.boot === undefined) return undefined // no /proc: a live pid may be another process
  const st = await procStat(owner.pid)
  if (st === undefined) return undefined
  if (st.state === 'Z' || st.state === 'X') return false // killed, not yet reaped by its parent
  return owner.start === undefined || st.start === owner.start
}

// --- a writer's own files, told apart from a crashed writer's ---

/** This machine (host, boot, PID namespace) in 12 hex digits: a pid means something only on the machine that names it. */
function machineTag(me: Identity): string {
  return createHash('sha256')
    .update(`${me.host}\0${me.boot ?? ''}\0${me.pidNs ?? ''}`)
    .digest('hex')
    .slice(0, 12)
}

/**
 * A prefix for the names of files this process writes and may leave behind if it crashes
 * (`<machine>-<pid>-<start time>`), so that a sweeper can tell at once, with `writerGone`,
 * that the process that wrote one is gone.
 */
export async function writerTag(): Promise<string> {
  const me = await myIdentity()
  return `${machineTag(me)}-${me.pid}-${me.start ?? 'u'}`
}

/**
 * Whether the process whose `writerTag` starts `name` is surely gone: true when it ran on
 * this machine and has exited (pid reuse and zombies included, as for a lock's holder),
 * false when it still runs, undefined when that cannot be told (another machine, a name
 * without a tag, no /proc): then only the file's age can tell.
 */
export async function writerGone(name: string): Promise<boolean | undefined> {
  const m = /^([0-9a-f]{12})-([1-9][0-9]*)-([0-9]+|u)\./.exec(name)
  if (m === null) return undefined
  const me = await myIdentity()
  if (m[1] !== machineTag(me)) return undefined
  const owner: LockOwner = { ...me, token: '', pid: Number(m[2]), start: m[3] === 'u' ? undefined : m[3] }
  const alive = await holderAlive(owner, me)
  return alive === undefined ? undefined : !alive
}

/** The names of the folders `acquireLock` builds a lock in, under its `stagingParent`. */
export const LOCK_STAGING_PREFIX = 'lock-'

/**
 * Whether the taker that built the lock staging folder `dir` is surely gone (as
 * `writerGone`): true, false, or undefined when that cannot be told (another machine, or
 * a folder named by an older version with no whole owner file in it). Its owner file
 * says, or else its name (`lock-<writerTag>.<token>`): a taker killed after making the
 * folder and before its owner file was whole left only that.
 */
export async function stagingGone(dir: string): Promise<boolean | undefined> {
  const names = await fs.readdir(dir).catch(() => [] as string[])
  const name = names.find((n) => n.startsWith('owner-'))
  const text = name === undefined ? undefined : await readRegularText(join(dir, name)).catch(() => undefined)
  const owner = text === undefined ? undefined : parseJson<LockOwner>(text)
  if (owner === undefined || typeof owner.pid !== 'number') {
    return writerGone(basename(dir).slice(LOCK_STAGING_PREFIX.length))
  }
  const alive = await holderAlive(owner, await myIdentity())
  return alive === undefined ? undefined : !alive
}

/**
 * Removes the lock at `lockDir` when nobody holds it: broken when its holder is gone, by
 * the very rules a waiter follows (`breakIfStale`: a live holder's lock is never touched),
 * and the folder removed once empty. For sweeping the locks of crashed holders that no
 * waiter came to break. `fileSystemNow` is the time on the clock the file system dates
 * files by (read only when a holder's heartbeat is to be judged).
 */
export async function sweepLock(lockDir: string, fileSystemNow: () => Promise<number>): Promise<void> {
  if (await breakIfStale(lockDir, await myIdentity(), fileSystemNow)) await fs.rmdir(lockDir).catch(() => {})
}

/**
 * Takes the lock at `lockDir` (a directory), waiting while another holds it, at most
 * `waitMs` (then ERR_STORE). The directory store locks keys with it; the WAL its folder.
 *
 * A lock is a directory holding exactly one file, `owner-<token>` (a random token per
 * taking), whose JSON says who holds it (LockOwner). It is built complete in `staging`
 * and renamed into place: a rename onto a directory that is not empty fails, so only one
 * taker can succeed, and nobody ever sees a lock without its owner (an empty lock
 * directory, left for a moment by a release or a break, is free: the rename replaces it).
 *
 * A waiter that finds the lock taken reads its owner. When that process is gone (checked
 * with kill(pid, 0) and /proc, pid reuse and zombies included), or when it cannot be
 * checked and its heartbeat has stopped for LOCK_STALE_MS, the waiter breaks the lock by
 * unlinking that very owner file, `owner-<token>`: of several waiters that saw it stale,
 * one unlink succeeds, and none can touch a lock taken since, whose owner file has
 * another name. The holder releases the same way, then removes the directory if it is
 * still empty. So at most one owner file is ever in the lock, and its holder alone may
 * remove it while it lives.
 *
 * The heartbeat compares no two machines' clocks. The holder writes its owner file's first
 * byte again every LOCK_HEARTBEAT_MS, which the file system dates (a file server its own
 * clock; setting the time, as `utimes` does, would date it by the holder's). The waiter
 * reads that clock off its own staging owner file, written just before (its modification
 * time, carried on by the monotonic clock), and reads the holder's owner file through a
 * handle it opens (on NFS an open fetches the file's attributes afresh).
 *
 * Neither the rename that takes a lock nor the unlink and rmdir that release it is followed
 * by an fsync of the folder: a lock binds only while its holder lives, and a machine crash
 * that could undo either ends every process of that machine, the holder with them. What
 * it leaves (a lock held then, or one whose release it undid) is a gone holder's, of
 * another boot, broken by the next taker once its heartbeat is LOCK_STALE_MS old; a reboot
 * takes longer. A file server (NFS, exported `sync` as by default) makes a rename or a
 * removal durable before it answers: its crash takes no lock from a holder that lives on.
 */
export async function acquireLock(
  lockDir: string,
  stagingParent: string,
  what: string,
  waitMs = LOCK_WAIT_MS,
): Promise<{ release(): Promise<void> }> {
  const me = await myIdentity()
  const owner: LockOwner = { ...me, token: randomBytes(16).toString('hex') }
  const ownerName = `owner-${owner.token}`
  // Named by its taker too: killed before its owner file is whole, a sweep still tells whose it was.
  const staging = join(stagingParent, `${LOCK_STAGING_PREFIX}${await writerTag()}.${owner.token}`)
  await fs.mkdir(staging)
  try {
    await fs.writeFile(join(staging, ownerName), JSON.stringify(owner))
    // The file system's clock, as it dated that write: read after the write, so that it
    // runs a little behind rather than ahead (a heartbeat is then taken for stale later,
    // never sooner). Whole-second file systems put it up to a second further behind.
    const written = performance.now()
    let dated: number | undefined
    const fileSystemNow = async () => {
      dated ??= (await fs.stat(join(staging, ownerName))).mtimeMs
      return dated + (performance.now() - written)
    }
    const deadline = performance.now() + waitMs // monotonic: a clock set back must not stretch the wait
    for (let delay = 1; ; ) {
      try {
        await fs.rename(staging, lockDir)
        break
      } catch (err) {
        if (!isCode(err, 'ENOTEMPTY') && !isCode(err, 'EEXIST')) throw err
      }
      if (await breakIfStale(lockDir, me, fileSystemNow)) continue
      if (performance.now() > deadline) {
        throw StreamSegmentError.store(`${what}: lock ${lockDir} held for over ${waitMs} ms by a live holder`)
      }
      await sleep(delay)
      delay = Math.min(delay * 2, LOCK_POLL_MAX_MS)
    }
  } catch (err) {
    await fs.rm(staging, { recursive: true, force: true }).catch(() => {})
    throw err
  }
  const ownerPath = join(lockDir, ownerName)
  let beating = false // one heartbeat at a time: a file server that stalls must not pile them up
  const heartbeat = setInterval(() => {
    if (beating) return
    beating = true
    touch(ownerPath)
      .catch(() => {})
      .finally(() => {
        beating = false
      })
  }, LOCK_HEARTBEAT_MS)
  heartbeat.unref()
  return {
    async release() {
      clearInterval(heartbeat)
      try {
        await fs.unlink(ownerPath)
      } catch (err) {
        log('releasing %s: %s', ownerPath, (err as Error).message)
        if (!isMissing(err)) return // left for a waiter to break once this process is gone
      }
      await fs.rmdir(lockDir).catch(() => {}) // ENOTEMPTY: taken again already
    },
  }
}

/**
 * The heartbeat: the owner file's first byte written again in place (its text unchanged),
 * so that the file system dates the file by its own clock. Opened without creating: a lock
 * released or broken meanwhile is left alone. Closed at once: an NFS client sends the write
 * to the server by then.
 */
async function touch(ownerPath: string): Promise<void> {
  const fh = await fs.open(ownerPath, 'r+')
  try {
    await fh.write(OWNER_FIRST_BYTE, 0, 1, 0)
  } finally {
    await fh.close()
  }
}

/**
 * The owner file at `path` as a waiter reads it: its status, and its text when it is a
 * regular file (anything else, a FIFO put in its place, is opened without blocking and
 * never read: no owner, and it goes stale as one). Both through one handle, whose opening
 * makes an NFS client fetch the file's attributes afresh. Undefined when it is gone.
 */
async function readOwnerFile(path: string): Promise<{ st: Stats; text: string | undefined } | undefined> {
  const fh = await openProbe(path)
  if (fh === undefined) {
    // A folder in its place: no owner; its age is what there is to judge.
    const st = await fs.stat(path).catch((err) => {
      if (isMissing(err)) return undefined
      throw err
    })
    return st === undefined ? undefined : { st, text: undefined }
  }
  return statAndText(fh)
}

/**
 * Breaks the lock if its holder is gone; true when the lock may be free now (take it again
 * at once). `fileSystemNow` gives the time on the clock the file system dates files by,
 * which a holder's heartbeat is judged by.
 */
async function breakIfStale(lockDir: string, me: Identity, fileSystemNow: () => Promise<number>): Promise<boolean> {
  let names: string[]
  try {
    names = await fs.readdir(lockDir)
  } catch (err) {
    if (isMissing(err)) return true
    throw err
  }
  const name = names.find((n) => n.startsWith('owner-'))
  // Empty: being released or broken, free to take. Anything else without an owner is not
  // ours: wait, and time out naming it.
  if (name === undefined) return names.length === 0
  const file = join(lockDir, name)
  const read = await readOwnerFile(file)
  if (read === undefined) return true
  const owner = read.text === undefined ? undefined : parseJson<LockOwner>(read.text)
  const alive = owner !== undefined && name === `owner-${owner.token}` ? await holderAlive(owner, me) : undefined
  if (alive === true || (alive === undefined && (await fileSystemNow()) - read.st.mtimeMs <= LOCK_STALE_MS)) {
    return false
  }
  try {
    await fs.unlink(file)
  } catch (err) {
    if (isMissing(err)) return true // another waiter broke it, or its holder released it
    throw err
  }
  log('broke the lock %s of pid %s (%s)', lockDir, owner?.pid, alive === false ? 'gone' : 'no heartbeat')
  await fs.rmdir(lockDir).catch(() => {})
  return true
}

/**
 * Failures that writing again will not mend: the path is wrong for a file (Node's
 * ERR_INVALID_ARG_VALUE: a NUL in it, which no file name may hold).
 */
const BAD_PATH = new Set([
  'EISDIR',
  'ENOTDIR',
  'EACCES',
  'EPERM',
  'EROFS',
  'ENAMETOOLONG',
  'EFBIG',
  'ELOOP',
  'ERR_INVALID_ARG_VALUE',
])

/**
 * A failure writing the local file `path`, its cause kept, named `what` (the path by
 * default): ERR_NOT_FOUND for a missing folder, ERR_INVALID_ARGUMENT for a path that
 * cannot be a writable file, else ERR_STORE (a full or failing disk).
 */
export function localFileError(err: unknown, path: string, what = path): Error {
  if (StreamSegmentError.is(err)) return err
  const e = err as NodeJS.ErrnoException
  if (e.code === 'ENOENT') return StreamSegmentError.notFound(`${what}: no such file or directory`, err)
  if (e.code !== undefined && BAD_PATH.has(e.code)) {
    return StreamSegmentError.invalidArgument(`${what}: cannot be written as a file (${e.message})`)
  }
  return StreamSegmentError.store(`${what}: ${e.message}`, err)
}
