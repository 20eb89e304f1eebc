/**
 * `Upload`'s done() failing on the network (no S3 answer: a connection refused). lib-storage's
 * done() rejects with the SDK's error, which carries `$metadata` ({ attempts, totalRetryDelay })
 * as every SDK error does, so a catch reading `err.$metadata.httpStatusCode` or
 * `err.$metadata.attempts` works; ours must not make that catch throw a TypeError.
 */
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { Upload as LibStorageUpload } from '@aws-sdk/lib-storage'
import { StreamSegmentError } from '../../lib/errors.js'
import { Upload } from '../../lib/index.js'

/** A port on 127.0.0.1 nothing listens on: a connection to it is refused. */
async function closedPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const { port } = server.address() as { port: number }
  await new Promise<void>((r) => server.close(() => r()))
  return port
}

describe('Upload: a network error, as lib-storage callers read it', () => {
  it("done() rejects with the SDK error's $metadata (attempts), as lib-storage's does; its code stays ERR_STORE", async () => {
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${await closedPort()}`,
      forcePathStyle: true,
      maxAttempts: 1,
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    })
    const params = () => ({ Bucket: 'b', Key: 'k', Body: 'hello' })
    const theirs = await new LibStorageUpload({ client, params: params() }).done().then(
      () => assert.fail('lib-storage resolved'),
      (err: { $metadata?: { attempts?: unknown } }) => err,
    )
    assert.equal(typeof theirs.$metadata?.attempts, 'number', "lib-storage's error has $metadata.attempts")
    await assert.rejects(new Upload({ client, params: params() }).done(), (err: Error) => {
      const { $metadata } = err as { $metadata?: { attempts?: unknown; httpStatusCode?: unknown } }
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
      assert.equal(typeof $metadata, 'object', `no $metadata on ${err.message}`)
      assert.equal(typeof $metadata?.attempts, 'number')
      assert.equal($metadata?.httpStatusCode, undefined)
      return true
    })
  })
})
