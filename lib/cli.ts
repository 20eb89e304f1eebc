/**
 * The `stream-segment` command. Every failure prints one line, `stream-segment: CODE: message`,
 * and exits with a code per error kind (EXIT_CODES); the stack only when DEBUG is set.
 * Data goes to stdout only for `get` to `-`; everything else a command reports goes to
 * stdout (tables, or JSON with --json), progress to stderr on a TTY.
 */

import { type ChildProcess, spawn } from 'node:child_process'
import { fstatSync } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import { cpus as cpuInfo } from 'node:os'
import { type Readable, Transform, type Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parseArgs as parseArgv } from 'node:util'
import {
  type ExportTarget,
  exportObject,
  gc,
  inspectCheckpoint,
  listCheckpoints,
  type Problem,
  removeContainer,
  verifyCheckpoint,
} from './admin/index.js'
import { type ErrorCode, StreamSegmentError } from './errors.js'
import { MAX_CNO } from './format/pointer.js'
import { isSettingName, type Settings, SPEC_DEFAULTS } from './settings.js'
import { fileUrlPath, openStore } from './store/open.js'
import type { ObjectStore } from './store/types.js'
import { type BenchResult, benchStore } from './streams/bench.js'
import { downloadFile } from './streams/download-file.js'
import { createStreamSegmentReadStream } from './streams/read-stream.js'
import { openLocalFile, uploadFile } from './streams/upload-file.js'
import { createStreamSegmentWriteStream } from './streams/write-stream.js'
import { optionalRequire } from './util/optional-require.cjs'
import type { WalSync } from './wal/log.js'
import { inspectWal, type WalOptions } from './wal/wal.js'
import type { FlushTiming } from './write/flush.js'

export const EXIT_CODES: Record<ErrorCode | 'usage', number> = {
  usage: 2,
  ERR_INVALID_ARGUMENT: 2,
  ERR_NOT_FOUND: 3,
  ERR_CORRUPT: 4,
  ERR_UNSUPPORTED: 5,
  ERR_CONFLICT: 6,
  ERR_STORE: 7,
  ERR_ABORTED: 8,
  ERR_RANGE: 9,
  ERR_STATE: 10,
  ERR_TIMEOUT: 11,
  ERR_AUTH: 12,
  ERR_INTERNAL: 70,
}

/** What each exit code means to someone at the command line (the --help table). */
const EXIT_MEANINGS: Record<ErrorCode, string> = {
  ERR_INVALID_ARGUMENT: 'usage: no or unknown command, unknown option, bad value or URL',
  ERR_NOT_FOUND: 'no such container, checkpoint, bucket or file',
  ERR_CORRUPT: 'bytes on storage fail a check',
  ERR_UNSUPPORTED: 'a layout version newer than this build',
  ERR_CONFLICT: 'another writer got there first',
  ERR_STORE: 'the store failed (network, 5xx, throttling)',
  ERR_ABORTED: 'interrupted (Ctrl-C)',
  ERR_RANGE: 'a range starting at or past the end',
  ERR_STATE: 'wrong state (e.g. a file that changed while being uploaded)',
  ERR_TIMEOUT: 'a request or a call ran past its time limit',
  ERR_AUTH: 'the store refused the credentials or the permission',
  ERR_INTERNAL: 'a bug: please report it',
}

function exitCodeTable(): string {
  const codes = (Object.keys(EXIT_MEANINGS) as ErrorCode[]).sort((a, b) => EXIT_CODES[a] - EXIT_CODES[b])
  const width = Math.max(...codes.map((c) => c.length))
  return [
    `   0  ${''.padEnd(width)}  success`,
    ...codes.map((c) => `${String(EXIT_CODES[c]).padStart(4)}  ${c.padEnd(width)}  ${EXIT_MEANINGS[c]}`),
  ].join('\n')
}

/** Text wrapped at spaces to lines of at most `width` characters, each starting with `indent`. */
function wrap(text: string, indent: string, width: number): string {
  const lines: string[] = []
  let line = ''
  for (const word of text.split(' ')) {
    if (line !== '' && indent.length + line.length + 1 + word.length > width) {
      lines.push(indent + line)
      line = word
    } else line = line === '' ? word : `${line} ${word}`
  }
  return [...lines, indent + line].join('\n')
}

const USAGE = `Usage: stream-segment <command> [options]

Write large byte streams to object storage as StreamSegment checkpoints, and read them back.

Commands:
  put <file|-> <url> [--<setting> <value>…] [--no-resume] [--json]
                   write a file as a new checkpoint, replacing the content; prints the FlushTiming.
                   A regular file goes by reference (read as its objects are sent, the spec's
                   defaults); stdin (-), a pipe, a FIFO or a device by value (streaming profile).
                   A regular file's put interrupted (a crash, a kill, Ctrl-C) resumes: run again,
                   it keeps what was sent of the same file (same size and mtime), each piece
                   checked against the file, and says how many bytes it kept; --no-resume
                   sends everything again
                   --size N: publish only if exactly N bytes came (stdin or a command)
                   --wal DIR [--wal-sync always|interval|none]: log the stream (stdin or a
                   command) in DIR first; if the process dies after the input ended, the next
                   put or open with DIR publishes it; a stream cut short is dropped
  put <url> [--size N] [--<setting> <value>…] -- <command> [args…]
                   run the command and write its stdout as a new checkpoint, published only when
                   it exits 0 (else ERR_ABORTED, exit 8, nothing published)
  get <url> [file|-] [-o file] [--range a-b] [--cno N] [--json]
                   read the file (or bytes a..b, inclusive; "a-" to the end; clipped to the
                   end, ERR_RANGE when a is past it) to a file (-o, --output) or stdout (-).
                   With no file it refuses to write to a terminal; --json reports as JSON
  ls <url> [--json]              list checkpoints (cno, size, objects, bytes, bytes only it holds,
                                 time, state) and the bytes the container stores
  inspect <url> [--cno N] [--json]
                   every object of a checkpoint: name, size, header fields, counts, dead slots
  inspect --wal <dir> [--json]
                   a write-ahead log folder: its container, files, records, a torn tail, the lock
  verify <url> [--cno N] [--json]
                   check every header, summary, node and block CRC reachable from a checkpoint;
                   exits 4 (ERR_CORRUPT), 3 (ERR_NOT_FOUND) or 5 (ERR_UNSUPPORTED) when
                   anything is wrong
  gc <url> [--keep N] [--keep-cnos a,b] [--keep-newer-than T] [--grace T] [--dry-run] [--json]
                   keep the N newest checkpoints (default 1) and delete the objects no kept
                   checkpoint reaches, once older than the grace period (default 1h); T is
                   milliseconds or a number with s, m, h or d
  rm <url> [--yes] [--json]
                   delete every object of the container, the inode last (--yes on a terminal)
  export <url> <s3://bucket/key|file> [--cno N] [--content-type T] [--no-copy] [--json]
                   write a checkpoint (default: the published one) as one plain object or file
                   that any S3 tool reads; S3 to S3 copies server-side what it can; prints the
                   bytes copied server-side and the bytes sent. Nothing is left on failure
  bench <url> [--size N] [--rounds N] [--json]
                   measure the store at <url>, which must hold nothing: each round writes N
                   bytes (default 256M, at least 1M) through the write stream, reads them back
                   through the read stream (checked), then puts and gets the same bytes as plain
                   16 MiB objects; prints MiB/s and CPU-s/GiB of each (median of --rounds,
                   default 3), and deletes everything it wrote, also on failure or Ctrl-C

Options:
  -h, --help       show this help
  -v, --version    print the version
Options are --name value or --name=value, multi-word names in kebab or camel case; after --
every argument is a positional one (a file named -x: put -- -x URL).

Settings for put, by their names or in kebab case, sizes with K/M/G (binary) suffixes:
${wrap(Object.keys(SPEC_DEFAULTS).join(', '), '  ', 92)}
--format stream|parted chooses a new container's layout: StreamSegment (tail first, sent
while written, the default) or PartedSegment (head first, each object built whole).
Reads take --read-get-max-bytes, --read-max-concurrency, --read-summary-cache-bytes and
--read-ahead-bytes.

Container URLs: s3://bucket/prefix, file:///dir or a directory path, mem://name (schemes in
any case). Anything else that starts like a URL (s3:/x, gs://, https://) is refused; a local
directory whose name has a colon is given as ./name.

Exit codes:
${exitCodeTable()}
Set DEBUG=stream-segment:* to log requests and flushes (DEBUG set also prints stacks).
`

const KiB = 1024
const MiB = 1024 * KiB
const PROGRESS_MS = 250

export function version(): string {
  return optionalRequire<{ version: string }>('../../../../package.json')?.version ?? 'unknown'
}

/** What a command accepts besides its positional arguments. */
interface CommandSpec {
  /** Options taking a value, in camelCase; each is accepted in kebab case too. */
  values?: readonly string[]
  /** Options taking no value (flags), likewise. */
  flags?: readonly string[]
  /** One-letter aliases: letter → option. */
  short?: Readonly<Record<string, string>>
}

interface Parsed {
  positional: string[]
  /** Options by their camelCase names. */
  options: Map<string, string>
  flags: Set<string>
  /** Each option as it was typed (`--keep-cnos`, `-o`), for messages. */
  typed: Map<string, string>
  help: boolean
  /** How many positionals came before a `--` ending the options (undefined: there was none). */
  beforeTerminator?: number
}

/**
 * The arguments after the command, tokenized by node:util's parseArgs (`--name value`,
 * `--name=value`, `-o value`, `--` ending the options, `-` a positional) and checked here,
 * so that every mistake is one line naming the option.
 */
function parseCommand(args: readonly string[], spec: CommandSpec): Parsed {
  const config: Record<string, { type: 'string' | 'boolean'; short?: string }> = {}
  const kinds = new Map<string, 'string' | 'boolean'>([['help', 'boolean']])
  for (const name of spec.values ?? []) kinds.set(name, 'string')
  for (const name of spec.flags ?? []) kinds.set(name, 'boolean')
  for (const [name, type] of kinds) {
    config[name] = { type }
    config[kebab(name)] = { type }
  }
  const short: Record<string, string> = { h: 'help', ...spec.short }
  for (const [letter, name] of Object.entries(short))
    config[name] = { ...config[name], type: kinds.get(name) ?? 'boolean', short: letter }
  const { tokens } = parseArgv({
    args: [...args],
    options: config,
    strict: false,
    allowPositionals: true,
    tokens: true,
  })
  const p: Parsed = { positional: [], options: new Map(), flags: new Set(), typed: new Map(), help: false }
  if (tokens.some((t) => t.kind === 'option' && t.name === 'help')) return { ...p, help: true }
  for (const t of tokens) {
    if (t.kind === 'positional') p.positional.push(t.value)
    if (t.kind === 'option-terminator') p.beforeTerminator = p.positional.length
    if (t.kind !== 'option') continue
    const name = camel(t.name)
    const kind = kinds.get(name)
    if (kind === undefined)
      throw StreamSegmentError.invalidArgument(`unknown option ${t.rawName} (see stream-segment --help)`)
    p.typed.set(name, t.rawName)
    if (kind === 'boolean') {
      if (t.value !== undefined) throw StreamSegmentError.invalidArgument(`option ${t.rawName} takes no value`)
      p.flags.add(name)
      continue
    }
    // `--cno --json`: the next argument is another option, not this one's value.
    if (t.value === undefined || (!t.inlineValue && t.value.length > 1 && t.value.startsWith('-'))) {
      const got =
        t.value === undefined ? '' : ` (got ${t.value}; if that is the value, write --${kebab(name)}=${t.value})`
      throw StreamSegmentError.invalidArgument(`option ${t.rawName} needs a value${got}`)
    }
    p.options.set(name, t.value)
  }
  return p
}

function camel(s: string): string {
  return s.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())
}

function kebab(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
}

/** An option's name for messages: as typed, else in kebab case. */
function optionName(p: Parsed, name: string): string {
  return p.typed.get(name) ?? `--${kebab(name)}`
}

/** An integer, with an optional binary size suffix (K, KiB, M, MiB, G, GiB); `option` names it in messages. */
function parseSize(option: string, text: string): number {
  const m = /^(\d+)\s*(k|ki|kib|m|mi|mib|g|gi|gib)?b?$/i.exec(text.trim())
  const unit = { k: KiB, m: MiB, g: 1024 * MiB }[(m?.[2]?.[0] ?? '').toLowerCase() as 'k' | 'm' | 'g'] ?? 1
  const n = m ? Number(m[1]) * unit : Number.NaN
  if (!Number.isSafeInteger(n))
    throw StreamSegmentError.invalidArgument(`option ${option}: ${JSON.stringify(text)} is not a size`)
  return n
}

function positionals(p: Parsed, min: number, max: number, usage: string): string[] {
  if (p.positional.length < min || p.positional.length > max) {
    throw StreamSegmentError.invalidArgument(`usage: stream-segment ${usage}`)
  }
  return p.positional
}

function cnoOption(p: Parsed): number | undefined {
  const v = p.options.get('cno')
  if (v === undefined) return undefined
  if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > MAX_CNO)
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'cno')}: ${JSON.stringify(v)} is not a checkpoint number (1..${MAX_CNO})`,
    )
  return Number(v)
}

const READ_OPTIONS = ['readGetMaxBytes', 'readMaxConcurrency', 'readSummaryCacheBytes', 'readAheadBytes'] as const

function readOptions(p: Parsed): Partial<Record<(typeof READ_OPTIONS)[number], number>> {
  const out: Partial<Record<(typeof READ_OPTIONS)[number], number>> = {}
  for (const name of READ_OPTIONS) {
    const v = p.options.get(name)
    if (v !== undefined) out[name] = parseSize(optionName(p, name), v)
  }
  return out
}

/** A file-system error as the library's: a missing path is ERR_NOT_FOUND, anything else a bad argument. */
function fsError(err: unknown, what: string): unknown {
  const code = (err as { code?: unknown }).code
  if (StreamSegmentError.is(err) || typeof code !== 'string') return err
  if (code === 'ENOENT') return StreamSegmentError.notFound(`${what}: no such file or directory`)
  return StreamSegmentError.invalidArgument(`${what}: ${(err as Error).message}`)
}

function formatBytes(n: number): string {
  if (n < KiB) return `${Math.round(n)} B`
  if (n < MiB) return `${(n / KiB).toFixed(1)} KiB`
  if (n < 1024 * MiB) return `${(n / MiB).toFixed(1)} MiB`
  return `${(n / 1024 / MiB).toFixed(2)} GiB`
}

function table(rows: Array<Array<string | number>>, right: boolean[]): string {
  const cells = rows.map((r) => r.map(String))
  const widths = cells[0]?.map((_, j) => Math.max(...cells.map((r) => (r[j] ?? '').length))) ?? []
  return cells
    .map((r) =>
      r
        .map((c, j) => (right[j] ? c.padStart(widths[j] as number) : c.padEnd(widths[j] as number)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
}

type Out = NodeJS.WritableStream & { isTTY?: boolean }

function stdinIsDirectory(): boolean {
  try {
    return fstatSync(0).isDirectory()
  } catch {
    return false // no stdin: reading it fails on its own
  }
}

// --- commands ---

async function put(p: Parsed, out: Out, err: Out): Promise<number> {
  // `put <url> -- <command> [args…]`: the producer's stdout, published only when it exits 0.
  const producer = p.beforeTerminator === 1 && p.positional.length > 1 ? p.positional.slice(1) : undefined
  const [source, url] =
    producer === undefined
      ? (positionals(p, 2, 2, 'put <file|-> <url> [--size N] [--<setting> <value>…] [--no-resume] [--json]') as [
          string,
          string,
        ])
      : ['-', p.positional[0] as string]
  const sizeText = p.options.get('size')
  const size = sizeText === undefined ? undefined : parseSize(optionName(p, 'size'), sizeText)
  if (size !== undefined && source !== '-') {
    throw StreamSegmentError.invalidArgument(`option ${optionName(p, 'size')} is for stdin or a command, not a file`)
  }
  const wal = walOption(p)
  if (wal !== undefined && source !== '-') {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'wal')} is for stdin or a command: a regular file goes by reference, not through a log`,
    )
  }
  const resume = !p.flags.has('noResume')
  if (!resume && source === '-') {
    throw StreamSegmentError.invalidArgument('option --no-resume is for a file: stdin or a command never resumes')
  }
  const settings: Partial<Record<keyof Settings, unknown>> = {}
  for (const [name, value] of p.options) {
    if (name === 'size' || name === 'wal' || name === 'walSync') continue
    if (!isSettingName(name)) throw StreamSegmentError.internal(`put: option --${name} is not a setting`)
    // String settings (format, conflictPolicy) are taken as given; resolveSettings checks them.
    settings[name] = typeof SPEC_DEFAULTS[name] === 'string' ? value : parseSize(optionName(p, name), value)
  }
  const store = openStore(url)
  if (source === '-' && producer === undefined && stdinIsDirectory()) {
    // A shell's `< dir` gives a descriptor that reads as an empty file: that is no content.
    throw StreamSegmentError.invalidArgument('-: stdin is a directory')
  }
  const fh = source === '-' ? undefined : await openLocalFile(source)
  const child = producer === undefined ? undefined : startProducer(producer)
  const ac = new AbortController()
  const onSigint = () => ac.abort(new Error('interrupted (SIGINT)'))
  process.once('SIGINT', onSigint)
  const t0 = performance.now()
  let r: PutResult
  try {
    const st = await fh?.stat()
    if (st?.isDirectory()) throw StreamSegmentError.invalidArgument(`${source}: is a directory`)
    // A regular file goes by reference: its blocks are read when their objects are sent.
    // Anything else (stdin, a pipe, a FIFO, a device) can be read only once, in order.
    r = st?.isFile()
      ? await putByReference(fh as FileHandle, store, settings as Partial<Settings>, ac.signal, err, resume)
      : await putByValue(
          fh?.createReadStream({ highWaterMark: MiB, autoClose: false }) ?? child?.stdout ?? process.stdin,
          producer === undefined ? source : producer.join(' '),
          store,
          settings as Partial<Settings>,
          ac.signal,
          err,
          completeWhen({ size, child }),
          wal,
        )
  } catch (e) {
    // The file source says the file ended early, not which file.
    if (StreamSegmentError.is(e, 'ERR_STATE') && !e.message.includes(source)) {
      throw new StreamSegmentError('ERR_STATE', `${source}: ${e.message}`, { cause: e })
    }
    throw e
  } finally {
    process.removeListener('SIGINT', onSigint)
    await fh?.close()
    child?.process.kill('SIGTERM') // a producer still running after a failure is stopped
  }
  const seconds = (performance.now() - t0) / 1000
  const { bytes, by, timing: t } = r
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify({ url: store.url, by, bytes, seconds, flushTiming: t })}\n`)
    return 0
  }
  out.write(
    `committed checkpoint ${t.cno} of ${store.url}: ${formatBytes(bytes)} by ${by} in ${seconds.toFixed(2)} s ` +
      `(${formatBytes(bytes / seconds)}/s), ${t.objects} objects\n` +
      `flush: ${t.totalMs.toFixed(1)} ms (data ${t.dataMs.toFixed(1)}, part 0 ${t.part0Ms.toFixed(1)}, inode ${t.inodeMs.toFixed(1)}), ` +
      `${t.conflicts} conflicts\n` +
      `sent ahead ${formatBytes(t.streamSentBytes)}, written by the flush ${formatBytes(t.streamFlushBytes)}, ` +
      `dead ${formatBytes(t.streamDeadBytes)}, meta ${formatBytes(t.streamMetaBytes)}\n` +
      (by === 'reference'
        ? `reused ${formatBytes(t.reusedBytes)} sent before by an interrupted upload of this file\n`
        : ''),
  )
  return 0
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
}

/** A regular file, by reference, with the spec's defaults (the dirty limits do not apply to it). */
async function putByReference(
  fh: FileHandle,
  store: ObjectStore,
  settings: Partial<Settings>,
  signal: AbortSignal,
  err: Out,
  resume: boolean,
): Promise<PutResult> {
  let bytes = 0
  let stop: (() => void) | undefined
  try {
    const timing = await uploadFile(fh, store, settings, {
      signal,
      resume,
      onStart: (file, size) => {
        bytes = size
        const sample = () => {
          const { uploadedBytes, requestsInFlight } = file.progress
          // Bytes kept from an interrupted upload of the file count as done.
          return { done: uploadedBytes + file.core.uploader.reusedBytes, total: size, requestsInFlight }
        }
        if (err.isTTY) stop = showProgress(err, sample, progressLine)
      },
    })
    return { by: 'reference', bytes, timing }
  } finally {
    stop?.()
  }
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
): Promise<PutResult> {
  // Files, pipes, sockets and a child's stdout hand over a new buffer for every chunk.
  const writer = createStreamSegmentWriteStream({ store, signal, adoptChunks: true, ...settings, ...(wal && { wal }) })
  const sample = () => ({ done: writer.bytesWritten, requestsInFlight: writer.file?.progress.requestsInFlight ?? 0 })
  const stop = err.isTTY ? showProgress(err, sample, progressLine) : undefined
  try {
    await (gate === undefined ? pipeline(input, writer) : pipeline(input, gate, writer))
  } catch (e) {
    throw fsError(e, source)
  } finally {
    stop?.()
  }
  return { by: 'value', bytes: writer.bytesWritten, timing: writer.flushTiming as FlushTiming }
}

export interface ProgressSample {
  /** Bytes done: uploaded (by reference) or taken in (by value). */
  done: number
  /** Bytes to do, when known (by reference: the file's size). */
  total?: number
  /** Requests with bodies in flight (SegmentFile.progress). */
  requestsInFlight: number
}

/**
 * The put progress line: bytes done (of the total, with a percentage, when known), the
 * rate, requests in flight. Uploaded bytes count block-map nodes, summaries, headers and
 * objects sent again too, so `done` is capped at `total`.
 */
export function progressLine(s: ProgressSample, seconds: number): string {
  const done = s.total === undefined ? s.done : Math.min(s.done, s.total)
  const pct = s.total ? Math.floor((done / s.total) * 100) : 100
  const amount = s.total === undefined ? formatBytes(done) : `${formatBytes(done)} of ${formatBytes(s.total)} (${pct}%)`
  const rate = seconds > 0 ? `${formatBytes(done / seconds)}/s` : '-'
  const n = s.requestsInFlight
  return `put: ${amount}  ${rate}  ${n} ${n === 1 ? 'request' : 'requests'} in flight`
}

/**
 * Draws a progress line, `line` of what `sample` gives, on `err` now and a few times a
 * second; the function returned draws it once more, as it ends, then clears it.
 */
function showProgress<S>(err: Out, sample: () => S, line: (s: S, seconds: number) => string): () => void {
  const t0 = performance.now()
  const draw = () => err.write(`\r\x1b[K${line(sample(), (performance.now() - t0) / 1000)}`)
  draw()
  const timer = setInterval(draw, PROGRESS_MS)
  return () => {
    clearInterval(timer)
    draw()
    err.write('\r\x1b[K')
  }
}

/** Bytes done of a command's work, and the total when it is known. */
interface Amount {
  done: number
  total?: number
}

/**
 * The progress line of `verb` (get, export, verify): bytes done of the total, with a
 * percentage, or bytes alone when the total is not known.
 */
function amountLine(verb: string): (s: Amount) => string {
  return (s) => {
    if (s.total === undefined) return `${verb}: ${formatBytes(s.done)}`
    const pct = s.total > 0 ? Math.floor((Math.min(s.done, s.total) / s.total) * 100) : 100
    return `${verb}: ${formatBytes(s.done)} of ${formatBytes(s.total)} (${pct}%)`
  }
}

const GET_USAGE = 'get <url> [file|-] [-o file] [--range a-b] [--cno N] [--json]'

async function get(p: Parsed, out: Out, err: Out): Promise<number> {
  const [url, file] = positionals(p, 1, 2, GET_USAGE) as [string, string | undefined]
  const output = p.options.get('output')
  if (file !== undefined && output !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `get: two targets, ${file} and ${optionName(p, 'output')} ${output}: give one (usage: stream-segment ${GET_USAGE})`,
    )
  }
  const target = file ?? output ?? '-'
  const json = p.flags.has('json')
  if (target === '-' && json) {
    throw StreamSegmentError.invalidArgument(
      'get --json reports on stdout, where the data would go: give a file (get URL FILE, or -o FILE)',
    )
  }
  let start: number | undefined
  let end: number | undefined
  const range = p.options.get('range')
  const rangeName = optionName(p, 'range')
  if (range !== undefined) {
    const m = /^(\d+)-(\d*)$/.exec(range)
    if (!m) throw StreamSegmentError.invalidArgument(`option ${rangeName}: ${JSON.stringify(range)} is not a-b or a-`)
    start = Number(m[1])
    if (!Number.isSafeInteger(start)) {
      throw StreamSegmentError.invalidArgument(`option ${rangeName}: ${m[1]} is past any file`)
    }
    // An end past the file is clipped to it, however far past.
    end = m[2] === '' ? undefined : Math.min(Number(m[2]), Number.MAX_SAFE_INTEGER)
    if (end !== undefined && end < start) {
      throw StreamSegmentError.invalidArgument(`option ${rangeName}: ${range} ends before it starts`)
    }
  }
  const cno = cnoOption(p)
  const reads = readOptions(p)
  const store = openStore(url)
  // Binary data on a terminal garbles it: only when asked for explicitly (`-`, `-o -`).
  if (target === '-' && file === undefined && output === undefined && out.isTTY) {
    throw StreamSegmentError.invalidArgument(
      'get: not writing binary data to a terminal: give a file (get URL FILE, or -o FILE), ' +
        'redirect stdout, or give - to write to the terminal anyway',
    )
  }
  const ac = new AbortController()
  const onSigint = () => ac.abort(new Error('interrupted (SIGINT)'))
  process.once('SIGINT', onSigint)
  // On a terminal, a progress line on stderr while a file is written.
  let stopProgress: (() => void) | undefined
  let done = 0
  const clearProgress = () => {
    stopProgress?.()
    stopProgress = undefined
  }
  // A range starting at or past the end of the file reads nothing, which here is an error
  // rather than an empty result.
  const pastEnd = (size: number, which: string) => {
    if (start === undefined || start < size) return
    throw StreamSegmentError.range(
      `option ${rangeName} ${range}: starts at byte ${start}, at or past the end of ${which} ` +
        `(${size} bytes${size > 0 ? `, bytes 0-${size - 1}` : ''})`,
    )
  }
  try {
    if (target === '-') {
      const rs = createStreamSegmentReadStream({ store, start, end, cno, signal: ac.signal, ...reads })
      await pipeline(rs, out as Writable)
      pastEnd(rs.size, `checkpoint ${rs.file?.cno} of ${store.url}`)
      return 0
    }
    // Into a temporary file, renamed into place once complete (downloadFile).
    const { readAheadBytes: _toStdoutOnly, ...fileReads } = reads
    const got = await downloadFile(store, target, {
      start,
      end,
      cno,
      signal: ac.signal,
      ...fileReads,
      onStart: (file, total) => {
        pastEnd(file.size, `checkpoint ${file.cno} of ${store.url}`)
        if (err.isTTY) stopProgress = showProgress(err, () => ({ done, total }), amountLine('get'))
      },
      onProgress: (d) => {
        done = d
      },
    })
    clearProgress()
    const t = got.timing
    const requests = Object.values(t.requests).reduce((a, b) => a + b, 0)
    if (json) {
      const r = {
        url: store.url,
        cno: got.cno,
        size: got.size,
        file: target,
        bytes: got.bytes,
        seconds: got.seconds,
        requests,
        timing: t,
      }
      out.write(`${JSON.stringify(r)}\n`)
    } else {
      out.write(
        `got ${formatBytes(got.bytes)} of checkpoint ${got.cno} into ${target} in ${got.seconds.toFixed(2)} s ` +
          `(${formatBytes(got.bytes / got.seconds)}/s, ${requests} requests)\n`,
      )
    }
  } catch (e) {
    if ((e as { code?: string }).code === 'EPIPE') return 0 // the reader of stdout went away
    throw e
  } finally {
    process.removeListener('SIGINT', onSigint)
    clearProgress()
  }
  return 0
}

async function ls(p: Parsed, out: Out): Promise<number> {
  const [url] = positionals(p, 1, 1, 'ls <url> [--json]')
  const store = openStore(url as string)
  const list = await listCheckpoints(store)
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify({ url: store.url, ...list })}\n`)
    return 0
  }
  const rows: Array<Array<string | number>> = [['cno', 'size', 'objects', 'bytes', 'only', 'time', 'state']]
  for (const c of list.checkpoints) {
    rows.push([
      c.cno,
      c.size,
      c.objects,
      c.bytes,
      c.uniqueBytes < 0 ? '?' : c.uniqueBytes,
      c.timeMs ? new Date(c.timeMs).toISOString() : '-',
      c.error === undefined ? c.state : `${c.state}, unreadable: ${c.error}`,
    ])
  }
  out.write(`${table(rows, [true, true, true, true, true, false, false])}\n`)
  out.write(`stored: ${list.storedBytes} bytes; "only": the bytes only that checkpoint holds, what dropping it frees\n`)
  if (list.inodeError !== undefined) out.write(`inode object unreadable: ${list.inodeError}\n`)
  for (const a of list.abandoned) {
    out.write(`abandoned: checkpoint ${a.cno} (${a.parts} parts, ${a.bytes} bytes, no part 0): not openable\n`)
  }
  return 0
}

async function inspect(p: Parsed, out: Out, err: Out): Promise<number> {
  const walDir = p.options.get('wal')
  if (walDir !== undefined) return inspectWalFolder(p, walDir, out)
  const [url] = positionals(p, 1, 1, 'inspect <url> [--cno N] [--json]')
  const store = openStore(url as string)
  const r = await inspectCheckpoint(store, { cno: cnoOption(p) })
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify(r)}\n`)
    return problemsFound('inspect', r, err)
  }
  out.write(
    `checkpoint ${r.cno} of ${r.url}${r.published ? ' (published)' : ''}: ${r.format}, ${r.size} bytes, ` +
      `blocks ${r.dataBlockSize}, meta blocks ${r.metaBlockSize}, made ${new Date(r.mtimeMs).toISOString()}\n` +
      `block map: height ${r.tree.height}, ${r.tree.nodes} nodes (${r.tree.leaves} leaves), ` +
      `${r.tree.dataPointers} data pointers, ${r.tree.holes} holes; ${r.objects.length} objects\n`,
  )
  const rows: Array<Array<string | number>> = [
    ['object', 'size', 'flags', 'data', 'meta', 'summary', 'dead', 'nodes→', 'blocks→', 'base', 'created'],
  ]
  for (const o of r.objects) {
    const h = o.header
    rows.push([
      `${o.key}${o.own ? '' : ' (older)'}`,
      o.size,
      h?.flags.join(',') || '-',
      h?.dataCount ?? '-',
      h?.metaCount ?? '-',
      h?.summaryCount ?? '-',
      o.deadSlots ?? '-',
      o.reachedNodes,
      o.reachedBlocks,
      h?.baseCno ?? '-',
      h ? new Date(h.createdMs).toISOString() : (o.error ?? '-'),
    ])
  }
  out.write(`${table(rows, [false, true, false, true, true, true, true, true, true, true, false])}\n`)
  for (const pr of r.problems) out.write(`${pr.code} ${pr.what} ${pr.where}: ${pr.message}\n`)
  return problemsFound('inspect', r, err)
}

/** `inspect --wal DIR`: what a replay would find, read without changing anything. */
async function inspectWalFolder(p: Parsed, dir: string, out: Out): Promise<number> {
  positionals(p, 0, 0, 'inspect --wal <dir> [--json]')
  if (p.options.has('cno')) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'cno')} is for a container's checkpoint, not with ${optionName(p, 'wal')}`,
    )
  }
  const r = await inspectWal(dir)
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify(r)}\n`)
    return 0
  }
  const lock = r.lockedBy === undefined ? 'not locked' : `locked by pid ${r.lockedBy.pid} on ${r.lockedBy.host}`
  out.write(
    `WAL ${r.dir} of ${r.container ?? '(no container yet)'}: ${r.records} records, ` +
      `${formatBytes(r.payloadBytes)} written, ${lock}\n`,
  )
  const rows: Array<Array<string | number>> = [['file', 'base cno', 'first record', 'records', 'bytes', 'cut']]
  for (const g of r.generations) {
    rows.push([g.path, g.baseCno, g.firstSeq, g.records, g.bytes, g.cutBytes > 0 ? `${g.cutBytes} bytes` : '-'])
  }
  out.write(`${table(rows, [false, true, true, true, true, false])}\n`)
  for (const g of r.generations) if (g.cutReason !== undefined) out.write(`torn or bad tail: ${g.cutReason}\n`)
  return 0
}

async function verify(p: Parsed, out: Out, err: Out): Promise<number> {
  const [url] = positionals(p, 1, 1, 'verify <url> [--cno N] [--json]')
  const store = openStore(url as string)
  const t0 = performance.now()
  // On a terminal, the bytes read so far, drawn a few times a second.
  let done = 0
  const stop = err.isTTY ? showProgress(err, () => ({ done }), amountLine('verify')) : undefined
  let r: Awaited<ReturnType<typeof verifyCheckpoint>>
  try {
    r = await verifyCheckpoint(store, {
      cno: cnoOption(p),
      onProgress: (b) => {
        done = b
      },
    })
  } finally {
    stop?.()
  }
  const s = (performance.now() - t0) / 1000
  if (p.flags.has('json')) out.write(`${JSON.stringify({ ...r, seconds: s })}\n`)
  else {
    for (const pr of r.problems) out.write(`${pr.code} ${pr.what} ${pr.where}: ${pr.message}\n`)
    out.write(
      `checkpoint ${r.cno} of ${r.url}: ${r.objects} objects, ${r.nodes} nodes, ${r.dataPointers} data pointers, ` +
        `${r.slots} data slots checked, ${formatBytes(r.bytesRead)} read in ${s.toFixed(2)} s: ` +
        `${r.problems.length === 0 ? 'ok' : `${r.problems.length} problems`}\n`,
    )
  }
  return problemsFound('verify', r, err)
}

/** 0 when a report found no problem; else one line on stderr and the exit code of the worst. */
function problemsFound(
  command: string,
  r: { problems: readonly Problem[]; cno: number; url: string },
  err: Out,
): number {
  if (r.problems.length === 0) return 0
  const code = worstCode(r.problems)
  err.write(
    `stream-segment: ${code}: ${command} found ${r.problems.length} problems in checkpoint ${r.cno} of ${r.url}\n`,
  )
  return EXIT_CODES[code]
}

function worstCode(problems: readonly Problem[]): ErrorCode {
  return problems.some((x) => x.code === 'ERR_CORRUPT') ? 'ERR_CORRUPT' : ((problems[0] as Problem).code as ErrorCode)
}

/** A duration: milliseconds, or a number with s, m, h or d; `option` names it in messages. */
function parseDuration(option: string, text: string): number {
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(text.trim())
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m?.[2] ?? 'ms') as 'ms']
  const n = m ? Number(m[1]) * unit : Number.NaN
  if (!Number.isSafeInteger(n)) {
    throw StreamSegmentError.invalidArgument(`option ${option}: ${JSON.stringify(text)} is not a duration`)
  }
  return n
}

async function gcCommand(p: Parsed, out: Out): Promise<number> {
  const [url] = positionals(
    p,
    1,
    1,
    'gc <url> [--keep N] [--keep-cnos a,b] [--keep-newer-than T] [--grace T] [--dry-run] [--json]',
  )
  const number = (name: string, v: string) => {
    if (!/^\d+$/.test(v))
      throw StreamSegmentError.invalidArgument(`option ${optionName(p, name)}: ${JSON.stringify(v)} is not a number`)
    return Number(v)
  }
  const opt = (name: string) => p.options.get(name)
  const duration = (name: string) => {
    const v = opt(name)
    return v === undefined ? undefined : parseDuration(optionName(p, name), v)
  }
  const options = {
    keep: opt('keep') === undefined ? undefined : number('keep', opt('keep') as string),
    keepCnos: opt('keepCnos')
      ?.split(',')
      .map((c) => number('keepCnos', c)),
    keepNewerThanMs: duration('keepNewerThan'),
    graceMs: duration('grace'),
    dryRun: p.flags.has('dryRun'),
  }
  const r = await gc(openStore(url as string), options)
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify(r)}\n`)
    return 0
  }
  const verb = r.dryRun ? 'would delete' : 'deleted'
  out.write(
    `${r.url}: kept checkpoints ${r.kept.join(', ') || 'none'}; dropped ${r.dropped.join(', ') || 'none'}\n` +
      `${verb} ${r.deletedObjects} objects (${formatBytes(r.deletedBytes)}), ` +
      `${r.dryRun ? 'would abort' : 'aborted'} ${r.abortedUploads} uploads; ${formatBytes(r.storedBytes)} stored\n`,
  )
  if (r.youngObjects + r.youngUploads > 0) {
    // Garbage the grace period protects: say so, or a run that frees nothing looks broken.
    out.write(
      `left ${r.youngObjects} unreached objects (${formatBytes(r.youngBytes)}) and ${r.youngUploads} uploads ` +
        `younger than the grace period (${formatDuration(r.graceMs)}): a later gc deletes them ` +
        '(--grace 0 only when no writer is running)\n',
    )
  }
  if (r.stopped !== undefined) out.write(`stopped, nothing deleted: ${r.stopped}\n`)
  return 0
}

/** Milliseconds as parseDuration reads them, in the largest unit that divides them: `1h`, `90s`, `250ms`. */
function formatDuration(ms: number): string {
  for (const [unit, n] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= n && ms % n === 0) return `${ms / n}${unit}`
  }
  return `${ms}ms`
}

async function rm(p: Parsed, out: Out): Promise<number> {
  const [url] = positionals(p, 1, 1, 'rm <url> [--yes] [--json]')
  if (process.stdin.isTTY && !p.flags.has('yes')) {
    throw StreamSegmentError.invalidArgument(`rm deletes every object of ${url}: add --yes to confirm`)
  }
  const r = await removeContainer(openStore(url as string))
  out.write(
    p.flags.has('json')
      ? `${JSON.stringify(r)}\n`
      : `${r.url}: deleted ${r.deletedObjects} objects (${formatBytes(r.deletedBytes)}), aborted ${r.abortedUploads} uploads\n`,
  )
  return 0
}

const EXPORT_USAGE = 'export <url> <s3://bucket/key|file> [--cno N] [--content-type T] [--no-copy] [--json]'

/** `s3://bucket/key` → an S3 target; a path (or file:///path) → itself; other URLs are refused. */
function exportTarget(dest: string, contentType: string | undefined): ExportTarget {
  const s3 = /^s3:\/\/([^/]+)\/(.+)$/i.exec(dest)
  if (s3 !== null) return { Bucket: s3[1] as string, Key: s3[2] as string, ContentType: contentType }
  if (/^s3:/i.test(dest)) {
    throw StreamSegmentError.invalidArgument(`export: ${JSON.stringify(dest)} is not s3://bucket/key`)
  }
  if (contentType !== undefined) {
    throw StreamSegmentError.invalidArgument('export: --content-type applies to an S3 object only')
  }
  if (/^file:\/\//i.test(dest)) return fileUrlPath(dest, 'export')
  if (/^[a-z][a-z0-9+.-]*:\//i.test(dest)) {
    throw StreamSegmentError.invalidArgument(`export: ${JSON.stringify(dest)}: only s3://bucket/key or a file path`)
  }
  return dest
}

async function exportCommand(p: Parsed, out: Out, err: Out): Promise<number> {
  const [url, dest] = positionals(p, 2, 2, EXPORT_USAGE) as [string, string]
  const target = exportTarget(dest, p.options.get('contentType'))
  const store = openStore(url)
  const t0 = performance.now()
  // On a terminal, the bytes copied or sent of the export's size, drawn a few times a
  // second once the first report gives the size.
  let stop: (() => void) | undefined
  let sample: Amount = { done: 0 }
  let r: Awaited<ReturnType<typeof exportObject>>
  try {
    r = await exportObject(store, target, {
      cno: cnoOption(p),
      copy: !p.flags.has('noCopy'),
      onProgress: err.isTTY
        ? (pr) => {
            sample = { done: pr.copiedBytes + pr.sentBytes, total: pr.totalBytes }
            stop ??= showProgress(err, () => sample, amountLine('export'))
          }
        : undefined,
    })
  } finally {
    stop?.()
  }
  const s = (performance.now() - t0) / 1000
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify({ ...r, seconds: s })}\n`)
    return 0
  }
  const pct = r.size === 0 ? 0 : (100 * r.copiedBytes) / r.size
  out.write(
    `exported checkpoint ${r.cno} of ${r.url} to ${r.location}: ${formatBytes(r.size)} (${r.size} bytes) in ${s.toFixed(2)} s\n` +
      `copied server-side ${r.copiedBytes} bytes (${pct.toFixed(1)} %), sent ${r.sentBytes} bytes; ` +
      `${r.parts === 0 ? 'one object' : `${r.parts} parts (${r.copyParts} copied)`}, ` +
      `${r.requests} ${r.requests === 1 ? 'request' : 'requests'}` +
      `${r.etag === undefined ? '' : `, ETag ${r.etag}`}\n`,
  )
  return 0
}

const BENCH_USAGE = 'bench <url> [--size N] [--rounds N] [--json]'

async function benchCommand(p: Parsed, out: Out, err: Out): Promise<number> {
  const [url] = positionals(p, 1, 1, BENCH_USAGE) as [string]
  const sizeText = p.options.get('size')
  const bytes = sizeText === undefined ? 256 * MiB : parseSize(optionName(p, 'size'), sizeText)
  if (bytes < MiB) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'size')}: ${bytes} bytes; at least 1M (1048576): less measures the requests, not the bytes`,
    )
  }
  const roundsText = p.options.get('rounds') ?? '3'
  if (!/^\d+$/.test(roundsText) || Number(roundsText) < 1 || Number(roundsText) > 100) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'rounds')}: ${JSON.stringify(roundsText)} is not a number from 1 to 100`,
    )
  }
  const rounds = Number(roundsText)
  const store = openStore(url)
  const ac = new AbortController()
  const onSigint = () => ac.abort(new Error('interrupted (SIGINT)'))
  process.once('SIGINT', onSigint)
  let r: BenchResult
  try {
    r = await benchStore(store, {
      bytes,
      rounds,
      signal: ac.signal,
      onPass: err.isTTY ? (round, pass) => err.write(`bench: round ${round + 1}/${rounds}: ${pass}\n`) : undefined,
    })
  } finally {
    process.removeListener('SIGINT', onSigint)
  }
  const gib = bytes / (1024 * MiB)
  const passes = [
    ['write stream (16 MiB objects)', r.rounds.map((x) => x.write)],
    ['read stream (cold, every byte checked)', r.rounds.map((x) => x.read)],
    ['store put (16 MiB objects, 4 at once)', r.rounds.map((x) => x.put)],
    ['store get (the same objects, 10 at once)', r.rounds.map((x) => x.get)],
  ] as const
  const rate = (xs: readonly { seconds: number }[]) => xs.map((x) => bytes / MiB / x.seconds)
  const cpu = (xs: readonly { cpuSeconds: number }[]) => xs.map((x) => x.cpuSeconds / gib)
  const ratio = (a: readonly { seconds: number }[], b: readonly { seconds: number }[]) => {
    const ra = rate(a)
    const rb = rate(b)
    return median(ra.map((x, i) => x / (rb[i] as number)))
  }
  const summary = {
    writeToPut: ratio(passes[0][1], passes[2][1]),
    readToGet: ratio(passes[1][1], passes[3][1]),
    firstByteMs: median(r.rounds.map((x) => x.read.firstByteMs)),
  }
  const cpus = cpuInfo()
  const machine = { node: process.version, cpu: cpus[0]?.model.trim() ?? 'unknown', cores: cpus.length }
  if (p.flags.has('json')) {
    out.write(`${JSON.stringify({ ...r, ...summary, machine })}\n`)
    return 0
  }
  const spread = (xs: number[], digits: number) =>
    `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`
  const rows: Array<Array<string | number>> = [['pass', 'MiB/s', 'CPU-s/GiB']]
  for (const [name, xs] of passes) rows.push([name, spread(rate(xs), 0), spread(cpu(xs), 2)])
  out.write(
    `bench of ${r.url}: ${formatBytes(bytes)} per pass, ${rounds} ${rounds === 1 ? 'round' : 'rounds'}, median (min-max); ` +
      `node ${machine.node}, ${machine.cpu} × ${machine.cores} cores\n` +
      `${table(rows, [false, true, true])}\n` +
      `write stream ${summary.writeToPut.toFixed(2)}x the store's put MiB/s, read stream ${summary.readToGet.toFixed(2)}x its get; ` +
      `first byte of a read after ${summary.firstByteMs.toFixed(0)} ms; everything written was deleted\n`,
  )
  return 0
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}

/** Every command: what it accepts, and what runs it. */
const COMMANDS: Record<string, { spec: CommandSpec; run: (p: Parsed, out: Out, err: Out) => Promise<number> }> = {
  put: {
    spec: {
      values: ['size', 'wal', 'walSync', ...Object.keys(SPEC_DEFAULTS).filter(isSettingName)],
      flags: ['json', 'noResume'],
    },
    run: put,
  },
  get: {
    spec: { values: ['range', 'cno', 'output', ...READ_OPTIONS], flags: ['json'], short: { o: 'output' } },
    run: get,
  },
  ls: { spec: { flags: ['json'] }, run: ls },
  inspect: { spec: { values: ['cno', 'wal'], flags: ['json'] }, run: inspect },
  verify: { spec: { values: ['cno'], flags: ['json'] }, run: verify },
  gc: { spec: { values: ['keep', 'keepCnos', 'keepNewerThan', 'grace'], flags: ['json', 'dryRun'] }, run: gcCommand },
  rm: { spec: { flags: ['json', 'yes'] }, run: rm },
  export: { spec: { values: ['cno', 'contentType'], flags: ['json', 'noCopy'] }, run: exportCommand },
  bench: { spec: { values: ['size', 'rounds'], flags: ['json'] }, run: benchCommand },
}

/**
 * Each command's own options as typed (kebab case), for the checks that the help and
 * docs/cli.md name them all: the settings `put` takes and the read options `get` takes
 * are listed once for all, not per command.
 */
export function commandOptions(): Record<string, string[]> {
  const general = new Set<string>([...Object.keys(SPEC_DEFAULTS), ...READ_OPTIONS])
  const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
  return Object.fromEntries(
    Object.entries(COMMANDS).map(([name, { spec }]) => [
      name,
      [...(spec.values ?? []), ...(spec.flags ?? [])].filter((o) => !general.has(o)).map(kebab),
    ]),
  )
}

/**
 * Errors stdout emits: EPIPE (the reader went away) ends the output quietly; the error
 * of a pipeline that destroyed stdout is the command's own, reported once by `main`;
 * anything else (a full disk behind a redirect) is reported here.
 */
function onStdoutError(e: NodeJS.ErrnoException): void {
  if (e.code === 'EPIPE' || e instanceof StreamSegmentError) return
  process.stderr.write(`stream-segment: ERR_STORE: stdout: ${e.message}\n`)
  process.exitCode = EXIT_CODES.ERR_STORE
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(
  argv: readonly string[],
  out: Out = process.stdout,
  err: Out = process.stderr,
): Promise<number> {
  // The SDK's multi-line notice about future Node versions would break the one-line output.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
  // A reader of stdout that went away (`ls | head -1`) ends the output, not the process.
  if (out === process.stdout && process.stdout.listenerCount('error') === 0) process.stdout.on('error', onStdoutError)
  try {
    const [first, ...rest] = argv
    if (first === undefined) {
      // A usage mistake: the usage goes where failures go, stdout stays empty.
      err.write(USAGE)
      return EXIT_CODES.usage
    }
    if (first === '-h' || first === '--help' || first === 'help') {
      out.write(USAGE)
      return 0
    }
    if (first === '-v' || first === '--version') {
      out.write(`${version()}\n`)
      return 0
    }
    const command = Object.hasOwn(COMMANDS, first) ? COMMANDS[first as keyof typeof COMMANDS] : undefined
    if (command === undefined) {
      if (rest.includes('-h') || rest.includes('--help')) {
        out.write(USAGE)
        return 0
      }
      throw StreamSegmentError.invalidArgument(`unknown command ${JSON.stringify(first)} (see stream-segment --help)`)
    }
    const p = parseCommand(rest, command.spec)
    if (p.help) {
      out.write(USAGE)
      return 0
    }
    return await command.run(p, out, err)
  } catch (e) {
    const code = StreamSegmentError.is(e) ? e.code : 'ERR_INTERNAL'
    const message = (e as Error)?.message ?? String(e)
    err.write(`stream-segment: ${code}: ${message.split('\n')[0]}\n`)
    if (process.env.DEBUG) err.write(`${(e as Error)?.stack}\n`)
    return EXIT_CODES[code]
  }
}
