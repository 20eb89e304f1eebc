/**
 * What S3Store puts in a request: a body of several chunks sent as they are (no copy),
 * its CRC-32 for `x-amz-checksum-crc32`, a header set per command, and an object's
 * standard headers.
 */
import { Readable } from 'node:stream'
import { crc32 } from '../util/crc32.js'
import { bodyLength, joinBody } from './common.js'
import type { Body, ObjectAttributes } from './types.js'

const EMPTY = new Uint8Array(0)

/** The CRC-32 of the chunks, one after the other, in base64 (`x-amz-checksum-crc32`). */
export function crc32Base64(chunks: readonly Uint8Array[]): string {
  let crc = 0
  for (const c of chunks) crc = crc32(c, crc)
  const b = Buffer.allocUnsafe(4)
  b.writeUInt32BE(crc >>> 0)
  return b.toString('base64')
}

/**
 * A request body of several chunks, sent as they are. The SDK's Node handler sends a
 * Readable body with `pipe`: this one writes every chunk to the request on each call,
 * so the same command can be sent again. Read as a stream, it gives the chunks once.
 */
export class ChunkBody extends Readable {
  private next = 0

  constructor(readonly chunks: readonly Uint8Array[]) {
    super()
  }

  override _read(): void {
    const c = this.chunks[this.next++]
    this.push(c === undefined ? null : c)
  }

  override pipe<T extends NodeJS.WritableStream>(dest: T): T {
    for (const c of this.chunks) dest.write(c)
    dest.end()
    return dest
  }
}

/**
 * What to hand the SDK as the body of `chunks`: one buffer as it is, or several as a
 * ChunkBody (no copy). The SDK reads neither: their payload hash and any checksum are ours.
 */
export function requestBody(chunks: Body): {
  body: Uint8Array | ChunkBody
  list: readonly Uint8Array[]
  length: number
  release: () => void
} {
  const list = chunks instanceof Uint8Array ? [chunks] : chunks.filter((c) => c.byteLength > 0)
  if (list.length > 1) return { body: new ChunkBody(list), list, length: bodyLength(list), release: () => {} }
  const joined = joinBody(list.length === 0 ? EMPTY : list)
  return { body: joined.bytes, list: [joined.bytes], length: joined.bytes.byteLength, release: joined.release }
}

type HttpRequestLike = { headers: Record<string, string>; body?: unknown }

function isHttpRequest(x: unknown): x is HttpRequestLike {
  return typeof x === 'object' && x !== null && typeof (x as HttpRequestLike).headers === 'object'
}

type MiddlewareCommand = {
  middlewareStack: {
    add(
      mw: (next: (args: unknown) => Promise<unknown>) => (args: unknown) => Promise<unknown>,
      options: { step: 'build'; name: string },
    ): void
  }
}

/** Per-command middleware (never the caller's client): set one header at the build step. */
export function addHeader<C>(command: C, name: string, value: (req: HttpRequestLike) => string | undefined): C {
  ;(command as unknown as MiddlewareCommand).middlewareStack.add(
    (next) => async (args) => {
      const req = (args as { request?: unknown }).request
      if (isHttpRequest(req)) {
        const v = value(req)
        if (v !== undefined) req.headers[name] = v
      }
      return next(args)
    },
    { step: 'build', name: `streamSegment-${name}` },
  )
  return command
}

/** What the SDK's retry step warns when a request with a stream body (a ChunkBody) fails. */
const STREAM_NOT_RETRIED = 'An error was encountered in a non-retryable streaming request.'

type Logger = Partial<Record<'trace' | 'debug' | 'info' | 'warn' | 'error', (...args: unknown[]) => void>>

type ContextCommand = {
  middlewareStack: {
    add(
      mw: (
        next: (args: unknown) => Promise<unknown>,
        context: { logger?: Logger },
      ) => (args: unknown) => Promise<unknown>,
      options: { step: 'build'; name: string },
    ): void
  }
}

/**
 * Per-command middleware (never the caller's client): the SDK's warning that a failed
 * request with a stream body is not retried is dropped. The store retries it itself, and
 * an abort fails such requests on purpose; a client with no logger of its own would print
 * the warning to the console once per request in flight (lib-storage's Upload, sending
 * bytes, never does). Around the request and its retries only: every other message goes
 * to the client's logger, and the steps before and after see that logger itself.
 */
export function withoutStreamRetryWarning<C>(command: C): C {
  ;(command as unknown as ContextCommand).middlewareStack.add(
    (next, context) => async (args) => {
      const theirs = context.logger
      context.logger = {
        trace: (...a) => theirs?.trace?.(...a),
        debug: (...a) => theirs?.debug?.(...a),
        info: (...a) => theirs?.info?.(...a),
        warn: (...a) => (a[0] === STREAM_NOT_RETRIED ? undefined : theirs?.warn?.(...a)),
        error: (...a) => theirs?.error?.(...a),
      }
      try {
        return await next(args)
      } finally {
        context.logger = theirs
      }
    },
    { step: 'build', name: 'streamSegment-withoutStreamRetryWarning' },
  )
  return command
}

/** The SDK's fields for the standard headers of `attributes`. */
export function s3Attributes(a: ObjectAttributes | undefined) {
  return {
    ContentType: a?.contentType,
    CacheControl: a?.cacheControl,
    ContentDisposition: a?.contentDisposition,
    ContentEncoding: a?.contentEncoding,
    ContentLanguage: a?.contentLanguage,
  }
}
