/**
 * The one error class of the library. Users match on `err.code`; the message carries
 * the key, offsets and sizes involved and is not API. `retryable` says whether the same
 * call may succeed if simply made again (the README lists every code).
 *
 * A message holds no control character: the constructor escapes each (`printable`). Messages
 * quote what the library does not choose (a store's URL or root, keys, file paths, a
 * caller's names, bytes of a damaged object, the messages of Node and the SDK), and an ESC
 * or the one-byte CSI 0x9b in one would recolour or rewrite the terminal of whoever prints
 * the error; escaped here, no message built anywhere can carry one raw. No message is meant
 * to span lines, and escaping twice changes nothing, so one quoting another's is fine.
 */

import { printable } from './util/shell-words.js'

export const ERROR_CODES = {
  /** A precondition failed: another writer published, or a create-only key exists. */
  ERR_CONFLICT: { retryable: true },
  /** Bytes read from storage fail a check (length, magic, CRC, bounds, names). */
  ERR_CORRUPT: { retryable: false },
  /** A layout version or feature newer than this build. */
  ERR_UNSUPPORTED: { retryable: false },
  /** A key, container or checkpoint that does not exist. */
  ERR_NOT_FOUND: { retryable: false },
  /** The caller's AbortSignal fired, or the stream was destroyed. */
  ERR_ABORTED: { retryable: false },
  /** A bad option, URL, offset or length passed by the caller. */
  ERR_INVALID_ARGUMENT: { retryable: false },
  /** A range request starting at or past the end of an object (HTTP 416). */
  ERR_RANGE: { retryable: false },
  /** The object store failed (network, 5xx, throttling) after the library's retries. */
  ERR_STORE: { retryable: true },
  /** A request, or a whole call with its retries, ran past its time limit (no answer, no bytes moving). */
  ERR_TIMEOUT: { retryable: true },
  /** The store refused the credentials or the permission (401, 403, bad or expired keys). */
  ERR_AUTH: { retryable: false },
  /** The handle is closed, read-only, or a previous failure made it unusable. */
  ERR_STATE: { retryable: false },
  /** A bug: an invariant of the library does not hold. Please report it. */
  ERR_INTERNAL: { retryable: false },
} as const

export type ErrorCode = keyof typeof ERROR_CODES

/**
 * Marks the errors of every copy of this class: the package's ESM and CommonJS builds, both
 * loaded in one process (an `import` here, a `require` in a dependency), each have their
 * own, and `instanceof` knows only its own. `StreamSegmentError.is` knows both.
 */
const BRAND = Symbol.for('stream-segment.StreamSegmentError')

export class StreamSegmentError extends Error {
  override name = 'StreamSegmentError'
  readonly code: ErrorCode

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(printable(message), options)
    this.code = code
    Object.defineProperty(this, BRAND, { value: true })
  }

  get retryable(): boolean {
    return ERROR_CODES[this.code].retryable
  }

  static conflict(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_CONFLICT', message, { cause })
  }
  static corrupt(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_CORRUPT', message, { cause })
  }
  static unsupported(message: string) {
    return new StreamSegmentError('ERR_UNSUPPORTED', message)
  }
  static notFound(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_NOT_FOUND', message, { cause })
  }
  static aborted(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_ABORTED', message, { cause })
  }
  static invalidArgument(message: string) {
    return new StreamSegmentError('ERR_INVALID_ARGUMENT', message)
  }
  static range(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_RANGE', message, { cause })
  }
  static store(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_STORE', message, { cause })
  }
  static timeout(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_TIMEOUT', message, { cause })
  }
  static auth(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_AUTH', message, { cause })
  }
  static state(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_STATE', message, { cause })
  }
  static internal(message: string, cause?: unknown) {
    return new StreamSegmentError('ERR_INTERNAL', message, { cause })
  }

  /**
   * Whether `err` is one, from this build or the package's other one (BRAND), with `code` if
   * given. A code that is none (a typo: 'ERR_NOTFOUND') is ERR_INVALID_ARGUMENT: it would
   * never match, and the catch testing for it would pass every such error by without a word.
   */
  static is(err: unknown, code?: ErrorCode): err is StreamSegmentError {
    if (code !== undefined && (typeof code !== 'string' || !Object.hasOwn(ERROR_CODES, code))) {
      throw StreamSegmentError.invalidArgument(
        `StreamSegmentError.is: code ${typeof code === 'string' ? JSON.stringify(code) : String(code)} is no error code ` +
          `(${Object.keys(ERROR_CODES).join(', ')})`,
      )
    }
    const ours =
      err instanceof StreamSegmentError ||
      (typeof err === 'object' && err !== null && (err as { [BRAND]?: unknown })[BRAND] === true)
    return ours && (code === undefined || (err as StreamSegmentError).code === code)
  }
}

/**
 * Whether bytes that were read may have been damaged on the way, and so are worth reading
 * once more before the error is reported: they failed their checks (ERR_CORRUPT), or they
 * claim a layout version newer than this build (ERR_UNSUPPORTED), which one flipped bit of
 * a version field also gives (the version is checked before the CRC). A newer object
 * fails the same way again, and is then reported as it is.
 */
export function mayBeDamagedOnTheWay(err: unknown): err is StreamSegmentError {
  return StreamSegmentError.is(err, 'ERR_CORRUPT') || StreamSegmentError.is(err, 'ERR_UNSUPPORTED')
}

/** Throws ERR_ABORTED when `signal` has fired, keeping its reason as the cause. */
export function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted) throw StreamSegmentError.aborted(`${what} aborted`, signal.reason)
}

/** An AbortSignal, or an object that behaves as one (another realm's, a polyfill's). */
export function isSignal(value: unknown): value is AbortSignal {
  if (value instanceof AbortSignal) return true
  const v = value as { aborted?: unknown; addEventListener?: unknown } | null
  return (
    typeof v === 'object' && v !== null && typeof v.aborted === 'boolean' && typeof v.addEventListener === 'function'
  )
}
