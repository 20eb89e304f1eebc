/**
 * `Upload`'s params changed between the constructor and `done()`. lib-storage reads its
 * params (the caller's object itself) when `done()` sends, so a change there is what it
 * writes; this Upload chooses the container, the Body and its total in the constructor.
 * A change must not be written somewhere other than the result says, nor a parameter that
 * would be refused (an ACL) be silently dropped: `done()` rejects, naming it, publishing nothing.
 */
import assert from 'node:assert/strict'
import { Readable } from 'node:stream'
import { describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { StreamSegmentError } from '../../lib/errors.js'
import { Upload, type UploadParams } from '../../lib/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'

const client = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })

/** An Upload of `params` into a memory store standing for s3://b/k, and that store. */
function upload(params: UploadParams): { upload: Upload; store: MemoryStore } {
  const u = new Upload({ client, params })
  const store = new MemoryStore()
  Object.defineProperty(u, 'store', { value: store })
  return { upload: u, store }
}

async function nothingPublished(store: MemoryStore): Promise<void> {
  await assert.rejects(SegmentFile.open(store, { readOnly: true }), (err) =>
    StreamSegmentError.is(err, 'ERR_NOT_FOUND'),
  )
}

describe('Upload: params changed after the constructor', () => {
  const changes: Array<[string, (p: UploadParams) => void, RegExp]> = [
    ['Key', (p) => (p.Key = 'other'), /params\.Key was changed after the constructor/],
    ['Bucket', (p) => (p.Bucket = 'other'), /params\.Bucket was changed after the constructor/],
    ['Body', (p) => (p.Body = 'a longer body'), /params\.Body was changed after the constructor/],
    ['ContentLength', (p) => (p.ContentLength = 3), /params\.ContentLength was changed after the constructor/],
    ['ACL (refused)', (p) => (p.ACL = 'public-read'), /params\.ACL: per-object access control/],
  ]
  for (const [name, change, message] of changes) {
    for (const where of ['upload.params', "the caller's params object"] as const) {
      it(`${name}, changed on ${where}: done() rejects naming it, nothing published`, async () => {
        const params: UploadParams = { Bucket: 'b', Key: 'k', Body: 'hello' }
        const { upload: u, store } = upload(params)
        const events: unknown[] = []
        u.on('httpUploadProgress', (p) => events.push(p))
        change(where === 'upload.params' ? u.params : params)
        await assert.rejects(
          u.done(),
          (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && message.test(err.message),
        )
        assert.deepEqual(events, [])
        await nothingPublished(store)
      })
    }
  }

  it("a getter's params are not read again by done() (one making a new stream each time would open one never read)", async () => {
    let made = 0
    const params = {
      Bucket: 'b',
      Key: 'k',
      get Body() {
        made++
        return Readable.from([Buffer.from('hello')])
      },
    }
    const { upload: u, store } = upload(params)
    const before = made
    const result = await u.done()
    assert.equal(made, before, 'done() called the getter')
    assert.equal(result.size, 5)
    const file = await SegmentFile.open(store, { readOnly: true })
    assert.equal(Buffer.from(await file.read(0, file.size)).toString(), 'hello')
    await file.close()
  })

  it('a change back to the same values, or to an ignored parameter, is no change: done() publishes', async () => {
    const params: UploadParams = { Bucket: 'b', Key: 'k', Body: 'hello' }
    const { upload: u, store } = upload(params)
    params.Key = 'k'
    u.params.ContentType = 'text/plain'
    const result = await u.done()
    assert.equal(result.Key, 'k')
    assert.equal(result.size, 5)
    const file = await SegmentFile.open(store, { readOnly: true })
    assert.equal(Buffer.from(await file.read(0, file.size)).toString(), 'hello')
    await file.close()
  })
})
