/**
 * S3Store's lean GET path reads bodies into pieces of the pool (util/piece-pool.ts). A GET
 * that fails part-way (the connection closed or reset mid-body, the idle timeout, the
 * caller's signal, an answer refused after its body was read) gives every piece it took
 * back, none of them lent to anyone: `pieceStats().out` is what it was, and the next GET
 * reads into them again. A try that failed, then one that succeeded, costs the pool only
 * the pieces its caller holds; `get`, which joins the pieces, gives them back too.
 * Against a local HTTP server (node:http on 127.0.0.1) answering as each test scripts.
 */
import assert from 'node:assert/strict'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { after, describe, it } from 'node:test'
import { createS3Client, S3Store, type S3StoreOptions } from '../../lib/store/s3.js'
import { crc32Base64 } from '../../lib/store/s3-body.js'
import { dropPieces, givePieces, isLentPiece, PIECE_BYTES, pieceStats } from '../../lib/util/piece-pool.js'
import { rejectsCode } from '../helpers/assert.js'
import { testS3Store } from '../helpers/fake-s3.js'
import { pattern } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const OBJECT = pattern(0, MiB, 7)
/** Bytes of the body a cut answer sends: five pieces and part of a sixth. */
const SENT = 5 * PIECE_BYTES + 100
/** Pieces the lean path has taken once those bytes came (the sixth being filled). */
const TAKEN = 6

type Answer = (req: IncomingMessage, res: ServerResponse, n: number) => void

const servers: Server[] = []
after(async () => {
  for (const s of servers) {
    s.closeAllConnections()
    await new Promise((resolve) => s.close(resolve))
  }
})

/** A server on 127.0.0.1 answering request `n` (0-based) with `answer`. */
async function serve(answer: Answer): Promise<string> {
  let n = 0
  const server = createServer((req, res) => {
    res.socket?.on('error', () => undefined)
    answer(req, res, n++)
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`
}

/** The whole object's head: 200, its Content-Length, an ETag. */
function head(res: ServerResponse, extra: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-length': String(OBJECT.length), etag: '"e"', ...extra })
}

/** Answers with the whole object. */
const honest: Answer = (_req, res) => {
  head(res)
  res.end(OBJECT)
}

/** Pieces out when the test started (`fresh`). */
let base = 0

/** Resolves once TAKEN pieces more than `base` are out (the GET has read SENT bytes), or after 10 s. */
async function readSent(): Promise<void> {
  const t0 = performance.now()
  while (pieceStats().out < base + TAKEN && performance.now() - t0 < 10_000) {
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** SENT bytes of the body, then `then` (on the socket) once the GET has read them (the server is in this process). */
function cut(then: (socket: Socket) => void): Answer {
  return (_req, res) => {
    head(res)
    res.write(OBJECT.subarray(0, SENT), () => readSent().then(() => then(res.socket as Socket)))
  }
}

/** The pool emptied: what a failed GET gives back is then all that is kept. */
function fresh() {
  dropPieces()
  const stats = pieceStats()
  base = stats.out
  return stats
}

let honestUrl: Promise<string> | undefined

/** The failed GET's pieces are back: none out, TAKEN kept, and the next GET reads into them. */
async function piecesBack(before: { out: number; reused: number }): Promise<void> {
  const failed = pieceStats()
  assert.equal(failed.out, before.out, 'pieces taken and not given back')
  assert.equal(failed.keptBytes, TAKEN * PIECE_BYTES, 'bytes kept in the pool')
  honestUrl ??= serve(honest)
  const chunks = await store(await honestUrl).getChunks('k')
  assert.equal(pieceStats().reused, before.reused + TAKEN, 'the next GET read into them')
  assert.deepEqual(Buffer.concat(chunks), OBJECT)
  givePieces(chunks)
  assert.equal(pieceStats().out, before.out)
}

/** A store whose client validates response checksums (the SDK reads the body it is handed). */
function validating(url: string): S3Store {
  return new S3Store({
    client: createS3Client({
      endpoint: url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      responseChecksumValidation: 'WHEN_SUPPORTED',
    }),
    bucket: 'bucket',
    prefix: 'p',
    maxRetries: 0,
  })
}

function store(url: string, options: Partial<S3StoreOptions> = {}, idleTimeoutMs?: number) {
  return testS3Store(url, { maxRetries: 0, ...options }, idleTimeoutMs === undefined ? {} : { idleTimeoutMs })
}

describe('S3Store lean GET: pieces of a GET that fails part-way go back to the pool', () => {
  it('the connection closed mid-body: ERR_STORE, every piece back', async () => {
    const url = await serve(cut((socket) => socket.end()))
    const before = fresh()
    await rejectsCode(store(url).getChunks('k'), 'ERR_STORE', new RegExp(`closed after ${SENT} of ${MiB} bytes`))
    await piecesBack(before)
  })

  it('the connection reset mid-body: ERR_STORE, every piece back', async () => {
    const url = await serve(cut((socket) => socket.resetAndDestroy()))
    const before = fresh()
    await rejectsCode(store(url).getChunks('k'), 'ERR_STORE', /ECONNRESET|closed after/)
    await piecesBack(before)
  })

  it('nothing more received mid-body (the idle timeout): ERR_TIMEOUT, every piece back', async () => {
    const url = await serve(cut(() => undefined))
    const before = fresh()
    await rejectsCode(store(url, {}, 300).getChunks('k'), 'ERR_TIMEOUT', /nothing received for 300 ms/)
    await piecesBack(before)
  })

  it("the caller's signal aborts mid-body: ERR_ABORTED, every piece back", async () => {
    const url = await serve(cut(() => undefined))
    const before = fresh()
    const ac = new AbortController()
    const got = store(url).getChunks('k', { signal: ac.signal })
    await readSent()
    ac.abort()
    await rejectsCode(got, 'ERR_ABORTED')
    await piecesBack(before)
  })

  it("the call's deadline passes mid-body: ERR_TIMEOUT, every piece back", async () => {
    const url = await serve(cut(() => undefined))
    const before = fresh()
    await rejectsCode(store(url, { deadlineMs: 500 }).getChunks('k'), 'ERR_TIMEOUT', /deadline of 500 ms/)
    await piecesBack(before)
  })

  it('a body whose checksum does not match (a client validating responses): refused after the body was read, every piece back', async () => {
    // A client of the caller's that validates response checksums: the SDK reads the body
    // it was handed (the pieces) and fails the call after every piece was filled.
    const url = await serve((_req, res) => {
      head(res, { 'x-amz-checksum-crc32': crc32Base64([Buffer.from('other bytes')]) })
      res.end(OBJECT)
    })
    const before = fresh()
    const s = validating(url)
    await assert.rejects(s.getChunks('k'), /checksum|Checksum/)
    const failed = pieceStats()
    assert.equal(failed.out, before.out, 'pieces taken and not given back')
    assert.equal(failed.keptBytes, MiB, 'bytes kept in the pool')
  })

  it('a client validating response checksums, the checksum right: the answer is the pieces, lent, none else out', async () => {
    const url = await serve((_req, res) => {
      head(res, { 'x-amz-checksum-crc32': crc32Base64([OBJECT]) })
      res.end(OBJECT)
    })
    const before = fresh()
    const chunks = await validating(url).getChunks('k')
    assert.deepEqual(Buffer.concat(chunks), OBJECT)
    assert.equal(chunks.filter(isLentPiece).length, MiB / PIECE_BYTES, 'the SDK handed the pieces through')
    assert.equal(pieceStats().out, before.out + MiB / PIECE_BYTES)
    givePieces(chunks)
    assert.equal(pieceStats().out, before.out)
  })

  it('a failed try, then one that succeeds: only the pieces handed out are out', async () => {
    const url = await serve((req, res, n) =>
      n === 0 ? cut((socket) => socket.destroy())(req, res, n) : honest(req, res, n),
    )
    const before = fresh()
    const s = store(url, { maxRetries: 1 })
    const chunks = await s.getChunks('k')
    assert.equal(s.retries, 1)
    assert.deepEqual(Buffer.concat(chunks), OBJECT)
    assert.equal(pieceStats().out, before.out + MiB / PIECE_BYTES, 'the answer’s pieces, lent to its caller')
    assert.equal(pieceStats().reused, before.reused + TAKEN, 'the second try read into the first one’s pieces')
    givePieces(chunks)
    assert.equal(pieceStats().out, before.out)
  })

  it('a body longer than its Content-Length in the read holding the head: refused, no piece out', async () => {
    const url = await serve((_req, res) => {
      const socket = res.socket as Socket
      socket.write(`HTTP/1.1 200 OK\r\nContent-Length: 100\r\nETag: "e"\r\n\r\n`)
      socket.end(OBJECT.subarray(0, 200))
    })
    const before = fresh()
    await rejectsCode(store(url).getChunks('k'), 'ERR_STORE', /body longer than its Content-Length 100/)
    assert.equal(pieceStats().out, before.out)
  })

  it('get joins the pieces of its answer and gives them back', async () => {
    const url = await serve(honest)
    const before = fresh()
    assert.deepEqual(await store(url).get('k'), OBJECT)
    const got = pieceStats()
    assert.equal(got.out, before.out, 'pieces taken and not given back')
    assert.equal(got.keptBytes, MiB)
  })
})
