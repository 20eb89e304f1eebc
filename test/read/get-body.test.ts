/**
 * The GET body paths of S3Store: on the 'sdk' path a body is kept as the chunks it came in
 * (no copy into one buffer), on the 'http' path read into one buffer; exactly
 * Content-Length bytes: a short body, a long one, a connection cut or
 * closed early, and an abort are errors; on radosgw through the fault proxy a body cut or
 * truncated mid-answer is made again by the retry policy and returns the right bytes.
 */
import assert from 'node:assert/strict'
import { PassThrough } from 'node:stream'
import { describe, it } from 'node:test'
import { S3Store } from '../../lib/store/s3.js'
import { readBody } from '../../lib/store/s3-get.js'
import { type FaultProxy, useFaultProxy } from '../helpers/fault-proxy.js'
import { s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

function body(): PassThrough {
  return new PassThrough()
}

describe('readBody', () => {
  it('returns the chunks as they came, exactly Content-Length bytes, no copy', async () => {
    const b = body()
    const sent = [Buffer.alloc(5, 1), Buffer.alloc(7, 2), Buffer.alloc(4, 3)]
    const p = readBody(b, 16, undefined)
    for (const c of sent) b.write(c)
    b.end()
    const got = await p
    assert.equal(got.length, 3)
    for (let i = 0; i < 3; i++) assert.equal(got[i], sent[i], `chunk ${i} is the one received, not a copy`)
  })

  it('a short body (ended early) is an error naming the bytes', async () => {
    const b = body()
    const p = readBody(b, 16, undefined)
    b.write(Buffer.alloc(10))
    b.end()
    await assert.rejects(p, /body ended after 10 of 16 bytes/)
  })

  it('a long body is an error, and the stream is destroyed', async () => {
    const b = body()
    const p = readBody(b, 16, undefined)
    b.write(Buffer.alloc(10))
    b.write(Buffer.alloc(10))
    await assert.rejects(p, /body longer than its Content-Length 16/)
    assert.ok(b.destroyed)
  })

  it('a connection cut mid-body (an error, or a close with no end) is an error', async () => {
    const b = body()
    const p = readBody(b, 16, undefined)
    b.write(Buffer.alloc(10))
    b.destroy(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))
    await assert.rejects(p, /socket hang up/)
    const c = body()
    const q = readBody(c, 16, undefined)
    c.write(Buffer.alloc(3))
    c.destroy()
    await assert.rejects(q, /closed after 3 of 16 bytes/)
  })

  it('an abort mid-body destroys the stream and fails', async () => {
    const b = body()
    const ac = new AbortController()
    const p = readBody(b, 16, ac.signal)
    b.write(Buffer.alloc(10))
    ac.abort(new Error('stop'))
    await assert.rejects(p, /aborted while reading the body/)
    assert.ok(b.destroyed)
  })
})

describe('S3Store GET bodies on radosgw', () => {
  let proxy: FaultProxy
  const proxiedStore = useFaultProxy({}, (started) => {
    proxy = started
  })

  it("getChunks ('sdk' path): a ranged body in chunks, exactly the range; get joins them; 'http': 64 KiB pieces", async () => {
    const store = await s3TestStore(undefined, { getPath: 'sdk' })
    const bytes = Buffer.allocUnsafe(8 * MiB)
    for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE(i, i)
    await store.put('obj', bytes)
    const lean = new S3Store({ client: store.client, bucket: store.bucket, prefix: store.prefix })
    const pieces = await lean.getChunks('obj', { range: { start: 12345, end: 12345 + 5 * MiB } })
    assert.equal(pieces.length, 80, "the 'http' path reads a 5 MiB body into 64 KiB pieces")
    assert.ok(pieces.every((p) => p.byteLength === 64 * 1024))
    assert.ok(Buffer.concat(pieces).equals(bytes.subarray(12345, 12345 + 5 * MiB)))
    const chunks = await store.getChunks('obj', { range: { start: 12345, end: 12345 + 5 * MiB } })
    assert.ok(chunks.length > 1, 'a 5 MiB body comes in several chunks')
    assert.ok(Buffer.concat(chunks).equals(bytes.subarray(12345, 12345 + 5 * MiB)))
    assert.ok(
      Buffer.from(await store.get('obj', { range: { start: 1, end: 3 * MiB } })).equals(bytes.subarray(1, 3 * MiB)),
    )
    assert.deepEqual(await store.getChunks('obj', { range: { suffix: 4 } }), [bytes.subarray(8 * MiB - 4)])
  })

  for (const [kind, getPath] of [
    ['cut', 'http'],
    ['truncate', 'http'],
    ['cut', 'sdk'],
    ['truncate', 'sdk'],
  ] as const) {
    it(`getChunks ('${getPath}' path): a body ${kind} mid-answer is made again (one retry) and returns the right bytes`, async () => {
      const prefix = uniquePrefix(`get-${kind}`)
      const direct = await s3TestStore(prefix)
      const bytes = Buffer.allocUnsafe(4 * MiB)
      for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE(i * 7, i)
      await direct.put('obj', bytes)
      const store = await proxiedStore(prefix, { getPath }, 2000)
      const before = proxy.stats().faults[kind] ?? 0
      proxy.inject(kind, (r) => r.op === 'GetObject')
      const chunks = await store.getChunks('obj', { range: { start: MiB, end: 4 * MiB } })
      assert.ok(Buffer.concat(chunks).equals(bytes.subarray(MiB)))
      assert.equal((proxy.stats().faults[kind] ?? 0) - before, 1, `the ${kind} was not injected once`)
      assert.equal(store.retries, 1)
    })
  }
})
