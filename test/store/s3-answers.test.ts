/**
 * How S3Store takes answers it cannot trust, against a fake S3 server on 127.0.0.1
 * (test/helpers/fake-s3.ts; no real S3 server): each bad answer is ERR_STORE naming the
 * operation and the key, never a success made up from it, and no listing loops.
 */
import assert from 'node:assert/strict'
import type { ServerResponse } from 'node:http'
import { describe, test } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import { rejectsCode } from '../helpers/assert.js'
import {
  dropHeader,
  type FakeS3,
  fakeS3Servers,
  fakeS3Store,
  type ListedEntry,
  listPage,
  rawAnswer,
  replaceHeader,
  s3Error,
  send,
} from '../helpers/fake-s3.js'

const fake = fakeS3Servers()

/** Checkpoint 1 published (50,000 bytes of 1s), and a writer opened on it with 'NEW DATA' written at 0, not flushed. */
async function writerOnFirst(store: S3Store, options: { conflictPolicy?: 'fail' } = {}): Promise<SegmentFile> {
  const f0 = await SegmentFile.create(store)
  await f0.write(0, Buffer.alloc(50_000, 1))
  await f0.flush()
  await f0.close()
  const f = await SegmentFile.open(store, options)
  await f.write(0, Buffer.from('NEW DATA'))
  return f
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
    const f = await writerOnFirst(store)
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

/** Each listing test fails on its own within this, should its listing loop. */
const LOOP = { timeout: 10_000 }

describe('a conditional write answered 409 ConditionalRequestConflict', () => {
  test('is made again: with conflictPolicy fail, a flush beside a conditional write that failed publishes', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const f = await writerOnFirst(store, { conflictPolicy: 'fail' })
    // A conflicting operation under way on the key (another writer's conditional write,
    // which fails its own condition): S3 asks for the request to be made again.
    let answered = 0
    s3.hook = (r, res) => {
      if (r.op !== 'PutObject' || r.key !== 'p/inode' || answered++ > 0) return false
      s3Error(res, 409, 'ConditionalRequestConflict')
      return true
    }
    assert.equal((await f.flush()).cno, 2)
    s3.hook = undefined
    assert.equal(answered, 2, 'the inode PUT was made again')
    await f.close()
    // One that keeps answering so, past the retries, is a conflict.
    s3.hook = (r, res) => {
      if (r.op !== 'PutObject' || r.key !== 'p/inode') return false
      s3Error(res, 409, 'ConditionalRequestConflict')
      return true
    }
    const first = await store.head('inode')
    await rejectsCode(
      store.put('inode', Buffer.from('x'), { ifMatch: first?.etag as string }),
      'ERR_CONFLICT',
      /HTTP 409 ConditionalRequestConflict: a conflicting operation on the key was under way/,
    )
    s3.hook = undefined
    assert.equal((await store.head('inode'))?.etag, first?.etag)
  })
})

describe('a paged listing that would never end', () => {
  /** A server whose every answer to `op` is `page(n)`, n counting that op's requests from 1. */
  async function answering(op: string, page: (n: number) => string): Promise<FakeS3> {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== op) return false
      send(res, 200, page(s3.count(op)))
      return true
    }
    return s3
  }
  const entry = (key: string) => ({ key, size: 10, etag: '"e"', lastModified: '2024-01-01T00:00:00.000Z' })

  async function listAll(s3: FakeS3): Promise<number> {
    let n = 0
    for await (const _ of fakeS3Store(s3).list('')) n++
    return n
  }
  async function uploadsAll(s3: FakeS3): Promise<number> {
    let n = 0
    for await (const _ of fakeS3Store(s3).listMultipart('')) n++
    return n
  }

  test('ListObjectsV2 naming the same token again: ERR_STORE, not another request', LOOP, async () => {
    const s3 = await answering('ListObjectsV2', (n) => listPage([entry(`p/a${n}`)], { truncated: true, token: 'T' }))
    await rejectsCode(listAll(s3), 'ERR_STORE', /ListObjectsV2 s3:\/\/bucket\/p\/: page 2 .*named before \(T\)/)
    assert.equal(s3.count('ListObjectsV2'), 2)
  })

  test('ListObjectsV2 truncated without a token: ERR_STORE, not a listing cut short', LOOP, async () => {
    const s3 = await answering('ListObjectsV2', () => listPage([entry('p/a')], { truncated: true }))
    await rejectsCode(listAll(s3), 'ERR_STORE', /ListObjectsV2 s3:\/\/bucket\/p\/: .*truncated but names no place/)
    assert.equal(s3.count('ListObjectsV2'), 1)
  })

  test('ListObjectsV2 with a fresh token on every empty page: ERR_STORE after 100 of them', LOOP, async () => {
    const s3 = await answering('ListObjectsV2', (n) => listPage([], { truncated: true, token: `T${n}` }))
    await rejectsCode(listAll(s3), 'ERR_STORE', /ListObjectsV2 s3:\/\/bucket\/p\/: .*100 truncated pages in a row/)
    assert.equal(s3.count('ListObjectsV2'), 100)
  })

  const parts = (n: number) => `<Part><PartNumber>${n}</PartNumber><ETag>"a"</ETag><Size>5</Size></Part>`
  test('ListParts naming the same marker again, or none: ERR_STORE naming the upload', LOOP, async () => {
    for (const [marker, error] of [
      // The second page lists part 1 again: refused as a part listed twice, or a marker named before.
      [
        '<NextPartNumberMarker>1</NextPartNumberMarker>',
        /ListParts s3:\/\/bucket\/p\/k upload u: .*(named before|part 1 listed twice)/,
      ],
      ['', /ListParts s3:\/\/bucket\/p\/k upload u: .*names no place/],
    ] as const) {
      const s3 = await answering(
        'ListParts',
        () => `<ListPartsResult><IsTruncated>true</IsTruncated>${marker}${parts(1)}</ListPartsResult>`,
      )
      await rejectsCode(fakeS3Store(s3).listParts('k', 'u'), 'ERR_STORE', error)
      assert.ok(s3.count('ListParts') <= 2)
    }
  })

  test('ListParts entries a resume cannot take: ERR_STORE naming the part', async () => {
    const part = (n: string, etag: string, size: string) =>
      `<Part><PartNumber>${n}</PartNumber>${etag}<Size>${size}</Size></Part>`
    for (const [body, error] of [
      [part('1', '<ETag>"a"</ETag>', '5') + part('1', '<ETag>"a"</ETag>', '5'), /part 1 listed twice/],
      [part('2', '', '5'), /ListParts s3:\/\/bucket\/p\/k#2: answered without an ETag/],
      [part('3', '<ETag>"a"</ETag>', '-1'), /part 3 with size -1, which is no byte count/],
      [part('0', '<ETag>"a"</ETag>', '5'), /part 0 is no part number/],
    ] as const) {
      const s3 = await answering(
        'ListParts',
        () => `<ListPartsResult><IsTruncated>false</IsTruncated>${body}</ListPartsResult>`,
      )
      await rejectsCode(fakeS3Store(s3).listParts('k', 'u'), 'ERR_STORE', error)
    }
  })

  test('ListParts with a fresh marker on every empty page: ERR_STORE after 100 of them', LOOP, async () => {
    const s3 = await answering(
      'ListParts',
      (n) =>
        `<ListPartsResult><IsTruncated>true</IsTruncated><NextPartNumberMarker>${n}</NextPartNumberMarker></ListPartsResult>`,
    )
    await rejectsCode(fakeS3Store(s3).listParts('k', 'u'), 'ERR_STORE', /ListParts .*100 truncated pages in a row/)
  })

  test('ListMultipartUploads naming the same markers again, or none: ERR_STORE', LOOP, async () => {
    const upload =
      '<Upload><Key>p/0000000001.1</Key><UploadId>u1</UploadId><Initiated>2024-01-01T00:00:00.000Z</Initiated></Upload>'
    for (const [markers, error] of [
      [
        '<NextKeyMarker>p/a</NextKeyMarker><NextUploadIdMarker>u1</NextUploadIdMarker>',
        /ListMultipartUploads s3:\/\/bucket\/p\/: page 2 .*named before/,
      ],
      ['', /ListMultipartUploads s3:\/\/bucket\/p\/: .*names no place/],
    ] as const) {
      const s3 = await answering(
        'ListMultipartUploads',
        () =>
          `<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>${markers}${upload}</ListMultipartUploadsResult>`,
      )
      await rejectsCode(uploadsAll(s3), 'ERR_STORE', error)
      assert.ok(s3.count('ListMultipartUploads') <= 2)
    }
  })
})

describe('a listed object or upload without its time', () => {
  test('ListObjectsV2 entry without LastModified, ListMultipartUploads without Initiated: ERR_STORE naming the key', async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op === 'ListObjectsV2') send(res, 200, listPage([{ key: 'p/0000000002.1', size: 10, etag: '"e"' }]))
      else if (r.op === 'ListMultipartUploads') {
        send(
          res,
          200,
          '<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>p/0000000002.2</Key><UploadId>u1</UploadId></Upload></ListMultipartUploadsResult>',
        )
      } else return false
      return true
    }
    const store = fakeS3Store(s3)
    await rejectsCode(
      (async () => {
        for await (const _ of store.list('')) {
        }
      })(),
      'ERR_STORE',
      /ListObjectsV2 s3:\/\/bucket\/p\/0000000002\.1: entry without a valid LastModified/,
    )
    await rejectsCode(
      (async () => {
        for await (const _ of store.listMultipart('')) {
        }
      })(),
      'ERR_STORE',
      /ListMultipartUploads s3:\/\/bucket\/p\/0000000002\.2 \(upload u1\): entry without a valid Initiated/,
    )
  })

  test("gc on such a listing fails and removes nothing of a live writer's new objects and upload", async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(100_000, 1))
    await f.flush()
    await f.close()
    // A live writer's coming checkpoint 2, written a moment ago and not published yet.
    await store.put('0000000002.1', Buffer.alloc(5000, 2), { ifNoneMatch: '*' })
    await store.createMultipart('0000000002.2')
    s3.omitTimes = true
    await rejectsCode(gc(store), 'ERR_STORE', /LastModified|Initiated/)
    assert.ok(s3.objects.has('p/0000000002.1'))
    assert.equal(s3.uploads.size, 1)
  })
})

describe('an ETag that is no entity tag', () => {
  test('HEAD, PutObject, UploadPart and a listing: ERR_STORE naming the operation, the key and the ETag', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    await store.put('k', Buffer.from('x'))
    const id = await store.createMultipart('m')
    const long = 'e'.repeat(2000)
    s3.hook = (r, res) => {
      if (r.op === 'HeadObject') replaceHeader(res, 'etag', '"a b"')
      if (r.op === 'PutObject') replaceHeader(res, 'etag', '"a"b"')
      if (r.op === 'UploadPart') replaceHeader(res, 'etag', `"${long}"`)
      if (r.op === 'ListObjectsV2') {
        send(res, 200, listPage([{ key: 'p/k', size: 1, etag: '"a\nb"', lastModified: '2024-01-01T00:00:00.000Z' }]))
        return true
      }
      return false
    }
    await rejectsCode(
      store.head('k'),
      'ERR_STORE',
      /HeadObject s3:\/\/bucket\/p\/k: answered with ETag "\\"a b\\"", no entity tag/,
    )
    await rejectsCode(
      store.put('k', Buffer.from('y')),
      'ERR_STORE',
      /PutObject s3:\/\/bucket\/p\/k: answered with ETag .*no entity tag/,
    )
    await rejectsCode(
      (async () => {
        for await (const _ of store.list('')) {
        }
      })(),
      'ERR_STORE',
      /ListObjectsV2 s3:\/\/bucket\/p\/k: answered with ETag "\\"a\\nb\\"", no entity tag/,
    )
    await rejectsCode(
      store.uploadPart('m', id, 1, Buffer.from('part')),
      'ERR_STORE',
      /UploadPart s3:\/\/bucket\/p\/m#1: answered with ETag "\\"e{79}…", no entity tag/,
    )
  })

  test("an ifMatch that is no entity tag, or no string, is the caller's error, never sent", async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    await store.put('k', Buffer.from('x'))
    const id = await store.createMultipart('m')
    for (const ifMatch of ['"a\r\nX-Injected: 1"', 'a b', 'é'.repeat(3) + '\u0100']) {
      await rejectsCode(
        store.put('k', Buffer.from('y'), { ifMatch }),
        'ERR_INVALID_ARGUMENT',
        /put k: ifMatch .* is no entity tag/,
      )
      await rejectsCode(
        store.uploadPartCopy('m', id, 1, { store, key: 'k', range: { start: 0, end: 1 }, ifMatch }),
        'ERR_INVALID_ARGUMENT',
        /s3:\/\/bucket\/p\/k \[0, 1\): ifMatch .* is no entity tag/,
      )
    }
    await rejectsCode(
      store.put('k', Buffer.from('y'), { ifMatch: 7 as unknown as string }),
      'ERR_INVALID_ARGUMENT',
      /put k: ifMatch must be a string, got number 7/,
    )
    assert.equal(s3.count('PutObject'), 1)
    assert.equal(s3.count('UploadPartCopy'), 0)
  })
})

describe('an answer without an ETag', () => {
  test('HEAD, a listed object and UploadPart without an ETag: ERR_STORE naming the operation and key', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    await store.put('k', Buffer.from('x'))
    const id = await store.createMultipart('m')
    s3.hook = (r, res) => {
      if (r.op === 'HeadObject' || r.op === 'UploadPart') dropHeader(res, 'etag')
      if (r.op === 'ListObjectsV2') {
        send(res, 200, listPage([{ key: 'p/k', size: 1, lastModified: '2024-01-01T00:00:00.000Z' }]))
        return true
      }
      return false
    }
    await rejectsCode(store.head('k'), 'ERR_STORE', /HeadObject s3:\/\/bucket\/p\/k: answered without an ETag/)
    await rejectsCode(
      (async () => {
        for await (const _ of store.list('')) {
        }
      })(),
      'ERR_STORE',
      /ListObjectsV2 s3:\/\/bucket\/p\/k: answered without an ETag/,
    )
    await rejectsCode(
      store.uploadPart('m', id, 1, Buffer.from('part')),
      'ERR_STORE',
      /UploadPart s3:\/\/bucket\/p\/m#1: answered without an ETag/,
    )
  })

  test('an empty ifMatch is the caller\'s error, never sent as If-Match ""', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    await store.put('k', Buffer.from('x'))
    const id = await store.createMultipart('m')
    for (const ifMatch of ['', '""']) {
      await rejectsCode(
        store.put('k', Buffer.from('y'), { ifMatch }),
        'ERR_INVALID_ARGUMENT',
        /put k: ifMatch is empty/,
      )
      await rejectsCode(
        store.uploadPartCopy('m', id, 1, { store, key: 'k', range: { start: 0, end: 1 }, ifMatch }),
        'ERR_INVALID_ARGUMENT',
        /s3:\/\/bucket\/p\/k \[0, 1\): ifMatch is empty/,
      )
    }
    assert.equal(s3.count('PutObject'), 1)
    assert.equal(s3.count('UploadPartCopy'), 0)
  })

  test('a writer whose answers carry no ETag fails; it never publishes with If-Match ""', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const f0 = await SegmentFile.create(store)
    await f0.write(0, Buffer.alloc(10_000, 1))
    await f0.flush()
    await f0.close()
    s3.hook = (r, res) => {
      if (r.op === 'HeadObject' || r.op === 'PutObject' || r.op === 'GetObject') dropHeader(res, 'etag')
      return false
    }
    const opened = SegmentFile.open(store).then(async (f) => {
      await f.write(0, Buffer.from('WRITER-A'))
      await f.flush()
      await f.close()
    })
    await assert.rejects(opened, (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ERR_STORE', err.message)
      assert.match(err.message, /answered without an ETag/)
      return true
    })
    s3.hook = undefined
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.equal(r.cno, 1)
    await r.close()
  })
})

describe('a 200 answer that is no listing', () => {
  const bodies: Record<string, [string, string]> = {
    'an empty body': ['', ''],
    'an HTML page': ['<html><body>Captive portal</body></html>', 'text/html'],
    'another XML document': [
      '<?xml version="1.0"?><ListAllMyBucketsResult><Buckets/></ListAllMyBucketsResult>',
      'application/xml',
    ],
  }
  for (const [name, [body, type]] of Object.entries(bodies)) {
    test(`${name}: list, listMultipart and listParts are ERR_STORE, head is ERR_STORE`, async () => {
      const s3 = await fake()
      s3.hook = (_r, res) => {
        send(res, 200, body, type === '' ? {} : { 'content-type': type })
        return true
      }
      const store = fakeS3Store(s3)
      const drain = async (it: AsyncIterable<unknown>) => {
        for await (const _ of it) {
        }
      }
      await rejectsCode(drain(store.list('')), 'ERR_STORE', /ListObjectsV2 s3:\/\/bucket\/p\/: .*no listing/)
      await rejectsCode(
        drain(store.listMultipart('')),
        'ERR_STORE',
        /ListMultipartUploads s3:\/\/bucket\/p\/: .*no listing/,
      )
      await rejectsCode(store.listParts('k', 'u'), 'ERR_STORE', /ListParts s3:\/\/bucket\/p\/k upload u: .*no listing/)
      await rejectsCode(store.head('k'), 'ERR_STORE', /HeadObject s3:\/\/bucket\/p\/k: /)
    })
  }
})

describe('a GET answered with other bytes than asked', () => {
  const OBJ = Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz'.repeat(100)) // 3600 bytes
  type Range = { start: number; end: number } | { suffix: number } | undefined
  /** Each case: the range asked, the answer's status, Content-Range and the bytes sent, the refusal expected. */
  const cases: Array<[string, Range, number, string, Buffer, RegExp]> = [
    [
      'a whole GET answered 206 with part of the object',
      undefined,
      206,
      'bytes 0-9/3600',
      OBJ.subarray(0, 10),
      /part of the object to a request for all of it/,
    ],
    [
      'a suffix answered 206 with the first bytes',
      { suffix: 256 },
      206,
      'bytes 0-255/3600',
      OBJ.subarray(0, 256),
      /not the last 256 bytes/,
    ],
    [
      'a Content-Range ending past the size it names',
      { start: 0, end: 100 },
      206,
      'bytes 0-99/50',
      OBJ.subarray(0, 100),
      /ends past the object's size/,
    ],
    [
      'a range answered 206 with other bytes',
      { start: 100, end: 200 },
      206,
      'bytes 0-99/3600',
      OBJ.subarray(0, 100),
      /not within the bytes asked, \[100, 200\)/,
    ],
    [
      'a range answered 206 with fewer bytes than the object holds',
      { start: 100, end: 200 },
      206,
      'bytes 100-149/3600',
      OBJ.subarray(100, 150),
      /not within the bytes asked, \[100, 200\)/,
    ],
    [
      'a range not at 0 answered 200 with the whole object',
      { start: 100, end: 200 },
      200,
      '',
      OBJ,
      /200 with the whole object \(3600 bytes\) to a request for a range/,
    ],
  ]
  for (const getPath of ['http', 'sdk'] as const) {
    for (const [name, range, status, contentRange, body, refusal] of cases) {
      test(`getPath '${getPath}': ${name}: ERR_STORE naming the key, not retried`, async () => {
        const s3 = await fake()
        s3.hook = (r, res) => {
          if (r.op !== 'GetObject') return false
          const headers: Record<string, string> = { 'content-length': String(body.length), etag: '"e"' }
          if (contentRange !== '') headers['content-range'] = contentRange
          res.writeHead(status, headers)
          res.end(body)
          return true
        }
        const store = fakeS3Store(s3, { getPath })
        await rejectsCode(
          store.get('k', range === undefined ? {} : { range }),
          'ERR_STORE',
          new RegExp(
            `GetObject s3://bucket/p/k${range === undefined ? '' : ' \\(bytes=\\d*-\\d+\\)'}: .*answer refused: .*${refusal.source}`,
          ),
        )
        assert.equal(s3.count('GetObject'), 1)
      })
    }
    test(`getPath '${getPath}': honest answers of whole, ranged, clamped and suffix GETs are taken`, async () => {
      const s3 = await fake()
      const store = fakeS3Store(s3, { getPath })
      await store.put('k', OBJ)
      assert.deepEqual(Buffer.from(await store.get('k')), OBJ)
      assert.deepEqual(Buffer.from(await store.get('k', { range: { start: 100, end: 200 } })), OBJ.subarray(100, 200))
      assert.deepEqual(Buffer.from(await store.get('k', { range: { start: 3500, end: 9000 } })), OBJ.subarray(3500))
      assert.deepEqual(Buffer.from(await store.get('k', { range: { suffix: 256 } })), OBJ.subarray(-256))
      assert.deepEqual(Buffer.from(await store.get('k', { range: { suffix: 9000 } })), OBJ)
      s3.hook = (r, res) => {
        if (r.op !== 'GetObject') return false
        // A whole GET answered 206 with all of the object.
        res.writeHead(206, { 'content-length': String(OBJ.length), 'content-range': `bytes 0-3599/3600`, etag: '"e"' })
        res.end(OBJ)
        return true
      }
      assert.deepEqual(Buffer.from(await store.get('k')), OBJ)
    })
  }
})

describe('listed entries that cannot be right', () => {
  const LM = '2024-01-01T00:00:00.000Z'
  const e = (key: string | undefined, size: number | string | undefined = 10) => ({
    key,
    size,
    etag: '"e"',
    lastModified: LM,
  })
  const cases: Array<[string, ListedEntry[], RegExp]> = [
    [
      'a key outside the prefix',
      [e('other/0000000001.0')],
      /s3:\/\/bucket\/other\/0000000001\.0: listed though not under/,
    ],
    ['an entry without a key', [e(undefined)], /listed without a Key/],
    [
      'keys out of order',
      [e('p/0000000002.0'), e('p/0000000001.0')],
      /0000000001\.0: listed out of order, not after p\/0000000002\.0/,
    ],
    ['a key listed twice', [e('p/0000000001.0'), e('p/0000000001.0')], /0000000001\.0: listed out of order/],
    ['a negative size', [e('p/0000000001.0', -5)], /0000000001\.0: listed with size -5, which is no byte count/],
    [
      'no size',
      [{ key: 'p/0000000001.0', etag: '"e"', lastModified: LM }],
      /0000000001\.0: listed with size undefined/,
    ],
  ]
  for (const [name, entries, error] of cases) {
    test(`${name}: ERR_STORE naming the key`, async () => {
      const s3 = await fake()
      s3.hook = (r, res) => {
        if (r.op !== 'ListObjectsV2') return false
        send(res, 200, listPage(entries))
        return true
      }
      await rejectsCode(
        (async () => {
          for await (const _ of fakeS3Store(s3).list('')) {
          }
        })(),
        'ERR_STORE',
        new RegExp(`ListObjectsV2 .*${error.source}`),
      )
    })
  }

  test("keys under the prefix that no key of the store can be (another tool's: a console folder, a//b, ../x) are passed over", async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== 'ListObjectsV2') return false
      const keys = ['p/', 'p/../x', 'p//a', 'p/0000000001.0', 'p/backup/', 'p/backup/x', 'p/inode', 'p/x/./y']
      send(res, 200, listPage(keys.map((k) => e(k))))
      return true
    }
    const listed: string[] = []
    for await (const entry of fakeS3Store(s3).list('')) listed.push(entry.key)
    assert.deepEqual(listed, ['0000000001.0', 'backup/x', 'inode'])
  })

  test('a console folder made inside a container: gc and a writer opening it pass over it, and leave it', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(1000, 1))
    await f.flush()
    await f.close()
    const folder = {
      body: Buffer.alloc(0),
      etag: '"d41d8cd98f00b204e9800998ecf8427e"',
      lastModified: new Date(),
      meta: {},
    }
    s3.objects.set('p/backup/', folder)
    const r = await gc(store, { graceMs: 0 })
    assert.deepEqual(r.kept, [1])
    const w = await SegmentFile.open(store)
    await w.write(0, Buffer.alloc(10, 2))
    assert.equal((await w.flush()).cno, 2)
    await w.close()
    assert.equal(s3.objects.get('p/backup/'), folder)
  })

  test('a bucket that lists in no order (a directory bucket): the listing is sorted, startAfter applied here', async () => {
    const s3 = await fake()
    const asked: string[] = []
    s3.hook = (r, res) => {
      if (r.op !== 'ListObjectsV2') return false
      asked.push(r.query.get('start-after') ?? '')
      send(res, 200, listPage([e('p/0000000003.0'), e('p/0000000001.0'), e('p/inode'), e('p/0000000002.1')]))
      return true
    }
    const list = async (startAfter?: string) => {
      const keys: string[] = []
      const store = fakeS3Store(s3, { unorderedListing: true })
      for await (const x of store.list('', startAfter === undefined ? {} : { startAfter })) keys.push(x.key)
      return keys
    }
    assert.deepEqual(await list(), ['0000000001.0', '0000000002.1', '0000000003.0', 'inode'])
    assert.deepEqual(await list('0000000002.'), ['0000000002.1', '0000000003.0', 'inode'])
    assert.deepEqual(asked, ['', ''], 'no StartAfter sent')
    // The same answer from an ordered bucket is refused.
    await rejectsCode(
      (async () => {
        for await (const _ of fakeS3Store(s3).list('')) {
        }
      })(),
      'ERR_STORE',
      /out of order/,
    )
  })

  test("the container's prefix as an empty object (a console's folder) is passed over, not refused", async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== 'ListObjectsV2') return false
      send(res, 200, listPage([e('p/', 0), e('p/0000000001.0')]))
      return true
    }
    const keys: string[] = []
    for await (const x of fakeS3Store(s3).list('')) keys.push(x.key)
    assert.deepEqual(keys, ['0000000001.0'])
  })

  test('fresh tokens on pages of the same keys: ERR_STORE, not a loop', LOOP, async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== 'ListObjectsV2') return false
      send(res, 200, listPage([e('p/0000000001.0')], { truncated: true, token: `T${s3.count('ListObjectsV2')}` }))
      return true
    }
    await rejectsCode(
      (async () => {
        for await (const _ of fakeS3Store(s3).list('')) {
        }
      })(),
      'ERR_STORE',
      /0000000001\.0: listed out of order/,
    )
    assert.equal(s3.count('ListObjectsV2'), 2)
  })

  test('a key not after startAfter: ERR_STORE', async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== 'ListObjectsV2') return false
      send(res, 200, listPage([e('p/0000000001.0')]))
      return true
    }
    await rejectsCode(
      (async () => {
        for await (const _ of fakeS3Store(s3).list('', { startAfter: '0000000005.0' })) {
        }
      })(),
      'ERR_STORE',
      /0000000001\.0: listed out of order, not after p\/0000000005\.0/,
    )
  })

  test('HEAD without a Content-Length: ERR_STORE naming the key', async () => {
    const s3 = await fake()
    s3.hook = (r, res) => {
      if (r.op !== 'HeadObject') return false
      rawAnswer(res, 'HTTP/1.1 200 OK\r\nETag: "e"')
      return true
    }
    await rejectsCode(
      fakeS3Store(s3).head('0000000001.0'),
      'ERR_STORE',
      /HeadObject s3:\/\/bucket\/p\/0000000001\.0: answered without a valid Content-Length/,
    )
  })
})

describe('an endpoint that is no S3 server', () => {
  test('a listing answered 404 without NoSuchBucket (a web page): ERR_STORE asking whether the endpoint is S3, one request', async () => {
    const s3 = await fake()
    s3.hook = (_r, res) => {
      send(res, 404, '<html><body>Not Found</body></html>', { 'content-type': 'text/html' })
      return true
    }
    const store = fakeS3Store(s3)
    const drain = async (it: AsyncIterable<unknown>) => {
      for await (const _ of it) {
      }
    }
    for (const [op, listing] of [
      ['ListObjectsV2', () => drain(store.list(''))],
      ['ListMultipartUploads', () => drain(store.listMultipart(''))],
    ] as const) {
      const before = s3.log.length
      await rejectsCode(
        listing(),
        'ERR_STORE',
        new RegExp(`${op} s3://bucket/p/: HTTP 404 .*is the endpoint .* an S3 server\\?`),
      )
      assert.equal(s3.log.length - before, 1, `${op}: one request`)
    }
    // A key's 404 stays what S3 means by it: no such key.
    assert.equal(await store.head('k'), undefined)
    await rejectsCode(store.get('k'), 'ERR_NOT_FOUND')
  })

  test('a bucket S3 says does not exist: still ERR_NOT_FOUND naming the bucket', async () => {
    const s3 = await fake()
    s3.hook = (_r, res) => {
      s3Error(res, 404, 'NoSuchBucket')
      return true
    }
    const it = fakeS3Store(s3).list('')
    await rejectsCode(
      (async () => {
        for await (const _ of it) {
        }
      })(),
      'ERR_NOT_FOUND',
      /bucket bucket does not exist/,
    )
  })
})

describe('a redirect', () => {
  const answers: Record<string, (res: ServerResponse) => void> = {
    '301 PermanentRedirect': (res) =>
      s3Error(res, 301, 'PermanentRedirect', '<Endpoint>bucket.s3.eu-west-1.amazonaws.com</Endpoint>'),
    '307 without a body': (res) => send(res, 307, '', { location: 'http://127.0.0.1:1/' }),
  }
  for (const [name, answer] of Object.entries(answers)) {
    test(`${name}: ERR_STORE naming the redirect and the key, not retried`, async () => {
      const s3 = await fake()
      s3.hook = (_r, res) => {
        answer(res)
        return true
      }
      const calls: Array<[string, (store: S3Store) => Promise<unknown>]> = [
        [
          'ListObjectsV2',
          async (store) => {
            for await (const _ of store.list('')) {
            }
          },
        ],
        ['HeadObject', (store) => store.head('k')],
        ['PutObject', (store) => store.put('k', Buffer.from('x'))],
        ['GetObject', (store) => store.get('k')],
      ]
      for (const getPath of ['http', 'sdk'] as const) {
        for (const [op, call] of calls) {
          const before = s3.log.length
          await rejectsCode(
            call(fakeS3Store(s3, { getPath })),
            'ERR_STORE',
            new RegExp(`${op} s3://bucket/p/.*redirected the request.*\\(wrong endpoint or region\\?\\)`),
          )
          assert.equal(s3.log.length - before, 1, `${op}: one request`)
        }
      }
    })
  }
})

describe('a bad key', () => {
  test('is ERR_INVALID_ARGUMENT from every call, before any request: get, head and delete included', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    for (const k of ['', '../x', 'a//b', 'a\0b', 'a\uD800', '\u00E9'.repeat(600)]) {
      await rejectsCode(store.get(k), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.getChunks(k), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.head(k), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.delete(k), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.delete(['fine', k]), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.put(k, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.createMultipart(k), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.uploadPart(k, 'u', 1, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(
        store.uploadPartCopy(k, 'u', 1, { store, key: 'fine', range: { start: 0, end: 1 } }),
        'ERR_INVALID_ARGUMENT',
        /invalid key/,
      )
      await rejectsCode(
        store.completeMultipart(k, 'u', [{ partNumber: 1, etag: 'e' }]),
        'ERR_INVALID_ARGUMENT',
        /invalid key/,
      )
      await rejectsCode(store.abortMultipart(k, 'u'), 'ERR_INVALID_ARGUMENT', /invalid key/)
      await rejectsCode(store.listParts(k, 'u'), 'ERR_INVALID_ARGUMENT', /invalid key/)
    }
    assert.deepEqual(s3.log, [])
  })

  test('a multipart call given a part number out of 1..10000, or parts without their ETags: ERR_INVALID_ARGUMENT, no request', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    await store.put('src', Buffer.from('x'))
    const id = await store.createMultipart('m')
    const before = s3.log.length
    for (const n of [0, 10_001, 1.5]) {
      await rejectsCode(store.uploadPart('m', id, n, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /part number/)
      await rejectsCode(
        store.uploadPartCopy('m', id, n, { store, key: 'src', range: { start: 0, end: 1 } }),
        'ERR_INVALID_ARGUMENT',
        /part number/,
      )
    }
    const { etag } = await store.uploadPart('m', id, 1, Buffer.from('part'))
    assert.equal(s3.log.length, before + 1)
    const bad: Array<[unknown, RegExp]> = [
      ['', /part 1 has etag "", no entity tag/],
      ['""', /part 1 has etag "\\"\\"", no entity tag/],
      [undefined, /part 1 has etag undefined, no entity tag/],
    ]
    for (const [e, message] of bad) {
      await rejectsCode(
        store.completeMultipart('m', id, [{ partNumber: 1, etag: e as string }]),
        'ERR_INVALID_ARGUMENT',
        message,
      )
    }
    await rejectsCode(store.completeMultipart('m', id, []), 'ERR_INVALID_ARGUMENT', /at least one part/)
    await rejectsCode(
      store.completeMultipart('m', id, [
        { partNumber: 1, etag },
        { partNumber: 1, etag },
      ]),
      'ERR_INVALID_ARGUMENT',
      /increasing order/,
    )
    assert.equal(s3.log.length, before + 1, 'no Complete sent')
    // Parts given out of order are still sorted, as before.
    const { etag: second } = await store.uploadPart('m', id, 2, Buffer.from('two'))
    await store.completeMultipart('m', id, [
      { partNumber: 2, etag: second },
      { partNumber: 1, etag },
    ])
    assert.equal(Buffer.from(await store.get('m')).toString(), 'parttwo')
  })

  test("counts the store's prefix in S3's 1024 bytes of UTF-8: a key that fits alone but not under the prefix", async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3, { prefix: 'pr\u00E9fix' })
    assert.equal(Buffer.byteLength(store.prefix), 8)
    const fits = `${'\u20AC'.repeat(100)}/${'x'.repeat(1016 - 301)}`
    assert.equal(Buffer.byteLength(fits), 1016)
    await store.put(fits, Buffer.from('x'))
    assert.equal((await store.head(fits))?.size, 1)
    assert.equal(s3.objects.size, 1)
    const over = `${fits}y`
    for (const p of [store.put(over, Buffer.from('x')), store.get(over), store.head(over), store.delete(over)]) {
      await rejectsCode(
        p,
        'ERR_INVALID_ARGUMENT',
        /1017 bytes of UTF-8, 1025 with the prefix "pr\u00E9fix\/", over the 1024/,
      )
    }
    assert.deepEqual(
      s3.log.map((l) => l.split(' ')[0]),
      ['PutObject', 'HeadObject'],
    )
  })
})

describe("a server whose clock is an hour ahead of this machine's", () => {
  const HOUR = 3_600_000
  /**
   * The fake with its clock an hour ahead: every answer dated by it, and a request signed more
   * than 15 minutes off it refused as S3 refuses it (403 RequestTimeTooSkewed). `refused`
   * lists the operations refused so.
   */
  async function skewed(): Promise<{ s3: FakeS3; refused: string[] }> {
    const s3 = await fake()
    const refused: string[] = []
    s3.hook = (r, res) => {
      const now = Date.now() + HOUR
      res.setHeader('date', new Date(now).toUTCString())
      const amzDate = String(r.req.headers['x-amz-date'])
      const signed = Date.parse(amzDate.replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'))
      if (Math.abs(signed - now) <= 15 * 60_000) return false
      refused.push(r.op)
      s3Error(res, 403, 'RequestTimeTooSkewed')
      return true
    }
    return { s3, refused }
  }

  test("the first request is refused, the SDK sets its clock by the server's, and the call passes on its retry", async () => {
    const { s3, refused } = await skewed()
    const drain = async (it: AsyncIterable<unknown>) => {
      for await (const _ of it) {
      }
    }
    const calls: Array<[string, 'http' | 'sdk', (store: S3Store) => Promise<unknown>]> = [
      ['HeadObject', 'http', (store) => store.head('k')],
      ['PutObject', 'http', (store) => store.put('k', Buffer.from('x'))],
      ['GetObject', 'http', (store) => store.get('k')],
      ['GetObject', 'sdk', (store) => store.get('k')],
      ['ListObjectsV2', 'http', (store) => drain(store.list(''))],
    ]
    for (const [op, getPath, call] of calls) {
      // A new client each time: its clock is this machine's.
      const store = fakeS3Store(s3, { getPath })
      refused.length = 0
      await call(store)
      assert.deepEqual(refused, [op], `${op}: refused once`)
      assert.equal(store.retries, 1, `${op}: made again once`)
    }
    // A container made and read on a fresh client: one refusal in all.
    const store = fakeS3Store(s3)
    refused.length = 0
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.from('on time'))
    await f.flush()
    await f.close()
    const g = await SegmentFile.open(store)
    assert.equal(Buffer.from(await g.read(0, 7)).toString(), 'on time')
    await g.close()
    assert.equal(refused.length, 1, refused.join(' '))
  })

  test("with the SDK's clock correction off: ERR_AUTH saying to check this machine's clock, not retried", async () => {
    const { s3, refused } = await skewed()
    const client = createS3Client({
      endpoint: s3.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
      disableClockSkewCorrection: true,
    })
    const store = new S3Store({ client, bucket: 'bucket', prefix: 'p', maxRetries: 2, retryBaseMs: 1, retryMaxMs: 5 })
    const err = await rejectsCode(
      store.put('k', Buffer.from('x')),
      'ERR_AUTH',
      /^PutObject s3:\/\/bucket\/p\/k: HTTP 403 RequestTimeTooSkewed: .*too far from its own clock: check this machine's clock$/,
    )
    assert.equal(err.retryable, false)
    assert.deepEqual(refused, ['PutObject'], 'one request')
  })
})

describe('a permission denied on deletes only (a policy denying s3:DeleteObject)', () => {
  test('DeleteObjects answering AccessDenied for its keys: ERR_AUTH from delete and gc, not tried again', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    // Three checkpoints: the first two are garbage once the third is published.
    for (let i = 0; i < 3; i++) {
      const f = i === 0 ? await SegmentFile.create(store) : await SegmentFile.open(store)
      await f.write(i * 1000, Buffer.alloc(100_000, i + 1))
      await f.flush()
      await f.close()
    }
    s3.hook = (r, res) => {
      if (r.op === 'DeleteObject') {
        s3Error(res, 403, 'AccessDenied')
        return true
      }
      if (r.op !== 'DeleteObjects') return false
      const keys = [...r.body.toString().matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1])
      const errors = keys.map(
        (k) => `<Error><Key>${k}</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`,
      )
      send(res, 200, `<DeleteResult>${errors.join('')}</DeleteResult>`)
      return true
    }
    const objects = s3.objects.size
    const denied =
      /DeleteObjects s3:\/\/bucket\/p: 2 of 2 keys failed, p\/a: AccessDenied Access Denied: .*may delete objects in bucket bucket$/
    const err = await rejectsCode(store.delete(['a', 'b']), 'ERR_AUTH', denied)
    assert.equal(err.retryable, false)
    await rejectsCode(store.delete('a'), 'ERR_AUTH', /DeleteObject s3:\/\/bucket\/p\/a: HTTP 403 AccessDenied/)
    const before = s3.count('DeleteObjects')
    await rejectsCode(
      gc(store, { graceMs: 0 }),
      'ERR_AUTH',
      /^s3:\/\/bucket\/p: gc: deleted 0 of the \d+ objects .*DeleteObjects .* AccessDenied .*may delete objects in bucket bucket; a later gc deletes the rest$/,
    )
    assert.equal(s3.count('DeleteObjects') - before, 1, 'one DeleteObjects request')
    assert.equal(s3.objects.size, objects, 'nothing deleted')
  })
})

describe('a HEAD refused 400 (no body, so no error code)', () => {
  test('says what it usually is: an expired session token or another region, the one named by x-amz-bucket-region', async () => {
    const s3 = await fake()
    let region: string | undefined
    s3.hook = (_r, res) => {
      send(res, 400, '', region === undefined ? {} : { 'x-amz-bucket-region': region })
      return true
    }
    const store = fakeS3Store(s3)
    await rejectsCode(
      store.head('k'),
      'ERR_STORE',
      /^HeadObject s3:\/\/bucket\/p\/k: HTTP 400 Unknown: .*not retried: .*expired session token \(AWS_SESSION_TOKEN\) or a region other than the bucket's/,
    )
    region = 'eu-west-1'
    await rejectsCode(
      SegmentFile.open(store),
      'ERR_STORE',
      /HeadObject s3:\/\/bucket\/p\/inode: .*the bucket is in region eu-west-1: set AWS_REGION=eu-west-1/,
    )
    assert.equal(s3.count('HeadObject'), 2, 'not tried again')
  })
})
