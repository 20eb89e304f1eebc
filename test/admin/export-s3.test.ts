/**
 * exportObject on radosgw: GetObject of the export returns the checkpoint's bytes
 * (SHA-256 against a read of the checkpoint) — sequential (≥ 99 % copied server-side),
 * patched at random (any mix), with holes, small, empty, into a local file — a failure
 * mid-way leaves neither an object nor an open multipart upload, and a damaged data block
 * fails every export that reads it.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { GetObjectCommand, HeadObjectCommand, ListMultipartUploadsCommand } from '@aws-sdk/client-s3'
import { exportObject } from '../../lib/admin/export.js'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { S3Store } from '../../lib/store/s3.js'
import { rejectsCode } from '../helpers/assert.js'
import { prng } from '../helpers/containers.js'
import { proxiedS3Client, startFaultProxy } from '../helpers/fault-proxy.js'
import { fillPattern } from '../helpers/pattern.js'
import { s3TestClient, s3TestStore } from '../helpers/s3-env.js'

const KiB = 1024
const MiB = 1024 * KiB

function sha(b: Uint8Array): string {
  return createHash('sha256').update(b).digest('hex')
}

/** The checkpoint's bytes, as the reader returns them. */
async function readCheckpoint(store: S3Store, cno?: number): Promise<Uint8Array> {
  const f = await SegmentFile.open(store, { readOnly: true, cno })
  try {
    return f.size === 0 ? new Uint8Array(0) : await f.read(0, f.size)
  } finally {
    await f.close()
  }
}

/** GetObject of the export, whole. */
async function getExport(bucket: string, key: string): Promise<Buffer> {
  const out = await s3TestClient().send(new GetObjectCommand({ Bucket: bucket, Key: key }))
  return Buffer.from(await (out.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray())
}

async function openUploads(bucket: string, prefix: string): Promise<number> {
  const out = await s3TestClient().send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }))
  return out.Uploads?.length ?? 0
}

/** Writes `size` patterned bytes in 1 MiB writes, and flushes. */
async function sequential(store: S3Store, size: number, settings: Partial<Settings> = {}): Promise<void> {
  const f = await SegmentFile.create(store, settings)
  const chunk = Buffer.allocUnsafe(MiB)
  for (let at = 0; at < size; at += MiB) {
    const n = Math.min(MiB, size - at)
    fillPattern(chunk.subarray(0, n), at, 5)
    await f.write(at, chunk.subarray(0, n))
  }
  await f.flush()
  await f.close()
}

describe('export on S3 (radosgw)', () => {
  it('a sequentially written 80 MiB checkpoint: same bytes, ≥ 99 % copied server-side in several parts, with its headers', async () => {
    const store = await s3TestStore()
    await sequential(store, 80 * MiB)
    const dest = await s3TestStore()
    const Key = `${dest.prefix}seq.bin`
    const seen: number[] = []
    const r = await exportObject(
      store,
      { Bucket: dest.bucket, Key, ContentType: 'application/octet-stream', Metadata: { Origin: 'export-test' } },
      { onProgress: (p) => seen.push(p.copiedBytes + p.sentBytes) },
    )
    const want = sha(await readCheckpoint(store))
    assert.equal(sha(await getExport(dest.bucket, Key)), want, 'GetObject returns the checkpoint')
    assert.equal(r.size, 80 * MiB)
    assert.ok(r.copiedBytes >= 0.99 * r.size, `copied ${r.copiedBytes} of ${r.size}`)
    assert.equal(r.copiedBytes + r.sentBytes, r.size)
    assert.ok(r.copyParts >= 3, `${r.copyParts} parts copied`)
    assert.equal(r.location, `s3://${dest.bucket}/${Key}`)
    assert.ok(r.etag !== undefined && r.etag.length > 0)
    const head = await s3TestClient().send(new HeadObjectCommand({ Bucket: dest.bucket, Key }))
    assert.equal(head.ContentType, 'application/octet-stream')
    assert.equal(head.Metadata?.origin, 'export-test')
    assert.equal(head.ContentLength, 80 * MiB)
    assert.equal(seen.at(-1), r.size, 'progress reaches the size')
    assert.equal(await openUploads(dest.bucket, dest.prefix), 0)
  })

  it('a randomly patched checkpoint: same bytes whatever the mix of copies and sent parts (seeded)', async () => {
    for (const seed of [7, 8]) {
      const store = await s3TestStore()
      await sequential(store, 64 * MiB)
      const f = await SegmentFile.open(store)
      const rnd = prng(seed)
      for (let i = 0; i < 8; i++) {
        const at = Math.floor(rnd() * 66 * MiB)
        const len = 1 + Math.floor(rnd() * (rnd() < 0.2 ? 3 * MiB : 64 * KiB))
        const b = Buffer.allocUnsafe(len)
        fillPattern(b, at, seed * 1000 + i)
        await f.write(at, b)
      }
      await f.flush()
      await f.close()
      const dest = await s3TestStore()
      const Key = `${dest.prefix}patched.bin`
      const r = await exportObject(store, { Bucket: dest.bucket, Key })
      const ref = await readCheckpoint(store)
      assert.equal(sha(await getExport(dest.bucket, Key)), sha(ref), `seed ${seed}: same bytes`)
      assert.equal(r.copiedBytes + r.sentBytes, ref.byteLength)
      assert.ok(r.copiedBytes > 0 && r.sentBytes > 0, `seed ${seed}: a mix (${r.copiedBytes} / ${r.sentBytes})`)
      assert.equal(await openUploads(dest.bucket, dest.prefix), 0)
    }
  })

  it('a checkpoint with holes, an empty one and one under 5 MiB export equal (the small ones in one PutObject)', async () => {
    const store = await s3TestStore()
    const f = await SegmentFile.create(store)
    const a = Buffer.allocUnsafe(7 * MiB)
    fillPattern(a, 0, 1)
    await f.write(0, a)
    fillPattern(a, 20 * MiB, 2)
    await f.write(20 * MiB, a) // a 13 MiB hole between
    await f.truncate(30 * MiB + 5) // and one at the end
    const holes = (await f.flush()).cno
    await f.truncate(0)
    const empty = (await f.flush()).cno
    await f.write(0, a.subarray(0, 3 * MiB + 17))
    const small = (await f.flush()).cno
    await f.close()
    const dest = await s3TestStore()
    for (const [cno, what] of [
      [holes, 'holes'],
      [empty, 'empty'],
      [small, 'small'],
    ] as const) {
      const Key = `${dest.prefix}${what}.bin`
      const r = await exportObject(store, { Bucket: dest.bucket, Key }, { cno })
      const ref = await readCheckpoint(store, cno)
      const got = await getExport(dest.bucket, Key)
      assert.equal(got.byteLength, ref.byteLength, `${what}: length`)
      assert.equal(sha(got), sha(ref), `${what}: same bytes`)
      if (what !== 'holes') assert.equal(r.parts, 0, `${what}: one PutObject`)
    }
  })

  it('from a directory-store container to S3: every byte sent by the client, same bytes', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-export-dir-'))
    const store = new DirectoryStore(join(root, 'c'))
    const f = await SegmentFile.create(store)
    const b = Buffer.allocUnsafe(20 * MiB + 5)
    fillPattern(b, 0, 4)
    await f.write(0, b)
    await f.flush()
    await f.close()
    const dest = await s3TestStore()
    const Key = `${dest.prefix}from-dir.bin`
    const r = await exportObject(store, { client: s3TestClient(), Bucket: dest.bucket, Key })
    assert.equal(sha(await getExport(dest.bucket, Key)), sha(b))
    assert.equal(r.copiedBytes, 0)
    assert.equal(r.sentBytes, b.byteLength)
    assert.ok(r.parts >= 2, `${r.parts} parts`)
  })

  it('to a local file from an S3 container: same bytes', async () => {
    const store = await s3TestStore()
    await sequential(store, 9 * MiB + 123)
    const path = join(mkdtempSync(join(tmpdir(), 'ss-export-s3-')), 'out.bin')
    const r = await exportObject(store, path)
    assert.equal(sha(readFileSync(path)), sha(await readCheckpoint(store)))
    assert.equal(r.sentBytes, 9 * MiB + 123)
  })

  it('the answers of a part copy and of the completion lost after they landed: exported once, the same bytes', async () => {
    const store = await s3TestStore()
    await sequential(store, 24 * MiB)
    const dest = await s3TestStore()
    const Key = `${dest.prefix}lost.bin`
    const proxy = await startFaultProxy()
    const client = proxiedS3Client(proxy)
    try {
      proxy.setRate(0)
      proxy.inject('lost', (r) => r.op === 'UploadPartCopy')
      proxy.inject('lost', (r) => r.op === 'CompleteMultipartUpload')
      const r = await exportObject(store, { client, Bucket: dest.bucket, Key })
      assert.deepEqual(proxy.stats().faultsByOp, { 'UploadPartCopy lost': 1, 'CompleteMultipartUpload lost': 1 })
      assert.ok(r.copyParts >= 2, `${r.copyParts} parts copied`)
      assert.equal(sha(await getExport(dest.bucket, Key)), sha(await readCheckpoint(store)))
      assert.equal(await openUploads(dest.bucket, dest.prefix), 0)
    } finally {
      client.destroy()
      await proxy.close()
    }
  })

  it('sources deleted mid-way (as gc would): the export fails naming them, no object, no open upload', async () => {
    const store = await s3TestStore()
    await sequential(store, 40 * MiB)
    const victims: string[] = []
    for await (const e of store.list()) if (/\.[1-9]/.test(e.key)) victims.push(e.key)
    assert.ok(victims.length >= 3, `${victims.length} data objects`)
    const dest = await s3TestStore()
    const Key = `${dest.prefix}failed.bin`
    let gone: Promise<void> | undefined
    const err = await rejectsCode(
      exportObject(
        store,
        { Bucket: dest.bucket, Key },
        {
          concurrency: 1,
          onProgress: () => {
            gone ??= store.delete(victims)
          },
        },
      ),
      'ERR_NOT_FOUND',
      /gc/,
    )
    await gone
    assert.ok(
      victims.some((v) => err.message.includes(v)),
      `the message names the object: ${err.message}`,
    )
    assert.equal(await dest.head('failed.bin'), undefined, 'no object')
    assert.equal(await openUploads(dest.bucket, dest.prefix), 0, 'no open multipart upload')
  })

  it('a flipped data bit: sent or written to a file it fails the export; copied server-side it is not read, verify finds it', async () => {
    const store = await s3TestStore()
    await sequential(store, 12 * MiB)
    const want = await readCheckpoint(store)
    // The largest object holds the checkpoint's first, longest run: copied server-side.
    let key = ''
    let largest = 0
    for await (const e of store.list()) {
      if (/^\d+\.\d+$/.test(e.key) && e.size > largest) [key, largest] = [e.key, e.size]
    }
    const bytes = Buffer.from(await store.get(key))
    bytes[100] = (bytes[100] as number) ^ 1
    await store.put(key, bytes)
    await rejectsCode(readCheckpoint(store), 'ERR_CORRUPT')
    const message = new RegExp(`${key.replace('.', '\\.')}: block \\d+ at byte 0 has CRC-32 `)
    const dir = mkdtempSync(join(tmpdir(), 'ss-export-s3-'))
    await rejectsCode(exportObject(store, join(dir, 'out.bin')), 'ERR_CORRUPT', message)
    assert.deepEqual(readdirSync(dir), [], 'no file, no temporary file left')
    const dest = await s3TestStore()
    await rejectsCode(
      exportObject(store, { Bucket: dest.bucket, Key: `${dest.prefix}sent.bin` }, { copy: false }),
      'ERR_CORRUPT',
      message,
    )
    assert.equal(await dest.head('sent.bin'), undefined, 'no object')
    assert.equal(await openUploads(dest.bucket, dest.prefix), 0, 'no open multipart upload')
    // The documented limit: a run copied inside the store never reaches the client.
    const r = await exportObject(store, { Bucket: dest.bucket, Key: `${dest.prefix}copied.bin` })
    assert.ok(r.copiedBytes > 0)
    const got = await getExport(dest.bucket, `${dest.prefix}copied.bin`)
    let differ = 0
    for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) differ++
    assert.equal(differ, 1, 'the bytes as stored, the flipped one with them')
    const v = await verifyCheckpoint(store)
    assert.ok(
      v.problems.some((p) => p.where.includes(key)),
      `verify reports the block: ${JSON.stringify(v.problems)}`,
    )
  })
})
