/**
 * `downloadFile(url, path)`: a checkpoint (or a byte range of it) written to a local file,
 * every stored block checked against its CRC-32 as the read stream checks it.
 *
 * How: the range is read as `SegmentFile.readInto` reads it (read/reader.ts, `scan`): a
 * window of the block map walked at a time, at most `readMaxConcurrency` data GETs in
 * flight, and each GET's answer, once checked, written to its place in the file with
 * positional `writev` calls straight from the store's pieces, which then go back to be
 * read into again. No buffer is made for the bytes and none is handed to a consumer, so
 * memory stays at the GETs in flight and nothing goes to the garbage collector. Holes are
 * left to the file's length (set first), which reads them as zeros.
 *
 * Nothing half-written is visible at `path`: the bytes go to a temporary file beside it
 * (`.ss-download-<pid>-<random>.tmp`), made with no more access than the file it replaces
 * and given its permission bits once its bytes are written (a write clears setuid and
 * setgid), renamed over `path` once complete (over the file a symbolic link there names; something
 * not a regular file there is refused: admin/export.ts, `checkFileTarget`); on any failure
 * or abort the temporary file is removed (unless that fails too) and `path` is left as it was. The file is not
 * synced before the rename (as `fs.createWriteStream` does not).
 */
import { open, rename, rm } from 'node:fs/promises'
import { checkFileTarget, temporaryBeside, temporaryFileError } from '../admin/export.js'
import { StreamSegmentError } from '../errors.js'
import { Reader, type ReadTiming } from '../read/reader.js'
import { fileState, SegmentFile } from '../segment-file.js'
import { checkByteRange, checkOptionNames, type ReadOptions, resolveReadOptions } from '../settings.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { localFileError, writeFully } from '../util/local-fs.js'
import { unlessAborted } from '../util/signals.js'
import { asError, showValue } from '../util/typed-arrays.js'
import { checkStreamOptions, countingStore, withOpen } from './options.js'

export interface DownloadFileOptions extends ReadOptions {
  /** The checkpoint to read (default: the latest). */
  cno?: number
  /** First byte (default 0) and last byte (inclusive, default the file's last), clipped to the file. */
  start?: number
  end?: number
  /** Aborts every request in flight; nothing is written at `path`. */
  signal?: AbortSignal
  /**
   * Called once the checkpoint is open, before anything is written, with the read-only
   * handle and the bytes the range holds; what it throws (or its promise rejects with)
   * ends the download.
   */
  onStart?: (file: SegmentFile, bytes: number) => void
  /**
   * Called as the download goes: bytes done of the range (holes count once passed), and the
   * range's bytes; not after the signal fired or a callback threw. A promise it returns is
   * awaited (the bytes of that write are held meanwhile), as onStart's is.
   */
  onProgress?: (done: number, total: number) => void
}

export interface DownloadResult {
  /** The checkpoint read, and the size of its file. */
  cno: number
  size: number
  /** Bytes written to `path`: the range, clipped to the file. */
  bytes: number
  seconds: number
  /** Requests and bytes by kind, as the read stream's `timing`: `inode` counts the open. */
  timing: ReadTiming
}

/** Writes checkpoint `cno` (default: the latest) of the container at `location`, or bytes `start`…`end` of it, to `path`. */
export async function downloadFile(
  location: StoreLocation | ObjectStore,
  path: string,
  options: DownloadFileOptions = {},
): Promise<DownloadResult> {
  checkStreamOptions('downloadFile', options)
  checkOptionNames('downloadFile', options, ['cno', 'start', 'end', 'signal', 'onStart', 'onProgress'], { read: true })
  // Read once, here: an options object changed while the download runs (reused for the
  // next call) must not move the range checked below.
  const { cno, start, end, signal, onStart, onProgress } = options
  if (typeof path !== 'string' || path === '') {
    throw StreamSegmentError.invalidArgument(`downloadFile: path ${showValue(path)} must name a file`)
  }
  checkByteRange('downloadFile', { start, end })
  const read = resolveReadOptions(options) // validates before any request
  const store = storeAt(location, 'downloadFile')
  const what = `download of ${store.url} to ${path}`
  const target = await checkFileTarget(store, path, `downloadFile to ${path}`)
  const aborted = () => StreamSegmentError.aborted(`${what} aborted`, signal?.reason)
  if (signal?.aborted) throw aborted()
  const t0 = performance.now()
  const opening = { requests: 0, bytes: 0 }
  // The signal is heard from before the open: an open stalled on a request (the inode's
  // GET, say) ends when it fires, as the reads after it do.
  const abortOpen = new AbortController()
  let handle: SegmentFile | undefined
  const onAbort = () => {
    abortOpen.abort(signal?.reason)
    handle?.abort(aborted())
  }
  signal?.addEventListener('abort', onAbort, { once: true })
  const tmp = temporaryBeside(target.path, 'download')
  let tmpExists = false
  // What the caller's onStart or onProgress throws, or rejects with (an async one: its
  // promise let go would be an unhandled rejection), ends the download as it is; anything
  // else thrown that is no Error came from the store (asError).
  let callerThrew: { value: unknown } | undefined
  const callCaller = async (call: () => void) => {
    try {
      await call()
    } catch (err) {
      callerThrew = { value: err }
      throw err
    }
  }
  try {
    const counted = countingStore(store, opening, abortOpen.signal)
    const file = await unlessAborted(
      SegmentFile.open(counted.store, { cno, readOnly: true }),
      abortOpen.signal,
      (late) => late.close().catch(() => undefined),
    )
    counted.stop()
    handle = file
    if (signal?.aborted) throw aborted()
    const from = Math.min(start ?? 0, file.size)
    const to = Math.min(end === undefined ? file.size : end + 1, file.size)
    const bytes = Math.max(0, to - from)
    if (onStart !== undefined) await callCaller(() => onStart(file, bytes))
    const reader = new Reader(fileState(file), read)
    // Made with no more than the replaced file's access bits (the umask may take more): one
    // others may not read must not be readable meanwhile, though its mode is set at the end.
    const fh = await open(tmp, 'wx', target.mode === undefined ? 0o666 : target.mode & 0o777).catch(async (err) => {
      throw await temporaryFileError(err, tmp, `downloadFile to ${path}`)
    })
    tmpExists = true
    let written = false
    try {
      await fh.truncate(bytes).catch((err) => {
        throw localFileError(err, path)
      })
      let done = 0
      let writeFailed = false
      /** `stopped`: the scan's signal, aborted when it has failed (a GET, a check, a write). */
      const advance = async (n: number, stopped?: AbortSignal) => {
        done += n
        // Stopped (the signal fired, the caller threw, a write or the scan failed), the writes
        // still under way finish unreported: a caller that threw to stop is not called again,
        // a display not moved on past a download that has failed.
        if (onProgress === undefined || callerThrew !== undefined || signal?.aborted) return
        if (writeFailed || stopped?.aborted) return
        await callCaller(() => onProgress(done, bytes))
      }
      if (bytes > 0) {
        await reader.scan(from, from + bytes, {
          bytes: async (at, views, stopped) => {
            await writeFully(fh, views, at - from).catch((err) => {
              writeFailed = true
              throw localFileError(err, path)
            })
            await advance(
              views.reduce((n, v) => n + v.byteLength, 0),
              stopped,
            )
          },
          zeros: (_at, length, stopped) => advance(length, stopped), // the file's length reads as zeros there
        })
      } else {
        await advance(0) // an empty range is done at once: a display shows it so, as an empty export's
      }
      // Only now, after the bytes: a write by a process without CAP_FSETID (anyone but
      // root) clears the setuid and setgid bits, which set before it would be lost.
      if (target.mode !== undefined) {
        await fh.chmod(target.mode).catch((err) => {
          throw localFileError(err, path)
        })
      }
      written = true
    } finally {
      // A write may fail only at close (NFS reports a full disk or a quota there): as any
      // write's failure, unless the download failed before it, which is what it reports.
      await fh.close().catch((err) => {
        if (written) throw localFileError(err, path)
      })
    }
    if (signal?.aborted) throw aborted()
    await rename(tmp, target.path).catch((err) => {
      throw localFileError(err, path)
    })
    tmpExists = false
    const timing = withOpen(reader.timing, opening)
    return { cno: file.cno, size: file.size, bytes, seconds: (performance.now() - t0) / 1000, timing }
  } catch (err) {
    if (signal?.aborted) throw aborted()
    throw callerThrew !== undefined && err === callerThrew.value ? err : asError(err, what)
  } finally {
    signal?.removeEventListener('abort', onAbort)
    // One that cannot be removed (the disk gone read-only, as after the write that failed)
    // stays: what stopped the download is what is said, and the handle is still closed.
    if (tmpExists) await rm(tmp, { force: true }).catch(() => undefined)
    await handle?.close().catch(() => undefined) // an aborted handle refuses close; nothing is held
  }
}
