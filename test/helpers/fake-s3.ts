/**
 * A small fake S3 server on 127.0.0.1 for tests of how S3Store takes the server's answers:
 * path-style, one bucket, objects and multipart uploads in memory, enough of the API for
 * the store's calls (ListObjectsV2, HeadObject, GetObject, PutObject with If-Match and
 * If-None-Match, DeleteObject(s), the multipart calls). `hook` sees every request first
 * and may answer it itself (return true): that is how a test makes the server answer badly.
 * No real S3 server is needed.
 */
import { createHash, randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { after } from 'node:test'
import { createS3Client, S3Store, type S3StoreOptions } from '../../lib/store/s3.js'

export interface FakeObject {
  body: Buffer
  etag: string
  lastModified: Date
  /** `x-amz-meta-*` headers as sent. */
  meta: Record<string, string>
}

export interface FakeUpload {
  key: string
  parts: Map<number, { body: Buffer; etag: string }>
  initiated: Date
  meta: Record<string, string>
}

/** A request as the hook sees it: the operation, the full key (with the store's prefix), the query, the body. */
export interface FakeRequest {
  op: string
  key: string
  query: URLSearchParams
  body: Buffer
  req: IncomingMessage
}

export type FakeHook = (r: FakeRequest, res: ServerResponse, s3: FakeS3) => boolean | undefined

export interface FakeS3 {
  url: string
  objects: Map<string, FakeObject>
  uploads: Map<string, FakeUpload>
  /** Every request, as `op key`. */
  log: string[]
  hook: FakeHook | undefined
  /** List objects without LastModified and uploads without Initiated. */
  omitTimes: boolean
  /** Requests of operation `op` so far. */
  count(op: string): number
  close(): Promise<void>
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex')

export function send(res: ServerResponse, status: number, body = '', headers: Record<string, string> = {}): void {
  res.writeHead(status, {
    'content-length': String(Buffer.byteLength(body)),
    ...(body === '' ? {} : { 'content-type': 'application/xml' }),
    ...headers,
  })
  res.end(body)
}

export function s3Error(res: ServerResponse, status: number, code: string, extra = ''): void {
  send(
    res,
    status,
    `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${code}</Message>${extra}<RequestId>fake</RequestId></Error>`,
  )
}

/** Writes `head` (status line and headers, no blank line) and `body` as raw bytes, then closes: headers node:http would not send. */
export function rawAnswer(res: ServerResponse, head: string, body: Uint8Array = new Uint8Array(0)): void {
  const socket = res.socket as Socket
  socket.write(`${head}\r\nConnection: close\r\n\r\n`, 'latin1')
  socket.end(body)
}

/** One `<Contents>` of a ListObjectsV2 page; a field left undefined is left out. */
export interface ListedEntry {
  key?: string
  size?: number | string
  etag?: string
  lastModified?: string
}

export function listPage(entries: ListedEntry[], page: { truncated?: boolean | null; token?: string } = {}): string {
  const { truncated = false, token } = page
  const contents = entries
    .map(
      (e) =>
        `<Contents>${e.key === undefined ? '' : `<Key>${esc(e.key)}</Key>`}${e.lastModified === undefined ? '' : `<LastModified>${e.lastModified}</LastModified>`}${e.etag === undefined ? '' : `<ETag>${e.etag}</ETag>`}${e.size === undefined ? '' : `<Size>${e.size}</Size>`}</Contents>`,
    )
    .join('')
  return `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>bucket</Name><KeyCount>${entries.length}</KeyCount>${truncated === null ? '' : `<IsTruncated>${truncated}</IsTruncated>`}${token === undefined ? '' : `<NextContinuationToken>${esc(token)}</NextContinuationToken>`}${contents}</ListBucketResult>`
}

function opOf(req: IncomingMessage): { op: string; key: string; query: URLSearchParams } {
  const u = new URL(req.url ?? '/', 'http://fake')
  const query = u.searchParams
  const key = decodeURIComponent(u.pathname).split('/').slice(2).join('/')
  const m = req.method
  let op: string
  if (key === '') {
    if (m === 'GET' && query.has('uploads')) op = 'ListMultipartUploads'
    else if (m === 'GET') op = 'ListObjectsV2'
    else if (m === 'POST' && query.has('delete')) op = 'DeleteObjects'
    else op = `${m}-bucket`
  } else if (m === 'GET' && query.has('uploadId')) op = 'ListParts'
  else if (m === 'GET') op = 'GetObject'
  else if (m === 'HEAD') op = 'HeadObject'
  else if (m === 'PUT' && query.has('uploadId'))
    op = req.headers['x-amz-copy-source'] === undefined ? 'UploadPart' : 'UploadPartCopy'
  else if (m === 'PUT') op = 'PutObject'
  else if (m === 'POST' && query.has('uploads')) op = 'CreateMultipartUpload'
  else if (m === 'POST' && query.has('uploadId')) op = 'CompleteMultipartUpload'
  else if (m === 'DELETE' && query.has('uploadId')) op = 'AbortMultipartUpload'
  else if (m === 'DELETE') op = 'DeleteObject'
  else op = `${m}-object`
  return { op, key, query }
}

function metaOf(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(req.headers)) if (k.startsWith('x-amz-meta-') && typeof v === 'string') out[k] = v
  return out
}

/** The usual answer to `r`, as a working S3 server gives it. */
function answer(s3: FakeS3, r: FakeRequest, res: ServerResponse): void {
  const { op, key, query, body, req } = r
  switch (op) {
    case 'ListObjectsV2': {
      const prefix = query.get('prefix') ?? ''
      const max = Number(query.get('max-keys') ?? 1000)
      const after = query.get('continuation-token') ?? query.get('start-after') ?? ''
      const keys = [...s3.objects.keys()].filter((k) => k.startsWith(prefix) && k > after).sort()
      const page = keys.slice(0, max)
      const truncated = keys.length > max
      const entries = page.map((k) => {
        const o = s3.objects.get(k) as FakeObject
        const lastModified = s3.omitTimes ? undefined : o.lastModified.toISOString()
        return { key: k, size: o.body.length, etag: `"${o.etag}"`, lastModified }
      })
      send(res, 200, listPage(entries, truncated ? { truncated, token: page.at(-1) as string } : {}))
      return
    }
    case 'ListMultipartUploads': {
      const prefix = query.get('prefix') ?? ''
      const list = [...s3.uploads].filter(([, u]) => u.key.startsWith(prefix))
      const uploads = list
        .map(
          ([id, u]) =>
            `<Upload><Key>${esc(u.key)}</Key><UploadId>${id}</UploadId>${s3.omitTimes ? '' : `<Initiated>${u.initiated.toISOString()}</Initiated>`}</Upload>`,
        )
        .join('')
      send(
        res,
        200,
        `<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>${uploads}</ListMultipartUploadsResult>`,
      )
      return
    }
    case 'DeleteObjects': {
      for (const m of body.toString().matchAll(/<Key>([^<]*)<\/Key>/g)) {
        s3.objects.delete((m[1] as string).replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&'))
      }
      send(res, 200, '<DeleteResult></DeleteResult>')
      return
    }
    case 'HeadObject':
    case 'GetObject': {
      const o = s3.objects.get(key)
      if (o === undefined) {
        if (op === 'HeadObject') send(res, 404)
        else s3Error(res, 404, 'NoSuchKey')
        return
      }
      const h = { etag: `"${o.etag}"`, 'last-modified': o.lastModified.toUTCString(), ...o.meta }
      if (op === 'HeadObject') {
        res.writeHead(200, { ...h, 'content-length': String(o.body.length) })
        res.end()
        return
      }
      const range = req.headers.range
      if (range === undefined) {
        res.writeHead(200, { ...h, 'content-length': String(o.body.length) })
        res.end(o.body)
        return
      }
      const m = /^bytes=(\d*)-(\d*)$/.exec(range) as RegExpExecArray
      const size = o.body.length
      const start = m[1] === '' ? Math.max(0, size - Number(m[2])) : Number(m[1])
      const end = m[1] === '' || m[2] === '' ? size : Math.min(size, Number(m[2]) + 1)
      if (start >= size) {
        s3Error(res, 416, 'InvalidRange')
        return
      }
      res.writeHead(206, {
        ...h,
        'content-length': String(end - start),
        'content-range': `bytes ${start}-${end - 1}/${size}`,
      })
      res.end(o.body.subarray(start, end))
      return
    }
    case 'PutObject': {
      const cur = s3.objects.get(key)
      if (req.headers['if-none-match'] === '*' && cur !== undefined) {
        s3Error(res, 412, 'PreconditionFailed')
        return
      }
      const ifMatch = req.headers['if-match']
      if (ifMatch !== undefined && (cur === undefined || cur.etag !== ifMatch.replace(/"/g, ''))) {
        s3Error(res, cur === undefined ? 404 : 412, cur === undefined ? 'NoSuchKey' : 'PreconditionFailed')
        return
      }
      const etag = md5(body)
      s3.objects.set(key, { body, etag, lastModified: new Date(), meta: metaOf(req) })
      send(res, 200, '', { etag: `"${etag}"` })
      return
    }
    case 'DeleteObject':
      s3.objects.delete(key)
      send(res, 204)
      return
    case 'CreateMultipartUpload': {
      const id = randomUUID()
      s3.uploads.set(id, { key, parts: new Map(), initiated: new Date(), meta: metaOf(req) })
      send(
        res,
        200,
        `<InitiateMultipartUploadResult><Bucket>bucket</Bucket><Key>${esc(key)}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`,
      )
      return
    }
    case 'UploadPart': {
      const u = s3.uploads.get(query.get('uploadId') ?? '')
      if (u === undefined) {
        s3Error(res, 404, 'NoSuchUpload')
        return
      }
      const etag = md5(body)
      u.parts.set(Number(query.get('partNumber')), { body, etag })
      send(res, 200, '', { etag: `"${etag}"` })
      return
    }
    case 'UploadPartCopy': {
      const u = s3.uploads.get(query.get('uploadId') ?? '')
      if (u === undefined) {
        s3Error(res, 404, 'NoSuchUpload')
        return
      }
      // `bucket/key`, each segment escaped; the one bucket is the fake's.
      const source = decodeURIComponent(String(req.headers['x-amz-copy-source'])).split('/').slice(1).join('/')
      const o = s3.objects.get(source)
      if (o === undefined) {
        s3Error(res, 404, 'NoSuchKey')
        return
      }
      const ifMatch = req.headers['x-amz-copy-source-if-match']
      if (typeof ifMatch === 'string' && ifMatch.replace(/"/g, '') !== o.etag) {
        s3Error(res, 412, 'PreconditionFailed')
        return
      }
      const m = /^bytes=(\d+)-(\d+)$/.exec(String(req.headers['x-amz-copy-source-range'] ?? ''))
      const start = m === null ? 0 : Number(m[1])
      const end = m === null ? o.body.length : Number(m[2]) + 1
      if (start >= end || end > o.body.length) {
        s3Error(res, 400, 'InvalidArgument')
        return
      }
      const part = Buffer.from(o.body.subarray(start, end))
      const etag = md5(part)
      u.parts.set(Number(query.get('partNumber')), { body: part, etag })
      send(
        res,
        200,
        `<CopyPartResult><ETag>"${etag}"</ETag><LastModified>${new Date().toISOString()}</LastModified></CopyPartResult>`,
      )
      return
    }
    case 'ListParts': {
      const u = s3.uploads.get(query.get('uploadId') ?? '')
      if (u === undefined) {
        s3Error(res, 404, 'NoSuchUpload')
        return
      }
      const parts = [...u.parts]
        .sort((a, b) => a[0] - b[0])
        .map(
          ([n, p]) => `<Part><PartNumber>${n}</PartNumber><ETag>"${p.etag}"</ETag><Size>${p.body.length}</Size></Part>`,
        )
        .join('')
      send(res, 200, `<ListPartsResult><IsTruncated>false</IsTruncated>${parts}</ListPartsResult>`)
      return
    }
    case 'CompleteMultipartUpload': {
      const id = query.get('uploadId') ?? ''
      const u = s3.uploads.get(id)
      if (u === undefined) {
        s3Error(res, 404, 'NoSuchUpload')
        return
      }
      const numbers = [...body.toString().matchAll(/<PartNumber>(\d+)<\/PartNumber>/g)].map((m) => Number(m[1]))
      const data = Buffer.concat(numbers.map((n) => u.parts.get(n)?.body ?? Buffer.alloc(0)))
      // As S3 names it: the MD5 of the parts' MD5s, and their count.
      const etag = `${createHash('md5')
        .update(Buffer.concat(numbers.map((n) => Buffer.from(u.parts.get(n)?.etag ?? '', 'hex'))))
        .digest('hex')}-${numbers.length}`
      s3.objects.set(u.key, { body: data, etag, lastModified: new Date(), meta: u.meta })
      s3.uploads.delete(id)
      send(
        res,
        200,
        `<CompleteMultipartUploadResult><Key>${esc(u.key)}</Key><ETag>"${etag}"</ETag></CompleteMultipartUploadResult>`,
      )
      return
    }
    case 'AbortMultipartUpload':
      s3.uploads.delete(query.get('uploadId') ?? '')
      send(res, 204)
      return
    default:
      s3Error(res, 501, 'NotImplemented')
  }
}

/** Starts fake S3 servers for one test file: each is closed when the file's tests are done. */
export function fakeS3Servers(): (hook?: FakeHook) => Promise<FakeS3> {
  const servers: FakeS3[] = []
  after(async () => {
    for (const s of servers) await s.close()
  })
  return async (hook) => {
    const s3 = await startFakeS3(hook)
    servers.push(s3)
    return s3
  }
}

export async function startFakeS3(hook?: FakeHook): Promise<FakeS3> {
  const sockets = new Set<Socket>()
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (d: Buffer) => chunks.push(d))
    req.on('end', () => {
      const r: FakeRequest = { ...opOf(req), body: Buffer.concat(chunks), req }
      s3.log.push(`${r.op} ${r.key}`)
      try {
        if (s3.hook?.(r, res, s3) !== true) answer(s3, r, res)
      } catch (err) {
        res.destroy(err as Error)
      }
    })
  })
  server.on('connection', (s: Socket) => {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  const s3: FakeS3 = {
    url: `http://127.0.0.1:${port}`,
    objects: new Map(),
    uploads: new Map(),
    log: [],
    hook,
    omitTimes: false,
    count: (op) => s3.log.filter((l) => l.startsWith(`${op} `)).length,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const s of sockets) s.destroy()
      await closed
    },
  }
  return s3
}

/**
 * An S3Store for a test server at `url` (this fake, or a scripted one): bucket `bucket`,
 * prefix `p/`, test credentials, retrying quickly; `client` overrides client options.
 */
export function testS3Store(
  url: string,
  options: Partial<S3StoreOptions> = {},
  client: { idleTimeoutMs?: number; maxSockets?: number; forcePathStyle?: boolean } = {},
): S3Store {
  return new S3Store({
    client: createS3Client({
      endpoint: url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      ...client,
    }),
    bucket: 'bucket',
    prefix: 'p',
    maxRetries: 2,
    retryBaseMs: 1,
    retryMaxMs: 5,
    ...options,
  })
}

/** An S3Store on the fake server (see testS3Store). */
export function fakeS3Store(s3: FakeS3, options: Partial<S3StoreOptions> = {}): S3Store {
  return testS3Store(s3.url, options)
}

/** Makes the answer about to be written on `res` leave out header `name` (lower case). */
export function dropHeader(res: ServerResponse, name: string): void {
  replaceHeader(res, name, undefined)
}

/** Makes the answer about to be written on `res` carry header `name` (lower case) as `value`, or not at all. */
export function replaceHeader(res: ServerResponse, name: string, value: string | undefined): void {
  type WriteHead = (status: number, headers?: Record<string, string>) => ServerResponse
  const writeHead = res.writeHead.bind(res) as WriteHead
  const patched: WriteHead = (status, headers = {}) =>
    writeHead(status, {
      ...Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase() !== name)),
      ...(value === undefined ? {} : { [name]: value }),
    })
  ;(res as unknown as { writeHead: WriteHead }).writeHead = patched
}
