/** The exit code of each error kind, and what each means at the command line. */

import type { ErrorCode } from '../errors.js'

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
  ERR_ABORTED: "interrupted (Ctrl-C, SIGTERM, SIGHUP), or a put's input refused",
  ERR_RANGE: 'a range starting at or past the end',
  ERR_STATE: 'wrong state (e.g. a file that changed while being uploaded)',
  ERR_TIMEOUT: 'a request or a call ran past its time limit',
  ERR_AUTH: 'the store refused the credentials or the permission',
  ERR_INTERNAL: 'a bug: please report it',
}

/** The --help table of exit codes. */
export function exitCodeTable(): string {
  const codes = (Object.keys(EXIT_MEANINGS) as ErrorCode[]).sort((a, b) => EXIT_CODES[a] - EXIT_CODES[b])
  const width = Math.max(...codes.map((c) => c.length))
  return [
    `   0  ${''.padEnd(width)}  success`,
    ...codes.map((c) => `${String(EXIT_CODES[c]).padStart(4)}  ${c.padEnd(width)}  ${EXIT_MEANINGS[c]}`),
  ].join('\n')
}
