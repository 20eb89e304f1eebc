/**
 * The `stream-segment` command. Every failure prints one line, `stream-segment: CODE: message`,
 * and exits with a code per error kind (EXIT_CODES); the stack only when DEBUG is set.
 */
import { type ErrorCode, StreamSegmentError } from './errors.js'
import { optionalRequire } from './optional-require.cjs'

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
  ERR_INTERNAL: 70,
}

const USAGE = `Usage: stream-segment <command> [options]

Write large byte streams to object storage as StreamSegment checkpoints, and read them back.

Commands: none yet besides the options below; put, get, ls, inspect, verify and gc come next.

Options:
  -h, --help       show this help
  -v, --version    print the version

Container URLs: s3://bucket/prefix, file:///dir or a directory path, mem://name.
Set DEBUG=stream-segment:* to log requests and flushes.
`

export function version(): string {
  return optionalRequire<{ version: string }>('../../../package.json')?.version ?? 'unknown'
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: readonly string[], out = process.stdout, err = process.stderr): Promise<number> {
  try {
    const [first] = argv
    if (first === undefined || first === '-h' || first === '--help' || first === 'help') {
      out.write(USAGE)
      return first === undefined ? EXIT_CODES.usage : 0
    }
    if (first === '-v' || first === '--version') {
      out.write(`${version()}\n`)
      return 0
    }
    throw StreamSegmentError.invalidArgument(`unknown command ${JSON.stringify(first)} (see stream-segment --help)`)
  } catch (e) {
    const code = StreamSegmentError.is(e) ? e.code : 'ERR_INTERNAL'
    err.write(`stream-segment: ${code}: ${(e as Error).message}\n`)
    if (process.env.DEBUG) err.write(`${(e as Error).stack}\n`)
    return EXIT_CODES[code]
  }
}
