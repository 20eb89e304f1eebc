/**
 * The `stream-segment` command. Every failure prints one line, `stream-segment: CODE: message`,
 * and exits with a code per error kind (EXIT_CODES); the stack only when DEBUG is set.
 * Data goes to stdout only for `get` to `-`; everything else a command reports goes to
 * stdout (tables, or JSON with --json), progress to stderr on a TTY. Ctrl-C, SIGTERM and
 * SIGHUP abort the command through one AbortSignal: it cleans up (temporary files, uploads)
 * and fails with ERR_ABORTED, exit 8.
 */

import { constants as osConstants } from 'node:os'
import {
  type CommandSpec,
  kebab,
  namedAsTyped,
  type Parsed,
  parseCommand,
  READ_OPTIONS,
  unpublishedAsTyped,
} from './cli/args.js'
import { benchCommand } from './cli/bench.js'
import { inspect, ls, verify } from './cli/checkpoints.js'
import { gcCommand, rm } from './cli/cleanup.js'
import { EXIT_CODES, exitCodeTable } from './cli/exit-codes.js'
import { exportCommand } from './cli/export.js'
import { get } from './cli/get.js'
import type { Out } from './cli/output.js'
import { put } from './cli/put.js'
import { StreamSegmentError } from './errors.js'
import { isSettingName, nearest, SPEC_DEFAULTS } from './settings.js'
import { optionalRequire } from './util/optional-require.cjs'
import { printable } from './util/shell-words.js'

export { EXIT_CODES } from './cli/exit-codes.js'
export { type ProgressSample, progressLine } from './cli/output.js'

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
  put <file|-> <url> [--size N] [--wal DIR [--wal-sync M]] [--<setting> <value>…] [--no-resume] [--json]
                   write a file as a new checkpoint, replacing the content; prints the FlushTiming.
                   A regular file goes by reference (read as its objects are sent, the spec's
                   defaults); stdin (-), a pipe, a FIFO or a device by value (streaming profile).
                   A regular file's put interrupted (a crash, a kill, Ctrl-C) resumes: run again,
                   it keeps what was sent of the same file (same size and mtime), each piece
                   checked against the file, and says how many bytes it kept; --no-resume
                   sends everything again
                   --size N: publish only if exactly N bytes came (stdin, a command, a FIFO)
                   --wal DIR [--wal-sync always|interval|none]: log the stream (stdin, a
                   command, a FIFO) in DIR first; if the process dies after the input ended, the
                   next put or open with DIR publishes it; a stream cut short is dropped
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
                   keep the N newest checkpoints (default 1) and those superseded within
                   the grace period, and delete the objects no kept checkpoint reaches,
                   once older than the grace period (default 1h); T is milliseconds or a
                   number with s, m, h or d
  rm <url> [--yes] [--json]
                   delete every object of the container, the inode last (--yes on a terminal)
  export <url> <s3://bucket/key|file> [--cno N] [--content-type T] [--no-copy] [--json]
                   write a checkpoint (default: the published one) as one plain object or file
                   that any S3 tool reads; S3 to S3 copies server-side what it can; prints the
                   bytes copied server-side and the bytes sent. Nothing is left on failure
  bench <url> [--size N] [--rounds N] [--json]
                   measure the store at <url>, which must hold nothing: each round writes N
                   bytes (default 256M, at least 1M, at most 1024G, and no more than the
                   memory of mem:// or the disk of a folder holds) through the write stream,
                   reads them back through the read stream (checked), then puts and gets the
                   same bytes as plain 16 MiB objects; prints MiB/s and CPU-s/GiB of each
                   (median of --rounds, default 3), and deletes everything it wrote, also on
                   failure or Ctrl-C

Options:
  -h, --help       show this help (also after any command); so does help [command]
  -v, --version    print the version
Options are --name value or --name=value, multi-word names in kebab or camel case; after --
every argument is a positional one (a file named -x: put -- -x URL).

Settings for put, by their names or in kebab case, sizes with K/M/G (binary) suffixes,
those in milliseconds (…Ms) as durations like --grace:
${wrap(Object.keys(SPEC_DEFAULTS).join(', '), '  ', 92)}
--format stream|parted chooses a new container's layout: StreamSegment (tail first, sent
while written, the default) or PartedSegment (head first, each object built whole).
Reads take --read-get-max-bytes, --read-max-concurrency, --read-summary-cache-bytes and
--read-ahead-bytes (get to stdout only).

Container URLs: s3://bucket/prefix, file:///dir or a directory path, mem://name (schemes in
any case; mem:// is the command's own memory, gone when it ends: for bench). Anything else
that starts like a URL (s3:/x, gs://, https://) is refused; a local directory whose name
has a colon is given as ./name.

Exit codes:
${exitCodeTable()}
Set DEBUG=stream-segment:* to log requests and flushes (DEBUG set also prints stacks).
`

export function version(): string {
  return optionalRequire<{ version: string }>('../../../../package.json')?.version ?? 'unknown'
}

/** Every command: what it accepts, and what runs it. */
const COMMANDS: Record<
  string,
  { spec: CommandSpec; run: (p: Parsed, out: Out, err: Out, signal: AbortSignal) => Promise<number> }
> = {
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
  return Object.fromEntries(
    Object.entries(COMMANDS).map(([name, { spec }]) => [
      name,
      [...(spec.values ?? []), ...(spec.flags ?? [])].filter((o) => !general.has(o)).map(kebab),
    ]),
  )
}

/** The error that failed stdout, once reported (by onStdoutError): reported once only. */
let stdoutFailed: Error | undefined

/**
 * Errors stdout emits: EPIPE (the reader went away) ends the output quietly; the error
 * of a pipeline that destroyed stdout is the command's own, reported once by `main`;
 * anything else (a full disk behind a redirect) is reported here, once however many
 * writes fail.
 */
function onStdoutError(e: NodeJS.ErrnoException): void {
  if (e.code === 'EPIPE' || e instanceof StreamSegmentError || stdoutFailed !== undefined) return
  stdoutFailed = e
  process.stderr.write(`stream-segment: ERR_STORE: stdout: ${e.message}\n`)
  process.exitCode = EXIT_CODES.ERR_STORE
}

/** The signals that interrupt a command: Ctrl-C, a kill, the terminal going away. */
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const

/**
 * Aborts `ac` on the first of INTERRUPTS, so that the command stops, cleans up (temporary
 * files, uploads) and fails with ERR_ABORTED; the same signal again while it does stops
 * the process at once, as that signal would have. Returns the function that removes the
 * handlers.
 */
function abortOnSignals(ac: AbortController): () => void {
  let first: NodeJS.Signals | undefined
  const handlers = INTERRUPTS.map((sig) => {
    const handler = () => {
      if (first === undefined) {
        first = sig
        ac.abort(new Error(`interrupted (${sig})`))
      } else if (sig === first) {
        remove()
        process.kill(process.pid, sig)
        // Should the signal not end the process (a handler elsewhere), its conventional code.
        process.exit(128 + osConstants.signals[sig])
      }
    }
    process.on(sig, handler)
    return [sig, handler] as const
  })
  const remove = () => {
    for (const [sig, handler] of handlers) process.removeListener(sig, handler)
  }
  return remove
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
  // A stderr that cannot be written (`2>/dev/full`, a closed pipe) loses the message, not the exit code.
  if (err === process.stderr && process.stderr.listenerCount('error') === 0) process.stderr.on('error', () => {})
  const ac = new AbortController()
  let removeHandlers: (() => void) | undefined
  let p: Parsed | undefined
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
      // `lss`, `--hlep`: said as the slip it is, as a misspelt option of a command is.
      const option = first.startsWith('-')
      const near = nearest(first, option ? ['--help', '--version'] : [...Object.keys(COMMANDS), 'help'])
      const meant = near === undefined ? '' : `did you mean ${near}? `
      throw StreamSegmentError.invalidArgument(
        `unknown ${option ? 'option' : 'command'} ${JSON.stringify(first)} (${meant}see stream-segment --help)`,
      )
    }
    p = parseCommand(rest, command.spec)
    if (p.help) {
      out.write(USAGE)
      return 0
    }
    // Kept until the command has returned (and reported): an interrupt after its work is
    // done changes nothing, rather than killing the process before it says so.
    removeHandlers = abortOnSignals(ac)
    return await command.run(p, out, err, ac.signal)
  } catch (caught) {
    // A setting's error names it as the user typed it (--segment-buffer-size), not as the library does.
    let e = p === undefined ? caught : unpublishedAsTyped(namedAsTyped(p, caught))
    // The command's failure to write stdout, reported once by onStdoutError already.
    if (stdoutFailed !== undefined && (e === stdoutFailed || (e as Error)?.cause === stdoutFailed)) {
      return EXIT_CODES.ERR_STORE
    }
    // An interrupt can surface as whatever failed first (a read cut short): it is the interrupt.
    if (ac.signal.aborted && !StreamSegmentError.is(e, 'ERR_ABORTED')) {
      e = StreamSegmentError.aborted(`${argv[0]}: ${(ac.signal.reason as Error).message}`, e)
    } else if (ac.signal.aborted && !(e as Error).message.includes((ac.signal.reason as Error).message)) {
      // The library's own abort (`write to URL aborted`) does not say why: the signal that stopped it.
      e = new StreamSegmentError('ERR_ABORTED', `${(e as Error).message}: ${(ac.signal.reason as Error).message}`, {
        cause: e,
      })
    }
    const code = StreamSegmentError.is(e) ? e.code : 'ERR_INTERNAL'
    const message = (e as Error)?.message ?? String(e)
    // One line, whatever the message holds (a path with a newline in it, bytes of an object quoted).
    err.write(`stream-segment: ${code}: ${printable(message)}\n`)
    if (process.env.DEBUG) err.write(`${(e as Error)?.stack}\n`)
    return EXIT_CODES[code]
  } finally {
    removeHandlers?.()
  }
}
