/**
 * The embedded default store: a container in a local directory, no server needed.
 *
 * What it guarantees, across processes on one machine:
 * - An object file holds exactly the object's bytes. Every write goes to a temporary
 *   file in `.ss-tmp/`, is fsynced, then linked (create-only: `link` fails if the key
 *   exists, atomically) or renamed (replace) into place, and the directory is fsynced;
 *   so is the parent of each folder a write makes (the root, the store's own folders, a
 *   key's folders), before the write answers.
 *   A crash leaves the old object or the new one, never a torn one; leftovers in
 *   `.ss-tmp/` are garbage, swept by the store's first write in each process (`sweep`):
 *   a temporary file is named after its writer's process, so one whose writer is gone
 *   goes at once, one whose writer cannot be checked once it is an hour old.
 *   `gc` and `removeContainer` sweep too; `removeContainer` then removes the store's own
 *   folders and the root when they are empty (`removeEmptyStoreFolders`), and a write of a
 *   store that made them before finds them gone and makes them again, once (`inFolders`).
 *   A write that fails (a full disk: ENOSPC) removes its temporary file and leaves the
 *   key as it was; so does a put, part, part copy or completion whose signal fires before
 *   it is in place, which stops writing within a MiB (`writeBody`, `copyRangeInto`,
 *   `concatInto`) and is ERR_ABORTED (an aborted completion leaves its upload open, its
 *   parts as they were, as S3 does). A delete fsyncs the folder of each key it removed
 *   before it answers (once per folder): a crash cannot bring back a key whose delete
 *   answered.
 * - Every object has a sidecar `.ss-meta/<inode number>` holding its metadata and its
 *   ETag: 128 random bits drawn for each write. The sidecar is written and fsynced
 *   before the object becomes visible, so whoever sees the object sees its sidecar; a
 *   new write always has a new ETag, whatever its size and however soon it follows (the
 *   file's inode number and mtime do not: a freed inode number is reused at once, and
 *   mtimes can be as coarse as a second). Objects written before sidecars held ETags
 *   keep the ETag they had: `<inode>-<size>-<mtime µs>` in hex.
 *   The sidecar also records the file it was written for: its key, size and mtime in
 *   nanoseconds (`fileRecord`), which the link or rename into place keeps. A copy of the
 *   store's folder (`cp -a`, rsync, a restore) gives every file a new inode number, which
 *   may name another object's sidecar: one recording another file is none of this one's
 *   (`recordsFile`), and the object is as one written before sidecars (no metadata, the
 *   ETag of its file), never another's. One recording no file (older versions) is taken.
 *   A sidecar is removed only while its inode is held (an open handle, or a name only
 *   this process knows), so it can never be another file's, which later gets that number;
 *   but the sweep of `gc` and `removeContainer` takes a sidecar no file of the store holds
 *   once it was last written well before the sweep began (SIDECAR_MARGIN_MS): a crash
 *   between replacing or deleting an object and removing its sidecar leaves one.
 * - A multipart upload lives in `.ss-multipart/<uploadId>/`: its `upload.json`, and its
 *   parts, each in a file of its own renamed into place (completion joins copies of them),
 *   unless the upload was made with `partBytes`. Then each part is written in place, at
 *   (partNumber − 1) × partBytes of one file this process writes for the upload, and
 *   `<partNumber>.part` records where its bytes are and its ETag (`placeInPlace`); a
 *   completion of parts 1 to n all in that file, holding nothing more, hard-links it into
 *   `.ss-tmp` and publishes it as any put's file: the pieces of a large object are written
 *   once, and its completion costs an fsync. Each place is written once, so the bytes a
 *   record names never change (see PlacedFile): a part sent again goes to a file of its
 *   own, another process's parts to that process's file, and a completion that finds its
 *   parts in several files (or listed with gaps) copies them into a new one.
 * - `ifMatch` puts, claimed multipart completions and deletes run under a per-key lock
 *   (a folder named after the key's SHA-256), so that compare-and-swap is atomic, a delete
 *   included (see `acquireLock` in util/local-fs.ts): a holder that crashed is detected at
 *   once when it ran on this machine (its process is gone), within LOCK_STALE_MS
 *   otherwise (its heartbeat stops), and only that holder's lock is ever broken.
 *   A put without a condition takes no lock (a lock per object would cost every data
 *   object five more file system calls): racing an `ifMatch` put of the same key, it can be
 *   overwritten by that put's rename although it landed after the check. The library
 *   never mixes the two on one key: the inode alone is compare-and-swapped, always so.
 * - Failures of the file system are ERR_STORE naming the cause (`no space left on the
 *   device (ENOSPC)`), the key and the file the failed call was on; a key no file name
 *   can hold (ENAMETOOLONG) is ERR_INVALID_ARGUMENT (`fsError`).
 * - Keys map to paths segment by segment; bytes other than [A-Za-z0-9_.-] and a
 *   leading dot are %-escaped, and a key segment that has children becomes a
 *   directory named `<segment>%2F`, so the key `a` and the key `a/b` never collide and
 *   no key reaches outside the root or into the store's own dot-folders.
 *   A symlink at a key's path is no object (opened with O_NOFOLLOW: OPEN_OBJECT); a
 *   symlink in a key's folders is refused, ERR_STORE (`checkFolders`), so that a key
 *   resolves inside the root. The check is made as each call starts: a folder swapped
 *   for a link while the call runs is still followed (closing that needs calls relative
 *   to an open folder, which Node lacks). The root (and what is above it) may be a symlink.
 */
import { createHash, type Hash, randomBytes, randomUUID } from 'node:crypto'
import { type BigIntStats, constants as fsConstants, type Stats } from 'node:fs'
import * as fs from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import {
  acquireLock,
  isCode,
  isMissing,
  LOCK_STAGING_PREFIX,
  mkdirs,
  mkdirsDurable,
  OPEN_PROBE,
  openProbe,
  parseJson,
  readFully,
  readRegularText,
  stagingGone,
  sweepLock,
  syncDir,
  writeFully,
  writerGone,
  writerTag,
} from '../util/local-fs.js'
import { lendPieces, PIECE_BYTES, returnPieces, takePiece } from '../util/piece-pool.js'
import { printableLog } from '../util/shell-words.js'
import { describeValue } from '../util/typed-arrays.js'
import {
  CLOCK_OFFSET_NOISE_MS,
  checkConditions,
  checkCopyRange,
  checkIfMatch,
  checkKey,
  checkListArguments,
  checkMetadata,
  checkPartBytes,
  checkPartList,
  checkPartNumber,
  checkPartSizes,
  checkPutPrecondition,
  compareKeys,
  listOf,
  MAX_PART_BYTES,
  newWriteId,
  putMetadata,
  resolveRange,
  throwIfAborted,
  unquoteEtag,
} from './common.js'
import type {
  AbortMultipartOptions,
  Body,
  CompletedPart,
  CopySource,
  CreateMultipartOptions,
  GetOptions,
  ListEntry,
  ListOptions,
  MultipartUpload,
  ObjectInfo,
  ObjectStore,
  PutOptions,
  RequestOptions,
  UploadedPart,
} from './types.js'
import { WRITE_ID_METADATA } from './types.js'

const log = printableLog(debug('stream-segment:dir'))

const TMP = '.ss-tmp'
/** The folders in TMP an upload's folder is built in (`upload-<writerTag>.<uploadId>`). */
const UPLOAD_STAGING_PREFIX = 'upload-'
/** What `now` writes to have a file dated by the file system. */
const CLOCK_PROBE = Buffer.from('clock')
const META = '.ss-meta'
const LOCKS = '.ss-lock'
const UPLOADS = '.ss-multipart'
/** The store's own folders, made by its first write (`init`), removed when empty by `removeEmptyStoreFolders`. */
const OWN_FOLDERS = [TMP, META, LOCKS, UPLOADS]
/**
 * An upload made with `partBytes` writes its parts in place (`placeInPlace`): into files of
 * its folder named `data.<writerTag>.<uuid>`, each part's whereabouts in `<partNumber>.part`.
 */
const DATA_PREFIX = 'data.'
const DATA_NAME = /^data\.[A-Za-z0-9_.-]{1,200}$/
const RECORD_SUFFIX = '.part'
/** How a part is written in place: created when missing, never truncated, never through a symlink. */
const WRITE_IN_PLACE = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_NOFOLLOW
/** The sidecar field holding the ETag: not a valid metadata key, so never a caller's. */
const ETAG_FIELD = 'ss:etag'
/**
 * The sidecar fields naming the file it is for (see `fileRecord`): its key, size and mtime
 * in nanoseconds, as decimal strings. The store's own fields all start `ss:`.
 */
const KEY_FIELD = 'ss:key'
const SIZE_FIELD = 'ss:size'
const MTIME_FIELD = 'ss:mtime'
/** The most bytes one step of a copy (a part copy, a completion) moves: what is copied after its signal fired. */
const COPY_BUFFER = 1024 * 1024
const LIST_CONCURRENCY = 32

/** What link() answers on a file system that cannot make the create-only put's hard link (see noLinks). */
const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EXDEV'])

/**
 * How a key's file is opened: as OPEN_PROBE, and never through a symlink at the key's path
 * (ELOOP): such a link is no object (`list` passes it over), and what it points to, outside
 * the store maybe, is neither read nor removed as one.
 */
const OPEN_OBJECT = OPEN_PROBE | fsConstants.O_NOFOLLOW

/**
 * How a sidecar is written: truncating one left by a file that had this inode number
 * before; never through a symlink someone put in its place (ELOOP), which would have the
 * put write over the file it points to, nor waiting for a reader of a FIFO there (ENXIO).
 * Either is removed, and the sidecar made afresh (`writeSidecar`).
 */
const WRITE_SIDECAR =
  fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_TRUNC | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK

/** Links a create-only put makes while its key comes and goes (see linkCreateOnly). */
const CREATE_ONLY_TRIES = 4

/** Test hooks: not part of the API (hookedDirectoryStore gives a store them). */
export interface DirectoryStoreHooks {
  /** Runs while this store holds a key's lock, before the guarded compare-and-swap. */
  lockHeld?: (key: string) => void | Promise<void>
  /** Runs once an `ifMatch` put's precondition has held, before its rename (the lock still held). */
  casChecked?: (key: string) => void | Promise<void>
  /** Runs when an `ifNoneMatch` put finds the key taken (its link refused), before it looks at what holds it. */
  createOnlyRefused?: (key: string) => void | Promise<void>
  /** Runs once a put has renamed its file over an object, before the replaced object's sidecar goes. */
  replaced?: (path: string) => void | Promise<void>
}

/** The hooks of the stores hookedDirectoryStore made: beside them, so no argument of the constructor reaches them. */
const HOOKS = new WeakMap<DirectoryStore, DirectoryStoreHooks>()
const NO_HOOKS: DirectoryStoreHooks = Object.freeze({})

/**
 * The sweep each store's first write started in the background (`init`), settled when it
 * is done: its folders made again, a store does not sweep again, and `removeEmptyStoreFolders`
 * waits for it (it may write a file in `.ss-tmp` to read the clock).
 */
const BACKGROUND_SWEEPS = new WeakMap<DirectoryStore, Promise<void>>()

/** For tests (not exported from the package): a store at `root` whose steps run `hooks`. */
export function hookedDirectoryStore(root: string, hooks: DirectoryStoreHooks): DirectoryStore {
  const store = new DirectoryStore(root)
  HOOKS.set(store, hooks)
  return store
}

/** A temporary file being written, and whether it has become an object (its sidecar then stays). */
interface Temp {
  path: string
  ino: number
  etag: string
  published: boolean
}

/**
 * What a temporary file holds: what a function writes into it, or the file at `link`,
 * hard-linked (a file nothing writes to any more: an upload's parts written in place).
 */
type Fill = ((fh: fs.FileHandle) => Promise<void>) | { link: string }

/** An object found at a path: what head says of it, and its file. */
interface Found extends ObjectInfo {
  st: Stats
}

/** An open upload, as its folder's `upload.json` says. */
interface OpenUpload {
  dir: string
  metadata: Record<string, string>
  claimed: boolean
  uneven: boolean
  /** Made with `partBytes`: its parts are written in place (`placeInPlace`). */
  partBytes: number | undefined
}

/** Where a part written in place is (`<partNumber>.part`): bytes [at, at + size) of `file` in its upload's folder. */
interface PartRecord {
  file: string
  at: number
  size: number
  etag: string
}

/**
 * The file this process writes an upload's parts in place in, by upload folder (uploads
 * made with `partBytes`): part n at (n − 1) × partBytes. Each place in it is written once
 * (`written`): a part sent again, or twice at once, goes to a file of its own, so that the
 * bytes a part's record names never change under a reader, nor under the completion that
 * makes the file the object. Only this process writes it; `pending` counts its writes
 * running, and a completion that takes the file whole `seals` it first (a part sent after
 * goes to a new file) and waits for them (`idle`).
 */
interface PlacedFile {
  name: string
  written: Set<number>
  pending: number
  sealed: boolean
  idle: Array<() => void>
}
const placedFiles = new Map<string, PlacedFile>()

export class DirectoryStore implements ObjectStore {
  readonly url: string
  private ready: Promise<void> | undefined

  /** Takes the root alone: a second argument is refused. */
  constructor(
    readonly root: string,
    ...extra: never[]
  ) {
    if (typeof root !== 'string' || root === '') {
      throw StreamSegmentError.invalidArgument(
        `DirectoryStore: root must be a directory's path (a non-empty string), got ${describeValue(root)}`,
      )
    }
    // A second argument is no option (the store takes none): refused, not ignored, so that
    // options a caller expected it to take do not pass without a word.
    if (extra[0] !== undefined) {
      throw StreamSegmentError.invalidArgument(
        `DirectoryStore: takes one argument, the root directory; got a second: ${describeValue(extra[0])}`,
      )
    }
    this.url = root
  }

  private get hooks(): DirectoryStoreHooks {
    return HOOKS.get(this) ?? NO_HOOKS
  }

  async put(key: string, body: Body, options?: PutOptions): Promise<{ etag: string }> {
    checkKey(key)
    checkConditions(`put ${key}`, options)
    throwIfAborted(options?.signal, `put ${key}`)
    const { metadata, writeId } = putMetadata(`put ${key}`, options)
    const stopped = () => throwIfAborted(options?.signal, `put ${key}`)
    try {
      return await this.publish(
        key,
        (fh) => writeBody(fh, body, stopped),
        metadata,
        (tmp, path) => {
          // A signal that fired once the body was written (while it was fsynced): the write
          // is not yet the key's, and goes with its temporary file, as one stopped sooner.
          stopped()
          if (options?.ifNoneMatch === '*') return this.linkCreateOnly(key, tmp, path, options, writeId)
          if (options?.ifMatch !== undefined) {
            return this.withLock(key, async () => {
              const current = await this.info(key, path)
              if (checkPutPrecondition(`${this.url}/${key}`, current, options, writeId) === 'replayed') {
                return current!.etag
              }
              await this.hooks.casChecked?.(key)
              return this.replace(tmp, path)
            })
          }
          return this.replace(tmp, path)
        },
      )
    } catch (err) {
      throw this.mapError(err, `put ${key}`)
    }
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const [out] = await this.#read(key, options, false)
    return out ?? Buffer.alloc(0)
  }

  /**
   * As `get`, the bytes in pieces of 64 KiB, the last one shorter. Pieces, not one buffer
   * of the range's length: C allocators serve a request under 128 KiB from memory the
   * process freed before, but map a larger one afresh each time, its pages faulted in on
   * first use (see lib/store/s3-get.ts). Full pieces come from util/piece-pool.ts and
   * are lent to the caller, who may give them back.
   */
  async getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
    const pieces = await this.#read(key, options, true)
    lendPieces(pieces)
    return pieces
  }

  /**
   * The bytes asked, filled by `readv` (readFully): in pieces of the pool (util/piece-pool.ts)
   * when `pooled` (getChunks, whose caller is lent them and gives them back), the last one
   * shorter; else in one buffer of their own (a `get`, whose answer nobody gives back: a
   * piece would be lost to the pool). The signal is heeded at each step, each read
   * included: once it fires, no more is read, and the call fails ERR_ABORTED.
   */
  async #read(key: string, options: GetOptions | undefined, pooled: boolean): Promise<Buffer[]> {
    checkKey(key)
    const signal = options?.signal
    const stopped = () => throwIfAborted(signal, `get ${key}`)
    stopped()
    const where = `${this.url}/${key}`
    let fh: fs.FileHandle
    try {
      await this.checkFolders(key, `get ${key}`)
      // Without blocking: a FIFO at the key would hold a blocking open in libuv's thread
      // pool for good (no signal ends it, and four fill the pool). A regular file reads the same.
      fh = await fs.open(this.pathOf(key), OPEN_OBJECT)
    } catch (err) {
      throw this.mapError(err, `get ${key}`, true)
    }
    try {
      stopped()
      const st = await fh.stat()
      stopped()
      if (!st.isFile()) throw StreamSegmentError.notFound(`${where}: no such key`)
      const [start, end] = resolveRange(options?.range, st.size, where)
      const pieces: Buffer[] = []
      if (!pooled) pieces.push(Buffer.allocUnsafe(end - start))
      else {
        for (let at = start; at < end; at += PIECE_BYTES) {
          const n = Math.min(PIECE_BYTES, end - at)
          pieces.push(n === PIECE_BYTES ? takePiece() : Buffer.allocUnsafe(n))
        }
      }
      // Failed (a disk error, the file shrank, the signal fired), the read gives its pieces
      // back: no readv is in flight once readFully has settled, and nobody else has seen them.
      const read = await readFully(fh, pieces, start, stopped)
        .then((n) => {
          stopped()
          return n
        })
        .catch((err) => {
          returnPieces(pieces)
          throw err
        })
      if (read < end - start) {
        returnPieces(pieces)
        throw StreamSegmentError.store(`${where}: file shrank while being read`)
      }
      return pieces
    } catch (err) {
      throw this.mapError(err, `get ${key}`)
    } finally {
      await fh.close().catch(() => {})
    }
  }

  /**
   * The time now on the clock the file system dates files by: this machine's on a local
   * disk, the file server's on one shared over the network (NFS), which object ages (gc,
   * a roll-forward, a resume, the sweep of another machine's leftovers) are measured by.
   * Read off a file made for it (one byte, synced, its modification time read, removed);
   * an offset within CLOCK_OFFSET_NOISE_MS is the noise of that (whole-second file
   * systems), and this machine's clock is taken. Where no file can be made, this
   * machine's clock too.
   */
  async now(): Promise<number> {
    const before = Date.now()
    let dated: number
    try {
      const tmp = await this.writeTemp((fh) => fh.write(CLOCK_PROBE).then(() => undefined), undefined, true)
      try {
        dated = (await fs.stat(tmp.path)).mtimeMs
      } finally {
        await this.dropTemp(tmp)
      }
    } catch (err) {
      log(
        "%s: the file system clock cannot be read (%s): this machine's clock is taken",
        this.url,
        (err as Error).message,
      )
      return Date.now()
    }
    const offset = dated - before
    return Date.now() + (Math.abs(offset) > CLOCK_OFFSET_NOISE_MS ? offset : 0)
  }

  async head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    checkKey(key)
    throwIfAborted(options?.signal, `head ${key}`)
    try {
      await this.checkFolders(key, `head ${key}`)
      const found = await this.info(key)
      return found && { size: found.size, etag: found.etag, metadata: found.metadata }
    } catch (err) {
      throw this.mapError(err, `head ${key}`)
    }
  }

  async *list(prefix = '', options?: ListOptions): AsyncIterable<ListEntry> {
    checkListArguments('list', prefix, options?.startAfter)
    const files: Array<{ key: string; path: string }> = []
    try {
      await this.walk(this.root, '', { prefix, after: options?.startAfter }, files, options?.signal)
    } catch (err) {
      throw this.mapError(err, listOf(prefix))
    }
    const entries: ListEntry[] = []
    for (let i = 0; i < files.length; i += LIST_CONCURRENCY) {
      throwIfAborted(options?.signal, listOf(prefix))
      const batch = files.slice(i, i + LIST_CONCURRENCY)
      const found = await Promise.all(
        batch.map((f) => this.info(f.key, f.path).catch((err) => Promise.reject(this.mapError(err, `list ${f.key}`)))),
      )
      batch.forEach((f, j) => {
        const o = found[j]
        if (o !== undefined) entries.push({ key: f.key, size: o.st.size, etag: o.etag, lastModifiedMs: o.st.mtimeMs })
      })
    }
    // S3's order: the keys' UTF-8 bytes (UTF-16 code units sort U+E000..U+FFFF after the
    // characters above U+FFFF).
    const bytes = new Map(entries.map((e) => [e, Buffer.from(e.key)]))
    entries.sort((a, b) => Buffer.compare(bytes.get(a)!, bytes.get(b)!))
    yield* entries
  }

  /**
   * Deletes each key in order, under the key's lock: an `ifMatch` put or a claimed
   * completion checks the key and then renames onto it, and a delete between the two would
   * be undone by the rename. A key that is not there is passed over without the lock:
   * while a compare-and-swap holds the lock its key exists (nothing else removes one), so
   * none can be between its check and its rename. On a full disk, where a lock cannot be
   * made, the key is deleted without it (deleting is how room is made): a compare-and-swap
   * can then be mid-way only if it took its lock before the disk filled.
   */
  async delete(keys: string | readonly string[], options?: RequestOptions): Promise<void> {
    const list = typeof keys === 'string' ? [keys] : keys
    for (const key of list) checkKey(key)
    // The folders keys were removed from (each with the first such key, for messages), each
    // fsynced once as the call ends, a failed one too: an unlink is durable only then, and a
    // crash before it brings the key back (a part 0 a rollback deleted, then published).
    const removed = new Map<string, string>()
    try {
      for (const key of list) {
        throwIfAborted(options?.signal, `delete ${key}`)
        try {
          await this.checkFolders(key, `delete ${key}`)
          const path = this.pathOf(key)
          const st = await fs.lstat(path).catch((err) => {
            if (isMissing(err)) return undefined
            throw err
          })
          if (!st?.isFile()) continue
          const lock = await this.lockKey(key).catch((err) => {
            if (!isCode(err, 'ENOSPC') && !isCode(err, 'EDQUOT')) throw err
            log('%s: delete %s without its lock: %s', this.url, key, (err as Error).message)
            return undefined
          })
          try {
            if (!removed.has(dirname(path))) removed.set(dirname(path), key)
            await unlinkWithSidecar(this.root, path)
          } finally {
            await lock?.release()
          }
        } catch (err) {
          throw this.mapError(err, `delete ${key}`)
        }
      }
    } catch (err) {
      await this.syncRemovals(removed).catch(() => {}) // the first failure is the one to report
      throw err
    }
    await this.syncRemovals(removed)
  }

  /** Fsyncs each folder `delete` removed keys from; a failure names the first key removed there. */
  private async syncRemovals(removed: ReadonlyMap<string, string>): Promise<void> {
    for (const [folder, key] of removed) {
      await syncDir(folder).catch((err) => Promise.reject(this.mapError(err, `delete ${key}`)))
    }
  }

  async createMultipart(key: string, options?: CreateMultipartOptions): Promise<string> {
    checkKey(key)
    checkConditions(`createMultipart ${key}`, options)
    checkPartBytes(`createMultipart ${key}`, options)
    checkMetadata(`createMultipart ${key}`, options?.metadata)
    throwIfAborted(options?.signal, `create multipart ${key}`)
    const metadata = { ...options?.metadata }
    if (options?.ifNoneMatch === '*') {
      const claim = newWriteId()
      // With the caller's signal (as S3Store's): one that fires while the placeholder is
      // written and fsynced leaves no claim, and no upload is made.
      await this.put(key, new Uint8Array(0), {
        ifNoneMatch: '*',
        writeId: claim,
        metadata: options?.metadata,
        signal: options?.signal,
      })
      metadata[WRITE_ID_METADATA] = claim
    }
    try {
      // Its folders made again when an rm removed them meanwhile: a failed try leaves nothing.
      return await this.inFolders(async () => {
        const uploadId = randomUUID()
        // Built in a folder named by this process and renamed into place whole: a writer
        // killed meanwhile leaves that folder, which a sweep takes as soon as the writer is
        // gone, never an upload folder without its upload.json (kept for an hour).
        const staging = join(this.root, TMP, `${UPLOAD_STAGING_PREFIX}${await writerTag()}.${uploadId}`)
        await mkdirs(staging)
        try {
          const uneven = options?.unevenParts === true
          await fs.writeFile(
            join(staging, 'upload.json'),
            JSON.stringify({
              key,
              metadata,
              claimed: options?.ifNoneMatch === '*',
              uneven,
              partBytes: options?.partBytes,
            }),
          )
          await fs.rename(staging, join(this.root, UPLOADS, uploadId))
        } catch (err) {
          await fs.rm(staging, { recursive: true, force: true }).catch(() => {})
          throw err
        }
        return uploadId
      })
    } catch (err) {
      const claim = metadata[WRITE_ID_METADATA]
      if (options?.ifNoneMatch === '*' && claim !== undefined) await this.releasePlaceholder(key, claim)
      throw this.mapError(err, `create multipart ${key}`)
    }
  }

  /**
   * Un-claims a key whose upload failed to start or was aborted (as S3Store does): left, its
   * placeholder would hold the key until gc, and a retry of the claim would fail with
   * ERR_CONFLICT. Removed
   * under the key's lock, only while it is still our empty placeholder (on a full disk, the
   * likeliest cause, without the lock, as `delete` does); best effort (what is left, gc
   * removes).
   */
  private async releasePlaceholder(key: string, claim: string): Promise<void> {
    try {
      const lock = await this.lockKey(key).catch((err) => {
        if (!isCode(err, 'ENOSPC') && !isCode(err, 'EDQUOT')) throw err
        return undefined
      })
      try {
        await this.checkFolders(key, `release the placeholder of ${key}`)
        const path = this.pathOf(key)
        const current = await this.info(key, path)
        if (current?.st.size === 0 && current.metadata[WRITE_ID_METADATA] === claim) {
          await unlinkWithSidecar(this.root, path)
        }
      } finally {
        await lock?.release()
      }
    } catch (err) {
      log('%s: releasing the placeholder of %s: %s', this.url, key, (err as Error).message)
    }
  }

  async uploadPart(
    key: string,
    uploadId: string,
    partNumber: number,
    body: Body,
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    checkKey(key)
    checkPartNumber(key, partNumber)
    const stopped = () => throwIfAborted(options?.signal, `upload part ${partNumber} of ${key}`)
    stopped()
    try {
      const upload = await this.upload(key, uploadId)
      // Parts need no fsync of their own: the completed object is synced before it is visible.
      if (upload.partBytes !== undefined) {
        const size = bodyChunks(body).reduce((n, c) => n + c.byteLength, 0)
        return await this.placeInPlace(
          key,
          upload,
          partNumber,
          size,
          (fh, at) => writeBody(fh, body, stopped, at),
          stopped,
        )
      }
      return await this.placePart(upload.dir, partNumber, (fh) => writeBody(fh, body, stopped), stopped)
    } catch (err) {
      throw this.mapError(
        await this.uploadGone(err, key, uploadId),
        `upload part ${partNumber} of ${key} (upload ${uploadId})`,
      )
    }
  }

  canCopyFrom(source: ObjectStore): boolean {
    return source instanceof DirectoryStore
  }

  /**
   * Writes a part's bytes with `fill` into a temporary file and renames it into the upload's
   * folder, unless `stopped` throws first (a signal that fired): then the file goes.
   */
  private async placePart(
    dir: string,
    partNumber: number,
    fill: (fh: fs.FileHandle) => Promise<void>,
    stopped?: () => void,
  ): Promise<{ etag: string }> {
    const tmp = await this.writeTemp(fill, undefined, false)
    try {
      stopped?.()
      // The ETag of this very file, taken before the rename (which changes no part of it):
      // read at the part's path after, it is another file's once the same part, sent again,
      // has been renamed over it meanwhile, and names bytes this call did not upload.
      const etag = legacyEtag(await fs.stat(tmp.path))
      await fs.rename(tmp.path, join(dir, String(partNumber)))
      tmp.published = true
      return { etag }
    } finally {
      await this.dropTemp(tmp)
    }
  }

  /**
   * Writes a part of an upload made with `partBytes` (`size` bytes, by `fill` at the offset
   * it is given) in place, and then its record: at (partNumber − 1) × partBytes of this
   * process's file for the upload when that place was never written, else at the start of a
   * file of its own (see PlacedFile). Its ETag is drawn anew for each send, and names the
   * bytes this call wrote: the record renamed into place last is the part's.
   */
  private async placeInPlace(
    key: string,
    upload: OpenUpload,
    partNumber: number,
    size: number,
    fill: (fh: fs.FileHandle, at: number) => Promise<void>,
    stopped: () => void,
  ): Promise<{ etag: string }> {
    const partBytes = upload.partBytes as number
    if (size > partBytes) {
      throw StreamSegmentError.invalidArgument(
        `${this.url}/${key}: part ${partNumber} holds ${size} bytes, more than the upload's partBytes (${partBytes})`,
      )
    }
    await this.init()
    const tag = await writerTag()
    let placed = placedFiles.get(upload.dir)
    if (placed === undefined || placed.sealed) {
      placed = { name: `${DATA_PREFIX}${tag}.${randomUUID()}`, written: new Set(), pending: 0, sealed: false, idle: [] }
      placedFiles.set(upload.dir, placed)
    }
    const own = placed.written.has(partNumber) ? undefined : placed
    const record: PartRecord = {
      file: own?.name ?? `${DATA_PREFIX}${tag}.${randomUUID()}`,
      at: own === undefined ? 0 : (partNumber - 1) * partBytes,
      size,
      etag: randomBytes(16).toString('hex'),
    }
    if (own !== undefined) {
      own.written.add(partNumber) // written in part or whole, the place is never written again
      own.pending++
    }
    const path = join(upload.dir, record.file)
    try {
      const fh = await fs.open(path, WRITE_IN_PLACE)
      try {
        await fill(fh, record.at)
      } finally {
        await fh.close()
      }
      stopped()
      // The record is renamed into place whole: a reader finds the last send's or none.
      const tmp = join(this.root, TMP, `${tag}.${randomUUID()}`)
      try {
        await fs.writeFile(tmp, JSON.stringify(record), { flag: 'wx' })
        await fs.rename(tmp, join(upload.dir, `${partNumber}${RECORD_SUFFIX}`))
      } catch (err) {
        await fs.rm(tmp, { force: true }).catch(() => {})
        throw err
      }
      return { etag: record.etag }
    } catch (err) {
      if (own === undefined) await fs.rm(path, { force: true }).catch(() => {})
      throw err
    } finally {
      if (own !== undefined && --own.pending === 0) for (const wake of own.idle.splice(0)) wake()
    }
  }

  /** Copies the source range into the part's file; `ifMatch` is checked on the very file read. */
  async uploadPartCopy(
    key: string,
    uploadId: string,
    partNumber: number,
    source: CopySource,
    options?: RequestOptions,
  ): Promise<{ etag: string; md5: string }> {
    checkKey(key)
    checkPartNumber(key, partNumber)
    const stopped = () => throwIfAborted(options?.signal, `upload part copy ${partNumber} of ${key}`)
    stopped()
    const from = source.store
    if (!(from instanceof DirectoryStore)) {
      throw StreamSegmentError.invalidArgument(`${this.url}/${key}: cannot copy a part from ${from.url}`)
    }
    checkKey(source.key)
    const where = `${from.url}/${source.key}`
    const ifMatch = source.ifMatch === undefined ? undefined : checkIfMatch(`copy from ${where}`, source.ifMatch)
    try {
      const upload = await this.upload(key, uploadId)
      const dir = upload.dir
      let src: fs.FileHandle
      try {
        await from.checkFolders(source.key, `copy source ${source.key}`)
        src = await fs.open(from.pathOf(source.key), OPEN_OBJECT) // a FIFO there must not block: see #read
      } catch (err) {
        throw from.mapError(err, `copy source ${source.key}`, true)
      }
      try {
        const st = await src.stat()
        if (!st.isFile()) throw StreamSegmentError.notFound(`${where}: no such key (copy source)`)
        if (ifMatch !== undefined) {
          const found = await from.info(source.key)
          if (found === undefined || found.st.ino !== st.ino || found.etag !== ifMatch) {
            throw StreamSegmentError.conflict(`${where}: etag is ${found?.etag ?? 'gone'}, copy expected ${ifMatch}`)
          }
        }
        checkCopyRange(source.range, st.size, where)
        const { start, end } = source.range
        const md5 = createHash('md5')
        if (upload.partBytes !== undefined) {
          const part = await this.placeInPlace(
            key,
            upload,
            partNumber,
            end - start,
            (out, at) => copyRangeInto(out, src, where, start, end, md5, stopped, at),
            stopped,
          )
          return { ...part, md5: md5.digest('hex') }
        }
        const part = await this.placePart(
          dir,
          partNumber,
          (out) => copyRangeInto(out, src, where, start, end, md5, stopped),
          stopped,
        )
        return { ...part, md5: md5.digest('hex') }
      } finally {
        await src.close().catch(() => {})
      }
    } catch (err) {
      throw this.mapError(
        await this.uploadGone(err, key, uploadId),
        `upload part copy ${partNumber} of ${key} (upload ${uploadId})`,
      )
    }
  }

  async completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    checkKey(key)
    const stopped = () => throwIfAborted(options?.signal, `complete multipart ${key}`)
    stopped()
    try {
      const upload = await this.upload(key, uploadId)
      // Taken in part-number order, whatever order they are listed in (as S3Store takes them).
      const sorted = [...parts].sort((a, b) => a.partNumber - b.partNumber)
      checkPartList(key, sorted) // the caller's list, said as every store says it
      const where = `${this.url}/${key}`
      const commit = this.completion(key, uploadId, upload, stopped)
      if (upload.partBytes !== undefined) return await this.completePlaced(key, upload, sorted, where, stopped, commit)
      const paths: Array<{ partNumber: number; path: string; etag: string }> = []
      const sizes: number[] = []
      for (const p of sorted) {
        const path = join(upload.dir, String(p.partNumber))
        // Only a part missing was never uploaded: a stat that fails (EIO) is the disk's failure.
        const st = await fs.stat(path).catch((err) => {
          if (isMissing(err)) return undefined
          throw err
        })
        if (st === undefined || legacyEtag(st) !== unquoteEtag(p.etag)) {
          throw StreamSegmentError.invalidArgument(
            `${where}: part ${p.partNumber} with etag ${p.etag} was not uploaded`,
          )
        }
        paths.push({ partNumber: p.partNumber, path, etag: p.etag })
        sizes.push(st.size)
      }
      if (!upload.uneven) checkPartSizes(where, sizes)
      return await this.publish(key, (out) => concatInto(out, paths, uploadId, where, stopped), upload.metadata, commit)
    } catch (err) {
      throw this.mapError(await this.uploadGone(err, key, uploadId), `complete multipart ${key}`)
    }
  }

  /** How a completion makes its object, once written to a temporary file, `key`'s, and ends the upload. */
  private completion(
    key: string,
    uploadId: string,
    upload: OpenUpload,
    stopped: () => void,
  ): (tmp: Temp, path: string) => Promise<string> {
    return async (tmp, path) => {
      const commit = async () => {
        // A signal that fired once the parts were joined (while the object was fsynced,
        // or the lock awaited): the object goes with its temporary file, and the upload
        // stays as it was, to be completed or aborted later, as S3 leaves it.
        stopped()
        if (upload.claimed) {
          // The key must still hold our placeholder: nobody else may have completed it.
          const current = await this.info(key, path)
          if (current?.st.size !== 0 || current.metadata[WRITE_ID_METADATA] !== upload.metadata[WRITE_ID_METADATA]) {
            throw StreamSegmentError.conflict(`${this.url}/${key}: claimed by another writer (multipart ${uploadId})`)
          }
        }
        return this.replace(tmp, path)
      }
      const etag = upload.claimed ? await this.withLock(key, commit) : await commit()
      // The object is complete; an upload folder left behind is garbage for abort / gc.
      placedFiles.delete(upload.dir)
      await fs.rm(upload.dir, { recursive: true, force: true }).catch(() => {})
      return etag
    }
  }

  /**
   * Completes an upload made with `partBytes` from its parts' records. When this process
   * wrote every part in place, parts 1 to the last in one file holding nothing after them,
   * that file becomes the object (hard-linked into `.ss-tmp`, fsynced, given its sidecar,
   * and renamed into place as any put's file): nothing is copied. Otherwise, or on a file
   * system without hard links, the parts' bytes are copied into a new file, as for other uploads.
   */
  private async completePlaced(
    key: string,
    upload: OpenUpload,
    parts: readonly CompletedPart[],
    where: string,
    stopped: () => void,
    commit: (tmp: Temp, path: string) => Promise<string>,
  ): Promise<{ etag: string }> {
    const partBytes = upload.partBytes as number
    const records: PartRecord[] = []
    for (const p of parts) {
      const r = await readRecord(upload.dir, p.partNumber)
      if (r?.etag !== unquoteEtag(p.etag)) {
        throw StreamSegmentError.invalidArgument(`${where}: part ${p.partNumber} with etag ${p.etag} was not uploaded`)
      }
      records.push(r)
    }
    const sizes = records.map((r) => r.size)
    if (!upload.uneven) checkPartSizes(where, sizes)
    const placed = placedFiles.get(upload.dir)
    const inPlace =
      placed !== undefined &&
      records.every(
        (r, i) =>
          parts[i]?.partNumber === i + 1 &&
          r.file === placed.name &&
          r.at === i * partBytes &&
          (i === records.length - 1 || r.size === partBytes),
      )
    if (inPlace) {
      // No write goes to the file from now on; those running end first.
      placed.sealed = true
      while (placed.pending > 0) await new Promise<void>((wake) => placed.idle.push(wake))
      const file = join(upload.dir, placed.name)
      const st = await fs.lstat(file).catch(() => undefined)
      const total = sizes.reduce((n, size) => n + size, 0)
      if (st?.isFile() === true && st.size === total) {
        try {
          return await this.publish(key, { link: file }, upload.metadata, commit)
        } catch (err) {
          if (!NO_LINKS.has((err as NodeJS.ErrnoException).code ?? '')) throw err
          log(
            '%s: no hard link to complete %s in place (%s): the parts are copied',
            this.url,
            key,
            (err as Error).message,
          )
        }
      }
    }
    return await this.publish(
      key,
      (out) => copyRecords(out, upload.dir, records, parts, where, stopped),
      upload.metadata,
      commit,
    )
  }

  async abortMultipart(key: string, uploadId: string, options?: AbortMultipartOptions): Promise<void> {
    checkKey(key)
    throwIfAborted(options?.signal, `abort multipart ${uploadId}`)
    if (!/^[0-9a-f-]{36}$/.test(uploadId)) return
    const dir = join(this.root, UPLOADS, uploadId)
    try {
      // An upload is reached by its key and id together: named with another key, the id is
      // no upload (S3 answers NoSuchUpload), which an abort passes over, as one gone.
      const text = await readRegularText(join(dir, 'upload.json'))
      const upload =
        text === undefined
          ? undefined
          : parseJson<{ key?: unknown; claimed?: unknown; metadata?: Record<string, unknown> }>(text)
      if (upload?.key !== key) return
      placedFiles.delete(dir)
      await fs.rm(dir, { recursive: true, force: true })
      const claim = upload.metadata?.[WRITE_ID_METADATA]
      if (options?.releaseClaim === true && upload.claimed === true && typeof claim === 'string') {
        await this.releasePlaceholder(key, claim)
      }
    } catch (err) {
      throw this.mapError(err, `abort multipart ${uploadId} of ${key}`)
    }
  }

  /**
   * The parts in the upload's folder, each read once for its MD5; with `md5: false`, none
   * read: each part's size and ETag from its file's stat (or its record), no `md5`.
   */
  async listParts(
    key: string,
    uploadId: string,
    options?: RequestOptions & { md5?: boolean },
  ): Promise<UploadedPart[]> {
    checkKey(key)
    const stopped = () => throwIfAborted(options?.signal, `list parts of ${key}`)
    stopped()
    const withMd5 = options?.md5 !== false
    try {
      const upload = await this.upload(key, uploadId)
      const { dir } = upload
      if (upload.partBytes !== undefined) return await listPlacedParts(dir, stopped, withMd5)
      const parts: UploadedPart[] = []
      for (const name of await fs.readdir(dir)) {
        if (!/^[1-9][0-9]{0,4}$/.test(name)) continue
        stopped()
        const path = join(dir, name)
        // A part is renamed into place whole; one replaced meanwhile is read as it was opened.
        // Opened without blocking, and only a regular file read: a FIFO would block for good.
        const fh = await openProbe(path)
        if (fh === undefined) continue
        try {
          const st = await fh.stat()
          if (!st.isFile()) continue
          const md5 = withMd5 ? { md5: await md5Of(fh, 0, st.size, stopped) } : {}
          parts.push({ partNumber: Number(name), size: st.size, etag: legacyEtag(st), ...md5 })
        } finally {
          await fh.close().catch(() => {})
        }
      }
      return parts.sort((a, b) => a.partNumber - b.partNumber)
    } catch (err) {
      throw this.mapError(err, `list parts of ${key}`)
    }
  }

  async *listMultipart(prefix = '', options?: RequestOptions): AsyncIterable<MultipartUpload> {
    checkListArguments('listMultipart', prefix)
    // Heeded before the folder is read, not only between uploads: with none open, a fired
    // signal would pass for an answer that there are none.
    throwIfAborted(options?.signal, `list multipart ${prefix}`)
    const dir = join(this.root, UPLOADS)
    const open: MultipartUpload[] = []
    try {
      const ids = await fs.readdir(dir).catch((err) => {
        if (isMissing(err)) return [] as string[]
        throw err
      })
      for (const uploadId of ids) {
        throwIfAborted(options?.signal, `list multipart ${prefix}`)
        const file = join(dir, uploadId, 'upload.json')
        const [meta, st] = await Promise.all([
          readRegularText(file).catch(() => undefined),
          fs.stat(file).catch(() => undefined),
        ])
        const key = meta === undefined ? undefined : parseJson<{ key?: unknown }>(meta)?.key
        if (typeof key !== 'string' || st === undefined) continue
        if (key.startsWith(prefix)) open.push({ key, uploadId, initiatedMs: st.mtimeMs })
      }
    } catch (err) {
      throw this.mapError(err, `list multipart ${prefix}`)
    }
    open.sort((a, b) => compareKeys(a.key, b.key) || (a.uploadId < b.uploadId ? -1 : 1))
    yield* open
  }

  // --- internals ---

  /**
   * Makes the store's own folders, once (again after `foldersGone`); then, once per store,
   * sweeps what crashed writers left (`sweep`) in the background: nothing waits for it, and
   * its failures are only logged. Only writes call this: a store that is only read is never swept.
   */
  private init(): Promise<void> {
    this.ready ??= (async () => {
      const dirs = OWN_FOLDERS.map((d) => join(this.root, d))
      // Each folder made fsynced into its parent: else a crash takes it back, and what was
      // written in it with it (the sidecars in `.ss-meta`, a new root's objects). A folder
      // above the root that this process may not read cannot be opened to fsync: passed
      // over, as the store asks no more of the folders above it than to pass through.
      const root = dirname(dirs[0] as string) // as the folders' names give it: normalized
      await mkdirsDurable(dirs, (parent, err) => {
        if (parent === root) throw err
        log('%s: %s cannot be fsynced (%s)', this.url, parent, err.message)
      })
      for (const dir of dirs) {
        // Followed, it would have temporary files, sidecars, locks and uploads made, and
        // leftovers swept, outside the store. A plain Error, as the file system's: the
        // caller's mapping makes it ERR_STORE naming its call and key.
        if ((await fs.lstat(dir)).isSymbolicLink()) {
          throw new Error(`the store's folder ${dir} is a symbolic link; the store keeps its own files below its root`)
        }
      }
      if (BACKGROUND_SWEEPS.has(this)) return
      BACKGROUND_SWEEPS.set(
        this,
        sweep(this.root, false, () => this.now()).catch((err) =>
          log('%s: sweeping leftovers: %s', this.url, (err as Error).message),
        ),
      )
    })()
    // Failures are mapped by the caller, naming its key.
    return this.ready.catch((err) => {
      this.ready = undefined
      throw err
    })
  }

  /**
   * Runs `fn`, which writes in the store's own folders, once they are made (`init`); and
   * once more when it fails on a missing file because one of them is gone (`foldersGone`):
   * a `removeContainer` of this store's container (`removeEmptyStoreFolders`) removed them,
   * the root maybe too, after this store made them. A writer still running then writes on,
   * as on any store, and finds what `rm` did as the library's calls say it (its flush fails
   * ERR_CONFLICT), not as a file system's ENOENT.
   */
  private async inFolders<T>(fn: () => Promise<T>): Promise<T> {
    await this.init()
    const made = this.ready
    try {
      return await fn()
    } catch (err) {
      if (!(await this.foldersGone(err, made))) throw err
      log("%s: the store's folders were removed (an rm of the container): made again", this.url)
      await this.init()
      return await fn()
    }
  }

  /**
   * Whether `err`, a failure of a call made once the folders `made` were there, is a file
   * missing because the root or one of the store's own folders has gone since; if so, the
   * next `init` makes them again (unless a call beside this one had them made already).
   */
  private async foldersGone(err: unknown, made: Promise<void> | undefined): Promise<boolean> {
    if (!isMissing(err)) return false
    const gone = await Promise.all(
      OWN_FOLDERS.map((d) =>
        fs.lstat(join(this.root, d)).then(
          () => false,
          (e) => isMissing(e),
        ),
      ),
    )
    if (!gone.includes(true)) return false
    if (this.ready === made) this.ready = undefined
    return true
  }

  pathOf(key: string): string {
    const segs = key.split('/')
    const last = segs.length - 1
    return join(this.root, ...segs.map((s, i) => (i < last ? `${escapeSegment(s)}%2F` : escapeSegment(s))))
  }

  /**
   * Refuses a key whose path goes through a symlink below the root: ERR_STORE naming the
   * folder, for `what` (`get k`). Followed, it would have the key's file read, written or
   * removed outside the store, or as another key's. Each folder is looked at on every call,
   * none remembered: one can be swapped for a symlink between two calls. A flat key (no
   * folder) costs nothing; the others one lstat per folder, all at once. A folder missing,
   * or a file in its place, passes: the call then finds no object, or fails saying so.
   * Returns whether every folder is there.
   */
  private async checkFolders(key: string, what: string): Promise<boolean> {
    const folders = this.foldersOf(key)
    const found = await Promise.all(
      folders.map((f) =>
        fs.lstat(f).catch((err) => {
          if (isMissing(err)) return undefined
          throw err
        }),
      ),
    )
    const link = found.findIndex((st) => st?.isSymbolicLink())
    if (link >= 0) {
      throw StreamSegmentError.store(
        `${this.url}: ${what} refused: the key's folder ${folders[link]} is a symbolic link; the store follows none below its root`,
      )
    }
    return found.every((st) => st?.isDirectory())
  }

  /** The folders of `key`'s path below the root, outermost first (as pathOf names them). */
  private foldersOf(key: string): string[] {
    const folders: string[] = []
    let dir = this.root
    for (const seg of key.split('/').slice(0, -1)) {
      dir = join(dir, `${escapeSegment(seg)}%2F`)
      folders.push(dir)
    }
    return folders
  }

  private sidecarPath(ino: number): string {
    return join(this.root, META, String(ino))
  }

  /**
   * Writes an object to a temporary file with `fill` (and its sidecar, with a new ETag),
   * then makes it `key`'s with `commit`, which returns the ETag the key then has. Whatever
   * fails, the temporary file goes, and the key keeps what it had unless `commit` replaced it.
   */
  private async publish(
    key: string,
    fill: Fill,
    metadata: Record<string, string>,
    commit: (tmp: Temp, path: string) => Promise<string>,
  ): Promise<{ etag: string }> {
    const tmp = await this.writeTemp(fill, { key, metadata }, true)
    try {
      const path = this.pathOf(key)
      if (!(await this.checkFolders(key, `put ${key}`))) {
        await mkdirs(dirname(path))
        // Each folder fsynced into its parent, whoever made it (a put beside this one may not
        // have fsynced yet): else a crash takes the folder back, and the object in it.
        for (const folder of this.foldersOf(key)) await syncDir(dirname(folder))
        await this.checkFolders(key, `put ${key}`) // one may have been made meanwhile, as a symlink
      }
      return { etag: await commit(tmp, path) }
    } finally {
      await this.dropTemp(tmp)
    }
  }

  /**
   * A temporary file holding what `fill` writes, fsynced when `sync`; with `sidecar` (the
   * key it is written for, and its metadata), also its sidecar holding the metadata, a new
   * ETag and the file as filled (`fileRecord`), fsynced too. On failure nothing is left behind.
   */
  private writeTemp(
    fill: Fill,
    sidecar: { key: string; metadata: Record<string, string> } | undefined,
    sync: boolean,
  ): Promise<Temp> {
    // Its folders made again when an rm removed them meanwhile: a failed try leaves nothing.
    return this.inFolders(() => this.writeTempOnce(fill, sidecar, sync))
  }

  private async writeTempOnce(
    fill: Fill,
    sidecar: { key: string; metadata: Record<string, string> } | undefined,
    sync: boolean,
  ): Promise<Temp> {
    // Named after this process, so that a sweep can tell at once when its writer is gone.
    const name = `${await writerTag()}.${randomUUID()}`
    const tmp: Temp = { path: join(this.root, TMP, name), ino: -1, etag: '', published: false }
    let fh: fs.FileHandle
    if (typeof fill === 'function') fh = await fs.open(tmp.path, 'wx')
    else {
      await fs.link(fill.link, tmp.path)
      fh = await fs.open(tmp.path, OPEN_OBJECT).catch(async (err) => {
        await fs.rm(tmp.path, { force: true }).catch(() => {})
        throw err
      })
    }
    try {
      tmp.ino = (await fh.stat()).ino
      if (typeof fill === 'function') await fill(fh)
      if (sidecar !== undefined) {
        const etag = randomBytes(16).toString('hex')
        tmp.etag = etag
        const record = (st: BigIntStats) => ({
          ...sidecar.metadata,
          ...fileRecord(sidecar.key, st),
          [ETAG_FIELD]: etag,
        })
        // The file as its object will be: nothing writes to it after `fill`, and neither the
        // link nor the rename that makes it the key's changes its size or mtime.
        const filled = await fh.stat({ bigint: true })
        await allOrFirstError([sync ? fh.sync() : Promise.resolve(), this.writeSidecar(tmp.ino, record(filled), sync)])
        // A file system that dates a write when it reaches the disk or the server (a network
        // one whose client does not flush on stat) may date it in the sync: recorded again.
        const synced = await fh.stat({ bigint: true })
        if (synced.mtimeNs !== filled.mtimeNs || synced.size !== filled.size) {
          await this.writeSidecar(tmp.ino, record(synced), sync)
        }
        if (sync) await syncDir(join(this.root, META))
      } else if (sync) {
        await fh.sync()
      }
      await fh.close()
    } catch (err) {
      await fh.close().catch(() => {})
      await this.dropTemp(tmp)
      throw err
    }
    return tmp
  }

  /**
   * Removes a temporary file, and its sidecar unless it became an object. The sidecar goes
   * first, while the temporary file still holds the inode number it is named by.
   */
  private async dropTemp(tmp: Temp): Promise<void> {
    if (!tmp.published && tmp.ino >= 0) await fs.rm(this.sidecarPath(tmp.ino), { force: true }).catch(() => {})
    await fs.rm(tmp.path, { force: true }).catch(() => {})
  }

  private async writeSidecar(ino: number, record: Record<string, string>, sync: boolean): Promise<void> {
    const path = this.sidecarPath(ino)
    const fh = await openSidecarForWrite(path)
    try {
      await fh.writeFile(JSON.stringify(record))
      if (sync) await fh.sync()
    } catch (err) {
      await fh.close().catch(() => {}) // the write's failure is the one to report
      throw err
    }
    await fh.close() // a network file system may report a failed write only here
  }

  /**
   * The sidecar of the file `fh` (whose inode number is `ino`) at `key`; undefined when it
   * is missing, unreadable as JSON, or not a regular file (a FIFO put there: opened without
   * blocking, never read; a symlink: not followed), as for an object written before
   * sidecars; and undefined too when it records another file (`recordsFile`): one whose
   * number this file took when the store's folder was copied.
   */
  private async readSidecar(fh: fs.FileHandle, ino: number, key: string): Promise<Record<string, unknown> | undefined> {
    const side = await openObject(this.sidecarPath(ino))
    if (side === undefined) return undefined
    let record: Record<string, unknown> | undefined
    try {
      if (!(await side.stat()).isFile()) return undefined
      record = parseJson<Record<string, unknown>>(await side.readFile('utf8'))
    } finally {
      await side.close().catch(() => {})
    }
    if (record === undefined || recordsFile(record, key, await fh.stat({ bigint: true }))) return record
    log('%s: the sidecar %s records another file than %s: it has none', this.url, this.sidecarPath(ino), key)
    return undefined
  }

  /**
   * The object `key` (at `path`; undefined when there is none): its file, ETag and metadata.
   * The file stays open while its sidecar is read, so that its inode number cannot pass to
   * another file meanwhile.
   */
  private async info(key: string, path = this.pathOf(key)): Promise<Found | undefined> {
    for (let attempt = 0; ; attempt++) {
      const fh = await openObject(path)
      if (fh === undefined) return undefined
      try {
        const st = await fh.stat()
        if (!st.isFile()) return undefined
        const side = await this.readSidecar(fh, st.ino, key)
        const metadata = userMetadata(side)
        const etag = side?.[ETAG_FIELD]
        if (typeof etag === 'string' && /^[0-9a-f]{32}$/.test(etag)) return { st, size: st.size, etag, metadata }
        // No ETag in the sidecar: the object was replaced while we looked (its sidecar gone
        // with it), so look again; or an older version of this store wrote it, or it was
        // copied with the store's folder.
        if (attempt < 3 && (await fh.stat()).nlink === 0) continue
        return { st, size: st.size, etag: legacyEtag(st), metadata }
      } finally {
        await fh.close().catch(() => {})
      }
    }
  }

  private async linkCreateOnly(
    key: string,
    tmp: Temp,
    path: string,
    options: PutOptions,
    writeId: string | undefined,
  ): Promise<string> {
    // A key that vanishes between the refused link and the look at it was being deleted:
    // not a condition found false, so the link is made again (as S3Store makes a 409
    // ConditionalRequestConflict again). ERR_CONFLICT only once a look finds it taken, or
    // when it keeps coming and going.
    for (let attempt = 1; ; attempt++) {
      try {
        await fs.link(tmp.path, path)
        break
      } catch (err) {
        if (NO_LINKS.has((err as NodeJS.ErrnoException).code ?? '')) throw this.noLinks(key, err)
        if (!isCode(err, 'EEXIST')) throw err
        await this.hooks.createOnlyRefused?.(key)
        const current = await this.info(key, path)
        if (checkPutPrecondition(`${this.url}/${key}`, current, options, writeId) === 'replayed') return current!.etag
        if (attempt >= CREATE_ONLY_TRIES) {
          throw StreamSegmentError.conflict(`${this.url}/${key}: changed during create-only put (${attempt} tries)`)
        }
      }
    }
    tmp.published = true
    await syncDir(dirname(path))
    return tmp.etag
  }

  /**
   * ERR_STORE for a link() the file system refuses: a create-only put needs hard links
   * (EPERM, ENOTSUP: FAT, some FUSE and SMB mounts), on one file system (EXDEV: the key's
   * folder on another mount than `.ss-tmp`). Read as errnos alone, EPERM would be ERR_AUTH,
   * a permission to grant, and the others a bare code.
   */
  private noLinks(key: string, err: unknown): StreamSegmentError {
    const code = (err as NodeJS.ErrnoException).code
    const why =
      code === 'EXDEV'
        ? `the key's folder and ${TMP} are on different file systems, and a hard link cannot cross them`
        : 'the file system makes no hard links'
    return StreamSegmentError.store(
      `${this.url}: put ${key} failed: ${why} (${code})${failedCall(err)}; a create-only put (ifNoneMatch '*') links the object into place: keep the store on one local file system that has hard links (ext4, xfs, btrfs, tmpfs)`,
      err,
    )
  }

  /** Renames the temporary file over `path`; the replaced object's sidecar goes once no name links it. */
  private async replace(tmp: Temp, path: string): Promise<string> {
    let old: fs.FileHandle | undefined
    try {
      old = await fs.open(path, OPEN_PROBE)
    } catch (err) {
      if (!isMissing(err)) throw err
    }
    try {
      await fs.rename(tmp.path, path)
      tmp.published = true
      await syncDir(dirname(path))
      await this.hooks.replaced?.(path)
      if (old !== undefined) {
        // Held open, the replaced file keeps its inode number: the sidecar is surely its.
        const st = await old.stat()
        if (st.isFile() && st.nlink === 0) await fs.rm(this.sidecarPath(st.ino), { force: true }).catch(() => {})
      }
    } finally {
      await old?.close().catch(() => {})
    }
    return tmp.etag
  }

  private async upload(key: string, uploadId: string): Promise<OpenUpload> {
    const dir = join(this.root, UPLOADS, uploadId)
    const text = /^[0-9a-f-]{36}$/.test(uploadId)
      ? await readRegularText(join(dir, 'upload.json')).catch(() => undefined)
      : undefined
    const upload =
      text === undefined
        ? undefined
        : parseJson<{
            key: string
            metadata: Record<string, string>
            claimed: boolean
            uneven?: boolean
            partBytes?: unknown
          }>(text)
    if (upload?.key !== key) throw StreamSegmentError.notFound(`${this.url}/${key}: no multipart upload ${uploadId}`)
    const n = upload.partBytes
    return {
      dir,
      metadata: upload.metadata,
      claimed: upload.claimed,
      uneven: upload.uneven === true,
      // One this store did not write (a hand-edited record) is none: the parts go in files of their own.
      partBytes: typeof n === 'number' && Number.isSafeInteger(n) && n > 0 && n <= MAX_PART_BYTES ? n : undefined,
    }
  }

  /**
   * ERR_NOT_FOUND, as for an unknown upload, when `err` is a file missing because the
   * upload's folder went meanwhile (aborted, or completed, while a part was written or the
   * parts joined); else `err`. Trying again cannot help, which ERR_STORE would say.
   */
  private async uploadGone(err: unknown, key: string, uploadId: string): Promise<unknown> {
    if (!isMissing(err)) return err
    const dir = join(this.root, UPLOADS, uploadId)
    if ((await fs.stat(join(dir, 'upload.json')).catch(() => undefined)) !== undefined) return err
    return StreamSegmentError.notFound(`${this.url}/${key}: no multipart upload ${uploadId} (gone meanwhile)`, err)
  }

  /** Takes `key`'s lock (see `acquireLock`). */
  private lockKey(key: string): Promise<{ release(): Promise<void> }> {
    // Named after a hash of the key: the key's own escaped name can be longer than a file
    // name may be (255 bytes) even when each of its segments fits. Its folders made again
    // when an rm removed them meanwhile (a failed try leaves nothing).
    return this.inFolders(() =>
      acquireLock(
        join(this.root, LOCKS, createHash('sha256').update(key).digest('hex')),
        join(this.root, TMP),
        `${this.url}/${key}`,
      ),
    )
  }

  private async withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const lock = await this.lockKey(key)
    try {
      await this.hooks.lockHeld?.(key)
      return await fn()
    } finally {
      await lock.release()
    }
  }

  /** The files under `dir` whose keys start with `want.prefix` and come after `want.after`. */
  private async walk(
    dir: string,
    keyPrefix: string,
    want: { prefix: string; after: string | undefined },
    out: Array<{ key: string; path: string }>,
    signal?: AbortSignal,
  ) {
    const { prefix, after } = want
    // Keys compare as S3 orders them, by their UTF-8 bytes.
    const afterBytes = after === undefined ? undefined : Buffer.from(after)
    throwIfAborted(signal, listOf(prefix))
    const entries = await fs.readdir(dir, { withFileTypes: true }).catch((err) => {
      if (isCode(err, 'ENOENT')) return []
      throw err
    })
    for (const e of entries) {
      if (e.name.startsWith('.')) continue // the store's own folders; keys never map to dot names
      if (e.isDirectory() && e.name.endsWith('%2F')) {
        if (!isEscapedName(e.name.slice(0, -3))) continue
        const k = `${keyPrefix}${unescapeSegment(e.name.slice(0, -3))}/`
        // Every key in it starts with k: none comes after `after` when k sorts below it and is no prefix of it.
        if (afterBytes !== undefined) {
          const kb = Buffer.from(k)
          if (Buffer.compare(kb, afterBytes) < 0 && !kb.equals(afterBytes.subarray(0, kb.length))) continue
        }
        if (k.startsWith(prefix) || prefix.startsWith(k)) await this.walk(join(dir, e.name), k, want, out, signal)
      } else if (e.isFile()) {
        // A name this store does not write for any key (`0000000004%2E0`, a person's file)
        // would be listed as a key whose object is elsewhere, or nowhere: passed over.
        if (!isEscapedName(e.name)) continue
        const key = keyPrefix + unescapeSegment(e.name)
        if (key.startsWith(prefix) && (afterBytes === undefined || Buffer.compare(Buffer.from(key), afterBytes) > 0)) {
          out.push({ key, path: join(dir, e.name) })
        }
      }
    }
  }

  private mapError(err: unknown, what: string, missingIsNotFound = false): StreamSegmentError {
    return fsError(this.url, err, what, missingIsNotFound)
  }
}

/**
 * The error to throw for a file system failure of the store at `url` while doing `what`,
 * naming the cause (`no space left on the device (ENOSPC)`) and the file (`failedCall`):
 * ERR_NOT_FOUND for a missing file when `missingIsNotFound` (a get); ERR_AUTH for a
 * permission refused (EACCES, EPERM); ERR_INVALID_ARGUMENT for a store path through a
 * file (ENOTDIR) and for a path no file can have (ENAMETOOLONG: a key segment over 255 bytes escaped, or the whole path
 * too long; Node's ERR_INVALID_ARG_VALUE: a NUL in the store's path), which trying again
 * cannot mend; else ERR_STORE, which may pass when tried again (a full disk emptied, a
 * read-only mount made writable).
 */
export function fsError(url: string, err: unknown, what: string, missingIsNotFound = false): StreamSegmentError {
  if (err instanceof StreamSegmentError) return err
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  // ELOOP: a symlink at the key's path, opened with O_NOFOLLOW (OPEN_OBJECT), is no object.
  if (missingIsNotFound && (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR' || code === 'ELOOP')) {
    return StreamSegmentError.notFound(`${url}: ${what}: no such key`, err)
  }
  const known = code === undefined ? undefined : ERRNO_TEXT[code]
  const why =
    known !== undefined ? `${known} (${code})${failedCall(err)}` : err instanceof Error ? err.message : String(err)
  const message = `${url}: ${what.trimEnd()} failed: ${why}`
  if (code === 'EACCES' || code === 'EPERM') return StreamSegmentError.auth(message, err)
  if (code === 'ENOTDIR' || code === 'ENAMETOOLONG' || code === 'ERR_INVALID_ARG_VALUE') {
    return StreamSegmentError.invalidArgument(message)
  }
  return StreamSegmentError.store(message, err)
}

/**
 * Reclaims what crashed writers left in a directory store (see `sweep`), the sidecars no
 * file holds included; nothing for any other store. `removeContainer` runs it once it has
 * deleted the container's objects, `gc` at the end of a run not stopped. It never fails:
 * what it could not do is logged, and left for the next sweep.
 */
export async function sweepStoreLeftovers(store: ObjectStore): Promise<void> {
  if (!(store instanceof DirectoryStore)) return
  await sweep(store.root, true, () => store.now()).catch((err) =>
    log('%s: sweeping leftovers: %s', store.url, (err as Error).message),
  )
}

/**
 * Removes a directory store's own folders (`.ss-tmp`, `.ss-meta`, `.ss-lock`,
 * `.ss-multipart`) that are empty, and then its root when that is empty too; nothing for
 * any other store. `removeContainer` runs it once it has deleted the container's objects
 * and swept (`sweepStoreLeftovers`): the container's folder goes, as a removed prefix of
 * S3 leaves no key. Only empty folders go, one `rmdir` each: a folder holding anything
 * (a user's file beside the container, a key that is not the container's, a file a
 * writer makes meanwhile) stays, and so does a symlink in a folder's place (none is
 * followed, and a root that is one is left). A writer of this store still running makes
 * them again at its next write (`inFolders`). It never fails: what it could not remove
 * is logged.
 */
export async function removeEmptyStoreFolders(store: ObjectStore): Promise<void> {
  if (!(store instanceof DirectoryStore)) return
  await BACKGROUND_SWEEPS.get(store)
  // Resolved: a root given with a trailing slash would name what a symlink there points to.
  const root = resolve(store.root)
  for (const folder of OWN_FOLDERS) await removeIfEmpty(store.url, join(root, folder))
  await removeIfEmpty(store.url, root)
}

/** Removes the folder at `path` when it is one (not a symlink) and empty; else leaves it (see removeEmptyStoreFolders). */
async function removeIfEmpty(url: string, path: string): Promise<void> {
  try {
    if (!(await fs.lstat(path)).isDirectory()) return
    await fs.rmdir(path)
  } catch (err) {
    // Gone already, or holding something (EEXIST is how some systems say ENOTEMPTY).
    if (isMissing(err) || isCode(err, 'ENOTEMPTY') || isCode(err, 'EEXIST')) return
    log('%s: removing the empty folder %s: %s', url, path, (err as Error).message)
  }
}

/**
 * How old a leftover must be for a sweep to take it when its writer's process cannot be
 * checked (it ran on another machine, or the file is named by an older version; one whose
 * writer ran on this machine is taken as soon as that process is gone, and never while it
 * runs). A temporary file's mtime is its last write: it is written continuously while it
 * is filled, then fsynced, given its sidecar, and linked or renamed into place, after
 * waiting at most a minute for the key's lock (LOCK_WAIT_MS in util/local-fs.ts; then the
 * put fails and drops the file). A lock staging folder lives no longer than that wait. An
 * hour leaves a writer that stalled (a hung disk or network file system, a stopped
 * process) sixty times that, and one that is later still finds its file gone: its rename
 * or link fails, ERR_STORE, and the key keeps what it had. Nothing is ever torn.
 */
const LEFTOVER_STALE_MS = 60 * 60_000
/**
 * A sidecar that no file held when the sweep looked is taken only when it was last
 * written this long before the sweep began: a temporary file made meanwhile may have
 * taken that inode number, and writes its sidecar afresh (coarse or skewed mtimes allowed
 * for).
 */
const SIDECAR_MARGIN_MS = 60_000

/**
 * Sweeps the store at `root` of what crashed writers left: temporary files in `.ss-tmp`
 * (with their sidecars), and the folders locks and uploads are built in there, whose
 * writer is gone or that are LEFTOVER_STALE_MS old; locks whose holder is gone (by the
 * rules a waiter breaks them by); upload folders without a readable `upload.json` (made
 * by an older version that built them in place, or a power loss that left it empty) that old.
 * With `full`, also the sidecars in `.ss-meta` that no file in the store holds (left by a
 * crash between replacing or deleting an object and removing its sidecar): that walks
 * every file of the store. A sidecar named by a file's number but recording another file
 * (a copied folder's) is held all the same: it is read as none, and goes with that file.
 * Each leftover's failure is logged and passed over.
 */
async function sweep(root: string, full: boolean, now: () => Promise<number>): Promise<void> {
  // By the clock that dates the files (a file server's may be hours from this machine's).
  // Reading it makes a file: a sweep reads it once, when it first needs an age (most find
  // nothing to age), but a full one at its start, which its sidecar margin counts from.
  let began = full ? await now() : undefined
  const clock = async () => (began ??= await now())
  const old = async (st: Stats) => (await clock()) - st.mtimeMs > LEFTOVER_STALE_MS
  const each = async (dir: string, fn: (path: string, name: string) => Promise<unknown>) => {
    for (const name of await namesIn(dir)) {
      const path = join(dir, name)
      await fn(path, name).catch((err) => log('%s: sweeping %s: %s', root, path, (err as Error).message))
    }
  }
  await each(join(root, TMP), async (path, name) => {
    const st = await fs.lstat(path)
    if (st.isDirectory() && (name.startsWith(LOCK_STAGING_PREFIX) || name.startsWith(UPLOAD_STAGING_PREFIX))) {
      const lock = name.startsWith(LOCK_STAGING_PREFIX)
      const gone = lock ? await stagingGone(path) : await writerGone(name.slice(UPLOAD_STAGING_PREFIX.length))
      if (gone === true || (gone === undefined && (await old(st)))) await fs.rm(path, { recursive: true, force: true })
    } else if (st.isFile()) {
      const gone = await writerGone(name)
      if (gone === true || (gone === undefined && (await old(st)))) await unlinkWithSidecar(root, path)
    }
  })
  await each(join(root, LOCKS), (path) => sweepLock(path, clock))
  await each(join(root, UPLOADS), async (path) => {
    const st = await fs.lstat(path)
    if (!st.isDirectory() || !(await old(st))) return
    // A record that names no key is as good as none (upload.json is not fsynced: a power
    // loss can leave it empty): no call can reach that upload, nor list it to abort it.
    const text = await readRegularText(join(path, 'upload.json'))
    if (typeof (text === undefined ? undefined : parseJson<{ key?: unknown }>(text)?.key) !== 'string') {
      await fs.rm(path, { recursive: true, force: true })
    }
  })
  if (!full) return
  // Every file's inode number, `.ss-tmp` first: a file renamed out of it meanwhile is then
  // found where it went. A sidecar written since the sweep began may be a file's made
  // meanwhile: SIDECAR_MARGIN_MS keeps it.
  const held = new Set<number>()
  for (const name of await namesIn(join(root, TMP))) {
    const st = await fs.lstat(join(root, TMP, name)).catch(() => undefined)
    if (st?.isFile()) held.add(st.ino)
  }
  await inodesUnder(root, held, new Set([join(root, META), join(root, TMP)]))
  const since = (await clock()) - SIDECAR_MARGIN_MS
  await each(join(root, META), async (path, name) => {
    if (!/^[0-9]+$/.test(name) || held.has(Number(name))) return
    const st = await fs.lstat(path)
    if (st.isFile() && st.mtimeMs < since) await fs.rm(path, { force: true })
  })
}

/**
 * The names in one of the store's own folders; none when it does not exist, or is a
 * symlink: what it points to is not the store's, and nothing there is swept.
 */
async function namesIn(dir: string): Promise<string[]> {
  try {
    if ((await fs.lstat(dir)).isSymbolicLink()) {
      log('%s: a symbolic link, not swept', dir)
      return []
    }
    return await fs.readdir(dir)
  } catch (err) {
    if (isMissing(err)) return []
    throw err
  }
}

/** Adds the inode number of every file under `dir` to `out`, but under the folders in `skip`. */
async function inodesUnder(dir: string, out: Set<number>, skip: ReadonlySet<string>): Promise<void> {
  const entries = await fs.readdir(dir, { withFileTypes: true }).catch((err) => {
    if (isMissing(err)) return []
    throw err
  })
  const files: string[] = []
  for (const e of entries) {
    const path = join(dir, e.name)
    if (e.isDirectory()) {
      if (!skip.has(path)) await inodesUnder(path, out, skip)
    } else if (e.isFile()) {
      files.push(path)
    }
  }
  for (let i = 0; i < files.length; i += LIST_CONCURRENCY) {
    const sts = await Promise.all(files.slice(i, i + LIST_CONCURRENCY).map((f) => fs.lstat(f).catch(() => undefined)))
    for (const st of sts) if (st !== undefined) out.add(st.ino)
  }
}

/**
 * Unlinks the file at `path` (an object, or a leftover temporary file) of the store at
 * `root`, and its sidecar once no name links it: the file is held open meanwhile, so that
 * its inode number cannot pass to another. (An unlink never needs room: this works on a
 * full disk.)
 */
async function unlinkWithSidecar(root: string, path: string): Promise<void> {
  let fh: fs.FileHandle
  try {
    fh = await fs.open(path, OPEN_OBJECT)
  } catch (err) {
    if (isMissing(err) || isCode(err, 'EISDIR') || isCode(err, 'ELOOP')) return // no object: a symlink is left
    throw err
  }
  try {
    const st = await fh.stat()
    if (!st.isFile()) return
    try {
      await fs.unlink(path)
    } catch (err) {
      if (isMissing(err)) return
      throw err
    }
    if ((await fh.stat()).nlink === 0) await fs.rm(join(root, META, String(st.ino)), { force: true })
  } finally {
    await fh.close().catch(() => {})
  }
}

/**
 * `: open /store/.ss-tmp/x`, the call that failed and the file it failed on, when the error
 * names them: the key alone does not say which of the store's files (its own folders
 * included: one made by another user, a stray file in their place) is at fault. Node's own
 * message says it too, but is replaced by ERRNO_TEXT's.
 */
function failedCall(err: unknown): string {
  const { syscall, path, dest } = err as { syscall?: unknown; path?: unknown; dest?: unknown }
  if (typeof path !== 'string') return ''
  return `: ${typeof syscall === 'string' ? `${syscall} ` : ''}${path}${typeof dest === 'string' ? ` -> ${dest}` : ''}`
}

/** What the file system's failures mean, for messages. */
const ERRNO_TEXT: Record<string, string> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'the file system is read-only',
  EIO: 'input/output error: the device or the file system failed',
  EMFILE: 'too many open files in this process',
  ENFILE: 'too many open files in the system',
  EFBIG: 'file too large for the file system',
  ENOMEM: 'out of memory in the kernel',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EBUSY: 'device or resource busy',
  EAGAIN: 'resource temporarily unavailable',
  ESTALE: 'stale file handle: the network file system lost the file',
  ETIMEDOUT: 'the network file system timed out',
  ENAMETOOLONG: 'file name too long',
  EMLINK: 'too many links',
  ENOENT: "a file or folder of the store's is missing",
  ENOTDIR: 'a path in the store is not a folder',
}

// --- helpers ---

function bodyChunks(body: Body): readonly Uint8Array[] {
  return body instanceof Uint8Array ? [body] : body
}

/** The most bytes of a body one step of writeBody writes: what is written after its signal fired. */
const WRITE_STEP_BYTES = 1024 * 1024

/**
 * Writes `body` at `position` of `fh` (at the handle's position when undefined) in steps of
 * WRITE_STEP_BYTES (a chunk larger than that sliced), `stopped` called before each: what it
 * throws (a signal that fired) ends the write there, so a large body is not written to its
 * end for a caller that has gone. Steps of bytes, not of chunks: one writev of a list of
 * chunks writes them all.
 */
async function writeBody(fh: fs.FileHandle, body: Body, stopped: () => void, position?: number): Promise<void> {
  let step: Uint8Array[] = []
  let bytes = 0
  let at = position
  for (const chunk of bodyChunks(body)) {
    for (let from = 0; from < chunk.byteLength; ) {
      const piece = chunk.subarray(from, from + WRITE_STEP_BYTES - bytes)
      step.push(piece)
      bytes += piece.byteLength
      from += piece.byteLength
      if (bytes === WRITE_STEP_BYTES) {
        stopped()
        await writeFully(fh, step, at)
        if (at !== undefined) at += bytes
        step = []
        bytes = 0
      }
    }
  }
  if (step.length > 0) {
    stopped()
    await writeFully(fh, step, at)
  }
}

/**
 * Part `partNumber`'s record in the upload folder `dir` (an upload made with partBytes);
 * undefined when there is none, or it is not one this store writes (a torn or hand-made
 * file, a data file named outside the folder): as a part never uploaded.
 */
async function readRecord(dir: string, partNumber: number): Promise<PartRecord | undefined> {
  const text = await readRegularText(join(dir, `${partNumber}${RECORD_SUFFIX}`))
  const r = text === undefined ? undefined : parseJson<Record<string, unknown>>(text)
  const offset = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
  if (
    r === undefined ||
    typeof r.file !== 'string' ||
    !DATA_NAME.test(r.file) ||
    !offset(r.at) ||
    !offset(r.size) ||
    typeof r.etag !== 'string' ||
    !/^[0-9a-f]{32}$/.test(r.etag)
  ) {
    return undefined
  }
  return { file: r.file, at: r.at as number, size: r.size as number, etag: r.etag }
}

/**
 * The parts of an upload made with partBytes, from their records, each with the MD5 of its
 * bytes (`withMd5` false: none read, no `md5`); a part whose bytes are not all there (its
 * file gone or short: a hand-made record) is not listed.
 */
async function listPlacedParts(dir: string, stopped: () => void, withMd5 = true): Promise<UploadedPart[]> {
  const parts: UploadedPart[] = []
  for (const name of await fs.readdir(dir)) {
    const m = /^([1-9][0-9]{0,4})\.part$/.exec(name)
    if (m === null) continue
    stopped()
    const partNumber = Number(m[1])
    const r = await readRecord(dir, partNumber)
    if (r === undefined) continue
    const fh = await openProbe(join(dir, r.file))
    if (fh === undefined) continue
    try {
      const st = await fh.stat()
      if (!st.isFile() || (r.size > 0 && st.size < r.at + r.size)) continue // an empty part needs no bytes
      const md5 = withMd5 ? { md5: await md5Of(fh, r.at, r.size, stopped) } : {}
      parts.push({ partNumber, size: r.size, etag: r.etag, ...md5 })
    } finally {
      await fh.close().catch(() => {})
    }
  }
  return parts.sort((a, b) => a.partNumber - b.partNumber)
}

/**
 * Copies the bytes `records` name (parts `parts`, in order; an upload made with partBytes)
 * from the files of the upload folder `dir` into `out`, in steps of COPY_BUFFER, `stopped`
 * called before each. A part whose file holds fewer bytes than its record says is refused as
 * one never uploaded (ERR_INVALID_ARGUMENT naming `where`); other failures, a file missing
 * included (ENOENT: the upload aborted meanwhile, `uploadGone`), are plain Errors, as in concatInto.
 * The bytes a record names are never written again (PlacedFile): no check on the way.
 */
async function copyRecords(
  out: fs.FileHandle,
  dir: string,
  records: readonly PartRecord[],
  parts: readonly CompletedPart[],
  where: string,
  stopped: () => void,
): Promise<void> {
  let pos = 0
  for (const [i, r] of records.entries()) {
    const gone = () =>
      StreamSegmentError.invalidArgument(
        `${where}: part ${parts[i]?.partNumber} with etag ${parts[i]?.etag} was not uploaded (its bytes are gone)`,
      )
    const path = join(dir, r.file)
    const src = await fs.open(path, OPEN_PROBE)
    try {
      const st = await src.stat()
      if (!st.isFile() || (r.size > 0 && st.size < r.at + r.size)) throw gone() // an empty part needs no bytes
      await copyRangeInto(out, src, path, r.at, r.at + r.size, undefined, stopped, pos)
      pos += r.size
    } finally {
      await src.close().catch(() => {})
    }
  }
}

/** The file at a key's path, opened with OPEN_OBJECT; undefined when there is none, a folder or a symlink. */
async function openObject(path: string): Promise<fs.FileHandle | undefined> {
  try {
    return await fs.open(path, OPEN_OBJECT)
  } catch (err) {
    if (isMissing(err) || isCode(err, 'EISDIR') || isCode(err, 'ELOOP')) return undefined
    throw err
  }
}

/**
 * The sidecar at `path` opened with WRITE_SIDECAR, a regular file: a symlink, a FIFO or
 * anything else in its place is removed first, and the sidecar made afresh. Every handle
 * opened here and not returned is closed, whatever fails (the fstat included).
 */
async function openSidecarForWrite(path: string): Promise<fs.FileHandle> {
  const fh = await fs.open(path, WRITE_SIDECAR).catch((err) => {
    if (isCode(err, 'ELOOP') || isCode(err, 'ENXIO')) return undefined
    throw err
  })
  if (fh !== undefined) {
    const regular = await fh.stat().then(
      (st) => st.isFile(),
      async (err) => {
        await fh.close().catch(() => {}) // the fstat's failure is the one to report
        throw err
      },
    )
    if (regular) return fh
    await fh.close()
  }
  await fs.rm(path, { force: true })
  return fs.open(path, WRITE_SIDECAR)
}

/**
 * Copies the parts of the upload `uploadId` at `parts`, in order, into `out`, each only
 * while it is still the file its ETag names: a part sent again after the completion
 * checked it (renamed over it) holds other bytes than those the caller completes with,
 * and is refused as S3 refuses it (ERR_INVALID_ARGUMENT naming `where`, the object). Its
 * other failures are plain Errors, as the file system's are: the caller names its key (`fsError`).
 * In steps of COPY_BUFFER, `stopped` called before each, as in writeBody.
 */
async function concatInto(
  out: fs.FileHandle,
  parts: ReadonlyArray<{ partNumber: number; path: string; etag: string }>,
  uploadId: string,
  where: string,
  stopped: () => void,
): Promise<void> {
  const buf = Buffer.allocUnsafe(COPY_BUFFER)
  let pos = 0
  for (const { partNumber, path, etag } of parts) {
    const src = await fs.open(path, OPEN_PROBE) // a FIFO put in a part's place must not block
    try {
      const st = await src.stat()
      if (!st.isFile()) {
        throw new Error(`part ${partNumber} of upload ${uploadId} (${path}) is not a regular file`)
      }
      if (legacyEtag(st) !== unquoteEtag(etag)) {
        throw StreamSegmentError.invalidArgument(
          `${where}: part ${partNumber} with etag ${etag} was not uploaded (sent again while the parts were joined)`,
        )
      }
      for (;;) {
        stopped()
        const { bytesRead } = await src.read(buf, 0, buf.byteLength, null)
        if (bytesRead === 0) break
        let done = 0
        while (done < bytesRead) done += (await out.write(buf, done, bytesRead - done, pos + done)).bytesWritten
        pos += bytesRead
      }
    } finally {
      await src.close()
    }
  }
}

/**
 * Copies bytes [start, end) of `src` (the file `where`) to `out` from `base` on, into `md5`
 * too when given. Its failures are plain Errors, as the file system's are: the caller names
 * its key (`fsError`).
 * In steps of COPY_BUFFER, `stopped` called before each, as in writeBody.
 */
async function copyRangeInto(
  out: fs.FileHandle,
  src: fs.FileHandle,
  where: string,
  start: number,
  end: number,
  md5: Hash | undefined,
  stopped: () => void,
  base = 0,
): Promise<void> {
  const buf = Buffer.allocUnsafe(Math.min(COPY_BUFFER, end - start))
  for (let pos = start; pos < end; ) {
    stopped()
    const { bytesRead } = await src.read(buf, 0, Math.min(buf.byteLength, end - pos), pos)
    if (bytesRead === 0) throw new Error(`${where}: file shrank while being copied, at byte ${pos}`)
    md5?.update(buf.subarray(0, bytesRead))
    let done = 0
    while (done < bytesRead) {
      done += (await out.write(buf, done, bytesRead - done, base + pos - start + done)).bytesWritten
    }
    pos += bytesRead
  }
}

/**
 * The MD5 (hex) of bytes [at, at + size) of `fh`, read a MiB at a time with `stopped` called
 * between them (a 5 GiB part is heard from while it is read, not only after).
 */
async function md5Of(fh: fs.FileHandle, at: number, size: number, stopped: () => void): Promise<string> {
  const md5 = createHash('md5')
  if (size > 0) {
    const range = { start: at, end: at + size - 1, autoClose: false, highWaterMark: 1 << 20 }
    for await (const chunk of fh.createReadStream(range)) {
      stopped()
      md5.update(chunk)
    }
  }
  return md5.digest('hex')
}

/** Waits for all of `ps`; rejects with the first failure once all have settled. */
async function allOrFirstError(ps: readonly Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(ps)).find((r) => r.status === 'rejected')
  if (failed !== undefined) throw (failed as PromiseRejectedResult).reason
}

/** A sidecar's metadata, without the store's own fields (`ss:`: no metadata key has a colon). */
function userMetadata(side: Record<string, unknown> | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  if (side === undefined) return out
  for (const [k, v] of Object.entries(side)) if (!k.startsWith('ss:') && typeof v === 'string') out[k] = v
  return out
}

/**
 * What names the file a sidecar is written for: its key, size and mtime (nanoseconds).
 * They stay the file's through the link or rename that makes it its key's, and are
 * another file's (but by a chance of one size and one tick of the clock, at one key):
 * the sidecar is named by the file's inode number, which a copy of the store's folder
 * (`cp -a`, rsync, a restore) gives to another file, another key's maybe.
 */
function fileRecord(key: string, st: BigIntStats): Record<string, string> {
  return { [KEY_FIELD]: key, [SIZE_FIELD]: String(st.size), [MTIME_FIELD]: String(st.mtimeNs) }
}

/**
 * Whether the sidecar `side` was written for the file `st` at `key`, by `fileRecord`. One
 * that records no file at all (written by an older version) is taken as the file's: what
 * it was before.
 */
function recordsFile(side: Record<string, unknown>, key: string, st: BigIntStats): boolean {
  if (side[KEY_FIELD] === undefined && side[SIZE_FIELD] === undefined && side[MTIME_FIELD] === undefined) return true
  const want = fileRecord(key, st)
  return [KEY_FIELD, SIZE_FIELD, MTIME_FIELD].every((f) => side[f] === want[f])
}

function escapeSegment(s: string): string {
  let out = ''
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte)
    out +=
      /[A-Za-z0-9_.-]/.test(c) && !(out === '' && c === '.')
        ? c
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
  }
  return out
}

/**
 * Whether `name` is what escapeSegment makes of some key segment (so that key's path is
 * this name). A `/`, a NUL, `.` and `..` are in no key's segment (checkKey): a file named
 * `f%2F` is in a folder's place, not the key `f/`.
 */
function isEscapedName(name: string): boolean {
  const seg = unescapeSegment(name)
  if (seg === '.' || seg === '..' || seg.includes('/') || seg.includes('\0')) return false
  return escapeSegment(seg) === name
}

function unescapeSegment(s: string): string {
  return Buffer.from(
    s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16))),
    'latin1',
  ).toString('utf8')
}

/** The ETag of a file by its identity: for objects whose sidecar has no ETag (older versions), and for parts. */
function legacyEtag(st: Stats): string {
  return `${st.ino.toString(16)}-${st.size.toString(16)}-${Math.round(st.mtimeMs * 1000).toString(16)}`
}
