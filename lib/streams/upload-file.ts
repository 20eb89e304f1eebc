/**
 * `uploadFile(path, url)`: a local file written into a container by reference, as a new
 * checkpoint replacing its content (an existing container's older, larger content is
 * truncated away: the checkpoint holds exactly the file). Its blocks are read from the
 * file only when the object holding them is sent, and it is taken a step at a time
 * (BlockWriter.writeRef), so memory stays at the pieces and objects in flight whatever
 * the file's size; the file must not change until this returns (the
 * block-source contract), and must hold what its size says: one holding more (a file of
 * /proc, which says 0) is refused before the store is touched, and again before the flush
 * publishes (checkEnd). The signal aborts every request in flight and publishes nothing.
 *
 * Resume (`resume`, default on): an upload interrupted by a crash, a kill or an abort
 * left open multipart uploads in the container; the next `uploadFile` of the same file
 * (same size and mtime) to the same container continues them, keeping every part whose
 * size and MD5 are those of the file's bytes there, copies server-side the pieces of the
 * objects it completed whose block CRC-32s are the file's, and sends only the rest
 * (`FlushTiming.reusedBytes` says how much was kept or copied). See container/resume.ts.
 */
import type { FileHandle } from 'node:fs/promises'
import {
  checkContinued,
  DEFAULT_RESUME_MAX_AGE_MS,
  FileResumer,
  findCompleted,
  findLeftovers,
} from '../container/resume.js'
import { StreamSegmentError } from '../errors.js'
import { fileState, OPEN_SIGNAL, type SegmentFile } from '../segment-file.js'
import { checkOptionNames, checkSettingValues, type Settings } from '../settings.js'
import type { BlockSource } from '../state/dirty-tier.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { BufferPool } from '../util/buffer-pool.js'
import { allocLarge } from '../util/huge-memory.js'
import { openLocalFile } from '../util/local-fs.js'
import { describeValue, showValue } from '../util/typed-arrays.js'
import type { FlushTiming } from '../write/flush.js'
import { checkStreamOptions, countingStore } from './options.js'
import { openForAppend } from './write-stream.js'

/** A file's version as a torn-source check compares it: size, mtime and ctime. */
export interface FileVersion {
  size: number
  mtimeMs: number
  ctimeMs: number
}

function isFileVersion(v: unknown): v is FileVersion {
  const { size, mtimeMs, ctimeMs } = (typeof v === 'object' && v !== null ? v : {}) as Record<string, unknown>
  return Number.isSafeInteger(size) && (size as number) >= 0 && Number.isFinite(mtimeMs) && Number.isFinite(ctimeMs)
}

/** Bytes of buffers a fileSource keeps, given back by the writer, to read into again. */
const SOURCE_POOL_BYTES = 64 * 1024 * 1024

/**
 * A BlockSource reading a file handle. `verify` (called by the flush before it publishes)
 * compares the file's size, mtime and ctime with `version` (default: as when the source
 * was made), and fails with ERR_STATE when the file changed: rewritten in place during
 * the upload, it would be published torn; so it does when the file holds bytes past that
 * size (checkEnd). A read or a stat that fails (a failing disk, a
 * handle closed too early) is ERR_STORE; errors name the file `name` (default 'the file').
 *
 * Reads go into buffers the writer gives back once their request has ended (`release`),
 * up to SOURCE_POOL_BYTES of them kept: a new buffer of a piece's size is mapped afresh
 * and faulted in, which costs more than the read on some virtual machines (less in the
 * huge pages util/huge-memory.ts asks for).
 */
/** What errors call a file given as a handle, with no name. */
export const UNNAMED_FILE = 'the file'

export function fileSource(
  fh: {
    read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>
    stat?(): Promise<FileVersion>
  },
  version?: FileVersion,
  name = UNNAMED_FILE,
): BlockSource {
  if (typeof (fh as { read?: unknown } | null)?.read !== 'function') {
    throw StreamSegmentError.invalidArgument(
      `fileSource: expected an open file (a FileHandle, or an object with read(buffer, offset, length, position)), got ${describeValue(fh)}`,
    )
  }
  // Checked here: a name given where the version goes would be taken for a version, and
  // every verify would then say that the file changed.
  if (version !== undefined && !isFileVersion(version)) {
    throw StreamSegmentError.invalidArgument(
      `fileSource: version must be { size, mtimeMs, ctimeMs } as a stat gives them, got ${describeValue(version)}`,
    )
  }
  if (typeof name !== 'string') {
    throw StreamSegmentError.invalidArgument(`fileSource: name must be a string, got ${describeValue(name)}`)
  }
  const stat = fh.stat?.bind(fh)
  const first: Promise<FileVersion> | undefined = version !== undefined ? Promise.resolve(version) : stat?.()
  first?.catch(() => undefined) // judged by verify
  /** Buffers given back; the views lent out (a read never given back is not held). */
  const pool = new BufferPool(SOURCE_POOL_BYTES)
  const lent = new WeakSet<Uint8Array>()
  return {
    async read(position, length) {
      const out = (pool.take(length) ?? allocLarge(length)).subarray(0, length)
      let done = 0
      while (done < length) {
        const at = position + done
        const { bytesRead } = await fh.read(out, done, length - done, at).catch((err: unknown) => {
          // The system's error (EIO, EBADF) would pass for a bug of the writer's, and name no file.
          throw StreamSegmentError.is(err)
            ? err
            : StreamSegmentError.store(`${name}: cannot be read at byte ${at} (${(err as Error)?.message})`, err)
        })
        if (bytesRead === 0) {
          throw StreamSegmentError.state(
            `${name}: ended at byte ${at}, ${length - done} bytes short: it changed while being uploaded`,
          )
        }
        done += bytesRead
      }
      lent.add(out)
      return out
    },
    release(bytes) {
      // Only the very view a read returned, once: a stale view of reused memory is ignored.
      if (lent.delete(bytes)) pool.give(Buffer.from(bytes.buffer))
    },
    async verify() {
      if (stat === undefined || first === undefined) return
      // A stat that fails (EIO, EBADF) says nothing of a change: it is the disk's failure, and
      // a stat of the source's making that failed leaves nothing to compare with.
      const [was, now] = await Promise.all([first, stat()]).catch((err: unknown) => {
        throw StreamSegmentError.is(err)
          ? err
          : StreamSegmentError.store(`${name}: cannot be checked for changes (${(err as Error)?.message})`, err)
      })
      if (was.size !== now.size || was.mtimeMs !== now.mtimeMs || was.ctimeMs !== now.ctimeMs) {
        throw StreamSegmentError.state(
          `${name}: changed while being uploaded (size ${was.size} → ${now.size}, mtime ${iso(was.mtimeMs)} → ${iso(now.mtimeMs)}, ctime ${iso(was.ctimeMs)} → ${iso(now.ctimeMs)}): nothing was published`,
        )
      }
      // A size that stays put says nothing of bytes past it: a file system may lag in
      // saying a file grew, and some files' size is not their length (/proc's say 0).
      await checkEnd(fh, was.size, name)
    },
  }
}

/**
 * Fails (ERR_STATE) when `fh` holds bytes past `size`, what its stat said: it is being
 * written to, or its size is not its length (a file of /proc says 0). Taken at its word,
 * that size would publish a short checkpoint without a word. One read of one byte, made
 * once per upload, never per block; a read that fails is ERR_STORE, as fileSource's.
 */
async function checkEnd(
  fh: { read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }> },
  size: number,
  name: string,
): Promise<void> {
  const { bytesRead } = await fh.read(Buffer.alloc(1), 0, 1, size).catch((err: unknown) => {
    throw StreamSegmentError.is(err)
      ? err
      : StreamSegmentError.store(`${name}: cannot be read at byte ${size} (${(err as Error)?.message})`, err)
  })
  if (bytesRead > 0) {
    throw StreamSegmentError.state(
      `${name}: holds more than the ${size} bytes its size says (written to meanwhile, or a file whose size is not its length, as /proc's): nothing was published; give a stream of it to the write stream instead`,
    )
  }
}

/** A time for a message; the ctime alone may tell a change (a rewrite whose mtime was set back). */
function iso(ms: number): string {
  return new Date(ms).toISOString()
}

export interface UploadFileOptions {
  /** Aborts the upload: every request in flight is aborted, nothing is published, ERR_ABORTED. */
  signal?: AbortSignal
  /**
   * Called once the container is open, before anything is written, with the file being
   * written and the bytes it will hold: for progress displays (`file.progress`). A promise
   * it returns is awaited; what it throws or rejects with ends the upload.
   */
  onStart?: (file: SegmentFile, bytes: number) => void
  /**
   * Continue what an interrupted upload of the same file (same size and mtime) to this
   * container left, checked part by part against the file (default true); false sends
   * everything again (what was left stays for gc).
   */
  resume?: boolean
  /** Interrupted uploads started longer ago than this are not continued (default 30 minutes; see gc's grace). */
  resumeMaxAgeMs?: number
}

/**
 * Writes a local file (a path, or a handle already open, which is left open) by
 * reference as a new checkpoint of the container; resolves to the flush's timing.
 */
export async function uploadFile(
  path: string | FileHandle,
  location: StoreLocation | ObjectStore,
  settings: Partial<Settings> = {},
  options: UploadFileOptions = {},
): Promise<FlushTiming> {
  checkStreamOptions('uploadFile', options)
  if (typeof settings !== 'object' || settings === null) {
    throw StreamSegmentError.invalidArgument(`uploadFile: settings must be an object, got ${describeValue(settings)}`)
  }
  checkOptionNames('uploadFile: settings', settings, [], { settings: true })
  checkSettingValues(settings)
  checkOptionNames('uploadFile', options, ['signal', 'onStart', 'resume', 'resumeMaxAgeMs'])
  if (
    !(typeof path === 'string' && path !== '') &&
    !(typeof path === 'object' && path !== null && typeof path.stat === 'function' && typeof path.read === 'function')
  ) {
    throw StreamSegmentError.invalidArgument(
      `uploadFile: path must be a path or an open FileHandle, got ${describeValue(path)}`,
    )
  }
  const { signal, onStart, resume = true, resumeMaxAgeMs = DEFAULT_RESUME_MAX_AGE_MS } = options
  if (typeof resume !== 'boolean') {
    throw StreamSegmentError.invalidArgument(`uploadFile: resume = ${showValue(resume)}: must be true or false`)
  }
  if (!Number.isSafeInteger(resumeMaxAgeMs) || resumeMaxAgeMs < 0) {
    throw StreamSegmentError.invalidArgument(
      `uploadFile: resumeMaxAgeMs = ${showValue(resumeMaxAgeMs)}: must be an integer ≥ 0`,
    )
  }
  const store = storeAt(location, 'uploadFile')
  const what = typeof path === 'string' ? `upload of ${path} to ${store.url}` : `upload to ${store.url}`
  const aborted = () => StreamSegmentError.aborted(`${what} aborted`, signal?.reason)
  if (signal?.aborted) throw aborted()
  const fh = typeof path === 'string' ? await openLocalFile(path, true) : path
  try {
    // A handle given closed already fails here with Node's bare Error 'file closed', naming nothing.
    const version = await fh.stat().catch((err: Error) => {
      if (typeof path === 'string') {
        // Opened just now: a failing disk, not the caller's argument (ERR_STORE, as fileSource says a failed stat).
        throw StreamSegmentError.store(`${path}: its size and times cannot be read (${err?.message ?? err})`, err)
      }
      throw StreamSegmentError.invalidArgument(`uploadFile: the FileHandle cannot be read (${err?.message ?? err})`)
    })
    if (!version.isFile()) {
      // A directory reads as EISDIR, a FIFO or a device as bytes without a size to refer to.
      throw StreamSegmentError.invalidArgument(
        `${typeof path === 'string' ? path : 'uploadFile'}: not a regular file (give a stream of it to the write stream instead)`,
      )
    }
    const { size } = version
    const name = typeof path === 'string' ? path : undefined
    // Found before the store is touched: a container opened (made, maybe) for nothing.
    await checkEnd(fh, size, name ?? UNNAMED_FILE)
    // Fired while the file was opened and looked at (a slow mount): the listener below would
    // never hear it, and the open would go on, waiting on a stalled store for ever.
    if (signal?.aborted) throw aborted()
    // The signal is heard from before the open: an open stalled on a request (the inode's
    // GET, say) ends when it fires, as the upload's requests after it do.
    const opening = new AbortController()
    let file: SegmentFile | undefined
    const onAbort = () => {
      opening.abort(signal?.reason)
      file?.abort(aborted())
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      const opened = countingStore(store, { requests: 0, bytes: 0 }, opening.signal)
      // OPEN_SIGNAL: what the open writes (a roll-forward's inode write) hears it too.
      file = await openForAppend(opened.store, { ...settings, [OPEN_SIGNAL]: opening.signal }).catch((err) => {
        throw signal?.aborted ? aborted() : err
      })
      opened.stop()
      if (signal?.aborted) onAbort()
      const state = fileState(file)
      const id = {
        size,
        mtimeMs: version.mtimeMs,
        blockSize: state.blockSize,
        pieceSize: state.settings.segmentMpuChunkSize,
      }
      const find = { maxAgeMs: resumeMaxAgeMs, publishedCno: state.published.cno, signal }
      // An abort there is said as the upload's, as elsewhere: the look-ups alone name a listing.
      const looking = <T>(p: Promise<T>) =>
        p.catch((err: unknown) => {
          throw signal?.aborted ? aborted() : err
        })
      const leftovers = resume ? await looking(findLeftovers(store, id, find)) : undefined
      const completed = resume ? await looking(findCompleted(store, id, find)) : undefined
      const resumer = new FileResumer(id, leftovers, completed)
      state.uploader.resumer = resumer
      await onStart?.(file, size) // an async one's rejection let go would be an unhandled one
      const source = fileSource(fh, version, name)
      const verify = source.verify?.bind(source)
      source.verify = async () => {
        await verify?.()
        await checkContinued(store, resumer.continued, signal)
      }
      await file.writeRef(0, size, source)
      // No block refers to an empty file, so the flush verifies no source: a file written to
      // since it was looked at would publish empty.
      if (size === 0) await verify?.()
      const timing = await file.flush()
      return { ...timing, reusedBytes: state.uploader.reusedBytes }
    } finally {
      signal?.removeEventListener('abort', onAbort)
      await file?.close()
    }
  } finally {
    if (fh !== path) await fh.close()
  }
}
