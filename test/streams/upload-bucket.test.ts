/**
 * `Upload`'s params.Bucket with a "/": the SDK refuses it before any request ("Bucket name
 * shouldn't contain '/'", which lib-storage's done() rejects with), unless it is an ARN (an
 * access point's has a "/"). Refused in the constructor as bad input in the same words, not
 * found by done() as a retryable store error after the store's retries.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { Upload as LibStorageUpload } from '@aws-sdk/lib-storage'
import { StreamSegmentError } from '../../lib/errors.js'
import { Upload } from '../../lib/index.js'

// Nothing listens there: a request that were sent would fail to connect, not be refused.
const client = new S3Client({
  region: 'us-east-1',
  endpoint: 'http://127.0.0.1:9',
  maxAttempts: 1,
  credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
})
const SDK_WORDS = /Bucket name shouldn't contain '\/', received 'a\/b'/

describe("Upload: a Bucket with a '/'", () => {
  it("lib-storage's done() rejects it in the SDK's words, no request sent", async () => {
    const theirs = new LibStorageUpload({ client, params: { Bucket: 'a/b', Key: 'k', Body: 'hello' } })
    await assert.rejects(theirs.done(), (err: Error) => err.name === 'InvalidBucketName' && SDK_WORDS.test(err.message))
  })

  it("is refused in the constructor, naming params.Bucket, in the SDK's words", () => {
    assert.throws(
      () => new Upload({ client, params: { Bucket: 'a/b', Key: 'k', Body: 'hello' } }),
      (err) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
        err.message.startsWith('Upload: params.Bucket ') &&
        SDK_WORDS.test(err.message),
    )
  })

  it("an access point's ARN, whose '/' the SDK takes, is not refused", () => {
    const Bucket = 'arn:aws:s3:us-east-1:123456789012:accesspoint/my-access-point'
    assert.ok(new Upload({ client, params: { Bucket, Key: 'k', Body: 'hello' } }))
  })
})
