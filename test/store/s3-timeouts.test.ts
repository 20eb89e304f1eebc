/**
 * Time limits and refused credentials of S3Store:
 * - createS3Client refuses a socket bound or a time limit that is no count.
 * - A server that accepts connections and never answers: every call fails with
 *   ERR_TIMEOUT within its deadline, and each try ends after `idleTimeoutMs` of silence
 *   and is retried.
 * - A listener that never completes a connection: each try ends after `connectTimeoutMs`
 *   and is retried, on both GET paths and for a PUT.
 * - Stalls on radosgw through the fault proxy (before the answer, or mid-body) are
 *   retried to the right answer once `idleTimeoutMs` has passed.
 * - Wrong credentials on radosgw: ERR_AUTH naming the credentials after exactly one
 *   request (never retried), from the library and from the CLI (exit code 12).
 *
 * The CLI's own time limits are the library's defaults (idle 30 s, deadline 300 s) and
 * no option or variable shortens them, so its ERR_TIMEOUT exit (11) is not tested here.
 * Fails, never skips, without the S3 server (s3-env).
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { connect as connectSocket, createServer, type Server, type Socket } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { EXIT_CODES } from '../../lib/cli.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { createS3Client, S3Store, type S3StoreOptions } from '../../lib/store/s3.js'
import { rejectsCode } from '../helpers/assert.js'
import { type FaultKind, type FaultProxy, proxiedS3Client, startFaultProxy } from '../helpers/fault-proxy.js'
import { s3TestBucket, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

/**
 * A listener on 127.0.0.1 that accepts connections, reads what is sent, and never answers.
 * `connections(key)` counts those whose request names `key` (its first line): a try of an
 * earlier test accepted late, on a loaded machine, is not one of this test's.
 */
async function blackHole(): Promise<{
  url: string
  connections: (key: string) => number
  close: () => Promise<void>
}> {
  const sockets = new Set<Socket>()
  const firstLines: string[] = []
  const server: Server = createServer((s) => {
    sockets.add(s)
    s.on('error', () => undefined)
    let head = ''
    s.on('data', (d: Buffer) => {
      if (head.includes('\r\n')) return
      head += d.toString('latin1', 0, Math.min(d.length, 4096))
      if (head.includes('\r\n')) firstLines.push(head.slice(0, head.indexOf('\r\n')))
    })
    s.once('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}`,
    connections: (key) => firstLines.filter((l) => l.includes(`/${key}`)).length,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const s of sockets) s.destroy()
      await closed
    },
  }
}

/** A store on a test server at `url` with these time limits; its client goes into `clients` (destroyed after). */
function storeAt(
  url: string,
  limits: { idleTimeoutMs: number; connectTimeoutMs: number },
  clients: { destroy(): void }[],
  options: Partial<S3StoreOptions>,
): S3Store {
  const client = createS3Client({
    endpoint: url,
    ...limits,
    credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
    region: 'us-east-1',
  })
  clients.push(client)
  return new S3Store({ client, bucket: 'bucket', prefix: 'x', ...options })
}

/** `p`'s rejection and how long it took. */
async function timed(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const t0 = performance.now()
  try {
    await p
  } catch (err) {
    return { err, ms: performance.now() - t0 }
  }
  assert.fail('expected a failure, but it succeeded')
}

describe("createS3Client's socket bound and time limits", () => {
  test('a bound or limit that is no count is refused, naming it (maxSockets -1 held every SDK request until the deadline)', () => {
    const bad: Array<[string, unknown]> = [
      ['maxSockets', -1],
      ['maxSockets', 0],
      ['maxSockets', 2.5],
      ['maxSockets', Number.NaN],
      ['maxSockets', '4'],
      ['connectTimeoutMs', -5],
      ['connectTimeoutMs', Number.POSITIVE_INFINITY],
      ['idleTimeoutMs', Number.NaN],
      ['idleTimeoutMs', '100'],
    ]
    for (const [name, v] of bad) {
      assert.throws(
        () => createS3Client({ region: 'us-east-1', [name]: v }),
        (err: unknown) =>
          StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
          new RegExp(`^createS3Client: ${name} must be an integer ≥ [01], got `).test((err as Error).message),
        `${name} ${String(v)}`,
      )
    }
    // 0: no time limit, as the SDK's handler and the lean GET path take it.
    createS3Client({ region: 'us-east-1', maxSockets: 1, connectTimeoutMs: 0, idleTimeoutMs: 0 }).destroy()
  })
})

describe('S3Store against a server that never answers', () => {
  let hole: Awaited<ReturnType<typeof blackHole>>
  const clients: { destroy(): void }[] = []
  before(async () => {
    hole = await blackHole()
  })
  after(async () => {
    for (const c of clients) c.destroy()
    await hole?.close()
  })

  const holeStore = (options: Partial<S3StoreOptions>) =>
    storeAt(hole.url, { idleTimeoutMs: 500, connectTimeoutMs: 500 }, clients, options)

  test('put, get and head fail with ERR_TIMEOUT within the deadline + 20 %', async () => {
    const deadlineMs = 2000
    const store = holeStore({ deadlineMs, retryBaseMs: 10, retryMaxMs: 100 })
    const body = Buffer.alloc(MiB, 1)
    const calls = [
      ['put', () => store.put('k', body)],
      ['conditional put', () => store.put('k', body, { ifNoneMatch: '*' })],
      ['get', () => store.get('k')],
      ['head', () => store.head('k')],
    ] as const
    // At once: each has its own deadline.
    const outcomes = await Promise.all(calls.map(([, call]) => timed(call())))
    outcomes.forEach(({ err, ms }, i) => {
      const name = calls[i]?.[0]
      assert.ok(StreamSegmentError.is(err, 'ERR_TIMEOUT'), `${name}: ${err}`)
      assert.ok(ms <= deadlineMs * 1.2, `${name}: ERR_TIMEOUT after ${Math.round(ms)} ms, deadline ${deadlineMs} ms`)
      console.log(`# black hole: ${name}: ERR_TIMEOUT after ${Math.round(ms)} ms: ${err.message}`)
    })
  })

  test('each try ends after idleTimeoutMs of silence and is tried again (no deadline needed)', async () => {
    // idleTimeoutMs 500, 2 retries: 3 tries of ~500 ms. The deadline is only a backstop.
    const store = holeStore({ deadlineMs: 10_000, maxRetries: 2, retryBaseMs: 10, retryMaxMs: 20 })
    const { err, ms } = await timed(store.get('idle-tries'))
    const tries = hole.connections('idle-tries')
    console.log(
      `# black hole, idle timeout 500 ms, 2 retries: ${(err as Error).message} after ${Math.round(ms)} ms, ${tries} connections`,
    )
    assert.ok(StreamSegmentError.is(err, 'ERR_TIMEOUT'), String(err))
    assert.ok(
      ms < 2500 && tries === 3,
      `expected 3 tries ended by the 500 ms idle timeout, got ${tries} in ${Math.round(ms)} ms (${err.message}): ` +
        'idleTimeoutMs does not end a silent try (createS3Client passes it as the handler’s requestTimeout, which ' +
        '@smithy/node-http-handler only warns about unless throwOnRequestTimeout; socketTimeout is the idle timeout)',
    )
    assert.equal(store.retries, 2)
  })
})

/**
 * A listener on 127.0.0.1 that never completes a connection: a child process listens with
 * a backlog of 1 and blocks its event loop, fillers take the accept queue, and Linux then
 * drops every further SYN, so a connect stays pending until the client gives up.
 */
async function neverAccepting(): Promise<{ url: string; close: () => void }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const s = require('node:net').createServer()
s.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
  console.log(s.address().port)
  // Blocked for at most a minute, then gone, even if nobody kills it.
  setTimeout(() => {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60000)
    process.exit(0)
  }, 50)
})`,
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  )
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject)
    child.stdout.once('data', (d) => resolve(Number(String(d).trim())))
  })
  await new Promise((r) => setTimeout(r, 200)) // its event loop is blocked by now
  const fillers: Socket[] = []
  for (let i = 0; i < 8; i++) {
    const f = connectSocket(port, '127.0.0.1')
    f.on('error', () => undefined)
    fillers.push(f)
  }
  await new Promise((r) => setTimeout(r, 300))
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const f of fillers) f.destroy()
      child.kill('SIGKILL')
    },
  }
}

describe('S3Store against a listener that never completes a connection', () => {
  let hole: Awaited<ReturnType<typeof neverAccepting>>
  const clients: { destroy(): void }[] = []
  before(async () => {
    hole = await neverAccepting()
  })
  after(() => {
    for (const c of clients) c.destroy()
    hole?.close()
  })

  test('each try ends after connectTimeoutMs and is tried again, on both GET paths and for a PUT', async () => {
    // connectTimeoutMs 300, 2 retries: 3 tries of ~300 ms; the idle timeout and the
    // deadline (20 s each) would end them far later.
    const store = (getPath: 'http' | 'sdk') =>
      storeAt(hole.url, { idleTimeoutMs: 20_000, connectTimeoutMs: 300 }, clients, {
        getPath,
        deadlineMs: 20_000,
        maxRetries: 2,
        retryBaseMs: 10,
        retryMaxMs: 20,
      })
    const cases = [
      ['get, http path', store('http'), (s: S3Store) => s.get('k', { range: { start: 0, end: 10 } })],
      ['get, sdk path', store('sdk'), (s: S3Store) => s.get('k', { range: { start: 0, end: 10 } })],
      ['put', store('http'), (s: S3Store) => s.put('k', Buffer.alloc(1024))],
    ] as const
    const outcomes = await Promise.all(cases.map(([, s, call]) => timed(call(s))))
    outcomes.forEach(({ err, ms }, i) => {
      const [name, s] = cases[i] as (typeof cases)[number]
      console.log(
        `# never accepting, ${name}: ${(err as Error).message} after ${Math.round(ms)} ms, ${s.retries} retries`,
      )
      assert.ok(StreamSegmentError.is(err, 'ERR_TIMEOUT'), `${name}: ${err}`)
      assert.equal(s.retries, 2, `${name}: retries`)
      // (the first try starts just before the clock does)
      assert.ok(ms >= 3 * 300 - 50 && ms < 5000, `${name}: 3 tries of 300 ms took ${Math.round(ms)} ms`)
    })
  })
})

describe('stalls on radosgw through the fault proxy', () => {
  let proxy: FaultProxy
  const clients: { destroy(): void }[] = []
  before(async () => {
    await s3TestBucket() // without the server: fails here, with the hint
    proxy = await startFaultProxy()
  })
  after(async () => {
    for (const c of clients) c.destroy()
    await proxy?.close()
  })

  test('a stall before the answer or mid-body is retried after idleTimeoutMs, to the right answer', async () => {
    const prefix = uniquePrefix('stalls')
    const direct = await s3TestStore(prefix)
    const client = proxiedS3Client(proxy, { idleTimeoutMs: 1000 })
    clients.push(client)
    const bucket = await s3TestBucket()
    const body = Buffer.alloc(6 * MiB)
    for (let i = 0; i < body.length; i += 4) body.writeUInt32LE(i, i)
    await direct.put('obj-stall', body)
    await direct.put('obj-stallBody', body)
    type Case = { op: string; kind: FaultKind; key: string; run: (store: S3Store) => Promise<void> }
    const cases: Case[] = []
    for (const kind of ['stall', 'stallBody'] as const) {
      cases.push({
        op: 'GetObject',
        kind,
        key: `obj-${kind}`,
        run: async (store) => assert.ok(body.equals(await store.get(`obj-${kind}`)), 'other bytes'),
      })
      cases.push({
        op: 'PutObject',
        kind,
        key: `put-${kind}`,
        run: async (store) => {
          await store.put(`put-${kind}`, body, { ifNoneMatch: '*' })
          assert.ok(body.equals(await direct.get(`put-${kind}`)), 'other bytes stored')
        },
      })
      cases.push({
        op: 'UploadPart',
        kind,
        key: `mpu-${kind}`,
        run: async (store) => {
          const key = `mpu-${kind}`
          const id = await store.createMultipart(key, { ifNoneMatch: '*' })
          const p1 = await store.uploadPart(key, id, 1, body.subarray(0, 5 * MiB))
          const p2 = await store.uploadPart(key, id, 2, body.subarray(5 * MiB))
          await store.completeMultipart(key, id, [
            { partNumber: 1, etag: p1.etag },
            { partNumber: 2, etag: p2.etag },
          ])
          assert.ok(body.equals(await direct.get(key)), 'other bytes stored')
        },
      })
    }
    proxy.resetStats()
    // All at once, each on its own store (its own retry count); one fault of each kind per op.
    const results = await Promise.all(
      cases.map(async ({ op, kind, key, run }) => {
        const store = new S3Store({ client, bucket, prefix, deadlineMs: 4000 })
        proxy.inject(kind, (r) => r.op === op && r.key === `${prefix}${key}`)
        const t0 = performance.now()
        try {
          await run(store)
          const ms = Math.round(performance.now() - t0)
          // Success proves the stall was cut by idleTimeoutMs (it never ends on its own, and
          // the 4 s deadline would have failed the call); its time is printed, not asserted.
          const problem = store.retries !== 1 ? `${store.retries} retries` : undefined
          return { line: `${op} ${kind}: ${ms} ms, ${store.retries} retries`, problem }
        } catch (err) {
          const ms = Math.round(performance.now() - t0)
          const e = err as StreamSegmentError
          return {
            line: `${op} ${kind}: failed after ${ms} ms: ${e.message}`,
            problem: `${e.code ?? ''} after ${ms} ms: ${e.message}`,
          }
        }
      }),
    )
    console.log(`# stalls (idle timeout 1000 ms):\n#   ${results.map((r) => r.line).join('\n#   ')}`)
    const stats = proxy.stats()
    assert.equal(stats.faults.stall, 3, 'stalls injected')
    assert.equal(stats.faults.stallBody, 3, 'stalls mid-body (or after landing) injected')
    assert.deepEqual(
      results.flatMap((r, i) => (r.problem === undefined ? [] : [`${cases[i]?.op} ${cases[i]?.kind}: ${r.problem}`])),
      [],
      'stalls longer than idleTimeoutMs were not retried',
    )
  })
})

describe('an abort during an outage on radosgw', () => {
  let proxy: FaultProxy
  const clients: { destroy(): void }[] = []
  before(async () => {
    await s3TestBucket()
    proxy = await startFaultProxy()
  })
  after(async () => {
    for (const c of clients) c.destroy()
    await proxy?.close()
  })

  test("a claimed createMultipart aborted while the server stalls rejects at once, not after the claim's release", async () => {
    const prefix = uniquePrefix('abort-claim')
    const client = proxiedS3Client(proxy, { idleTimeoutMs: 2000 })
    clients.push(client)
    const store = new S3Store({ client, bucket: await s3TestBucket(), prefix })
    const key = `${prefix}claimed`
    // The placeholder lands; then nothing answers: the create, and the release's HEADs.
    proxy.inject('stall', (r) => r.op === 'CreateMultipartUpload' && r.key === key)
    for (let i = 0; i < 8; i++) proxy.inject('stall', (r) => r.op === 'HeadObject' && r.key === key)
    const ac = new AbortController()
    const created = store.createMultipart('claimed', { ifNoneMatch: '*', signal: ac.signal })
    await new Promise((r) => setTimeout(r, 300))
    const t0 = performance.now()
    ac.abort(new Error('stop'))
    await rejectsCode(created, 'ERR_ABORTED')
    const ms = performance.now() - t0
    // Waiting for the release took (1 + maxRetries) idle timeouts: 14 s here.
    assert.ok(ms < 1500, `rejected ${Math.round(ms)} ms after the abort`)
  })
})

describe('wrong credentials on radosgw', () => {
  let proxy: FaultProxy
  const clients: { destroy(): void }[] = []
  before(async () => {
    await s3TestBucket() // without the server: fails here, with the hint
    proxy = await startFaultProxy()
  })
  after(async () => {
    for (const c of clients) c.destroy()
    await proxy?.close()
  })

  test('ERR_AUTH naming the credentials after exactly one request, never retried', async () => {
    const bucket = await s3TestBucket()
    const prefix = uniquePrefix('auth')
    const direct = await s3TestStore(prefix)
    await direct.put('k', Buffer.from('hello'))
    for (const wrong of [
      { secretAccessKey: 'not-the-secret' },
      { accessKeyId: 'no-such-key', secretAccessKey: 'not-the-secret' },
    ]) {
      const client = proxiedS3Client(proxy, wrong)
      clients.push(client)
      const store = new S3Store({ client, bucket, prefix })
      for (const [name, call] of [
        ['get', () => store.get('k')],
        ['head', () => store.head('k')],
        ['put', () => store.put('k2', Buffer.from('x'))],
        ['conditional put', () => store.put('k2', Buffer.from('x'), { ifNoneMatch: '*' })],
        [
          'list',
          async () => {
            for await (const _ of store.list('')) {
              // nothing is listed
            }
          },
        ],
        ['delete', () => store.delete('k')],
      ] as const) {
        proxy.resetStats()
        const err = await rejectsCode(call(), 'ERR_AUTH', /credentials/)
        assert.equal(proxy.stats().requests, 1, `${name} (${Object.keys(wrong).join(', ')}): requests made`)
        assert.equal(store.retries, 0, `${name}: retries`)
        assert.match(err.message, /AWS_SECRET_ACCESS_KEY/)
      }
    }
    assert.equal((await direct.get('k')).byteLength, 5)
    assert.equal(await direct.head('k2'), undefined)
  })

  test('the CLI exits 12 (ERR_AUTH) naming the credentials after one request', async () => {
    const bucket = await s3TestBucket()
    const url = `s3://${bucket}/${uniquePrefix('auth-cli')}`
    await s3TestStore(url.slice(`s3://${bucket}/`.length))
    assert.equal(EXIT_CODES.ERR_AUTH, 12)
    for (const args of [
      ['ls', url],
      ['get', url, '-'],
      ['put', '-', url],
    ]) {
      proxy.resetStats()
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        AWS_ENDPOINT_URL_S3: proxy.url,
        AWS_SECRET_ACCESS_KEY: 'not-the-secret',
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      }
      delete env.DEBUG
      // Asynchronously: the proxy answering the CLI runs in this process.
      const r = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
        const child = spawn(process.execPath, ['bin/stream-segment.cjs', ...args], { env })
        let stderr = ''
        child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d))
        child.stdout.resume()
        child.stdin.end('some bytes')
        const kill = setTimeout(() => child.kill('SIGKILL'), 60_000)
        child.once('error', reject)
        child.once('close', (code) => {
          clearTimeout(kill)
          resolve({ code, stderr })
        })
      })
      assert.equal(r.code, 12, `${args[0]}: exit ${r.code}: ${r.stderr}`)
      assert.match(r.stderr, /^stream-segment: ERR_AUTH: .*credentials/m, args[0])
      assert.equal(proxy.stats().requests, 1, `${args[0]}: requests made`)
    }
  })
})
