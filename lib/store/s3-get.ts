/**
 * The lean GET of S3Store (`getPath: 'http'`): the SDK builds and signs the GetObject
 * request (endpoint and addressing style, region, credentials from the client's provider,
 * refreshed as it refreshes them) and parses error answers into its named errors; the
 * request goes out on a keep-alive socket of our own pool, and a 2xx body is read by the
 * kernel straight into pieces of at most PIECE_BYTES bytes, taken as the body arrives
 * (the socket's `onread` buffer is the current piece's unfilled rest: no per-read socket
 * buffers, no copy, no concat); full pieces come from util/piece-pool.ts, where the
 * reader gives them back. Pieces of 64 KiB, not one buffer sized from
 * Content-Length: C allocators (glibc, musl) serve a request under 128 KiB from memory the
 * process freed before, its pages in place, but map a larger one afresh each time, every
 * page faulted in on first use. On some virtual machines those faults cost more CPU than
 * all the rest of a GET (docs/benchmarks.md, "Reads").
 *
 * How: one middleware per command at the end of the deserialize step (after signing,
 * inside the deserializer) that does not call the SDK's handler. It answers the
 * deserializer with the body already read: a 2xx body as a `BodyBytes` (a Readable that
 * holds the buffer, never read as a stream by S3Store), an error body as its bytes.
 *
 * Invariants and failure handling:
 * - A 2xx answer must carry a Content-Length (a decimal integer); a ranged request must be
 *   answered 206 with a Content-Range of exactly the bytes asked (clamped to the object's
 *   size; a suffix ending at the object's end), spanning Content-Length bytes and ending
 *   before the size it names, which must be a number, not `*` (or 200 with the whole object, no longer than asked); a
 *   request for the whole object, 200 or a 206 of all of it. Otherwise the answer is
 *   refused (its status kept: not retried), naming what was wrong, the range and the
 *   object (`checkGetAnswer`, which the SDK path of S3Store applies too).
 * - The body fills exactly Content-Length bytes: an end or a close before the last byte,
 *   a reset, malformed headers (a line ended by a bare LF included: it is refused as soon
 *   as it comes, not waited on), or body bytes past Content-Length in the read that holds
 *   the headers are a failure with no HTTP status, which the store's retry policy makes
 *   again (as on the SDK path). Reads into the buffer stop at Content-Length, so bytes a
 *   server sends past it are never part of an answer: they are read while the connection
 *   is idle, and it is closed, unless they are one empty line, which HTTP lets a client
 *   pass over (the next request on it waits until the reads due when an answer ends are
 *   made: those bytes may have come with the body's last ones). The buffer is handed out
 *   only when complete; a body that fails gives its pieces back to the pool (`fail`, once
 *   the socket is closed: no read lands in them after that).
 * - Sockets: per origin at most the client's agent's `maxSockets` (64 when unbounded),
 *   kept alive between requests, waiting requests served in order. The client's connect
 *   timeout (no connection in time) and idle timeout (no byte received for that long,
 *   headers or body) fail the request with a TimeoutError, retried by the store. A kept
 *   socket that fails before any byte of the answer (the server closed it meanwhile) is
 *   replaced once, at once: a GET can be sent again.
 * - The AbortSignal destroys the request at any point, body included: AbortError.
 * - Headers are read up to HEAD_MAX bytes, an error body up to ERROR_BODY_MAX. Interim
 *   answers (1xx) before the real one are passed over, any number of them, in a loop; a
 *   304 has no body, whatever its Content-Length.
 */
import type { Agent as HttpAgent } from 'node:http'
import type { Agent as HttpsAgent } from 'node:https'
import { connect as netConnect, type Socket } from 'node:net'
import { Readable } from 'node:stream'
import { connect as tlsConnect } from 'node:tls'
import type { S3Client } from '@aws-sdk/client-s3'
import { PIECE_BYTES, returnPieces, takePiece } from '../util/piece-pool.js'

const HEAD_MAX = 64 * 1024
const ERROR_BODY_MAX = 1024 * 1024
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000
const DEFAULT_IDLE_TIMEOUT_MS = 30_000
const DEFAULT_MAX_SOCKETS = 64
/** A kept socket unused this long is closed. */
const FREE_SOCKET_MS = 15_000

/** How requests go out: the client's agents (their TLS options and socket bound) and timeouts. */
export interface Transport {
  pool: Pool
  /** 0: none. */
  connectTimeoutMs: number
  idleTimeoutMs: number
}

type HandlerConfig = {
  httpAgent?: HttpAgent
  httpAgentProvider?: () => Promise<HttpAgent>
  httpsAgent?: HttpsAgent
  connectionTimeout?: number
  socketTimeout?: number
}

const transports = new WeakMap<S3Client, Promise<Transport>>()

/**
 * The transport of `client`: the socket bound, TLS options and timeouts of its Node request
 * handler when it has one (every client createS3Client makes), else the defaults.
 */
export function transportOf(client: S3Client): Promise<Transport> {
  let t = transports.get(client)
  if (t === undefined) {
    t = (async (): Promise<Transport> => {
      const handler = (client.config as { requestHandler?: { configProvider?: Promise<HandlerConfig> } }).requestHandler
      const config: HandlerConfig = (await handler?.configProvider) ?? {}
      const nat = (v: number | undefined, d: number) => (typeof v === 'number' && v >= 0 ? v : d)
      const bound = (a: HttpAgent | undefined) =>
        a !== undefined && Number.isSafeInteger(a.maxSockets) && a.maxSockets > 0 ? a.maxSockets : DEFAULT_MAX_SOCKETS
      const tls = (config.httpsAgent as { options?: Record<string, unknown> } | undefined)?.options ?? {}
      return {
        pool: new Pool(bound(config.httpAgent ?? (await config.httpAgentProvider?.())), bound(config.httpsAgent), tls),
        connectTimeoutMs: nat(config.connectionTimeout, DEFAULT_CONNECT_TIMEOUT_MS),
        idleTimeoutMs: nat(config.socketTimeout, DEFAULT_IDLE_TIMEOUT_MS),
      }
    })()
    transports.set(client, t)
  }
  return t
}

/** A 2xx body already read: its pieces, as a Readable for the SDK's deserializer. */
export class BodyBytes extends Readable {
  constructor(readonly pieces: Uint8Array[]) {
    super()
  }

  override _read(): void {
    // Only read when something of the SDK wants the stream (a response checksum).
    for (const p of this.pieces) this.push(p)
    this.push(null)
  }
}

/** The signed request as the SDK's middleware sees it (@smithy/protocol-http HttpRequest). */
interface SignedRequest {
  protocol: string
  hostname: string
  port?: number
  method: string
  path: string
  query?: Record<string, string | string[] | null>
  headers: Record<string, string>
}

/** What the deserializer reads (@smithy/protocol-http HttpResponse's fields). */
export interface RawResponse {
  statusCode: number
  reason?: string
  headers: Record<string, string>
  body: Uint8Array | BodyBytes
}

type Middleware = (next: unknown) => (args: unknown) => Promise<{ response: RawResponse }>

type Stack = {
  middlewareStack: { add(mw: Middleware, options: { step: 'deserialize'; priority: 'low'; name: string }): void }
}

/**
 * Makes `command` (a GetObjectCommand) go out through `transport`: its 2xx body comes back
 * as a BodyBytes (`piecesOf` takes it). `where` names the object in error messages.
 * `read` is told the pieces of a 2xx body once it is read: the caller's to give back
 * (`returnPieces`) should the SDK fail the call after that, or not hand them out.
 */
export function sendOverHttp<C>(
  command: C,
  transport: Transport,
  signal: AbortSignal,
  where: string,
  read: (pieces: Uint8Array[]) => void,
): C {
  ;(command as unknown as Stack).middlewareStack.add(
    () => async (args) => {
      const response = await httpGet((args as { request: SignedRequest }).request, transport, signal, where)
      if (response.body instanceof BodyBytes) read(response.body.pieces)
      return { response }
    },
    { step: 'deserialize', priority: 'low', name: 'streamSegmentHttpGet' },
  )
  return command
}

/** The pieces of a GetObject output's Body when it came the lean way, else undefined. */
export function piecesOf(body: unknown): Uint8Array[] | undefined {
  return body instanceof BodyBytes ? body.pieces : undefined
}

/** One GET: a kept socket, or a new one; a kept one that failed before any answer byte is replaced once. */
export async function httpGet(
  request: SignedRequest,
  t: Transport,
  signal: AbortSignal,
  where: string,
): Promise<RawResponse> {
  const range = request.headers.range ?? request.headers.Range
  const what = `${where}${range === undefined ? '' : ` (${range})`}`
  const head = requestHead(request, what)
  const origin = {
    tls: request.protocol === 'https:',
    host: request.hostname.startsWith('[') ? request.hostname.slice(1, -1) : request.hostname,
    port: request.port ?? (request.protocol === 'https:' ? 443 : 80),
  }
  for (let fresh = false; ; fresh = true) {
    const conn = await t.pool.acquire(origin, t, signal, what, fresh)
    try {
      return await conn.exchange(head, askedRange(range), t.idleTimeoutMs, signal, what)
    } catch (err) {
      if (fresh || !conn.reused || conn.answered || signal.aborted) throw err
    }
  }
}

function requestHead(request: SignedRequest, what: string): Buffer {
  const path = request.path + queryString(request.query)
  let head = `${request.method} ${path} HTTP/1.1\r\n`
  for (const [k, v] of Object.entries(request.headers)) head += `${k}: ${v}\r\n`
  // A signed request never holds these: a guard against a header split.
  for (const [k, v] of Object.entries(request.headers)) {
    if (/[\r\n]/.test(k) || /[\r\n]/.test(String(v))) throw new Error(`GET ${what}: header ${k} holds a line break`)
  }
  if (/[\s]/.test(path)) throw new Error(`GET ${what}: request path ${JSON.stringify(path)} holds white space`)
  return Buffer.from(`${head}\r\n`, 'latin1')
}

function queryString(query: SignedRequest['query']): string {
  if (query === undefined) return ''
  const parts: string[] = []
  for (const [k, v] of Object.entries(query)) {
    const key = uriEscape(k)
    if (v === null || v === undefined) parts.push(key)
    else if (Array.isArray(v)) for (const x of v) parts.push(`${key}=${uriEscape(x)}`)
    else parts.push(`${key}=${uriEscape(v)}`)
  }
  return parts.length === 0 ? '' : `?${parts.join('&')}`
}

/** RFC 3986 escaping, as SigV4 signs the query. */
function uriEscape(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

/** A failure with an HTTP status: the answer was refused as it is (never retried). */
export function refused(status: number, message: string): Error {
  return Object.assign(new Error(message), { name: 'InvalidResponse', $metadata: { httpStatusCode: status } })
}

function named(name: string, message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, { cause }), { name })
}

/** Which bytes the request asked for, from its Range header. */
export type Asked = { start: number; end: number } | { suffix: number } | undefined

export function askedRange(h: string | undefined): Asked {
  if (h === undefined) return undefined
  const m = /^bytes=(\d*)-(\d*)$/.exec(h)
  if (m === null) return undefined
  if (m[1] === '') return { suffix: Number(m[2]) }
  return { start: Number(m[1]), end: m[2] === '' ? Number.POSITIVE_INFINITY : Number(m[2]) + 1 }
}

/**
 * The number of body bytes a 2xx answer must carry, checked against what was asked, or
 * the reason it is refused. Both GET paths take their answers through it (`getPath`
 * 'sdk' in S3Store#get). No range asked: 200, or a 206 of the whole object. A suffix: a
 * 206 of the object's last bytes, or 200 with a whole object no longer than asked. A
 * range: a 206 of exactly the bytes asked (clamped to the object's size), or 200 with a
 * whole object no longer than asked when it starts at 0. A Content-Range always names
 * the object's size, and ends before it.
 */
export function checkGetAnswer(
  status: number,
  contentLength: string | undefined,
  contentRange: string | undefined,
  asked: Asked,
): number | string {
  const cl = contentLength
  if (cl === undefined) return 'no Content-Length'
  if (!/^\d{1,15}$/.test(cl)) return `Content-Length ${JSON.stringify(cl)} is not a byte count`
  const n = Number(cl)
  if (status === 200) {
    if (asked === undefined) return n
    // The whole object: acceptable when it is all that was asked.
    const max = 'suffix' in asked ? asked.suffix : asked.start === 0 ? asked.end : -1
    return n <= max ? n : `${status} with the whole object (${n} bytes) to a request for a range`
  }
  if (status !== 206) return `status ${status} to a GET`
  const cr = contentRange
  // RFC 9110 §14.4 lets a server send `*` for a length it does not know; a stored object's
  // is known (S3, radosgw and MinIO name it), and without it a range clamped at the
  // object's end, or a suffix, could not be told from an answer cut short.
  if (cr !== undefined && /^bytes \d{1,15}-\d{1,15}\/\*$/.test(cr)) {
    return `Content-Range ${cr} names no object size (*): the answer cannot be checked against the object`
  }
  const m = cr === undefined ? null : /^bytes (\d{1,15})-(\d{1,15})\/(\d{1,15})$/.exec(cr)
  if (m === null) return `${status} with Content-Range ${JSON.stringify(cr ?? null)}`
  const first = Number(m[1])
  const last = Number(m[2])
  const total = Number(m[3])
  if (last < first || last - first + 1 !== n) return `Content-Range ${cr} does not span Content-Length ${n}`
  if (last >= total) return `Content-Range ${cr} ends past the object's size`
  if (asked === undefined) {
    if (first !== 0 || last !== total - 1) return `Content-Range ${cr}: part of the object to a request for all of it`
  } else if ('suffix' in asked) {
    if (last !== total - 1 || n !== Math.min(asked.suffix, total)) {
      return `Content-Range ${cr} is not the last ${asked.suffix} bytes of the object`
    }
  } else if (first !== asked.start || last !== Math.min(asked.end, total) - 1) {
    return `Content-Range ${cr} is not within the bytes asked, [${asked.start}, ${asked.end})`
  }
  return n
}

interface Origin {
  tls: boolean
  host: string
  port: number
}

/** Keep-alive sockets per origin, at most `max` each; requests wait in order for one. */
export class Pool {
  private readonly idle = new Map<string, Connection[]>()
  private readonly open = new Map<string, number>()
  private readonly waiting = new Map<string, Array<() => void>>()

  constructor(
    readonly maxHttp: number,
    readonly maxHttps: number,
    private readonly tlsOptions: Record<string, unknown>,
  ) {}

  /** Sockets open now, per origin (`host:port`, with `tls:` first for TLS). */
  sockets(): Record<string, number> {
    return Object.fromEntries(this.open)
  }

  async acquire(o: Origin, t: Transport, signal: AbortSignal, what: string, fresh: boolean): Promise<Connection> {
    const key = `${o.tls ? 'tls:' : ''}${o.host}:${o.port}`
    const max = o.tls ? this.maxHttps : this.maxHttp
    for (let woken = false; ; woken = true) {
      if (signal.aborted) {
        // Woken for a socket (kept or a free slot) and aborted before taking it: the next
        // waiter takes it, or it would wait for another GET's end or the socket's idle close.
        if (woken) this.waiting.get(key)?.shift()?.()
        throw named('AbortError', `GET ${what} aborted`, signal.reason)
      }
      const idle = this.idle.get(key)
      const kept = fresh ? undefined : idle?.pop()
      if (kept !== undefined) return kept.take()
      const n = this.open.get(key) ?? 0
      if (n < max) {
        this.open.set(key, n + 1)
        return new Connection(this, key, o, this.tlsOptions, t.connectTimeoutMs, what)
      }
      if (fresh && idle !== undefined && idle.length > 0) {
        ;(idle.shift() as Connection).destroy() // room for a fresh one
        continue
      }
      await new Promise<void>((resolve, reject) => {
        const list = this.waiting.get(key) ?? []
        this.waiting.set(key, list)
        const onAbort = () => {
          list.splice(list.indexOf(wake), 1)
          reject(named('AbortError', `GET ${what} aborted while waiting for a socket`, signal.reason))
        }
        const wake = () => {
          signal.removeEventListener('abort', onAbort)
          resolve()
        }
        list.push(wake)
        signal.addEventListener('abort', onAbort, { once: true })
      })
    }
  }

  /** A connection done with its exchange: kept for the next request, or gone. */
  release(c: Connection, keep: boolean): void {
    if (keep) {
      const list = this.idle.get(c.key) ?? []
      this.idle.set(c.key, list)
      list.push(c)
    } else c.destroy()
    this.waiting.get(c.key)?.shift()?.()
  }

  /** A connection closed: its slot is free. */
  closed(c: Connection): void {
    const list = this.idle.get(c.key)
    const i = list?.indexOf(c) ?? -1
    if (i >= 0) list?.splice(i, 1)
    const left = (this.open.get(c.key) ?? 1) - 1
    this.open.set(c.key, left)
    this.waiting.get(c.key)?.shift()?.()
    if (left > 0 || (this.waiting.get(c.key)?.length ?? 0) > 0) return
    // Its origin's last socket, and no GET waits for one: the origin's entries go. A client
    // that reads from many buckets (each its own host, virtual-hosted) would otherwise keep
    // them for every bucket it ever read, for as long as it lives.
    this.open.delete(c.key)
    this.idle.delete(c.key)
    this.waiting.delete(c.key)
  }
}

/** The answer being read on a connection. */
interface Exchange {
  what: string
  asked: Asked
  resolve: (r: RawResponse) => void
  reject: (err: Error) => void
  phase: 'head' | 'body' | 'error'
  status: number
  reason: string
  headers: Record<string, string>
  keepAlive: boolean
  /** The body: its pieces, the last one being filled; bytes filled in all of them. */
  pieces: Buffer[]
  filled: number
  expected: number
  /** Error body: bytes so far, and how it ends ('close': at the connection's end). */
  errorChunks: Buffer[]
  errorSize: number
  errorLength: number | 'chunked' | 'close'
  onAbort: () => void
  signal: AbortSignal
}

/** An answer's status line (`minor`: the 1 of HTTP/1.1) and headers. */
interface Head {
  minor: string
  status: number
  reason: string
  headers: Record<string, string>
}

/** One socket and the exchange on it (one at a time). */
class Connection {
  readonly socket: Socket
  /** Headers, error bodies and any byte while idle are read here. */
  private readonly scratch = Buffer.allocUnsafe(HEAD_MAX)
  private headLen = 0
  private x: Exchange | undefined
  private closed = false
  private connectTimer: NodeJS.Timeout | undefined
  /** Whether this socket served an exchange before this one. */
  reused = false
  /** Whether the current exchange has received a byte. */
  answered = false
  /** Bytes read since the last answer ended and before the next request (see onRead). */
  private idleLine = ''
  /** Set while the reads due when the last exchange ended are not all made (see `settle`). */
  private settling = false
  /** The exchange taken meanwhile, started once they are. */
  private held: (() => void) | undefined

  constructor(
    private readonly pool: Pool,
    readonly key: string,
    o: Origin,
    tlsOptions: Record<string, unknown>,
    connectTimeoutMs: number,
    what: string,
  ) {
    const onread = {
      buffer: () => this.nextBuffer(),
      callback: (n: number, buf: Uint8Array) => {
        this.onRead(n, buf)
        return true // keep reading
      },
    }
    const base = { host: o.host, port: o.port, onread, noDelay: true }
    this.socket = o.tls
      ? tlsConnect({
          ...tlsOptions,
          ...base,
          servername: /^[\d.]+$|:/.test(o.host) ? undefined : o.host,
          ALPNProtocols: ['http/1.1'],
        })
      : netConnect(base)
    if (connectTimeoutMs > 0) {
      this.connectTimer = setTimeout(() => {
        this.fail(
          named('TimeoutError', `GET ${what}: no connection to ${o.host}:${o.port} within ${connectTimeoutMs} ms`),
        )
      }, connectTimeoutMs)
      this.socket.once(o.tls ? 'secureConnect' : 'connect', () => clearTimeout(this.connectTimer))
    }
    this.socket.on('error', (err: Error & { code?: string }) => {
      this.fail(err.code === 'ETIMEDOUT' ? named('TimeoutError', err.message, err) : err)
    })
    this.socket.on('end', () => {
      const x = this.x
      if (x?.phase === 'error' && x.errorLength === 'close') this.finishError(x, false)
    })
    this.socket.on('close', () => {
      clearTimeout(this.connectTimer)
      const x = this.x
      if (x !== undefined) {
        const got =
          x.phase === 'body' ? ` after ${x.filled} of ${x.expected} bytes` : this.answered ? ' mid-answer' : ''
        this.fail(new Error(`GET ${x.what}: connection closed${got || ' before any answer'}`))
      }
      if (!this.closed) {
        this.closed = true
        this.pool.closed(this)
      }
    })
    this.socket.on('timeout', () => {
      const x = this.x
      if (x === undefined) this.destroy()
      else this.fail(named('TimeoutError', `GET ${x.what}: nothing received for ${this.socket.timeout} ms`))
    })
  }

  /** A kept connection, taken for a new exchange. */
  take(): Connection {
    this.reused = true
    return this
  }

  destroy(): void {
    this.socket.destroy()
  }

  exchange(head: Buffer, asked: Asked, idleTimeoutMs: number, signal: AbortSignal, what: string): Promise<RawResponse> {
    this.answered = false
    return new Promise<RawResponse>((resolve, reject) => {
      const begin = () => this.begin(head, asked, idleTimeoutMs, signal, what, resolve, reject)
      if (this.settling) this.held = begin
      else begin()
    })
  }

  /** Sends the request and reads its answer: `exchange` once the connection has settled. */
  private begin(
    head: Buffer,
    asked: Asked,
    idleTimeoutMs: number,
    signal: AbortSignal,
    what: string,
    resolve: (r: RawResponse) => void,
    reject: (err: Error) => void,
  ): void {
    // Half an empty line read while idle (onRead keeps no other bytes): its rest would start
    // this answer, so the socket is not used again, and the GET goes out on a fresh one.
    const halfLine = this.idleLine === '\r'
    this.idleLine = ''
    if (halfLine) this.destroy()
    if (this.closed || halfLine) {
      reject(new Error(`GET ${what}: connection closed before any answer`))
      return
    }
    // A signal that fired while the socket was being taken: its listener below would never
    // be called, and the GET would go out and be answered as if not aborted.
    if (signal.aborted) {
      this.destroy()
      reject(named('AbortError', `GET ${what} aborted`, signal.reason))
      return
    }
    const x: Exchange = {
      what,
      asked,
      resolve,
      reject,
      phase: 'head',
      status: 0,
      reason: '',
      headers: {},
      keepAlive: true,
      pieces: [],
      filled: 0,
      expected: 0,
      errorChunks: [],
      errorSize: 0,
      errorLength: 'close',
      signal,
      onAbort: () => this.fail(named('AbortError', `GET ${what} aborted`, signal.reason)),
    }
    this.x = x
    this.headLen = 0
    signal.addEventListener('abort', x.onAbort, { once: true })
    this.socket.ref()
    this.socket.setTimeout(idleTimeoutMs)
    this.socket.write(head)
  }

  /**
   * Holds the next exchange until the reads due when this one ended are made. Bytes a
   * server sent past an answer, in the segment that ended it, are read only after the
   * answer is handed out: libuv reads a socket again at once when a read filled its buffer
   * (the body's last read always does: it stops at Content-Length), and after 32 reads in
   * a row leaves the rest to the next poll. The next GET, taken and sent meanwhile, would
   * read them as the start of its answer; read first, they close this socket (`onRead`),
   * and that GET goes out on a fresh one. Two turns of the loop: this poll, and the next.
   */
  private settle(): void {
    this.settling = true
    setImmediate(() =>
      setImmediate(() => {
        this.settling = false
        const begin = this.held
        this.held = undefined
        begin?.()
      }),
    )
  }

  /** Where the next read goes: the rest of the body's buffer, else the scratch. */
  private nextBuffer(): Uint8Array {
    const x = this.x
    if (x?.phase === 'body') return this.bodyRoom(x)
    if (x?.phase === 'head') return this.scratch.subarray(this.headLen)
    return this.scratch
  }

  private onRead(n: number, buf: Uint8Array): void {
    const x = this.x
    if (x === undefined) {
      // Bytes while no request is out (past an answer's Content-Length): never trusted, but
      // for one empty line, which a client ignores before a status line (RFC 9112, 2.2) and
      // some servers send after a body: the socket stays, as Node's own client keeps it.
      this.idleLine += Buffer.from(buf.buffer, buf.byteOffset, n).toString('latin1')
      if (!'\r\n'.startsWith(this.idleLine)) this.destroy()
      return
    }
    this.answered = true
    if (x.phase === 'body') {
      x.filled += n
      if (x.filled === x.expected) this.finishBody(x)
    } else if (x.phase === 'head') {
      this.headLen += n
      this.parseHead(x)
    } else {
      this.addErrorBytes(x, buf.subarray(0, n))
    }
  }

  private parseHead(x: Exchange): void {
    // Interim answers (1xx) before the real one are passed over in a loop, without copying
    // the rest of the read for each: a read may hold thousands of them.
    let from = 0
    for (;;) {
      const end = this.scratch.subarray(from, this.headLen).indexOf('\r\n\r\n')
      if (end < 0) break
      const m = this.headOf(x, from, from + end)
      if (m === undefined) return
      from += end + 4
      if (m.status < 100 || m.status >= 200) {
        this.answer(x, m, this.scratch.subarray(from, this.headLen))
        return
      }
    }
    if (from > 0) {
      this.scratch.copy(this.scratch, 0, from, this.headLen)
      this.headLen -= from
    }
    // A line ended by a bare LF: its head would never end in CRLF CRLF, and the answer be
    // waited for until the idle timeout, each try, as if nothing had come.
    if (hasBareLf(this.scratch.subarray(0, this.headLen))) {
      this.fail(new Error(`GET ${x.what}: answer head has a line ended by a bare LF, not CRLF`))
      return
    }
    if (this.headLen === HEAD_MAX) this.fail(new Error(`GET ${x.what}: answer headers over ${HEAD_MAX} bytes`))
  }

  /** An answer's status line and headers, scratch[from, end); undefined when malformed (the exchange failed). */
  private headOf(x: Exchange, from: number, end: number): Head | undefined {
    const lines = this.scratch.toString('latin1', from, end).split('\r\n')
    const m = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(lines[0] as string)
    if (m === null) {
      this.fail(new Error(`GET ${x.what}: answer starts with ${JSON.stringify((lines[0] as string).slice(0, 80))}`))
      return undefined
    }
    const headers: Record<string, string> = {}
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i] as string
      const c = line.indexOf(':')
      // A bare CR or LF would run two lines into one header's value (RFC 9112 forbids it in one).
      if (c <= 0 || /[\r\n]/.test(line)) {
        this.fail(new Error(`GET ${x.what}: malformed header line ${JSON.stringify(line.slice(0, 80))}`))
        return undefined
      }
      const name = line.slice(0, c).trim().toLowerCase()
      const value = line.slice(c + 1).trim()
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`
    }
    return { minor: m[1] as string, status: Number(m[2]), reason: m[3] ?? '', headers }
  }

  /** The real answer's head `h`, with `rest` the bytes that came after it in the read. */
  private answer(x: Exchange, h: Head, rest: Buffer): void {
    this.headLen = 0
    const { status, headers } = h
    x.status = status
    x.reason = h.reason
    x.headers = headers
    const connection = (headers.connection ?? '').toLowerCase()
    x.keepAlive = h.minor === '1' ? !connection.includes('close') : connection.includes('keep-alive')
    if (status < 200 || status >= 300) {
      x.phase = 'error'
      const cl = headers['content-length']
      // A 304 has no body, whatever its Content-Length says (that of the object's).
      x.errorLength =
        status === 304
          ? 0
          : /chunked/i.test(headers['transfer-encoding'] ?? '')
            ? 'chunked'
            : cl !== undefined && /^\d{1,15}$/.test(cl)
              ? Number(cl)
              : 'close'
      if (x.errorLength === 'close') x.keepAlive = false
      this.addErrorBytes(x, rest)
      return
    }
    const expected =
      headers['transfer-encoding'] !== undefined
        ? `Transfer-Encoding ${headers['transfer-encoding']}`
        : checkGetAnswer(status, headers['content-length'], headers['content-range'], x.asked)
    if (typeof expected === 'string') {
      this.fail(refused(status, `GET ${x.what}: answer refused: ${expected}`))
      return
    }
    if (rest.byteLength > expected) {
      this.fail(new Error(`GET ${x.what}: body longer than its Content-Length ${expected}`))
      return
    }
    x.phase = 'body'
    x.expected = expected
    // Body bytes that came with the headers.
    while (x.filled < rest.byteLength) x.filled += rest.copy(this.bodyRoom(x), 0, x.filled)
    if (x.filled === expected) this.finishBody(x)
  }

  /**
   * Where the body's next bytes go: the unfilled rest of its last piece, or, when that is
   * full, a new piece of PIECE_BYTES bytes (fewer for the last). Called only while bytes
   * are missing; calling it again before any byte lands gives the same room.
   */
  private bodyRoom(x: Exchange): Buffer {
    let last = x.pieces[x.pieces.length - 1]
    const at = x.filled % PIECE_BYTES
    if (last === undefined || (at === 0 && x.filled === x.pieces.length * PIECE_BYTES)) {
      const n = Math.min(PIECE_BYTES, x.expected - x.filled)
      last = n === PIECE_BYTES ? takePiece() : Buffer.allocUnsafeSlow(n)
      x.pieces.push(last)
    }
    return last.subarray(at)
  }

  private finishBody(x: Exchange): void {
    this.done(x)
    x.resolve({ statusCode: x.status, reason: x.reason, headers: x.headers, body: new BodyBytes(x.pieces) })
  }

  private addErrorBytes(x: Exchange, bytes: Uint8Array): void {
    if (bytes.byteLength > 0) {
      x.errorChunks.push(Buffer.from(bytes)) // a copy: the scratch is read into again
      x.errorSize += bytes.byteLength
    }
    if (x.errorSize > ERROR_BODY_MAX) {
      x.keepAlive = false
      this.finishError(x, true)
      return
    }
    if (typeof x.errorLength === 'number' && x.errorSize >= x.errorLength)
      this.finishError(x, x.errorSize > x.errorLength)
    else if (x.errorLength === 'chunked') {
      const all = Buffer.concat(x.errorChunks)
      const body = dechunk(all)
      // Not chunked after all (what came is the body): where the answer ends is unknown.
      if (body !== undefined) this.finishError(x, body === all)
    }
  }

  /** Hands the error answer to the SDK's parser (`cut`: the body is what came, the socket goes). */
  private finishError(x: Exchange, cut: boolean): void {
    if (cut) x.keepAlive = false
    const all = Buffer.concat(x.errorChunks)
    const body =
      x.errorLength === 'chunked'
        ? (dechunk(all) ?? all)
        : typeof x.errorLength === 'number'
          ? all.subarray(0, x.errorLength)
          : all
    this.done(x)
    x.resolve({ statusCode: x.status, reason: x.reason, headers: x.headers, body })
  }

  /** The exchange is over: the socket goes back to the pool, or is closed. */
  private done(x: Exchange): void {
    this.x = undefined
    x.signal.removeEventListener('abort', x.onAbort)
    if (this.closed) return
    this.socket.setTimeout(FREE_SOCKET_MS)
    this.socket.unref()
    if (x.keepAlive) this.settle()
    this.pool.release(this, x.keepAlive)
  }

  /**
   * Fails the exchange in progress (if any) and closes the socket. The pieces its body was
   * being read into go back to the pool: once the socket is closed no read lands in them,
   * and nobody has seen them (a body is handed out only when complete).
   */
  private fail(err: Error): void {
    const x = this.x
    this.x = undefined
    if (x !== undefined) {
      x.signal.removeEventListener('abort', x.onAbort)
      x.reject(err)
    }
    this.destroy()
    if (x !== undefined) returnPieces(x.pieces)
  }
}

/** Whether `head` (an answer's head, without its CRLF CRLF end) holds an LF with no CR before it. */
function hasBareLf(head: Uint8Array): boolean {
  for (let i = head.indexOf(10); i >= 0; i = head.indexOf(10, i + 1)) {
    if (i === 0 || head[i - 1] !== 13) return true
  }
  return false
}

/** The payload of a complete chunked body, or undefined while it is incomplete. */
function dechunk(all: Buffer): Buffer | undefined {
  const out: Buffer[] = []
  let at = 0
  for (;;) {
    const eol = all.indexOf('\r\n', at)
    if (eol < 0) return undefined
    const size = Number.parseInt(all.toString('latin1', at, eol).split(';')[0] as string, 16)
    if (!Number.isSafeInteger(size) || size < 0) return all // not chunked after all: what came
    // The last chunk, then trailers up to an empty line: the answer ends there, and a socket
    // kept before that line came would read it as the start of the next answer.
    if (size === 0) return all.indexOf('\r\n\r\n', eol) < 0 ? undefined : Buffer.concat(out)
    if (eol + 2 + size + 2 > all.byteLength) return undefined
    out.push(all.subarray(eol + 2, eol + 2 + size))
    at = eol + 2 + size + 2
  }
}

type NodeReadable = {
  on(event: 'data', fn: (chunk: Uint8Array) => void): unknown
  on(event: 'end' | 'close', fn: () => void): unknown
  on(event: 'error', fn: (err: Error) => void): unknown
  destroy(err?: Error): void
}

/**
 * A response body as the chunks it arrived in, exactly `length` bytes when the length was
 * announced: a shorter body (the connection cut) or a longer one is an error with no
 * HTTP status, which the retry policy makes again. No copy, no per-chunk promise: the
 * chunks are kept as the socket gave them. The signal destroys the stream.
 */
export async function readBody(
  body: unknown,
  length: number | undefined,
  signal: AbortSignal | undefined,
): Promise<Uint8Array[]> {
  if (body === undefined || body === null) return []
  const stream = body as Partial<NodeReadable>
  if (typeof stream.on !== 'function' || typeof stream.destroy !== 'function') {
    return [await (body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()]
  }
  const readable = stream as NodeReadable
  const chunks: Uint8Array[] = []
  let filled = 0
  let onAbort: (() => void) | undefined
  try {
    await new Promise<void>((resolve, reject) => {
      let done = false
      const fail = (err: Error) => {
        if (done) return
        done = true
        readable.destroy(err)
        reject(err)
      }
      onAbort = () => fail(new Error('aborted while reading the body', { cause: signal?.reason }))
      if (signal?.aborted) {
        onAbort()
        return
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      readable.on('data', (chunk) => {
        if (done) return
        filled += chunk.byteLength
        if (length !== undefined && filled > length) {
          fail(new Error(`body longer than its Content-Length ${length}`))
          return
        }
        chunks.push(chunk)
      })
      readable.on('error', fail)
      const end = () => {
        if (done) return
        if (length !== undefined && filled !== length) {
          fail(new Error(`body ended after ${filled} of ${length} bytes`))
          return
        }
        done = true
        resolve()
      }
      readable.on('end', end)
      // A socket closed before the end (no 'end'): the body was cut.
      readable.on('close', () => {
        if (!done) fail(new Error(`connection closed after ${filled} of ${length ?? '?'} bytes`))
      })
    })
  } finally {
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort)
  }
  return chunks
}
