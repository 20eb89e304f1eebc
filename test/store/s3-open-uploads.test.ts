/**
 * What S3Store remembers of the multipart uploads it opened (each claim's write id, each
 * part's CRC), against a fake S3 server on 127.0.0.1 (test/helpers/fake-s3.ts): uploads
 * never completed nor aborted must not make it grow for the store's lifetime, so only the
 * most recently used are remembered, and a forgotten one still completes, less cheaply.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { MAX_OPEN_UPLOADS } from '../../lib/store/s3.js'
import { rejectsCode } from '../helpers/assert.js'
import { fakeS3Servers, fakeS3Store, replaceHeader } from '../helpers/fake-s3.js'

const fake = fakeS3Servers()

/** Keys `open-<from>`… of `count` uploads, each opened by `open` and left open, eight at a time. */
async function leaveOpen(count: number, open: (key: string) => Promise<unknown>, from = 0): Promise<void> {
  let next = from
  const worker = async () => {
    while (next < from + count) await open(`open-${next++}`)
  }
  await Promise.all(Array.from({ length: 8 }, worker))
}

describe('uploads left open', () => {
  test(`the part CRCs of all but the ${MAX_OPEN_UPLOADS} most recently used: their completion asks the server (ListParts)`, async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3, { checksums: true })
    const busy = await store.createMultipart('busy')
    const busyParts = [{ partNumber: 1, etag: (await store.uploadPart('busy', busy, 1, Buffer.from('busy 1'))).etag }]
    const old = await store.createMultipart('old')
    const oldPart = await store.uploadPart('old', old, 1, Buffer.from('old part'))
    const withPart = async (key: string) => {
      const id = await store.createMultipart(key)
      await store.uploadPart(key, id, 1, Buffer.from(key))
    }
    await leaveOpen(MAX_OPEN_UPLOADS - 2, withPart)
    // A part sent makes its upload the most recent: `old`, untouched since, is the one forgotten,
    // not `busy`, opened before it.
    busyParts.push({ partNumber: 2, etag: (await store.uploadPart('busy', busy, 2, Buffer.from(' busy 2'))).etag })
    await leaveOpen(1, withPart, MAX_OPEN_UPLOADS - 2)

    await store.completeMultipart('busy', busy, busyParts)
    assert.equal(s3.count('ListParts'), 0, 'the CRCs of the upload used last are known')
    assert.equal(s3.objects.get('p/busy')?.body.toString(), 'busy 1 busy 2')
    await store.completeMultipart('old', old, [{ partNumber: 1, etag: oldPart.etag }])
    assert.equal(s3.count('ListParts'), 1, "the oldest upload's CRCs were forgotten: asked of the server")
    assert.equal(s3.objects.get('p/old')?.body.toString(), 'old part')
  })

  test(`the claims of all but the ${MAX_OPEN_UPLOADS} most recent: a lost completion answer is then judged by the ETag alone`, async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3)
    // Parts whose ETags are no MD5 (SSE-KMS, some servers): only the claim tells that a completion landed.
    s3.hook = (r, res) => {
      if (r.op === 'UploadPart') replaceHeader(res, 'etag', `"kms-${r.query.get('partNumber')}"`)
      // The completion lands, and its answer is lost: the retry finds no upload.
      if (r.op === 'CompleteMultipartUpload') {
        const id = r.query.get('uploadId') ?? ''
        const u = s3.uploads.get(id)
        if (u === undefined) return false
        const body = u.parts.get(1)?.body ?? Buffer.alloc(0)
        s3.objects.set(u.key, { body, etag: 'kms-object', lastModified: new Date(), meta: u.meta })
        s3.uploads.delete(id)
        res.destroy()
        return true
      }
      return false
    }
    const old = await store.createMultipart('old', { ifNoneMatch: '*' })
    const oldPart = await store.uploadPart('old', old, 1, Buffer.from('old part'))
    await leaveOpen(MAX_OPEN_UPLOADS, (key) => store.createMultipart(key, { ifNoneMatch: '*' }))
    const last = `open-${MAX_OPEN_UPLOADS - 1}`
    const lastId = [...s3.uploads].find(([, u]) => u.key === `p/${last}`)?.[0] as string
    const lastPart = await store.uploadPart(last, lastId, 1, Buffer.from('last part'))

    const done = await store.completeMultipart(last, lastId, [{ partNumber: 1, etag: lastPart.etag }])
    assert.equal(done.etag, 'kms-object', "a recent upload's claim tells that its completion landed")
    // Forgotten, the claim cannot tell: never a success made up, the completion is refused.
    await rejectsCode(
      store.completeMultipart('old', old, [{ partNumber: 1, etag: oldPart.etag }]),
      'ERR_NOT_FOUND',
      /no upload .*the object there is not of its parts/,
    )
  })
})
