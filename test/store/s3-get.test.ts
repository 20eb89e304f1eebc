/**
 * S3Store's lean GET path (`getPath: 'http'`, lib/store/s3-get.ts):
 * - on radosgw: whole, ranged and suffix reads give the stored bytes, a missing key is
 *   ERR_NOT_FOUND, and the requests went out on the lean path's own kept sockets;
 * - against a tiny local server that answers as scripted (raw bytes on a socket): a
 *   short body, a wrong or missing Content-Length, a reset mid-body, bytes past the
 *   body, interim 1xx answers, a head with bare-LF line endings, a 304, a chunked error answer cut before its end, an abort mid-body, a stall (idle timeout), 503 SlowDown then success,
 *   virtual-host addressing (the Host header), the bound on sockets, and HTTPS (a
 *   self-signed certificate in test/fixtures/tls, trusted through the client's agent).
 * Fails, never skips, without the S3 server (s3-env).
 */
import assert from 'node:assert/strict'
import dns from 'node:dns'
import { readFileSync } from 'node:fs'
import { createServer as createHttpsServer, Agent as HttpsAgent } from 'node:https'
import { createServer, type Server, type Socket } from 'node:net'
import { after, describe, test } from 'node:test'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import { type BodyBytes, httpGet, Pool, transportOf } from '../../lib/store/s3-get.js'
import { FIXTURES_DIR } from '../fixtures/make-fixtures.js'
import { rejectsCode } from '../helpers/assert.js'
import { testS3Store } from '../helpers/fake-s3.js'
import { fillBlocks } from '../helpers/pattern.js'
import { s3TestStore } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

describe('lean GETs on radosgw', () => {
  test('whole, ranged, suffix and clamped reads; NoSuchKey; on kept sockets of its own', async () => {
    const store = await s3TestStore()
    assert.equal(store.getPath, 'http')
    const data = Buffer.allocUnsafe(3 * MiB + 4096)
    fillBlocks(data, 0)
    await store.put('obj', data)
    assert.deepEqual(await store.get('obj'), data)
    const ranges: Array<[number, number]> = [
      [0, 1],
      [4095, 4097],
      [MiB, 2 * MiB + 7],
      [3 * MiB, 3 * MiB + 123],
    ]
    for (const [start, end] of ranges) {
      const got = await store.getChunks('obj', { range: { start, end } })
      // Read into 64 KiB pieces, all full but the last.
      const sizes = got.map((p) => p.byteLength)
      const piece = 64 * 1024
      const n = Math.ceil((end - start) / piece)
      assert.deepEqual(sizes, [...Array(n - 1).fill(piece), end - start - (n - 1) * piece], `[${start}, ${end})`)
      assert.deepEqual(Buffer.concat(got), data.subarray(start, end), `[${start}, ${end})`)
    }
    assert.deepEqual(await store.get('obj', { range: { suffix: 5000 } }), data.subarray(-5000))
    assert.deepEqual(
      await store.get('obj', { range: { start: data.length - 10, end: data.length + 99 } }),
      data.subarray(-10),
    )
    await rejectsCode(store.get('missing'), 'ERR_NOT_FOUND', /NoSuchKey/)
    const sockets = (await transportOf(store.client)).pool.sockets()
    const origin = new URL(process.env.AWS_ENDPOINT_URL_S3 as string)
    const n = sockets[`${origin.hostname}:${origin.port}`] ?? 0
    assert.ok(n >= 1 && n <= 2, `sequential GETs kept one socket open: ${JSON.stringify(sockets)}`)
  })
})

interface Seen {
  method: string
  path: string
  headers: Record<string, string>
  connection: number
}

/** How the server answers request `n` (0-based, over all connections). */
type Script = (req: Seen, socket: Socket, n: number) => void

/** A server on 127.0.0.1 that parses request heads and lets `script` write raw answers. */
async function rawServer(script: Script) {
  const seen: Seen[] = []
  const sockets = new Set<Socket>()
  let connections = 0
  let open = 0
  let peak = 0
  const server: Server = createServer((socket) => {
    const id = connections++
    peak = Math.max(peak, ++open)
    sockets.add(socket)
    socket.on('error', () => undefined)
    socket.once('close', () => {
      open--
      sockets.delete(socket)
    })
    let buf = Buffer.alloc(0)
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
        const [line, ...rest] = buf.toString('latin1', 0, end).split('\r\n')
        buf = buf.subarray(end + 4)
        const [method, path] = (line as string).split(' ') as [string, string]
        const headers: Record<string, string> = {}
        for (const h of rest) headers[h.slice(0, h.indexOf(':')).toLowerCase()] = h.slice(h.indexOf(':') + 1).trim()
        const req = { method, path, headers, connection: id }
        seen.push(req)
        script(req, socket, seen.length - 1)
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    peak: () => peak,
    connections: () => connections,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const BODY = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz'.repeat(100)) // 3600 bytes

/** A 206 answer head for bytes [start, end) of BODY. */
function partial(start: number, end: number, extra = ''): string {
  return (
    `HTTP/1.1 206 Partial Content\r\nContent-Length: ${end - start}\r\n` +
    `Content-Range: bytes ${start}-${end - 1}/${BODY.length}\r\nETag: "e"\r\n${extra}\r\n`
  )
}

/** The range [start, end) a request asks for. */
function rangeOf(req: Seen): [number, number] {
  const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '')
  return m === null ? [0, BODY.length] : [Number(m[1]), Number(m[2]) + 1]
}

/** Answers every request with the bytes asked, as it should. */
function honest(req: Seen, socket: Socket): void {
  const [start, end] = rangeOf(req)
  socket.write(partial(start, end))
  socket.write(BODY.subarray(start, end))
}

describe('lean GETs against a scripted server', () => {
  const servers: Array<{ close: () => Promise<void> }> = []
  after(async () => {
    for (const s of servers) await s.close()
  })
  async function serve(script: Script) {
    const s = await rawServer(script)
    servers.push(s)
    return s
  }

  test('a range and the whole object; requests signed, path-style; one kept socket', async () => {
    const s = await serve(honest)
    const store = testS3Store(s.url)
    assert.deepEqual(await store.get('k/1', { range: { start: 10, end: 2000 } }), BODY.subarray(10, 2000))
    assert.deepEqual(await store.get('k/1', { range: { start: 0, end: 1 } }), BODY.subarray(0, 1))
    assert.equal(s.seen.length, 2)
    assert.match(s.seen[0]?.path ?? '', /^\/bucket\/p\/k\/1(\?|$)/)
    assert.equal(s.seen[0]?.headers.range, 'bytes=10-1999')
    assert.match(s.seen[0]?.headers.authorization ?? '', /^AWS4-HMAC-SHA256 Credential=test\//)
    assert.equal(s.seen[0]?.headers.host, `127.0.0.1:${s.port}`)
    assert.equal(s.connections(), 1, 'the second GET reused the first socket')
  })

  test('virtual-host addressing: the bucket in the Host header, not in the path', async () => {
    const s = await serve(honest)
    const lookup = dns.lookup
    // bucket.localhost does not resolve here: point it at the server.
    ;(dns as { lookup: unknown }).lookup = (host: string, opts: unknown, cb: unknown) => {
      const callback = (typeof opts === 'function' ? opts : cb) as (...a: unknown[]) => void
      if (host !== 'bucket.localhost') return (lookup as (...a: unknown[]) => void)(host, opts, cb)
      const all = typeof opts === 'object' && (opts as { all?: boolean }).all
      if (all) callback(null, [{ address: '127.0.0.1', family: 4 }])
      else callback(null, '127.0.0.1', 4)
    }
    try {
      const store = testS3Store(`http://localhost:${s.port}`, {}, { forcePathStyle: false })
      assert.deepEqual(await store.get('k', { range: { start: 5, end: 50 } }), BODY.subarray(5, 50))
    } finally {
      ;(dns as { lookup: unknown }).lookup = lookup
    }
    assert.equal(s.seen[0]?.headers.host, `bucket.localhost:${s.port}`)
    assert.match(s.seen[0]?.path ?? '', /^\/p\/k(\?|$)/)
  })

  test('a body shorter than its Content-Length, then the end: retried, and failing names the bytes', async () => {
    const s = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(partial(start, end))
      socket.end(BODY.subarray(start, start + 50))
    })
    const store = testS3Store(s.url)
    await rejectsCode(store.get('k', { range: { start: 0, end: 100 } }), 'ERR_STORE', /closed after 50 of 100 bytes/)
    assert.equal(s.seen.length, 3, 'tried 1 + maxRetries 2 times')
  })

  test('a connection reset mid-body is retried to the right bytes', async () => {
    const s = await serve((req, socket, n) => {
      const [start, end] = rangeOf(req)
      if (n > 0) return honest(req, socket)
      socket.write(partial(start, end))
      socket.write(BODY.subarray(start, start + 1000), () => socket.resetAndDestroy())
    })
    const store = testS3Store(s.url)
    assert.deepEqual(await store.get('k', { range: { start: 100, end: 3000 } }), BODY.subarray(100, 3000))
    assert.equal(store.retries, 1)
    assert.equal(s.seen.length, 2)
  })

  test('Content-Length not matching Content-Range, or missing (chunked): refused, not retried', async () => {
    const wrong = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(
        `HTTP/1.1 206 Partial Content\r\nContent-Length: ${end - start + 5}\r\nContent-Range: bytes ${start}-${end - 1}/${BODY.length}\r\n\r\n`,
      )
      socket.write(BODY.subarray(start, end + 5))
    })
    await rejectsCode(
      testS3Store(wrong.url).get('k', { range: { start: 0, end: 100 } }),
      'ERR_STORE',
      /Content-Range bytes 0-99\/3600 does not span Content-Length 105.*\(bytes=0-99\)|\(bytes=0-99\).*does not span Content-Length 105/,
    )
    assert.equal(wrong.seen.length, 1)
    const chunked = await serve((_req, socket) => {
      socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n')
    })
    await rejectsCode(testS3Store(chunked.url).get('k'), 'ERR_STORE', /answer refused: Transfer-Encoding chunked/)
    assert.equal(chunked.seen.length, 1)
    const other = await serve((_req, socket) => {
      socket.write(`HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\nContent-Range: bytes 7-16/3600\r\n\r\n`)
      socket.write(BODY.subarray(7, 17))
    })
    await rejectsCode(
      testS3Store(other.url).get('k', { range: { start: 0, end: 10 } }),
      'ERR_STORE',
      /not within the bytes asked, \[0, 10\)/,
    )
  })

  test('a Content-Range with no object size (bytes a-b/*, which RFC 9110 allows) is refused, saying so, not retried', async () => {
    const unsized = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(
        `HTTP/1.1 206 Partial Content\r\nContent-Length: ${end - start}\r\nContent-Range: bytes ${start}-${end - 1}/*\r\n\r\n`,
      )
      socket.write(BODY.subarray(start, end))
    })
    await rejectsCode(
      testS3Store(unsized.url).get('k', { range: { start: 0, end: 100 } }),
      'ERR_STORE',
      /Content-Range bytes 0-99\/\* names no object size \(\*\)/,
    )
    assert.equal(unsized.seen.length, 1)
  })

  test('interim 1xx answers before the real one are passed over, thousands in one read or split across reads', async () => {
    const s = await serve((req, socket, n) => {
      const [start, end] = rangeOf(req)
      const real = Buffer.concat([Buffer.from(partial(start, end)), BODY.subarray(start, end)])
      if (n === 0) {
        // ~60 KiB of interim answers in one write (they once took a stack frame each).
        socket.write(Buffer.concat([Buffer.from('HTTP/1.1 100\r\n\r\n'.repeat(3800)), real]))
        return
      }
      // An interim answer, then the real one cut inside its status line and its header end.
      const cut = real.indexOf('\r\n\r\n') + 2
      socket.write(Buffer.concat([Buffer.from('HTTP/1.1 100 Continue\r\n\r\n'), real.subarray(0, 10)]))
      setTimeout(() => socket.write(real.subarray(10, cut)), 10)
      setTimeout(() => socket.write(real.subarray(cut)), 20)
    })
    const store = testS3Store(s.url, { maxRetries: 0 })
    assert.deepEqual(await store.get('k', { range: { start: 5, end: 900 } }), BODY.subarray(5, 900))
    assert.deepEqual(await store.get('k', { range: { start: 7, end: 70 } }), BODY.subarray(7, 70))
    assert.equal(s.connections(), 1)
  })

  test('a head with bare-LF line endings is refused as malformed, not waited for until the idle timeout', async () => {
    // The socket stays open: a head never taken as ended would end only by the idle timeout.
    const lf = await serve((_req, socket) => {
      socket.write('HTTP/1.1 200 OK\nContent-Length: 5\nETag: "e"\n\nhello')
    })
    await rejectsCode(
      testS3Store(lf.url, { maxRetries: 1 }, { idleTimeoutMs: 200 }).get('k'),
      'ERR_STORE',
      /answer head has a line ended by a bare LF, not CRLF/,
    )
    assert.equal(lf.seen.length, 2, 'a failure with no status: tried again once')
    // A bare LF inside a CRLF head runs two lines into one value: malformed too, not an answer.
    const mixed = await serve((_req, socket) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: "e"\nX-Other: 1\r\n\r\nhello')
    })
    await rejectsCode(
      testS3Store(mixed.url, { maxRetries: 0 }, { idleTimeoutMs: 200 }).get('k'),
      'ERR_STORE',
      /malformed header line "ETag: \\"e\\"\\nX-Other: 1"/,
    )
  })

  test('a 304 has no body, whatever its Content-Length: refused at once, not read until the idle timeout', async () => {
    const s = await serve((_req, socket) => {
      socket.write('HTTP/1.1 304 Not Modified\r\nContent-Length: 3600\r\nETag: "e"\r\n\r\n')
    })
    const store = testS3Store(s.url, { maxRetries: 0 }, { idleTimeoutMs: 3000 })
    const t0 = performance.now()
    await rejectsCode(store.get('k', { range: { start: 0, end: 10 } }), 'ERR_STORE', /HTTP 304/)
    assert.ok(performance.now() - t0 < 2000, `${performance.now() - t0} ms`)
    assert.equal(s.seen.length, 1)
  })

  test('bytes past the Content-Length never join an answer; the next GET gets a fresh socket', async () => {
    // Resolves when the first socket, the garbage written to it, has closed: the next GET
    // waits for that (at most 10 s; the count below then fails), not for a time a loaded
    // machine may overrun.
    let firstClosed: Promise<void> | undefined
    const s = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(partial(start, end))
      socket.write(BODY.subarray(start, end))
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
      firstClosed ??= new Promise((resolve) => setTimeout(() => socket.write('GARBAGE', () => resolve(closed)), 20))
    })
    const store = testS3Store(s.url)
    assert.deepEqual(await store.get('k', { range: { start: 0, end: 10 } }), BODY.subarray(0, 10))
    await Promise.race([firstClosed, new Promise((r) => setTimeout(r, 10_000).unref())])
    assert.deepEqual(await store.get('k', { range: { start: 10, end: 20 } }), BODY.subarray(10, 20))
    assert.equal(s.connections(), 2, 'the socket that got the extra bytes was closed')
    // The same bytes in the read that holds the headers: refused, as a longer body.
    const eager = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(Buffer.concat([Buffer.from(partial(start, end)), BODY.subarray(start, end + 3)]))
    })
    await rejectsCode(
      testS3Store(eager.url, { maxRetries: 0 }).get('k', { range: { start: 0, end: 10 } }),
      'ERR_STORE',
      /body longer than its Content-Length 10/,
    )
  })

  test("bytes past the Content-Length that come with the body's last ones never start the next answer", async () => {
    // The head, then the body and the extra bytes in one write: the read that ends the
    // body stops at its Content-Length, and the next read, made at once, gets them. (The
    // body waits 50 ms: sooner, a loaded machine may read it with the head, which is refused
    // as a longer body, as the test above shows.) A GET
    // sent on that socket meanwhile took them as the start of its answer ("answer starts
    // with ..."), a failure with maxRetries 0. An empty line too (some servers send one):
    // ignored, as a client ignores one before a status line, and the socket kept.
    for (const [extra, sockets] of [
      ['\r\n', 1],
      ['GARBAGE', 6],
      ['\r', 6], // half an empty line: its rest would begin the next answer
    ] as const) {
      const s = await serve((req, socket) => {
        const [start, end] = rangeOf(req)
        socket.write(partial(start, end))
        setTimeout(() => socket.write(Buffer.concat([BODY.subarray(start, end), Buffer.from(extra)])), 50)
      })
      const store = testS3Store(s.url, { maxRetries: 0 })
      for (let i = 0; i < 6; i++) {
        const got = await store.get('k', { range: { start: i * 100, end: i * 100 + 1000 } })
        assert.deepEqual(got, BODY.subarray(i * 100, i * 100 + 1000), `GET ${i}, extra ${JSON.stringify(extra)}`)
      }
      assert.equal(s.seen.length, 6, 'no GET made again')
      assert.equal(s.connections(), sockets, `extra ${JSON.stringify(extra)}: sockets`)
    }
  })

  test('an abort mid-body fails at once with ERR_ABORTED', async () => {
    let sent: () => void = () => undefined
    const firstBytes = new Promise<void>((r) => (sent = r))
    const s = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(partial(start, end))
      socket.write(BODY.subarray(start, start + 10), () => sent()) // and nothing more
    })
    const store = testS3Store(s.url)
    const ac = new AbortController()
    const p = store.get('k', { range: { start: 0, end: 1000 }, signal: ac.signal })
    await firstBytes
    const t0 = performance.now()
    ac.abort(new Error('caller gave up'))
    const err = await rejectsCode(p, 'ERR_ABORTED')
    assert.ok(performance.now() - t0 < 1000)
    assert.equal((err.cause as Error).message, 'caller gave up')
  })

  test('a signal fired once the socket is taken, before the request goes out: AbortError, nothing sent', async () => {
    const s = await serve(honest)
    const store = testS3Store(s.url)
    const t = await transportOf(store.client)
    const ac = new AbortController()
    const origin = { tls: false, host: '127.0.0.1', port: s.port }
    const conn = await t.pool.acquire(origin, t, ac.signal, 'k', false)
    ac.abort(new Error('caller gave up'))
    const head = Buffer.from(`GET /bucket/p/k HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`)
    await assert.rejects(conn.exchange(head, undefined, 1000, ac.signal, 'k'), (err: Error) => {
      assert.equal(err.name, 'AbortError')
      assert.equal((err.cause as Error).message, 'caller gave up')
      return true
    })
    assert.equal(s.seen.length, 0, 'no request sent')
  })

  test('a stall mid-body ends after idleTimeoutMs with ERR_TIMEOUT, each try', async () => {
    const s = await serve((req, socket) => {
      const [start, end] = rangeOf(req)
      socket.write(partial(start, end))
      socket.write(BODY.subarray(start, start + 10))
    })
    const store = testS3Store(s.url, { maxRetries: 1 }, { idleTimeoutMs: 150 })
    const t0 = performance.now()
    await rejectsCode(store.get('k', { range: { start: 0, end: 1000 } }), 'ERR_TIMEOUT', /nothing received for 150 ms/)
    const ms = performance.now() - t0
    assert.ok(ms >= 290 && ms < 3000, `two tries of 150 ms: ${ms} ms`)
    assert.equal(s.seen.length, 2)
  })

  test('503 SlowDown, then the answer: retried to the right bytes; 404 NoSuchKey: ERR_NOT_FOUND', async () => {
    const xml = (code: string) =>
      `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>m</Message><RequestId>r1</RequestId></Error>`
    const s = await serve((req, socket, n) => {
      if (n === 0) {
        const body = xml('SlowDown')
        socket.write(
          `HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
        )
      } else if (req.path.includes('missing')) {
        const body = xml('NoSuchKey')
        // Chunked, as some servers send error documents.
        socket.write(
          `HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n` +
            `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
        )
      } else honest(req, socket)
    })
    const store = testS3Store(s.url)
    assert.deepEqual(await store.get('k', { range: { start: 3, end: 33 } }), BODY.subarray(3, 33))
    assert.equal(store.retries, 1)
    await rejectsCode(store.get('missing'), 'ERR_NOT_FOUND', /HTTP 404 NoSuchKey/)
    assert.equal(s.seen.length, 3)
    assert.equal(s.connections(), 1, 'error answers with a length keep the socket')
  })

  test('a chunked error answer ends at the empty line after its last chunk: its socket serves the retry', async () => {
    const body = '<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>m</Message></Error>'
    const s = await serve((req, socket, n) => {
      if (n === 0) {
        socket.write(
          `HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n` +
            `${body.length.toString(16)}\r\n${body}\r\n0\r\n`,
        )
        setTimeout(() => socket.write('\r\n'), 30) // the end of the (empty) trailers, late
      } else setTimeout(() => honest(req, socket), 60)
    })
    const store = testS3Store(s.url, { maxRetries: 1 })
    assert.deepEqual(await store.get('k', { range: { start: 3, end: 33 } }), BODY.subarray(3, 33))
    assert.equal(store.retries, 1)
    assert.equal(s.connections(), 1)
  })

  test('at most maxSockets sockets per origin; waiting GETs are served', async () => {
    const s = await serve((req, socket) => setTimeout(() => honest(req, socket), 10))
    const store = testS3Store(s.url, {}, { maxSockets: 3 })
    const got = await Promise.all(
      Array.from({ length: 20 }, (_, i) => store.get('k', { range: { start: i, end: i + 100 } })),
    )
    for (let i = 0; i < 20; i++) assert.deepEqual(got[i], BODY.subarray(i, i + 100))
    assert.equal(s.peak(), 3)
    assert.equal(s.seen.length, 20)
  })

  test("getPath 'sdk' reads the same bytes through the SDK's handler", async () => {
    const s = await serve(honest)
    const store = testS3Store(s.url, { getPath: 'sdk' })
    assert.deepEqual(await store.get('k', { range: { start: 1, end: 3000 } }), BODY.subarray(1, 3000))
    assert.deepEqual((await transportOf(store.client)).pool.sockets(), {})
    assert.throws(() => testS3Store(s.url, { getPath: 'curl' as 'sdk' }), /getPath "curl"/)
  })

  test("https: TLS with the CA and socket bound of the client's https agent; one kept socket", async () => {
    const cert = readFileSync(new URL('tls/localhost.crt', FIXTURES_DIR))
    const key = readFileSync(new URL('tls/localhost.key', FIXTURES_DIR))
    const hosts: string[] = []
    let connections = 0
    const server = createHttpsServer({ cert, key }, (req, res) => {
      hosts.push(req.headers.host ?? '')
      const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '')
      const [start, end] = m === null ? [0, BODY.length] : [Number(m[1]), Number(m[2]) + 1]
      res.writeHead(206, { 'content-length': end - start, 'content-range': `bytes ${start}-${end - 1}/${BODY.length}` })
      res.end(BODY.subarray(start, end))
    })
    server.on('secureConnection', () => connections++)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    servers.push({ close: () => new Promise<void>((resolve) => server.close(() => resolve()).closeAllConnections()) })
    const port = (server.address() as { port: number }).port
    const store = new S3Store({
      client: createS3Client({
        endpoint: `https://localhost:${port}`,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
        requestHandler: { httpsAgent: new HttpsAgent({ ca: cert, keepAlive: true, maxSockets: 2 }) },
      }),
      bucket: 'bucket',
      prefix: 'p',
      maxRetries: 0,
    })
    assert.deepEqual(await store.get('k', { range: { start: 7, end: 3007 } }), BODY.subarray(7, 3007))
    assert.deepEqual(await store.get('k', { range: { start: 0, end: 9 } }), BODY.subarray(0, 9))
    assert.deepEqual(hosts, [`localhost:${port}`, `localhost:${port}`])
    assert.equal(connections, 1)
    assert.deepEqual((await transportOf(store.client)).pool.sockets(), { [`tls:localhost:${port}`]: 1 })
    // Without the CA, the certificate is refused: not retried as a passing fault would be.
    const untrusting = new S3Store({
      client: createS3Client({
        endpoint: `https://localhost:${port}`,
        region: 'us-east-1',
        credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      }),
      bucket: 'bucket',
      prefix: 'p',
      maxRetries: 3,
      retryBaseMs: 1,
    })
    await rejectsCode(untrusting.get('k'), 'ERR_STORE', /certificate was refused.*self.signed certificate/i)
    await rejectsCode(untrusting.put('k', Buffer.from('x')), 'ERR_STORE', /certificate was refused/)
    assert.equal(untrusting.retries, 0)
  })
})

test('a pool that reached 20 origins keeps nothing of them once their sockets have closed', async () => {
  const pool = new Pool(4, 4, {})
  const t = { pool, connectTimeoutMs: 5000, idleTimeoutMs: 5000 }
  const servers = await Promise.all(Array.from({ length: 20 }, () => rawServer(honest)))
  for (const s of servers) {
    const request = {
      protocol: 'http:',
      hostname: '127.0.0.1',
      port: s.port,
      method: 'GET',
      path: '/bucket/k',
      headers: { host: `127.0.0.1:${s.port}`, range: 'bytes=0-9' },
    }
    const answer = await httpGet(request, t, new AbortController().signal, 'k')
    assert.deepEqual(Buffer.concat((answer.body as BodyBytes).pieces), BODY.subarray(0, 10))
  }
  assert.equal(Object.keys(pool.sockets()).length, 20, 'one kept socket per origin')
  for (const s of servers) await s.close() // each server ends its side: the pool's sockets close
  while (Object.values(pool.sockets()).some((n) => n > 0)) await new Promise((resolve) => setTimeout(resolve, 5))
  const maps = pool as unknown as { idle: Map<string, unknown>; waiting: Map<string, unknown> }
  assert.deepEqual(pool.sockets(), {}, 'no entry per origin gone')
  assert.equal(maps.idle.size, 0)
  assert.equal(maps.waiting.size, 0)
})

test('a waiting GET aborted just after it was woken passes the socket on to the next one', async () => {
  // A server that takes connections and says nothing: the pool's sockets stay open.
  const sockets: Socket[] = []
  const server: Server = createServer((s) => sockets.push(s))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  const pool = new Pool(1, 1, {})
  const origin = { tls: false, host: '127.0.0.1', port }
  const t = { pool, connectTimeoutMs: 5000, idleTimeoutMs: 5000 }
  const first = await pool.acquire(origin, t, new AbortController().signal, 'first', false)
  const b = new AbortController()
  const second = pool.acquire(origin, t, b.signal, 'second', false)
  second.catch(() => undefined)
  const third = pool.acquire(origin, t, new AbortController().signal, 'third', false)
  // The first socket is kept, which wakes the second GET; its signal fires before it runs on.
  pool.release(first, true)
  b.abort()
  await assert.rejects(second, { name: 'AbortError' })
  let timer: NodeJS.Timeout | undefined
  const got = await Promise.race([
    third,
    new Promise<'still waiting'>((resolve) => {
      timer = setTimeout(() => resolve('still waiting'), 3000)
    }),
  ])
  clearTimeout(timer)
  try {
    assert.equal(got, first, 'the third GET took the kept socket')
  } finally {
    first.destroy()
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
})
