/**
 * The S3 server the tests use: radosgw on loopback, started by `test/rgw/rgw.sh` and
 * located by the usual variables (`AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID`,
 * `AWS_SECRET_ACCESS_KEY`; `.ci/run` sets them from `rgw.sh env`). Without them, or
 * when the server does not answer, every S3 test fails with RGW_HINT: never skips.
 *
 * One bucket per test process (`S3_TEST_BUCKET` to choose it), created on first use;
 * every store gets a fresh prefix. Before the process exits, whatever the stores of this
 * process left under their prefixes (objects, open uploads) is deleted, so that the
 * in-memory OSD gets its memory back; `S3_TEST_KEEP=1` keeps it for a post-mortem.
 */
import { randomBytes } from 'node:crypto'
import { CreateBucketCommand, HeadBucketCommand, type S3Client } from '@aws-sdk/client-s3'
import { createS3Client, S3Store, type S3StoreOptions } from '../../lib/store/s3.js'

export const RGW_HINT =
  "S3 tests need an S3 server: run them with 'npm test' (it starts radosgw), or set AWS_ENDPOINT_URL_S3 and the keys to a running one"

let client: S3Client | undefined
let bucketReady: Promise<string> | undefined
const created: S3Store[] = []

function requireEnv(): string {
  const missing = ['AWS_ENDPOINT_URL_S3', 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'].filter((v) => !process.env[v])
  if (missing.length > 0) throw new Error(`${RGW_HINT} (${missing.join(', ')} not set)`)
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 as string
  // These tests create buckets and delete what they write: only ever on this machine.
  if (!/^https?:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?\/?$/.test(endpoint)) {
    throw new Error(`${RGW_HINT} (AWS_ENDPOINT_URL_S3=${endpoint} is not a loopback address)`)
  }
  return endpoint
}

/** The shared test client (tuned, like the library's default). */
export function s3TestClient(): S3Client {
  requireEnv()
  client ??= createS3Client({ maxAttempts: 3 })
  return client
}

/** The test bucket's name, creating the bucket if missing. */
export function s3TestBucket(): Promise<string> {
  bucketReady ??= (async () => {
    const endpoint = requireEnv()
    const c = s3TestClient()
    const bucket = process.env.S3_TEST_BUCKET || `stream-segment-test-${Date.now().toString(36)}-${process.pid}`
    try {
      await c.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal: AbortSignal.timeout(10_000) })
      return bucket
    } catch (err) {
      if ((err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode !== 404) {
        throw new Error(`${RGW_HINT} (${endpoint} does not answer: ${(err as Error).message || (err as Error).name})`, {
          cause: err,
        })
      }
    }
    try {
      await c.send(new CreateBucketCommand({ Bucket: bucket }), { abortSignal: AbortSignal.timeout(10_000) })
    } catch (err) {
      if ((err as Error).name === 'BucketAlreadyOwnedByYou') return bucket
      // A server that answers but cannot create a bucket (e.g. a full OSD: radosgw then
      // holds the request) is named, not left as a bare abort.
      throw new Error(
        `${endpoint} answers but did not create bucket ${bucket}: ${(err as Error).message || (err as Error).name} ` +
          "(a radosgw whose OSD is full holds writes: 'ceph -s' says so)",
        { cause: err },
      )
    }
    return bucket
  })()
  // A failure is not cached: the next test reports it again with its own message.
  bucketReady.catch(() => {
    bucketReady = undefined
  })
  return bucketReady
}

/** A unique prefix for one test or suite. */
export function uniquePrefix(label = 't'): string {
  return `${label}-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}/`
}

/** An S3Store on the test radosgw, in a fresh prefix unless one is given. */
export async function s3TestStore(
  prefix?: string,
  options: Partial<Omit<S3StoreOptions, 'bucket' | 'prefix'>> = {},
): Promise<S3Store> {
  const bucket = await s3TestBucket()
  const store = new S3Store({ client: s3TestClient(), bucket, prefix: prefix ?? uniquePrefix(), ...options })
  created.push(store)
  return store
}

/** Deletes every object and open upload under the store's prefix. */
export async function clearS3Store(store: S3Store): Promise<void> {
  for await (const u of store.listMultipart('')) await store.abortMultipart(u.key, u.uploadId)
  const keys: string[] = []
  for await (const e of store.list('')) keys.push(e.key)
  if (keys.length > 0) await store.delete(keys)
}

let cleaned = false
process.once('beforeExit', () => {
  if (cleaned || process.env.S3_TEST_KEEP === '1' || created.length === 0) return
  cleaned = true
  const stores = created.splice(0)
  Promise.allSettled(stores.map(clearS3Store)).then((results) => {
    const failed = results.filter((r) => r.status === 'rejected').length
    if (failed > 0) console.error(`s3-env: cleaning ${failed} of ${stores.length} test prefixes failed`)
    client?.destroy()
  })
})
