/**
 * A program written for @aws-sdk/lib-storage, unchanged but for its import line: it
 * uploads a stream with progress, then starts another and aborts it half-way.
 *
 *   node dist/esm/examples/lib-storage-upload.js <bucket> <key> [MiB]
 *
 * S3 settings come the SDK's usual way (AWS_ENDPOINT_URL_S3, AWS_REGION, the keys). The
 * first upload writes a container at s3://bucket/key holding MiB (default 200) MiB; the
 * second aims at s3://bucket/key-aborted and publishes nothing. Prints one JSON line per
 * progress event, then the results.
 */
import { createHash, randomFillSync } from 'node:crypto'
import { Readable } from 'node:stream'
import { S3Client } from '@aws-sdk/client-s3'
// import { Upload } from '@aws-sdk/lib-storage'
import { Upload } from 'stream-segment'

const [Bucket = '', Key = '', mib = '200'] = process.argv.slice(2)
if (Bucket === '' || Key === '') {
  console.error('usage: lib-storage-upload <bucket> <key> [MiB]')
  process.exit(2)
}
const size = Number(mib) * 1024 * 1024

/** `bytes` random bytes in 1 MiB chunks, hashed as they go. */
function randomStream(bytes: number, hash: ReturnType<typeof createHash>): Readable {
  let left = bytes
  return new Readable({
    read() {
      if (left === 0) return void this.push(null)
      const chunk = randomFillSync(Buffer.allocUnsafe(Math.min(left, 1024 * 1024)))
      left -= chunk.length
      hash.update(chunk)
      this.push(chunk)
    },
  })
}

// A custom endpoint (MinIO, radosgw) wants path-style addressing.
const client = new S3Client({ forcePathStyle: process.env.AWS_ENDPOINT_URL_S3 !== undefined })

const hash = createHash('sha256')
const upload = new Upload({
  client,
  params: { Bucket, Key, Body: randomStream(size, hash), ContentType: 'application/octet-stream' },
  queueSize: 4,
  partSize: 16 * 1024 * 1024,
  leavePartsOnError: false,
})
upload.on('httpUploadProgress', (progress) => {
  console.log(JSON.stringify({ upload: 'first', ...progress }))
})
const result = await upload.done()
console.log(
  JSON.stringify({
    upload: 'first',
    done: {
      Bucket: result.Bucket,
      Key: result.Key,
      ETag: result.ETag,
      Location: result.Location,
      status: result.$metadata.httpStatusCode,
    },
    sha256: hash.digest('hex'),
  }),
)

const second = new Upload({
  client,
  params: { Bucket, Key: `${Key}-aborted`, Body: randomStream(size, createHash('sha256')) },
})
second.on('httpUploadProgress', (progress) => {
  console.log(JSON.stringify({ upload: 'second', ...progress }))
  if ((progress.loaded ?? 0) >= size / 2) second.abort()
})
try {
  await second.done()
  console.log(JSON.stringify({ upload: 'second', error: 'not aborted' }))
  process.exitCode = 1
} catch (err) {
  console.log(JSON.stringify({ upload: 'second', error: (err as Error).name, message: (err as Error).message }))
}
client.destroy()
