/**
 * The lean GET of S3Store (`getPath: 'http'`): the SDK builds and signs the GetObject
 * request (endpoint and addressing style, region, credentials from the client's provider,
 * refreshed as it refreshes them), and parses error answers into its named errors; the
 * request itself goes out on `node:http`/`node:https` and a 2xx body is read straight
 * into ONE buffer sized from its Content-Length.
 *
 * How: one middleware per command at the end of the deserialize step (after signing,
 * inside the deserializer), which does not call the SDK's handler. It answers the
 * deserializer with the body already read: a 2xx body as a `BodyBytes` (a Readable that
 * holds the buffer, never read as a stream by S3Store), an error body as its bytes.
 *
 * Invariants and failure handling:
 * - A 2xx answer must carry a Content-Length (a decimal integer); a ranged request must be
 *   answered 206 with a Content-Range that starts at the requested byte and spans exactly
 *   Content-Length bytes (or 200 with the whole object, no longer than asked). Otherwise
 *   the answer is refused (status kept: not retried), naming what was wrong, the range
 *   and the object.
 * - The body fills exactly Content-Length bytes: one byte more, an end or a close before
 *   the last byte, a reset or a parse error is a failure with no HTTP status, which the
 *   store's retry policy makes again (as for the SDK path). The buffer is never handed
 *   out before it is complete.
 * - The socket pool is the client's (its keep-alive agents, so one bound on sockets for
 *   every request of the client), as are its connect timeout (connection not made in
 *   time: TimeoutError) and socket idle timeout (no byte moving for that long: the
 *   request is destroyed, TimeoutError); both retried by the store.
 * - The AbortSignal destroys the request at any point, body included: AbortError.
 * - An error body is read up to ERROR_BODY_MAX bytes (S3 error documents are small).
 */
import { type ClientRequest, type IncomingMessage, Agent as HttpAgent, request as httpRequest } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import type { Socket } from 'node:net'
import { Readable } from 'node:stream'
import type { S3Client } from '@aws-sdk/client-s3'

const ERROR_BODY_MAX = 1024 * 1024
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000
const DEFAULT_IDLE_TIMEOUT_MS = 30_000

/** How requests go out: the client's agents and timeouts (createS3Client's options). */
export interface Transport {
  httpAgent: HttpAgent
  httpsAgent: HttpsAgent
  /** 0: none. */
  connectTimeoutMs: number
  idleTimeoutMs: number
}

type HandlerConfig = {
  httpAgent?: HttpAgent
  httpsAgent?: HttpsAgent
  httpAgentProvider?: () => Promise<HttpAgent>
  connectionTimeout?: number
  socketTimeout?: number
}

const transports = new WeakMap<S3Client, Promise<Transport>>()

/**
 * The transport of `client`: the agents and timeouts of its Node request handler when it
 * has one (every client createS3Client makes), else keep-alive agents of our own
 * (64 sockets per origin) and the default timeouts.
 */
export function transportOf(client: S3Client): Promise<Transport> {
  let t = transports.get(client)
  if (t === undefined) {
    t = (async (): Promise<Transport> => {
      const handler = (client.config as { requestHandler?: { configProvider?: Promise<HandlerConfig> } }).requestHandler
      const config: HandlerConfig = (await handler?.configProvider) ?? {}
      const httpAgent =
        config.httpAgent ?? (await config.httpAgentProvider?.()) ?? new HttpAgent({ keepAlive: true, maxSockets: 64 })
      const nat = (v: number | undefined, d: number) => (typeof v === 'number' && v >= 0 ? v : d)
      return {
        httpAgent,
        httpsAgent: config.httpsAgent ?? new HttpsAgent({ keepAlive: true, maxSockets: 64 }),
        connectTimeoutMs: nat(config.connectionTimeout, DEFAULT_CONNECT_TIMEOUT_MS),
        idleTimeoutMs: nat(config.socketTimeout, DEFAULT_IDLE_TIMEOUT_MS),
      }
    })()
    transports.set(client, t)
  }
  return t
}

/** A 2xx body already read: the buffer, as a Readable for the SDK's deserializer. */
export class BodyBytes extends Readable {
  constructor(readonly bytes: Uint8Array) {
    super()
  }

  override _read(): void {
    // Only read when something of the SDK wants the stream (a response checksum).
    this.push(this.bytes)
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
interface RawResponse {
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
 * Makes `command` (a GetObjectCommand) go out on node:http: its 2xx body comes back as a
 * BodyBytes (`bytesOf` takes it). `where` names the object in error messages.
 */
export function sendOverHttp<C>(command: C, transport: Transport, signal: AbortSignal, where: string): C {
  ;(command as unknown as Stack).middlewareStack.add(
    () => async (args) => ({
      response: await fetch1((args as { request: SignedRequest }).request, transport, signal, where),
    }),
    { step: 'deserialize', priority: 'low', name: 'streamSegmentHttpGet' },
  )
  return command
}

/** The bytes of a GetObject output's Body when it came the lean way, else undefined. */
export function bytesOf(body: unknown): Uint8Array | undefined {
  return body instanceof BodyBytes ? body.bytes : undefined
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
function refused(status: number, message: string): Error {
  return Object.assign(new Error(message), { name: 'InvalidResponse', $metadata: { httpStatusCode: status } })
}

function named(name: string, message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, { cause }), { name })
}

/** Which bytes the request asked for, from its Range header. */
type Asked = { start: number; end: number } | { suffix: number } | undefined

function askedRange(headers: Record<string, string>): Asked {
  const h = headers.range ?? headers.Range
  if (h === undefined) return undefined
  const m = /^bytes=(\d*)-(\d*)$/.exec(h)
  if (m === null) return undefined
  if (m[1] === '') return { suffix: Number(m[2]) }
  return { start: Number(m[1]), end: m[2] === '' ? Number.POSITIVE_INFINITY : Number(m[2]) + 1 }
}

/**
 * The number of body bytes a 2xx answer must carry, checked against what was asked, or
 * the reason it is refused.
 */
function expectedLength(res: IncomingMessage, asked: Asked): number | string {
  const cl = res.headers['content-length']
  if (cl === undefined) return 'no Content-Length'
  if (!/^\d{1,15}$/.test(cl)) return `Content-Length ${JSON.stringify(cl)} is not a byte count`
  const n = Number(cl)
  if (asked === undefined) return n
  const status = res.statusCode as number
  if (status === 200) {
    // The whole object: acceptable when it is all that was asked.
    const max = 'suffix' in asked ? asked.suffix : asked.start === 0 ? asked.end : -1
    return n <= max ? n : `200 with the whole object (${n} bytes) to a request for a range`
  }
  const cr = res.headers['content-range']
  const m = cr === undefined ? null : /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(cr)
  if (m === null) return `206 with Content-Range ${JSON.stringify(cr ?? null)}`
  const first = Number(m[1])
  const last = Number(m[2])
  if (last < first || last - first + 1 !== n) return `Content-Range ${cr} does not span Content-Length ${n}`
  if ('suffix' in asked) {
    if (n > asked.suffix) return `Content-Range ${cr}: more than the last ${asked.suffix} bytes`
  } else if (first !== asked.start || last >= asked.end) {
    return `Content-Range ${cr} is not within the bytes asked, [${asked.start}, ${asked.end})`
  }
  return n
}

/** One request, its 2xx body read into one buffer, or its error body read whole. */
function fetch1(request: SignedRequest, t: Transport, signal: AbortSignal, where: string): Promise<RawResponse> {
  return new Promise<RawResponse>((resolve, reject) => {
    const https = request.protocol === 'https:'
    const asked = askedRange(request.headers)
    const what = `${where}${request.headers.range === undefined ? '' : ` (${request.headers.range})`}`
    let req: ClientRequest | undefined
    let done = false
    let connectTimer: NodeJS.Timeout | undefined
    const finish = (err: Error | undefined, value?: RawResponse) => {
      if (done) return
      done = true
      clearTimeout(connectTimer)
      signal.removeEventListener('abort', onAbort)
      if (err === undefined) resolve(value as RawResponse)
      else {
        req?.destroy()
        reject(err)
      }
    }
    const onAbort = () => finish(named('AbortError', `GET ${what} aborted`, signal.reason))
    if (signal.aborted) {
      onAbort()
      return
    }
    signal.addEventListener('abort', onAbort, { once: true })
    let hostname = request.hostname
    if (hostname.startsWith('[') && hostname.endsWith(']')) hostname = hostname.slice(1, -1)
    const options = {
      host: hostname,
      port: request.port,
      method: request.method,
      path: request.path + queryString(request.query),
      headers: request.headers,
      agent: https ? t.httpsAgent : t.httpAgent,
    }
    req = (https ? httpsRequest : httpRequest)(options)
    req.on('error', (err: Error & { code?: string }) => {
      finish(err.code === 'ETIMEDOUT' ? named('TimeoutError', err.message, err) : err)
    })
    if (t.connectTimeoutMs > 0) {
      req.once('socket', (socket: Socket) => {
        if (!socket.connecting) return
        connectTimer = setTimeout(
          () => finish(named('TimeoutError', `GET ${what}: no connection within ${t.connectTimeoutMs} ms`)),
          t.connectTimeoutMs,
        )
        socket.once('connect', () => clearTimeout(connectTimer))
      })
    }
    if (t.idleTimeoutMs > 0) {
      req.setTimeout(t.idleTimeoutMs, () => {
        finish(named('TimeoutError', `GET ${what}: nothing received for ${t.idleTimeoutMs} ms`))
      })
    }
    req.on('response', (res: IncomingMessage) => {
      const status = res.statusCode ?? 0
      const headers = res.headers as Record<string, string>
      const base = { statusCode: status, reason: res.statusMessage, headers }
      res.on('error', (err) => finish(err))
      if (status < 200 || status >= 300) {
        readErrorBody(res, (bytes) => finish(undefined, { ...base, body: bytes }))
        return
      }
      const expected = expectedLength(res, asked)
      if (typeof expected === 'string') {
        finish(refused(status, `GET ${what}: answer refused: ${expected}`))
        return
      }
      const into = Buffer.allocUnsafeSlow(expected)
      let filled = 0
      res.on('data', (chunk: Buffer) => {
        if (done) return
        if (filled + chunk.byteLength > expected) {
          finish(new Error(`GET ${what}: body longer than its Content-Length ${expected}`))
          return
        }
        into.set(chunk, filled)
        filled += chunk.byteLength
      })
      res.on('end', () => {
        if (filled !== expected) finish(new Error(`GET ${what}: body ended after ${filled} of ${expected} bytes`))
        else finish(undefined, { ...base, body: new BodyBytes(into) })
      })
      res.on('close', () => {
        if (!done) finish(new Error(`GET ${what}: connection closed after ${filled} of ${expected} bytes`))
      })
    })
    req.end()
  })
}

/** Reads a (small) error body; a body over ERROR_BODY_MAX, or one cut, gives what came. */
function readErrorBody(res: IncomingMessage, done: (bytes: Uint8Array) => void): void {
  const chunks: Buffer[] = []
  let size = 0
  let called = false
  const end = () => {
    if (called) return
    called = true
    done(Buffer.concat(chunks))
  }
  res.on('data', (c: Buffer) => {
    if (size + c.byteLength > ERROR_BODY_MAX) {
      res.destroy()
      end()
      return
    }
    chunks.push(c)
    size += c.byteLength
  })
  res.on('end', end)
  res.on('close', end)
}
