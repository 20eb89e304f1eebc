/**
 * A fault-injecting HTTP proxy in front of the test S3 server (AWS_ENDPOINT_URL_S3), for
 * the fault and timeout tests: S3 clients get `proxy.url` as their endpoint (path style),
 * and each request is forwarded as sent (its Host header kept, so SigV4 signatures still
 * hold), or answered with a fault chosen by a seeded PRNG at `rate`:
 *
 *   slowdown   503 SlowDown (an S3 XML error body), not forwarded
 *   internal   500 InternalError, not forwarded
 *   reset      the connection reset before the request is forwarded
 *   lost       forwarded, and the connection reset before any byte of the answer
 *   cut        forwarded; the status, the headers and part of the body, then a reset
 *   truncate   forwarded; the Content-Length the server said, fewer bytes, then the
 *              socket ended (FIN)
 *   delay      forwarded after `delayMs` (a short stall, below any idle timeout)
 *   stall      not forwarded, never answered (until the client gives up)
 *   stallBody  forwarded; the status, the headers and part of the body, then nothing more
 *   flip       forwarded; one byte of a GetObject body (2xx) changed on the way
 *
 * `cut` and `truncate` on an answer without a body (most writes) are `lost`, and counted
 * so; `stallBody` on one is a stall after the request landed. `flip` is only chosen for
 * GetObject requests (never a listing: only object bodies carry their own checks); an
 * answer with no body to flip passes through and counts in `flipSkipped`.
 *
 * Bounded: listens on 127.0.0.1 only and forwards to a loopback target only; a stalled
 * socket is closed after `stallMaxMs` at most; `close()` destroys every socket, client or
 * upstream, and clears every timer.
 */
import { randomBytes } from 'node:crypto'
import {
  Agent,
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { after, before, beforeEach } from 'node:test'
import type { S3Client } from '@aws-sdk/client-s3'
import { createS3Client, S3Store, type S3StoreOptions } from '../../lib/store/s3.js'
import { prng } from './containers.js'
import { s3TestBucket } from './s3-env.js'

export const FAULT_KINDS = [
  'slowdown',
  'internal',
  'reset',
  'lost',
  'cut',
  'truncate',
  'delay',
  'stall',
  'stallBody',
  'flip',
] as const

export type FaultKind = (typeof FAULT_KINDS)[number]

/** Every kind but the long stalls: what a run at a steady rate without timeouts injects. */
export const NO_STALL_KINDS: readonly FaultKind[] = FAULT_KINDS.filter((k) => k !== 'stall' && k !== 'stallBody')

/** A request as the proxy sees it. */
export interface RequestInfo {
  /** Its number, from 1, in order of arrival. */
  n: number
  method: string
  /** The path and query as sent. */
  url: string
  bucket: string
  /** The object key ('' for a bucket request), decoded. */
  key: string
  query: URLSearchParams
  /** The S3 operation it is (GetObject, UploadPart, UploadPartCopy, ListObjectsV2, …). */
  op: string
  /** The Range header, if any. */
  range: string | undefined
  /** Its Content-Length (0 when none). */
  length: number
}

export interface FaultProxyOptions {
  /** Where to forward (default AWS_ENDPOINT_URL_S3); a loopback http:// URL. */
  target?: string
  /** Probability that a request gets a fault, 0..1 (default 0). */
  rate?: number
  /** The kinds chosen from (default NO_STALL_KINDS). */
  kinds?: readonly FaultKind[]
  /** PRNG seed (default 1). */
  seed?: number
  /** Which requests may get a fault at `rate` (default all); injected faults ignore it. */
  eligible?: (r: RequestInfo) => boolean
  /** The short stall of `delay` (default 300 ms). */
  delayMs?: number
  /** The longest the proxy keeps a stalled socket open itself (default 120 s). */
  stallMaxMs?: number
}

export interface FaultStats {
  /** Requests seen. */
  requests: number
  /** Requests by S3 operation. */
  byOp: Record<string, number>
  /** Faults injected, by kind (what happened: a body-less `cut` counts as `lost`). */
  faults: Record<FaultKind, number>
  /** Faults injected, by `op kind`. */
  faultsByOp: Record<string, number>
  /** All faults injected. */
  faulted: number
  /** `flip` chosen for an answer with no body to flip (passed through). */
  flipSkipped: number
  /** Faults whose request reached the server (lost, cut, truncate, stallBody, flip). */
  landed: number
  /** Requests the proxy could not forward (answered 502), not counted as faults. */
  upstreamErrors: number
}

export interface FaultProxy {
  /** The endpoint to give S3 clients: http://127.0.0.1:PORT. */
  readonly url: string
  stats(): FaultStats
  /** Changes the rate (and the kinds chosen from) for the requests that follow. */
  setRate(rate: number, kinds?: readonly FaultKind[]): void
  /** Gives the next request matching `match` (default any) the fault `kind`, once. */
  inject(kind: FaultKind, match?: (r: RequestInfo) => boolean): void
  /** Forgets the faults injected and not yet given. */
  clearInjected(): void
  /** Zeroes the counters. */
  resetStats(): void
  /** Stops listening and destroys every socket. */
  close(): Promise<void>
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade'])

/**
 * The S3 operation of a path-style request; `copySource`: whether it carries an
 * x-amz-copy-source header (a PUT of a part with it is UploadPartCopy, not UploadPart).
 */
export function s3Op(method: string, key: string, query: URLSearchParams, copySource = false): string {
  const has = (name: string) => query.has(name)
  switch (method) {
    case 'GET':
      if (key === '') return has('list-type') ? 'ListObjectsV2' : has('uploads') ? 'ListMultipartUploads' : 'ListBucket'
      return has('uploadId') ? 'ListParts' : 'GetObject'
    case 'HEAD':
      return key === '' ? 'HeadBucket' : 'HeadObject'
    case 'PUT':
      if (key === '') return 'CreateBucket'
      if (has('uploadId')) return copySource ? 'UploadPartCopy' : 'UploadPart'
      return copySource ? 'CopyObject' : 'PutObject'
    case 'POST':
      if (has('delete')) return 'DeleteObjects'
      if (has('uploads')) return 'CreateMultipartUpload'
      return has('uploadId') ? 'CompleteMultipartUpload' : `POST${key === '' ? 'Bucket' : 'Object'}`
    case 'DELETE':
      if (key === '') return 'DeleteBucket'
      return has('uploadId') ? 'AbortMultipartUpload' : 'DeleteObject'
    default:
      return method
  }
}

function describe(n: number, req: IncomingMessage): RequestInfo {
  const url = req.url ?? '/'
  const q = url.indexOf('?')
  const path = q < 0 ? url : url.slice(0, q)
  const query = new URLSearchParams(q < 0 ? '' : url.slice(q + 1))
  const slash = path.indexOf('/', 1)
  const bucket = decodeURIComponent(slash < 0 ? path.slice(1) : path.slice(1, slash))
  const key = slash < 0 ? '' : decodeURIComponent(path.slice(slash + 1))
  const method = req.method ?? 'GET'
  const range = req.headers.range
  const length = Number(req.headers['content-length'] ?? 0) || 0
  const op = s3Op(method, key, query, req.headers['x-amz-copy-source'] !== undefined)
  return { n, method, url, bucket, key, query, op, range, length }
}

function s3Error(code: string, message: string, n: number): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>fault-proxy-${n}</RequestId><HostId>fault-proxy</HostId></Error>`
}

function forwardHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {}
  for (const [name, value] of Object.entries(headers)) if (!HOP_BY_HOP.has(name)) out[name] = value
  return out
}

function emptyStats(): FaultStats {
  return {
    requests: 0,
    byOp: {},
    faults: Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>,
    faultsByOp: {},
    faulted: 0,
    flipSkipped: 0,
    landed: 0,
    upstreamErrors: 0,
  }
}

/** Starts a proxy on 127.0.0.1, on a free port. */
export async function startFaultProxy(options: FaultProxyOptions = {}): Promise<FaultProxy> {
  const targetText = options.target ?? process.env.AWS_ENDPOINT_URL_S3
  if (!targetText) throw new Error('fault proxy: no target (AWS_ENDPOINT_URL_S3 is not set)')
  const target = new URL(targetText)
  if (target.protocol !== 'http:' || !LOOPBACK.test(target.hostname)) {
    throw new Error(`fault proxy: target ${targetText} is not an http:// loopback address`)
  }
  const targetHost = target.hostname.replace(/^\[(.*)\]$/, '$1')
  const targetPort = Number(target.port || 80)
  let rate = options.rate ?? 0
  let kinds: readonly FaultKind[] = options.kinds ?? NO_STALL_KINDS
  const random = prng(options.seed ?? 1)
  const delayMs = options.delayMs ?? 300
  const stallMaxMs = options.stallMaxMs ?? 120_000
  const eligible = options.eligible ?? (() => true)
  const injected: { kind: FaultKind; match: (r: RequestInfo) => boolean }[] = []
  let stats = emptyStats()
  let seen = 0
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()
  const upstream = new Agent({ keepAlive: true, maxSockets: 256 })
  let closing = false

  const checkRate = (r: number) => {
    if (!(r >= 0 && r <= 1)) throw new Error(`fault proxy: rate ${r} is not in 0..1`)
    return r
  }
  checkRate(rate)

  const later = (ms: number, fn: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t)
      fn()
    }, ms)
    timers.add(t)
    return t
  }

  const count = (info: RequestInfo, kind: FaultKind) => {
    stats.faults[kind]++
    stats.faulted++
    const k = `${info.op} ${kind}`
    stats.faultsByOp[k] = (stats.faultsByOp[k] ?? 0) + 1
    if (kind === 'lost' || kind === 'cut' || kind === 'truncate' || kind === 'stallBody' || kind === 'flip') {
      stats.landed++
    }
  }

  /** The fault for this request: an injected one first, else one at `rate`. */
  const choose = (info: RequestInfo): FaultKind | undefined => {
    const i = injected.findIndex((x) => x.match(info))
    if (i >= 0) return injected.splice(i, 1)[0]?.kind
    if (rate === 0 || !eligible(info)) return undefined
    // Two draws per request whatever happens, so a seed gives the same sequence of choices.
    const hit = random() < rate
    const pick = random()
    if (!hit) return undefined
    const can = kinds.filter((k) => k !== 'flip' || info.op === 'GetObject')
    return can.length === 0 ? undefined : can[Math.floor(pick * can.length)]
  }

  /** Holds a socket open without answering; closed when the client goes, or after stallMaxMs. */
  const stall = (socket: Socket) => {
    const t = later(stallMaxMs, () => socket.destroy()).unref()
    socket.once('close', () => {
      clearTimeout(t)
      timers.delete(t)
    })
  }

  const answerError = (res: ServerResponse, req: IncomingMessage, status: number, code: string, info: RequestInfo) => {
    const body = s3Error(
      code,
      code === 'SlowDown' ? 'Please reduce your request rate.' : 'We encountered an internal error. Please try again.',
      info.n,
    )
    req.resume()
    req.once('end', () => {
      res.writeHead(status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) })
      res.end(body)
    })
  }

  const forward = (req: IncomingMessage, res: ServerResponse, info: RequestInfo, fault: FaultKind | undefined) => {
    const up = httpRequest({
      host: targetHost,
      port: targetPort,
      method: req.method,
      path: req.url,
      headers: forwardHeaders(req.headers),
      agent: upstream,
    })
    const socket = req.socket
    // The client went away (it timed out, aborted, or a fault reset it): so does the upstream request.
    res.once('close', () => {
      if (!res.writableFinished) up.destroy()
    })
    up.on('error', () => {
      if (res.writableFinished) return
      stats.upstreamErrors++
      if (!res.headersSent && !socket.destroyed) {
        res.writeHead(502, { 'content-type': 'text/plain' })
        res.end('fault proxy: upstream failed')
      } else {
        socket.destroy()
      }
    })
    req.pipe(up)
    up.on('response', (ur) => {
      ur.on('error', () => socket.destroy())
      const status = ur.statusCode ?? 502
      const lengthHeader = ur.headers['content-length']
      const length = lengthHeader === undefined ? undefined : Number(lengthHeader)
      const chunked = /chunked/i.test(String(ur.headers['transfer-encoding'] ?? ''))
      const hasBody = req.method !== 'HEAD' && status !== 204 && status !== 304 && (chunked || (length ?? 0) > 0)
      const headers = forwardHeaders(ur.headers)
      let kind = fault
      if ((kind === 'cut' || kind === 'truncate') && !hasBody) kind = 'lost'
      if (kind === 'flip' && !(hasBody && status >= 200 && status < 300 && length !== undefined)) {
        stats.flipSkipped++
        kind = undefined
      }
      if (kind !== undefined) count(info, kind)
      if (kind === 'lost') {
        ur.resume()
        socket.destroy()
        return
      }
      if (kind === 'stallBody' && !hasBody) {
        ur.resume()
        stall(socket)
        return
      }
      res.writeHead(status, ur.statusMessage, headers)
      if (kind === 'cut' || kind === 'truncate' || kind === 'stallBody') {
        // Bytes of the body sent before the fault: at least one, never all of it.
        const total = length ?? 2
        const keep = Math.max(1, Math.min(total - 1, Math.floor(random() * total)))
        let sent = 0
        ur.on('data', (chunk: Buffer) => {
          if (sent >= keep) return
          const part = chunk.subarray(0, keep - sent)
          sent += part.length
          const done = sent >= keep
          res.write(part, () => {
            if (!done) return
            if (kind === 'cut') socket.destroy()
            else if (kind === 'truncate') socket.end()
          })
          if (done) {
            ur.destroy()
            if (kind === 'stallBody') stall(socket)
          }
        })
        // A chunked body shorter than planned: cut it where it ended.
        ur.on('end', () => {
          if (sent < keep) socket.destroy()
        })
        return
      }
      if (kind === 'flip') {
        const at = Math.floor(random() * (length as number))
        const xor = 1 + Math.floor(random() * 255)
        let pos = 0
        ur.on('data', (chunk: Buffer) => {
          if (at >= pos && at < pos + chunk.length) {
            const copy = Buffer.from(chunk)
            copy[at - pos] = (copy[at - pos] as number) ^ xor
            chunk = copy
          }
          pos += chunk.length
          if (!res.write(chunk)) {
            ur.pause()
            res.once('drain', () => ur.resume())
          }
        })
        ur.on('end', () => res.end())
        return
      }
      ur.pipe(res)
    })
  }

  const server = createServer((req, res) => {
    seen++
    const info = describe(seen, req)
    stats.requests++
    stats.byOp[info.op] = (stats.byOp[info.op] ?? 0) + 1
    if (closing) {
      req.socket.destroy()
      return
    }
    const fault = choose(info)
    switch (fault) {
      case 'slowdown':
        count(info, fault)
        answerError(res, req, 503, 'SlowDown', info)
        return
      case 'internal':
        count(info, fault)
        answerError(res, req, 500, 'InternalError', info)
        return
      case 'reset':
        count(info, fault)
        req.socket.destroy()
        return
      case 'stall':
        count(info, fault)
        req.resume()
        stall(req.socket)
        return
      case 'delay':
        count(info, fault)
        later(delayMs, () => {
          if (!req.socket.destroyed) forward(req, res, info, undefined)
        })
        return
      default:
        forward(req, res, info, fault)
    }
  })
  // Never time a stalled exchange out on the proxy's side: the client must. Idle
  // keep-alive connections are kept longer than the clients keep them, so that no request
  // meets a connection the proxy is closing (a reset that would not be a fault).
  server.requestTimeout = 0
  server.headersTimeout = 60_000
  server.keepAliveTimeout = 120_000
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('error', () => undefined)
    socket.once('close', () => sockets.delete(socket))
  })
  server.on('clientError', (_err, socket) => socket.destroy())
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    stats: () => structuredClone(stats),
    setRate(r: number, k?: readonly FaultKind[]) {
      rate = checkRate(r)
      if (k !== undefined) kinds = k
    },
    inject(kind: FaultKind, match: (r: RequestInfo) => boolean = () => true) {
      injected.push({ kind, match })
    },
    clearInjected() {
      injected.length = 0
    },
    resetStats() {
      stats = emptyStats()
    },
    async close() {
      closing = true
      for (const t of timers) clearTimeout(t)
      timers.clear()
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const s of sockets) s.destroy()
      upstream.destroy()
      await closed
    },
  }
}

/** A seed for a run: FAULT_SEED when set (to replay a run), else a random one (printed by the caller). */
export function faultSeed(): number {
  const given = process.env.FAULT_SEED
  if (given !== undefined && given !== '') {
    const n = Number(given)
    if (!Number.isSafeInteger(n)) throw new Error(`FAULT_SEED=${given} is not an integer`)
    return n
  }
  return randomBytes(4).readUInt32LE(0)
}

/** The bytes a GET's Range header asks for (`bytes=a-b`), or undefined for none or a suffix. */
export function rangeLength(r: RequestInfo): number | undefined {
  const m = /^bytes=(\d+)-(\d+)$/.exec(r.range ?? '')
  return m === null ? undefined : Number(m[2]) - Number(m[1]) + 1
}

/**
 * An S3Client whose endpoint is the proxy (path style), with the test credentials and
 * region from the environment and the given timeouts.
 */
export function proxiedS3Client(
  proxy: { url: string },
  options: { idleTimeoutMs?: number; connectTimeoutMs?: number; secretAccessKey?: string; accessKeyId?: string } = {},
): S3Client {
  const accessKeyId = options.accessKeyId ?? process.env.AWS_ACCESS_KEY_ID
  const secretAccessKey = options.secretAccessKey ?? process.env.AWS_SECRET_ACCESS_KEY
  if (!accessKeyId || !secretAccessKey)
    throw new Error('fault proxy: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set')
  return createS3Client({
    endpoint: proxy.url,
    forcePathStyle: true,
    region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
    credentials: { accessKeyId, secretAccessKey },
    idleTimeoutMs: options.idleTimeoutMs ?? 2000,
    connectTimeoutMs: options.connectTimeoutMs ?? 2000,
  })
}

/**
 * The fault proxy of one describe block's tests, in front of the test bucket: started before
 * them (failing there, with the hint, when the S3 server is missing) and handed to
 * `started`; its rate, injected faults and counts cleared before each test (whatever one
 * that failed left); closed after them, with the client of every store made by the function
 * returned: an S3Store on the test bucket under `prefix` whose requests go through the proxy.
 */
export function useFaultProxy(
  options: FaultProxyOptions,
  started: (proxy: FaultProxy) => void,
): (prefix: string, storeOptions?: Partial<S3StoreOptions>, idleTimeoutMs?: number) => Promise<S3Store> {
  let proxy: FaultProxy | undefined
  const clients: S3Client[] = []
  before(async () => {
    await s3TestBucket()
    proxy = await startFaultProxy(options)
    started(proxy)
  })
  after(async () => {
    for (const c of clients) c.destroy()
    await proxy?.close()
  })
  beforeEach(() => {
    proxy?.setRate(0)
    proxy?.clearInjected()
    proxy?.resetStats()
  })
  return async (prefix, storeOptions = {}, idleTimeoutMs = 2000) => {
    if (proxy === undefined) throw new Error('useFaultProxy: a store asked for before the proxy started')
    const client = proxiedS3Client(proxy, { idleTimeoutMs })
    clients.push(client)
    return new S3Store({ client, bucket: await s3TestBucket(), prefix, ...storeOptions })
  }
}
