// S3-specific behaviour of S3Store against a real radosgw (test/rgw/rgw.sh): lost answers,
// aborts mid-request, create-only races, If-Match forms, and radosgw's quirks made uniform.
// The generic ObjectStore contract is the conformance suite's job.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { describe, test } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import createDebug from 'debug'
import { StreamSegmentError } from '../../lib/errors.js'
import { createStreamSegmentReadStream, createStreamSegmentWriteStream } from '../../lib/index.js'
import { unquoteEtag } from '../../lib/store/common.js'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import { WRITE_ID_METADATA } from '../../lib/store/types.js'
import { crc32 } from '../../lib/util/crc32.js'
import { sha256BeatsMd5 } from '../../lib/util/digest.js'
import { rejectsCode } from '../helpers/assert.js'
import { foreignS3Client } from '../helpers/foreign-sdk.js'
import { s3TestBucket, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

/** Bytes derived from their offset and a seed, so a misplaced byte shows. */
function pattern(length: number, seed = 0): Buffer {
  const b = Buffer.allocUnsafe(length)
  for (let i = 0; i < length; i += 4) b.writeUInt32LE((i * 2654435761 + seed) >>> 0, Math.min(i, length - 4))
  if (length < 4) b.fill(seed & 0xff)
  return b
}

/** A client whose first answer to `commandName` is lost after the request landed (the SDK resends it). */
function clientLosingFirstAnswer(commandName: string): { client: S3Client; lost: () => number } {
  const client = createS3Client({ maxAttempts: 3 })
  let lost = 0
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const out = await next(args)
      if (context.commandName === commandName && lost === 0) {
        lost++
        throw Object.assign(new Error('socket hang up (test: answer lost)'), { code: 'ECONNRESET' })
      }
      return out
    },
    { step: 'deserialize', name: 'loseFirstAnswer' },
  )
  return { client, lost: () => lost }
}

/**
 * `client` (createS3Client's by default), recording every request as sent (headers in
 * lower case, and whether the body went as chunks), and damaging one byte of the first
 * body of each of `damage` after it was signed (a byte flipped on the way up).
 */
function recordingClient(
  damage: readonly string[] = [],
  client: S3Client = createS3Client(),
): {
  client: S3Client
  sent: { command: string; headers: Record<string, string>; chunked: boolean }[]
  damaged: () => number
} {
  const sent: { command: string; headers: Record<string, string>; chunked: boolean }[] = []
  const done = new Set<string>()
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const command = context.commandName as string
      const req = args.request as { headers: Record<string, string>; body?: unknown }
      sent.push({
        command,
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k.toLowerCase(), v])),
        chunked: req.body !== undefined && !(req.body instanceof Uint8Array) && typeof req.body !== 'string',
      })
      if (damage.includes(command) && !done.has(command)) {
        done.add(command)
        const body = req.body
        const bytes = Buffer.concat(body instanceof Uint8Array ? [body] : (body as { chunks: Uint8Array[] }).chunks)
        const at = bytes.length >> 1
        bytes[at] = (bytes[at] ?? 0) ^ 0x40
        req.body = bytes
      }
      return next(args)
    },
    { step: 'deserialize', name: 'damageFirstBody' },
  )
  return { client, sent, damaged: () => done.size }
}

/** The `x-amz-checksum-crc32` value of `bytes`. */
function crc32Header(bytes: Uint8Array): string {
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(bytes))
  return crc.toString('base64')
}

describe('S3Store on radosgw', () => {
  test('conditional put replayed with the same write id succeeds, with another conflicts', async () => {
    const store = await s3TestStore()
    const body = pattern(1000, 1)
    const first = await store.put('a', body, { ifNoneMatch: '*', writeId: 'w1' })
    assert.equal((await store.head('a'))?.metadata[WRITE_ID_METADATA], 'w1')
    assert.deepEqual(await store.put('a', body, { ifNoneMatch: '*', writeId: 'w1' }), first)
    await rejectsCode(store.put('a', body, { ifNoneMatch: '*', writeId: 'w2' }), 'ERR_CONFLICT')
    await rejectsCode(store.put('a', body, { ifNoneMatch: '*' }), 'ERR_CONFLICT')

    const second = await store.put('a', pattern(1000, 2), { ifMatch: first.etag, writeId: 'w3' })
    assert.notEqual(second.etag, first.etag)
    assert.deepEqual(await store.put('a', pattern(1000, 2), { ifMatch: first.etag, writeId: 'w3' }), second)
    await rejectsCode(store.put('a', pattern(1000, 3), { ifMatch: first.etag, writeId: 'w4' }), 'ERR_CONFLICT')
    assert.deepEqual(Buffer.from(await store.get('a')), pattern(1000, 2))
  })

  test('a conditional put whose answer is lost is resent by the SDK and recognised', async () => {
    const base = await s3TestStore()
    const { client, lost } = clientLosingFirstAnswer('PutObjectCommand')
    const store = new S3Store({ client, bucket: base.bucket, prefix: base.prefix })
    const out = await store.put('lost', pattern(5000, 4), { ifNoneMatch: '*' })
    assert.equal(lost(), 1)
    assert.equal(out.etag, (await base.head('lost'))?.etag)
    // The same with If-Match: the resent write finds the ETag changed, by itself.
    const again = clientLosingFirstAnswer('PutObjectCommand')
    const other = new S3Store({ client: again.client, bucket: base.bucket, prefix: base.prefix })
    const next = await other.put('lost', pattern(5000, 5), { ifMatch: out.etag })
    assert.equal(again.lost(), 1)
    assert.notEqual(next.etag, out.etag)
    assert.equal(next.etag, (await base.head('lost'))?.etag)
    assert.deepEqual(Buffer.from(await base.get('lost')), pattern(5000, 5))
    client.destroy()
    again.client.destroy()
  })

  test('abort by signal mid-request on a 64 MiB put and a 64 MiB get', async () => {
    const store = await s3TestStore()
    const body = pattern(64 * MiB, 6)
    const reason = new Error('test abort')
    const ac = new AbortController()
    setTimeout(() => ac.abort(reason), 20)
    const t0 = performance.now()
    const err = await rejectsCode(store.put('big', body, { signal: ac.signal }), 'ERR_ABORTED')
    assert.equal(err.cause, reason)
    assert.ok(performance.now() - t0 < 2000, `abort took ${performance.now() - t0} ms`)
    assert.equal(await store.head('big'), undefined, 'an aborted put leaves no object')

    await store.put('big', body)
    const ac2 = new AbortController()
    setTimeout(() => ac2.abort(reason), 20)
    const err2 = await rejectsCode(store.get('big', { signal: ac2.signal }), 'ERR_ABORTED')
    assert.equal(err2.cause, reason)
    // An already-fired signal fails before any request.
    await rejectsCode(store.head('big', { signal: AbortSignal.abort(reason) }), 'ERR_ABORTED')
    const all = await store.get('big')
    assert.equal(all.byteLength, body.byteLength)
    assert.ok(Buffer.from(all.buffer, all.byteOffset, all.byteLength).equals(body))
  })

  test('8 concurrent create-only puts: exactly one wins', async () => {
    const store = await s3TestStore()
    const bodies = Array.from({ length: 8 }, (_, i) => pattern(64 * 1024, 100 + i))
    const settled = await Promise.allSettled(bodies.map((b) => store.put('race', b, { ifNoneMatch: '*' })))
    const winners = settled.flatMap((s, i) => (s.status === 'fulfilled' ? [i] : []))
    assert.equal(winners.length, 1, `winners: ${winners}`)
    for (const s of settled) {
      if (s.status === 'rejected') assert.ok(StreamSegmentError.is(s.reason, 'ERR_CONFLICT'), String(s.reason))
    }
    const w = winners[0] as number
    assert.deepEqual(Buffer.from(await store.get('race')), bodies[w])
  })

  test('8 concurrent createMultipart(ifNoneMatch) on one key: exactly one wins', async () => {
    const store = await s3TestStore()
    const settled = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) =>
        store.createMultipart('mpu', { ifNoneMatch: '*', metadata: { who: `w${i}` } }),
      ),
    )
    const winners = settled.flatMap((s, i) => (s.status === 'fulfilled' ? [{ i, uploadId: s.value }] : []))
    assert.equal(winners.length, 1)
    for (const s of settled) {
      if (s.status === 'rejected') assert.ok(StreamSegmentError.is(s.reason, 'ERR_CONFLICT'), String(s.reason))
    }
    const { i, uploadId } = winners[0] as { i: number; uploadId: string }
    const open = []
    for await (const u of store.listMultipart('')) open.push({ key: u.key, uploadId: u.uploadId })
    assert.deepEqual(open, [{ key: 'mpu', uploadId }], 'the losers opened no upload')
    // The placeholder holds the key until the upload replaces it.
    const placeholder = await store.head('mpu')
    assert.equal(placeholder?.size, 0)
    await rejectsCode(store.put('mpu', pattern(10), { ifNoneMatch: '*' }), 'ERR_CONFLICT')

    const p1 = pattern(5 * MiB, 7)
    const p2 = pattern(1000, 8)
    const e2 = await store.uploadPart('mpu', uploadId, 2, p2)
    const e1 = await store.uploadPart('mpu', uploadId, 1, p1)
    const done = await store.completeMultipart('mpu', uploadId, [
      { partNumber: 2, etag: e2.etag },
      { partNumber: 1, etag: e1.etag },
    ])
    const info = await store.head('mpu')
    assert.ok(done.etag !== '' && !done.etag.includes('"'), `etag ${done.etag}`)
    assert.equal(done.etag, info?.etag, 'radosgw answers Complete with an empty ETag: HEAD fills it in')
    assert.equal(info?.size, p1.length + p2.length)
    assert.equal(info?.metadata.who, `w${i}`)
    assert.equal(info?.metadata[WRITE_ID_METADATA], placeholder?.metadata[WRITE_ID_METADATA])
    assert.deepEqual(Buffer.from(await store.get('mpu')), Buffer.concat([p1, p2]))
    await rejectsCode(store.createMultipart('mpu', { ifNoneMatch: '*' }), 'ERR_CONFLICT')
  })

  test('If-Match: current (quoted or not) replaces, stale and missing conflict', async () => {
    const store = await s3TestStore()
    const v1 = await store.put('m', pattern(100, 1))
    assert.ok(!v1.etag.includes('"'))
    const v2 = await store.put('m', pattern(100, 2), { ifMatch: v1.etag })
    const v3 = await store.put('m', pattern(100, 3), { ifMatch: `"${v2.etag}"` })
    await rejectsCode(store.put('m', pattern(100, 4), { ifMatch: v1.etag }), 'ERR_CONFLICT')
    await rejectsCode(store.put('m', pattern(100, 4), { ifMatch: v2.etag }), 'ERR_CONFLICT')
    assert.deepEqual(Buffer.from(await store.get('m')), pattern(100, 3))
    assert.equal((await store.head('m'))?.etag, v3.etag)
    await rejectsCode(store.put('missing', pattern(100), { ifMatch: v3.etag }), 'ERR_CONFLICT')
    assert.equal(await store.head('missing'), undefined)
  })

  test('ranges and suffixes answer the same as every store', async () => {
    const store = await s3TestStore()
    const body = pattern(1000, 9)
    await store.put('r', body)
    await store.put('empty', new Uint8Array(0))
    const get = async (key: string, range: { start: number; end: number } | { suffix: number }) =>
      Buffer.from(await store.get(key, { range }))
    assert.deepEqual(await get('r', { start: 10, end: 20 }), body.subarray(10, 20))
    assert.deepEqual(await get('r', { start: 990, end: 5000 }), body.subarray(990), 'end clamped')
    await rejectsCode(store.get('r', { range: { start: 500, end: 500 } }), 'ERR_INVALID_ARGUMENT')
    await rejectsCode(store.get('r', { range: { start: 1000, end: 1001 } }), 'ERR_RANGE')
    await rejectsCode(
      store.get('r', { range: { start: 2000, end: 3000 } }),
      'ERR_RANGE',
      /^GetObject s3:\/\/\S+\/r \(bytes=2000-2999\): HTTP 416/,
    )
    assert.deepEqual(await get('r', { suffix: 10 }), body.subarray(990))
    assert.deepEqual(await get('r', { suffix: 5000 }), body, 'suffix longer than the object')
    await rejectsCode(store.get('r', { range: { suffix: 0 } }), 'ERR_INVALID_ARGUMENT')
    assert.deepEqual(await get('empty', { suffix: 5 }), Buffer.alloc(0), 'radosgw answers 416')
    assert.deepEqual(Buffer.from(await store.get('empty')), Buffer.alloc(0))
    await rejectsCode(store.get('empty', { range: { start: 0, end: 10 } }), 'ERR_RANGE')
    await rejectsCode(store.get('nope', { range: { start: 0, end: 10 } }), 'ERR_NOT_FOUND')
    await rejectsCode(store.get('nope', { range: { suffix: 1 } }), 'ERR_NOT_FOUND')
    await rejectsCode(store.get('nope'), 'ERR_NOT_FOUND')
  })

  test('list and delete past 1000 keys; keys relative to the prefix', async () => {
    const store = await s3TestStore()
    const keys = Array.from({ length: 1003 }, (_, i) => `k/${String(i).padStart(5, '0')}`)
    for (let i = 0; i < keys.length; i += 32) {
      await Promise.all(keys.slice(i, i + 32).map((k) => store.put(k, pattern(16))))
    }
    await store.put('other', pattern(16))
    const listed = []
    for await (const e of store.list('k/')) listed.push(e)
    assert.deepEqual(
      listed.map((e) => e.key),
      keys,
    )
    assert.ok(listed.every((e) => e.size === 16 && e.etag !== '' && !e.etag.includes('"')))
    await store.delete([...keys, 'k/never-existed'])
    const left = []
    for await (const e of store.list('')) left.push(e.key)
    assert.deepEqual(left, ['other'])
    await store.delete('other')
    await store.delete('other')
    await store.delete([])
  })

  test('small pages: list, listMultipart, delete batches, ListParts', async () => {
    const prefix = uniquePrefix('paged')
    const store = await s3TestStore(prefix, { pageSize: 2, checksums: true })
    for (const k of ['a', 'b', 'c', 'd', 'e']) await store.put(k, pattern(10))
    const keys = []
    for await (const e of store.list('')) keys.push(e.key)
    assert.deepEqual(keys, ['a', 'b', 'c', 'd', 'e'])
    const ids = []
    for (const k of ['u1', 'u2', 'u2', 'u3']) ids.push({ key: k, uploadId: await store.createMultipart(k) })
    const open = []
    for await (const u of store.listMultipart('')) open.push(u)
    assert.deepEqual(
      open.map((u) => u.key),
      ['u1', 'u2', 'u2', 'u3'],
    )
    assert.deepEqual(new Set(open.map((u) => u.uploadId)), new Set(ids.map((u) => u.uploadId)))
    // Parts uploaded through one store, completed through another (ListParts, paged).
    const { key, uploadId } = ids[0] as { key: string; uploadId: string }
    const parts = []
    for (let n = 1; n <= 3; n++)
      parts.push({ partNumber: n, etag: (await store.uploadPart(key, uploadId, n, pattern(5 * MiB, n))).etag })
    const fresh = await s3TestStore(prefix, { pageSize: 2, checksums: true })
    await fresh.completeMultipart(key, uploadId, parts)
    assert.equal((await store.head(key))?.size, 15 * MiB)
    for (const u of ids.slice(1)) await store.abortMultipart(u.key, u.uploadId)
    await store.abortMultipart('u1', 'no-such-upload')
    await store.delete(['a', 'b', 'c', 'd', 'e', 'u1'])
    const left = []
    for await (const e of store.list('')) left.push(e.key)
    assert.deepEqual(left, [])
  })

  test('errors: missing uploads are ERR_NOT_FOUND, other failures ERR_STORE naming op, bucket, key, status', async () => {
    const store = await s3TestStore()
    await rejectsCode(store.uploadPart('x', 'no-such-upload', 1, pattern(10)), 'ERR_NOT_FOUND')
    await rejectsCode(store.completeMultipart('x', 'no-such-upload', [{ partNumber: 1, etag: 'abc' }]), 'ERR_NOT_FOUND')
    const uploadId = await store.createMultipart('x')
    await store.uploadPart('x', uploadId, 1, pattern(10))
    const err = await rejectsCode(
      store.completeMultipart('x', uploadId, [{ partNumber: 1, etag: '00000000000000000000000000000000' }]),
      'ERR_STORE',
    )
    assert.ok(err.message.includes(`CompleteMultipartUpload s3://${store.bucket}/${store.prefix}x`), err.message)
    assert.match(err.message, /HTTP 400/)
    assert.equal((err.cause as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode, 400)
    await store.abortMultipart('x', uploadId)
    await store.abortMultipart('x', uploadId)
    const missingBucket = new S3Store({ client: store.client, bucket: `${await s3TestBucket()}-missing`, prefix: 'p' })
    await rejectsCode(missingBucket.get('k'), 'ERR_NOT_FOUND', /bucket/)
  })

  test('checksums on: CRC-32 headers are accepted (radosgw ignores them)', async () => {
    const store = await s3TestStore(undefined, { checksums: true })
    assert.equal(store.checksums, true)
    await store.put('c', pattern(3 * MiB, 1), { ifNoneMatch: '*' })
    assert.deepEqual(Buffer.from(await store.get('c')), pattern(3 * MiB, 1))
    const id = await store.createMultipart('cm', { ifNoneMatch: '*' })
    const e1 = await store.uploadPart('cm', id, 1, pattern(5 * MiB, 2))
    const e2 = await store.uploadPart('cm', id, 2, pattern(7, 3))
    await store.completeMultipart(
      'cm',
      id,
      [e1, e2].map((e, i) => ({ partNumber: i + 1, etag: e.etag })),
    )
    assert.deepEqual(Buffer.from(await store.get('cm')), Buffer.concat([pattern(5 * MiB, 2), pattern(7, 3)]))
  })

  test('requests as sent: UNSIGNED-PAYLOAD, no Expect, our CRC-32 only, Content-MD5 on DeleteObjects', async () => {
    const base = await s3TestStore()
    const { client, sent } = recordingClient()
    const store = new S3Store({ client, bucket: base.bucket, prefix: base.prefix, checksums: true })
    const body = pattern(3 * MiB, 11)
    await store.put('h', body)
    const id = await store.createMultipart('h2')
    await store.uploadPart('h2', id, 1, body)
    await store.abortMultipart('h2', id)
    await store.delete(['h', 'h2'])
    for (const name of ['PutObjectCommand', 'UploadPartCommand']) {
      const h = sent.find((s) => s.command === name)?.headers ?? {}
      assert.equal(h['x-amz-content-sha256'], 'UNSIGNED-PAYLOAD', name)
      assert.equal(h.expect, undefined, name)
      assert.equal(h['x-amz-checksum-crc32'], crc32Header(body), name)
      assert.deepEqual(
        Object.keys(h).filter((k) => k.startsWith('x-amz-checksum-')),
        ['x-amz-checksum-crc32'],
      )
    }
    assert.match(
      sent.find((s) => s.command === 'DeleteObjectsCommand')?.headers['content-md5'] ?? '',
      /^[A-Za-z0-9+/]{22}==$/,
    )
    client.destroy()
  })

  test('a custom endpoint checks every body: signed SHA-256 where it is the cheaper hash, else Content-MD5', async () => {
    const base = await s3TestStore()
    const { client, sent } = recordingClient()
    const store = new S3Store({ client, bucket: base.bucket, prefix: base.prefix })
    assert.equal(store.checksums, false)
    assert.equal(store.unsignedPayload, !sha256BeatsMd5())
    assert.equal(store.contentMd5, store.unsignedPayload)
    const body = [pattern(MiB, 3), pattern(MiB + 5, 4)]
    await store.put('p', body)
    const id = await store.createMultipart('m')
    await store.uploadPart('m', id, 1, body)
    await store.abortMultipart('m', id)
    const whole = Buffer.concat(body)
    for (const name of ['PutObjectCommand', 'UploadPartCommand']) {
      const request = sent.find((s) => s.command === name)
      assert.equal(request?.chunked, true, `${name}: the chunks went as they are, not joined`)
      const h = request?.headers ?? {}
      if (store.unsignedPayload) {
        assert.equal(h['x-amz-content-sha256'], 'UNSIGNED-PAYLOAD', name)
        assert.equal(h['content-md5'], createHash('md5').update(whole).digest('base64'), name)
      } else {
        assert.equal(h['x-amz-content-sha256'], createHash('sha256').update(whole).digest('hex'), name)
        assert.equal(h['content-md5'], undefined, name)
      }
    }
    assert.deepEqual(Buffer.from(await store.get('p')), whole)
    client.destroy()
  })

  for (const [label, options, checked] of [
    ['signed SHA-256', { unsignedPayload: false }, true],
    ['unsigned, Content-MD5', { unsignedPayload: true }, true],
    ['unsigned, no Content-MD5', { unsignedPayload: true, contentMd5: false }, false],
  ] as const) {
    test(`a body damaged on the way up, ${label}: ${checked ? 'refused and sent again' : 'stored damaged'}`, async () => {
      const base = await s3TestStore()
      const { client, sent, damaged } = recordingClient(['PutObjectCommand', 'UploadPartCommand'])
      const store = new S3Store({ client, bucket: base.bucket, prefix: base.prefix, retryBaseMs: 1, ...options })
      const body = [pattern(MiB, 5), pattern(3 * MiB, 6)]
      await store.put('p', body)
      const id = await store.createMultipart('m')
      const part = await store.uploadPart('m', id, 1, body)
      await store.abortMultipart('m', id)
      assert.equal(damaged(), 2)
      const tries = (name: string) => sent.filter((s) => s.command === name).length
      const stored = Buffer.from(await store.get('p'))
      const whole = Buffer.concat(body)
      const md5 = createHash('md5').update(whole).digest('hex')
      if (checked) {
        assert.equal(tries('PutObjectCommand'), 2, 'the damaged put was sent again')
        assert.equal(tries('UploadPartCommand'), 2, 'the damaged part was sent again')
        assert.deepEqual(stored, whole)
        assert.equal(part.etag, md5, "radosgw's part ETag is the MD5 of the bytes it kept")
      } else {
        assert.equal(tries('PutObjectCommand'), 1)
        assert.notDeepEqual(stored, whole, 'nothing checked the body: the damage was kept')
        assert.notEqual(part.etag, md5)
      }
      client.destroy()
    })
  }

  test("a client with the SDK's default checksums: our CRC-32 on every body, which goes unjoined and not aws-chunked", async () => {
    const base = await s3TestStore()
    const endpoint = process.env.AWS_ENDPOINT_URL_S3
    const plain = new S3Client({ endpoint, forcePathStyle: true, region: 'us-east-1' })
    assert.equal(await plain.config.requestChecksumCalculation(), 'WHEN_SUPPORTED')
    const { client, sent } = recordingClient([], plain)
    const store = new S3Store({ client, bucket: base.bucket, prefix: base.prefix })
    assert.equal(store.checksums, false)
    const body = [pattern(MiB, 7), pattern(2 * MiB + 3, 8)]
    const whole = Buffer.concat(body)
    await store.put('p', body)
    const id = await store.createMultipart('m')
    const part = await store.uploadPart('m', id, 1, body)
    await store.completeMultipart('m', id, [{ partNumber: 1, etag: part.etag }])
    for (const name of ['PutObjectCommand', 'UploadPartCommand']) {
      const request = sent.find((s) => s.command === name)
      assert.equal(request?.chunked, true, `${name}: the chunks went as they are, not joined`)
      const h = request?.headers ?? {}
      assert.deepEqual(
        Object.keys(h).filter((k) => k.startsWith('x-amz-checksum-')),
        ['x-amz-checksum-crc32'],
        name,
      )
      assert.equal(h['x-amz-checksum-crc32'], crc32Header(whole), name)
      assert.equal(h['content-encoding'], undefined, `${name}: not aws-chunked`)
      assert.equal(h['content-length'], String(whole.length), name)
    }
    assert.deepEqual(Buffer.from(await store.get('p')), whole)
    assert.deepEqual(Buffer.from(await store.get('m')), whole)
    client.destroy()
  })

  test('createS3Client: tuned defaults, and checksums default by endpoint', async () => {
    const store = await s3TestStore()
    assert.equal(store.checksums, false, 'custom endpoint: radosgw checks no checksum')
    assert.equal(store.client.config.forcePathStyle, true)
    assert.equal(await store.client.config.requestChecksumCalculation(), 'WHEN_REQUIRED')
    assert.equal(await store.client.config.responseChecksumValidation(), 'WHEN_REQUIRED')
    // The SDK's messages (a warning on each failed request with a stream body) go to debug.
    const warn = console.warn
    const logged: string[] = []
    const { log } = createDebug
    const enabled = createDebug.disable()
    createDebug.enable('stream-segment:sdk')
    console.warn = (...args: unknown[]) => void logged.push(`console: ${args.join(' ')}`)
    createDebug.log = (...args: unknown[]) => void logged.push(`debug: ${args.join(' ')}`)
    try {
      store.client.config.logger.warn('a failed streaming request')
    } finally {
      console.warn = warn
      createDebug.log = log
      createDebug.enable(enabled)
    }
    assert.equal(logged.length, 1)
    assert.match(logged[0] ?? '', /^debug: .*stream-segment:sdk.*a failed streaming request/)
    const aws = new S3Client({ region: 'us-east-1' })
    const onAws = new S3Store({ client: aws, bucket: 'b', prefix: 'p' })
    assert.equal(onAws.checksums, true)
    assert.equal(onAws.unsignedPayload, true, 'AWS: our CRC-32 is checked, no hash pass')
    assert.equal(onAws.contentMd5, false)
    assert.equal(new S3Store({ client: aws, bucket: 'b', prefix: '/a/b' }).url, 's3://b/a/b')
    assert.equal(unquoteEtag('W/"abc"'), 'abc')
    assert.throws(() => new S3Store({ client: aws, bucket: '', prefix: '' }), /bucket/)
    aws.destroy()
  })

  test('an S3Client of another copy of the SDK (an application with its own version) is sent through: a write stream publishes by it, reads back equal', async () => {
    const base = await s3TestStore()
    const foreign = foreignS3Client({ forcePathStyle: true })
    assert.equal(foreign instanceof S3Client, false, 'a class of its own')
    const commands: string[] = []
    foreign.middlewareStack.add(
      (next, context) => async (args) => {
        commands.push(context.commandName as string)
        return next(args)
      },
      { step: 'initialize', name: 'recordCommands' },
    )
    const store = new S3Store({ client: foreign, bucket: base.bucket, prefix: base.prefix })
    assert.equal(
      new S3Store({ client: foreign, bucket: base.bucket, prefix: 'other' }).client,
      store.client,
      'one per client',
    )
    const bytes = pattern(3 * MiB + 5, 9)
    await pipeline(Readable.from([bytes]), createStreamSegmentWriteStream({ store }))
    assert.ok(commands.includes('PutObjectCommand'), `sent through the caller's client: ${commands.join(', ')}`)
    const back: Buffer[] = []
    for await (const chunk of createStreamSegmentReadStream({ store: base })) back.push(chunk as Buffer)
    assert.equal(sha(Buffer.concat(back)), sha(bytes))
    assert.throws(
      () => new S3Store({ client: { send() {} } as unknown as S3Client, bucket: 'b', prefix: 'p' }),
      (err: unknown) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && /client must be an S3Client/.test(String(err)),
    )
    foreign.destroy()
  })

  test("the longest prefix taken (1007 bytes of UTF-8) holds a container, and a container's longest key fits below it", async () => {
    const label = uniquePrefix('longest')
    const rest = 1007 - Buffer.byteLength(label)
    const prefix = `${label}${'\u00E9'.repeat(rest >> 1)}${'p'.repeat(rest & 1)}`
    assert.equal(Buffer.byteLength(prefix), 1007)
    const store = await s3TestStore(prefix)
    const bytes = pattern(MiB + 5, 11)
    await pipeline(Readable.from([bytes]), createStreamSegmentWriteStream({ store }))
    const back: Buffer[] = []
    for await (const chunk of createStreamSegmentReadStream({ store })) back.push(chunk as Buffer)
    assert.equal(sha(Buffer.concat(back)), sha(bytes))
    // The longest segment key there may be: 1024 bytes with the prefix, which S3 takes.
    await store.put('1073741823.16383', pattern(10, 1))
    assert.deepEqual(Buffer.from(await store.get('1073741823.16383')), pattern(10, 1))
    await store.delete(['1073741823.16383'])
  })
})

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')
