/**
 * How S3Store takes answers it cannot trust, against a fake S3 server on 127.0.0.1
 * (test/helpers/fake-s3.ts; no real S3 server): each bad answer is ERR_STORE naming the
 * operation and the key, never a success made up from it, and no listing loops.
 */
import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { rejectsCode } from '../helpers/assert.js'
import { dropHeader, type FakeS3, fakeS3Store, send, startFakeS3 } from '../helpers/fake-s3.js'

const servers: FakeS3[] = []
after(async () => {
  for (const s of servers) await s.close()
})

async function fake(): Promise<FakeS3> {
  const s3 = await startFakeS3()
  servers.push(s3)
  return s3
}

describe('a write answered 200 without an ETag', () => {
  test('a conditional put that did not land: ERR_STORE naming the key, never the old ETag', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const first = await store.put('inode', Buffer.from('one'), { ifNoneMatch: '*' })
    s3.hook = (r, res) => {
      if (r.op !== 'PutObject') return false
      send(res, 200) // success claimed, nothing stored
      return true
    }
    await rejectsCode(
      store.put('inode', Buffer.from('two'), { ifMatch: first.etag }),
      'ERR_STORE',
      /PutObject s3:\/\/bucket\/p\/inode: answered without an ETag.*did not land/,
    )
    await rejectsCode(
      store.put('new', Buffer.from('x'), { ifNoneMatch: '*' }),
      'ERR_STORE',
      /PutObject s3:\/\/bucket\/p\/new: .*no object is there.*did not land/,
    )
    // An unconditional put has no write id to tell it from what was there.
    await rejectsCode(store.put('plain', Buffer.from('x')), 'ERR_STORE', /PutObject s3:\/\/bucket\/p\/plain: .*ETag/)
    s3.hook = undefined
    assert.equal((await store.head('inode'))?.etag, first.etag)
  })

  test('a conditional put that landed: the ETag comes from a HEAD showing its write id', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    s3.hook = (r, res) => {
      if (r.op === 'PutObject') dropHeader(res, 'etag')
      return false
    }
    const put = await store.put('inode', Buffer.from('one'), { ifNoneMatch: '*' })
    s3.hook = undefined
    assert.equal(put.etag, (await store.head('inode'))?.etag)
  })

  test("a writer's flush whose inode PUT did not land rejects; nothing is published", async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const f0 = await SegmentFile.create(store)
    await f0.write(0, Buffer.alloc(50_000, 1))
    await f0.flush()
    await f0.close()
    const f = await SegmentFile.open(store)
    await f.write(0, Buffer.from('NEW DATA'))
    s3.hook = (r, res) => {
      if (r.op !== 'PutObject' || r.key !== 'p/inode') return false
      send(res, 200)
      return true
    }
    await assert.rejects(f.flush(), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ERR_STORE', err.message)
      assert.match(err.message, /inode/)
      return true
    })
    s3.hook = undefined
    await f.close().catch(() => undefined)
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.equal(r.cno, 1)
    assert.deepEqual(Buffer.from(await r.read(0, 8)), Buffer.alloc(8, 1))
    await r.close()
  })

  test('a claimed multipart completion that did not land (the placeholder is there): ERR_STORE', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const id = await store.createMultipart('0000000002.1', { ifNoneMatch: '*' })
    const part = await store.uploadPart('0000000002.1', id, 1, Buffer.from('part one'))
    s3.hook = (r, res) => {
      if (r.op !== 'CompleteMultipartUpload') return false
      send(res, 200, `<CompleteMultipartUploadResult><Key>${r.key}</Key></CompleteMultipartUploadResult>`)
      return true
    }
    await rejectsCode(
      store.completeMultipart('0000000002.1', id, [{ partNumber: 1, etag: part.etag }]),
      'ERR_STORE',
      /CompleteMultipartUpload s3:\/\/bucket\/p\/0000000002\.1: answered without an ETag.*did not land/,
    )
  })

  test('a completion answered without an ETag (as radosgw does) that landed: the ETag from a HEAD', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const id = await store.createMultipart('0000000002.1', { ifNoneMatch: '*' })
    const part = await store.uploadPart('0000000002.1', id, 1, Buffer.from('part one'))
    s3.hook = (r, res, fake) => {
      if (r.op !== 'CompleteMultipartUpload') return false
      const u = fake.uploads.get(r.query.get('uploadId') ?? '')
      const body = u?.parts.get(1)?.body ?? Buffer.alloc(0)
      fake.objects.set(r.key, { body, etag: 'abc-1', lastModified: new Date(), meta: u?.meta ?? {} })
      send(res, 200, `<CompleteMultipartUploadResult><Key>${r.key}</Key><ETag></ETag></CompleteMultipartUploadResult>`)
      return true
    }
    const done = await store.completeMultipart('0000000002.1', id, [{ partNumber: 1, etag: part.etag }])
    assert.equal(done.etag, 'abc-1')
  })
})
