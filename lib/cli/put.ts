/**
 * `stream-segment put`: a regular file by reference (read as its objects are sent, and
 * resumed when interrupted), stdin, a pipe or a command's stdout by value; `--size` and
 * `--wal` for streams.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, constants, fstatSync, openSync, type Stats, statSync } from 'node:fs'
import { type FileHandle, stat } from 'node:fs/promises'
import { Socket } from 'node:net'
import { resolve, sep } from 'node:path'
import { type Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { isatty } from 'node:tty'
import { DEFAULT_RESUME_MAX_AGE_MS } from '../container/resume.js'
import { StreamSegmentError } from '../errors.js'
import { fileState } from '../segment-file.js'
import { isSettingName, type Settings, SPEC_DEFAULTS } from '../settings.js'
import { DirectoryStore } from '../store/directory.js'
import { MemoryStore } from '../store/memory.js'
import type { ObjectStore } from '../store/types.js'
import { UNNAMED_FILE, uploadFile } from '../streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../streams/write-stream.js'
import { openLocalFile } from '../util/local-fs.js'
import { printable, shellWord } from '../util/shell-words.js'
import { MiB } from '../util/units.js'
import type { WalSync } from '../wal/log.js'
import { walPlacementProblem } from '../wal/placement.js'
import type { WalOptions } from '../wal/wal.js'
import type { FlushTiming } from '../write/flush.js'
import { openContainer, optionName, type Parsed, parseDuration, parseSize, positionals } from './args.js'
import { count, formatBytes, fsError, jsonLine, type Out, progressLine, showProgress } from './output.js'

function stdinIsDirectory(): boolean {
  try {
    return fstatSync(0).isDirectory()
  } catch {
    return false // no stdin: reading it fails on its own
  }
}

/**
 * Whether stdin is /dev/null: given so (`< /dev/null`), or closed (`<&-`, a service with no
 * stdin), which Node opens as /dev/null. Read, it is an empty file, and the put would
 * replace the container's file with nothing.
 */
function stdinIsDevNull(): boolean {
  try {
    const st = fstatSync(0)
    return st.isCharacterDevice() && st.rdev === statSync('/dev/null').rdev
  } catch {
    return false
  }
}

function isRegularFile(path: string): boolean {
  try {
    return statSync(path).isFile()
  } catch {
    return false // not there, or not ours: opening it says why
  }
}

/**
 * `--size` and `--wal` are for what goes by value (stdin, a command, a FIFO, a device): a
 * regular file goes by reference, its size known, read again where needed.
 */
function refuseForFile(p: Parsed, size: number | undefined, wal: WalOptions | undefined): void {
  if (size !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'size')} is for stdin, a command, a FIFO or a device, not a regular file (it goes by reference, its size known)`,
    )
  }
  if (wal !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'wal')} is for stdin, a command, a FIFO or a device: a regular file goes by reference, not through a log`,
    )
  }
}

/** The command with its two arguments the other way round, for one that looks swapped. */
function swapped(source: string, url: string): string {
  return `put takes the file first, then the container: put ${shellWord(url)} ${shellWord(source)}`
}

/**
 * What `put X` lacks: the container after a file X or after -, the command after `put X --`,
 * else the file (- for stdin) before a container X.
 */
function oneArgumentHint(arg: string, terminated: boolean): string {
  if (arg === '-') return 'give the container after it: put - <url>'
  if (terminated) return `no command after --: put ${shellWord(arg)} -- <command> [args…]`
  let file = false
  try {
    file = statSync(arg).isFile()
  } catch {
    // No such file: X is the container.
  }
  return file
    ? `give the container after the file: put ${shellWord(arg)} <url>`
    : `to write stdin, give - as the file: put - ${shellWord(arg)}`
}

/**
 * A named pipe (a FIFO: `mkfifo`, a shell's `<(command)`) as a stream read through the
 * event loop, opened without waiting for a writer, so an interrupt ends the put at once
 * whether a writer has come or not; undefined for anything else. It is opened, non-blocking,
 * before any writer can come and go: a second descriptor opened once a writer had written
 * and closed (after a blocking open returned) would never be told of the end, and the put
 * would wait for ever for a FIFO written with `printf abc > fifo`.
 */
function openFifo(path: string): Socket | undefined {
  try {
    if (!statSync(path).isFIFO()) return undefined
  } catch {
    return undefined // not there, or not ours: opening it says why
  }
  let fd: number
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (e) {
    throw fsError(e, path)
  }
  // What was opened is judged, not what the stat saw: a file put in the FIFO's place
  // meanwhile is no socket's (Node throws on one), and openSource opens it as any file.
  let fifo = false
  try {
    fifo = fstatSync(fd).isFIFO()
  } finally {
    if (!fifo) closeSync(fd)
  }
  return fifo ? new Socket({ fd, readable: true, writable: false }) : undefined
}

/**
 * Opens the file to put (openLocalFile: a FIFO that replaced it after openFifo looked is
 * opened without waiting for a writer, and read as openFifo's). An open may still wait:
 * on a stalled mount, or a device's (a serial line's, for its carrier). An interrupt then
 * fails the put at once with ERR_ABORTED; the handle, if the open ever returns, is closed.
 */
async function openSource(path: string, signal: AbortSignal): Promise<FileHandle> {
  if (signal.aborted) throw StreamSegmentError.aborted(`${path}: interrupted before it was opened`)
  const opening = openLocalFile(path)
  return new Promise<FileHandle>((resolve, reject) => {
    let settled = false
    const onAbort = () => {
      if (settled) return
      settled = true
      reject(StreamSegmentError.aborted(`${path}: interrupted while opening it`))
      opening.then(
        (fh) => fh.close(),
        () => {},
      )
    }
    signal.addEventListener('abort', onAbort, { once: true })
    opening.then(
      (fh) => {
        signal.removeEventListener('abort', onAbort)
        if (settled) return
        settled = true
        resolve(fh)
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort)
        if (settled) return
        settled = true
        reject(e)
      },
    )
  })
}

export async function put(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  // `put <url> -- <command> [args…]`: the producer's stdout, published only when it exits 0.
  const producer = p.beforeTerminator === 1 && p.positional.length > 1 ? p.positional.slice(1) : undefined
  const [source, url] =
    producer === undefined
      ? (positionals(
          p,
          2,
          2,
          'put <file|-> <url> [--size N] [--wal DIR [--wal-sync M]] [--<setting> <value>…] [--no-resume] [--json]',
          p.positional.length === 1 ? oneArgumentHint(p.positional[0] as string, p.beforeTerminator === 1) : undefined,
        ) as [string, string])
      : ['-', p.positional[0] as string]
  // No program has an empty name: said as the mistake it is, not as the exception spawn throws.
  if (producer?.[0] === '') {
    throw StreamSegmentError.invalidArgument(
      'put: the command after -- is an empty string: name the program to run (put <url> -- <command> [args…])',
    )
  }
  const sizeText = p.options.get('size')
  const size = sizeText === undefined ? undefined : parseSize(optionName(p, 'size'), sizeText)
  const wal = walOption(p)
  // Checked again once the file is open: a stat cannot block, an open of a FIFO waits for its writer.
  if (source !== '-' && isRegularFile(source)) refuseForFile(p, size, wal)
  const resume = !p.flags.has('noResume')
  if (!resume && source === '-') {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'noResume')} is for a file: stdin or a command never resumes`,
    )
  }
  const settings = settingOptions(p)
  const store = openContainer(url)
  // Its objects go when the command ends: a put there would report a checkpoint committed, and keep nothing.
  if (store instanceof MemoryStore) {
    throw StreamSegmentError.invalidArgument(
      `put: ${store.url} is this command's own memory, gone when it ends: nothing put there would be kept; ` +
        'give a directory, file:///dir or s3://bucket/prefix',
    )
  }
  // Refused before input is read (the open refuses it too, naming the library's option).
  const misplaced = wal === undefined ? undefined : walPlacementProblem(wal.dir, store)
  if (misplaced !== undefined) throw StreamSegmentError.invalidArgument(`option ${optionName(p, 'wal')}: ${misplaced}`)
  if (source === '-' && producer === undefined && stdinIsDirectory()) {
    // A shell's `< dir` gives a descriptor that reads as an empty file: that is no content.
    throw StreamSegmentError.invalidArgument('-: stdin is a directory')
  }
  if (source === '-' && producer === undefined && size === undefined && stdinIsDevNull()) {
    throw StreamSegmentError.invalidArgument(
      '-: stdin is /dev/null (given so, or closed): no content; --size 0 publishes an empty file',
    )
  }
  // Input typed at a terminal: no progress line there, whose redraws would erase the line being typed.
  const typed = source === '-' && producer === undefined && isatty(0)
  if (typed) {
    // Else a put typed without its input (a pipe forgotten) waits without a word.
    err.write(
      'stream-segment: reading stdin (a terminal) until end of input: Ctrl-D on a line of its own ends it, Ctrl-C cancels\n',
    )
  }
  // `signal`: the interrupts main hears (Ctrl-C, SIGTERM, SIGHUP), until it has reported.
  const fifo = source === '-' ? undefined : openFifo(source)
  const fh =
    source === '-' || fifo !== undefined
      ? undefined
      : await openSource(source, signal).catch((e: unknown) => {
          // `put s3://bucket/c model.pt`: a URL where the file goes, the arguments swapped.
          if (!StreamSegmentError.is(e, 'ERR_NOT_FOUND') || !/^[a-z][a-z0-9+.-]*:/i.test(source)) throw e
          throw new StreamSegmentError('ERR_NOT_FOUND', `${e.message} (a URL: ${swapped(source, url)})`, { cause: e })
        })
  const child = producer === undefined ? undefined : startProducer(producer)
  const t0 = performance.now()
  // A file's upload once begun: its size, and how many of its bytes are on the store.
  const sending: Sending = {}
  let r: PutResult
  try {
    const st = await fh?.stat()
    if (st?.isDirectory()) {
      // `put container model.pt`: the container first, the file after it.
      const hint = isRegularFile(url) ? ` (${swapped(source, url)})` : ''
      throw StreamSegmentError.invalidArgument(`${source}: is a directory${hint}`)
    }
    if (st?.isFile()) refuseForFile(p, size, wal)
    // A regular file goes by reference: its blocks are read when their objects are sent.
    // Anything else (stdin, a pipe, a FIFO, a device) can be read only once, in order.
    r = st?.isFile()
      ? await putByReference(fh as FileHandle, store, settings, signal, err, resume, sending)
      : await putByValue(
          fifo ?? (fh && st && sourceStream(fh, st, source)) ?? child?.stdout ?? process.stdin,
          producer === undefined ? source : producer.join(' '),
          store,
          settings,
          signal,
          err,
          completeWhen({ size, child }),
          wal,
          !typed,
        )
  } catch (e) {
    const unmade = await folderNotMade(e, store)
    if (unmade !== undefined) throw unmade
    // Interrupted, a file's upload is left open for a resume (uploadFile): said before the
    // error's line, which main writes.
    if (resume && signal.aborted && StreamSegmentError.is(e, 'ERR_ABORTED')) sayResumable(err, sending)
    // Not a byte from the FIFO: no writer has opened it yet (or one that has sent nothing).
    if (fifo !== undefined && signal.aborted && fifo.bytesRead === 0) {
      throw StreamSegmentError.aborted(`${source}: interrupted while waiting for a writer to open it`, e)
    }
    // The file source says the file ended early, not which file: it was given a handle.
    if (StreamSegmentError.is(e, 'ERR_STATE') && !e.message.includes(printable(source))) {
      const what = e.message.startsWith(`${UNNAMED_FILE}: `) ? e.message.slice(UNNAMED_FILE.length + 2) : e.message
      throw new StreamSegmentError('ERR_STATE', `${source}: ${what}`, { cause: e })
    }
    throw e
  } finally {
    await fh?.close()
    fifo?.destroy()
    if (child !== undefined) stopProducer(child.process)
  }
  report(out, p.flags.has('json'), store.url, r, (performance.now() - t0) / 1000)
  return 0
}

/** Why a folder cannot be made, for the failures that making it again will not mend. */
const NOT_MADE: Readonly<Record<string, string>> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EROFS: 'the file system is read-only',
  ENOENT: 'the file system makes no folder there', // its parent exists (mkdirs): /proc
  ENOTDIR: 'a path above it is not a folder',
  ENAMETOOLONG: 'file name too long',
  ELOOP: 'too many symbolic links',
}

/**
 * A put's local container whose folder could not be made (`put - /proc/c`), as the bad
 * argument it is, exit 2, naming the folder and why, as a `--wal` folder or a file `get`
 * writes is: the directory store says it as its own failure (ERR_STORE, ERR_AUTH for
 * EACCES), but no store failed and no credentials were refused; the path given cannot
 * hold a container. Undefined for any other failure, and when the folder is there after
 * all (one that exists but cannot be written stays the store's error).
 */
async function folderNotMade(e: unknown, store: ObjectStore): Promise<StreamSegmentError | undefined> {
  if (!(store instanceof DirectoryStore)) return undefined
  let cause = e as (NodeJS.ErrnoException & { cause?: unknown }) | undefined
  for (let depth = 0; cause !== undefined && cause?.syscall === undefined && depth < 8; depth++) {
    cause = cause.cause as typeof cause
  }
  const why = cause?.code === undefined ? undefined : NOT_MADE[cause.code]
  if (why === undefined || cause?.syscall !== 'mkdir' || typeof cause.path !== 'string') return undefined
  const root = resolve(store.root)
  const folder = resolve(cause.path)
  // The container's folder or one above it: not one of the store's own inside it.
  if (!`${root}${sep}`.startsWith(`${folder}${sep}`)) return undefined
  if ((await stat(root).catch(() => undefined))?.isDirectory()) return undefined
  return StreamSegmentError.invalidArgument(
    `${store.url}: the container's folder cannot be made: ${why} (${cause.code}): mkdir ${cause.path}`,
  )
}

/**
 * The `--<setting> <value>` options, as settings (sizes parsed, and durations for the
 * settings in milliseconds, `…Ms`: `1h` is an hour, not a size; resolveSettings checks them all).
 */
function settingOptions(p: Parsed): Partial<Settings> {
  const settings: Partial<Record<keyof Settings, unknown>> = {}
  for (const [name, value] of p.options) {
    if (name === 'size' || name === 'wal' || name === 'walSync') continue
    if (!isSettingName(name)) throw StreamSegmentError.internal(`put: option --${name} is not a setting`)
    // String settings (format, conflictPolicy) are taken as given; resolveSettings checks them.
    settings[name] =
      typeof SPEC_DEFAULTS[name] === 'string'
        ? value
        : name.endsWith('Ms')
          ? parseDuration(optionName(p, name), value)
          : parseSize(optionName(p, name), value)
  }
  return settings as Partial<Settings>
}

/** What a put did: one JSON line, or a few lines for people. */
function report(out: Out, json: boolean, url: string, r: PutResult, seconds: number): void {
  const { bytes, by, timing: t } = r
  if (json) {
    out.write(jsonLine({ url, by, bytes, seconds, flushTiming: t }))
    return
  }
  // A flush that changed nothing publishes nothing (no object, not even part 0): the
  // container's checkpoint already holds these bytes, and saying "committed" would claim a new one.
  const what =
    t.objects === 0
      ? `checkpoint ${t.cno} of ${printable(url)} unchanged`
      : `committed checkpoint ${t.cno} of ${printable(url)}`
  out.write(
    `${what}: ${formatBytes(bytes)} by ${by} in ${seconds.toFixed(2)} s ` +
      `(${formatBytes(bytes / seconds)}/s), ${count(t.objects, 'object')}\n` +
      `flush: ${t.totalMs.toFixed(1)} ms (data ${t.dataMs.toFixed(1)}, part 0 ${t.part0Ms.toFixed(1)}, inode ${t.inodeMs.toFixed(1)}), ` +
      `${count(t.conflicts, 'conflict')}\n` +
      `sent ahead ${formatBytes(t.streamSentBytes)}, written by the flush ${formatBytes(t.streamFlushBytes)}, ` +
      `dead ${formatBytes(t.streamDeadBytes)}, meta ${formatBytes(t.streamMetaBytes)}\n` +
      (by === 'reference' && r.resume
        ? `reused ${formatBytes(t.reusedBytes)} sent before by an interrupted upload of this file\n`
        : ''),
  )
}

/** `--wal DIR [--wal-sync MODE]`, checked (the mode again when the log opens). */
function walOption(p: Parsed): WalOptions | undefined {
  const dir = p.options.get('wal')
  const sync = p.options.get('walSync')
  if (dir === undefined) {
    if (sync !== undefined)
      throw StreamSegmentError.invalidArgument(`option ${optionName(p, 'walSync')} needs --wal DIR`)
    return undefined
  }
  // `-` is stdin or stdout here: read as a path, it would make a folder named - unasked.
  if (dir === '-') {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'wal')}: "-" (stdin or stdout) is not a folder: give its path (a folder named - is ./-)`,
    )
  }
  if (sync !== undefined && !['always', 'interval', 'none'].includes(sync)) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'walSync')} is ${JSON.stringify(sync)}: use always, interval or none`,
    )
  }
  return { dir, ...(sync !== undefined && { sync: sync as WalSync }) }
}

interface PutResult {
  by: 'reference' | 'value'
  bytes: number
  timing: FlushTiming
  /** Whether pieces of an interrupted upload were looked for (by reference, without --no-resume). */
  resume: boolean
}

/** A file's upload, once begun (putByReference): its size, and the bytes of it on the store so far. */
interface Sending {
  size?: number
  sent?: () => number
}

/**
 * One line on stderr for a put of a file interrupted once some of it was sent: how much, and
 * that the same put again resumes (uploadFile keeps the upload open for it, and a put again
 * keeps its whole pieces while the upload is younger than resumeMaxAgeMs).
 */
function sayResumable(err: Out, sending: Sending): void {
  if (sending.size === undefined) return
  // As the progress line counts it: block-map nodes, summaries and headers included, so capped.
  const sent = Math.min(sending.sent?.() ?? 0, sending.size)
  if (sent === 0) return
  err.write(
    `stream-segment: ${formatBytes(sent)} of ${formatBytes(sending.size)} sent; the same put run again within ` +
      `${DEFAULT_RESUME_MAX_AGE_MS / 60_000} minutes resumes from there (--no-resume starts over)\n`,
  )
}

/** A regular file, by reference, with the spec's defaults (the dirty limits do not apply to it). */
async function putByReference(
  fh: FileHandle,
  store: ObjectStore,
  settings: Partial<Settings>,
  signal: AbortSignal,
  err: Out,
  resume: boolean,
  sending: Sending,
): Promise<PutResult> {
  let bytes = 0
  let stop: (() => void) | undefined
  try {
    const timing = await uploadFile(fh, store, settings, {
      signal,
      resume,
      onStart: (file, size) => {
        bytes = size
        // Bytes kept from an interrupted upload of the file count as sent.
        const sent = () => file.progress.uploadedBytes + fileState(file).uploader.reusedBytes
        sending.size = size
        sending.sent = sent
        const sample = () => ({ done: sent(), total: size, requestsInFlight: file.progress.requestsInFlight })
        if (err.isTTY) stop = showProgress(err, sample, progressLine)
      },
    })
    return { by: 'reference', bytes, timing, resume }
  } finally {
    stop?.()
  }
}

/**
 * The stream of a source that is not a regular file. A FIFO (a named pipe, or a shell's
 * `<(command)`) is read as stdin is, through the event loop: a file read waits in a
 * thread of the pool, where no abort reaches it, so a put interrupted while its writer
 * neither writes nor closes would wait for that writer (the close of `fh` waits for the
 * read), and the process could not exit. It is read through a second, non-blocking
 * descriptor of the same pipe (the socket closes it); `fh` stays open until the put ends.
 * Anything else (a character device) is read as a file.
 */
function sourceStream(fh: FileHandle, st: Stats, path: string): Readable {
  if (!st.isFIFO()) return fh.createReadStream({ highWaterMark: MiB, autoClose: false })
  let fd: number
  try {
    fd = openSync(`/dev/fd/${fh.fd}`, constants.O_RDONLY | constants.O_NONBLOCK)
  } catch (e) {
    // `fh` is non-blocking (openLocalFile): its reads would take no writer yet for the end.
    throw StreamSegmentError.invalidArgument(
      `${path}: a FIFO, which here is read only through /dev/fd, and /dev/fd/${fh.fd} cannot be opened (${(e as Error).message})`,
    )
  }
  return new Socket({ fd, readable: true, writable: false })
}

/** A producer command run as a child process: its stdout is the input; stdin and stderr are ours. */
function startProducer(argv: readonly string[]): {
  process: ChildProcess
  stdout: Readable
  exit: Promise<string | undefined>
} {
  const [cmd, ...args] = argv as [string, ...string[]]
  const child = spawn(cmd, args, { stdio: ['inherit', 'pipe', 'inherit'] })
  // Why the producer failed, or undefined when it exited 0.
  const exit = new Promise<string | undefined>((resolve) => {
    child.once('error', (e) => resolve(`${cmd} could not start: ${e.message}`))
    child.once('close', (code, sig) =>
      resolve(
        code === 0 ? undefined : `${argv.join(' ')} ${sig ? `was killed by ${sig}` : `exited with code ${code}`}`,
      ),
    )
  })
  return { process: child, stdout: child.stdout as Readable, exit }
}

/** How long a producer still running after a failure has to exit on SIGTERM before SIGKILL. */
const PRODUCER_GRACE_MS = 2000

/**
 * Stops a producer still running after a failure: SIGTERM, then SIGKILL if it has not exited
 * within PRODUCER_GRACE_MS (one that ignores SIGTERM would keep the failed put waiting).
 */
function stopProducer(child: ChildProcess): void {
  child.stdout?.destroy() // the put is over: a grandchild holding the pipe keeps nothing waiting
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), PRODUCER_GRACE_MS)
  child.once('exit', () => clearTimeout(timer))
}

/**
 * All-or-nothing input: a stage between the input and the write stream that lets the end
 * of the input through (so that the write stream commits) only when the producer exited
 * 0 and exactly `size` bytes came; otherwise the put fails with ERR_ABORTED and the write
 * stream publishes nothing.
 */
function completeWhen(check: {
  size: number | undefined
  child: { exit: Promise<string | undefined> } | undefined
}): Transform | undefined {
  if (check.size === undefined && check.child === undefined) return undefined
  let bytes = 0
  const refuse = (why: string) => StreamSegmentError.aborted(`${why}: nothing was published`)
  return new Transform({
    transform(chunk: Buffer, _encoding, cb) {
      bytes += chunk.byteLength
      if (check.size !== undefined && bytes > check.size) cb(refuse(`more than --size ${check.size} bytes came`))
      else cb(null, chunk)
    },
    flush(cb) {
      ;(check.child?.exit ?? Promise.resolve(undefined)).then((failed) => {
        if (failed !== undefined) cb(refuse(failed))
        else if (check.size !== undefined && bytes !== check.size) {
          cb(refuse(`${bytes} bytes came, --size says ${check.size}`))
        } else cb()
      }, cb)
    },
  })
}

/** A stream, by value, through the write stream (its streaming profile). */
async function putByValue(
  input: Readable,
  source: string,
  store: ObjectStore,
  settings: Partial<Settings>,
  signal: AbortSignal,
  err: Out,
  gate?: Transform,
  wal?: WalOptions,
  progress = true,
): Promise<PutResult> {
  // Files, pipes, sockets and a child's stdout hand over a new buffer for every chunk.
  const writer = createStreamSegmentWriteStream({ store, signal, adoptChunks: true, ...settings, ...(wal && { wal }) })
  const sample = () => ({ done: writer.bytesWritten, requestsInFlight: writer.file?.progress.requestsInFlight ?? 0 })
  const stop = progress && err.isTTY ? showProgress(err, sample, progressLine) : undefined
  try {
    await (gate === undefined ? pipeline(input, writer) : pipeline(input, gate, writer))
  } catch (e) {
    throw fsError(e, source)
  } finally {
    stop?.()
  }
  return { by: 'value', bytes: writer.bytesWritten, timing: writer.flushTiming as FlushTiming, resume: false }
}
