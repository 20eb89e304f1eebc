/**
 * `Upload`'s done() failing on the network (no S3 answer: a connection refused, reset, or
 * timed out). lib-storage's done() rejects with the SDK's error, whose `name` its callers
 * test (`'TimeoutError'`, which the SDK also gives a reset connection; a system error's
 * `'Error'`) and which carries `$metadata` ({ attempts, totalRetryDelay }), so a catch
 * reading `err.$metadata.httpStatusCode` works. Ours takes that name and `$metadata`; its
 * `code` stays the library's (ERR_STORE, ERR_TIMEOUT) and its `cause` is the SDK's error,
 * with the system's code (`'ECONNREFUSED'`).
 */
import assert from 'node:assert/strict'
import { createServer, type Server, type Socket } from 'node:net'
import { after, describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { Upload as LibStorageUpload } from '@aws-sdk/lib-storage'
import { type ErrorCode, StreamSegmentError } from '../../lib/errors.js'
import { Upload } from '../../lib/index.js'

/** A listener on 127.0.0.1 that does `onSocket` with each connection. */
async function listener(onSocket: (s: Socket) => void): Promise<{ server: Server; port: number }> {
  const server = createServer(onSocket)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { server, port: (server.address() as { port: number }).port }
}

/** A port on 127.0.0.1 nothing listens on: a connection to it is refused. */
async function closedPort(): Promise<number> {
  const { server, port } = await listener(() => {})
  await new Promise<void>((r) => server.close(() => r()))
  return port
}

const sockets = new Set<Socket>()
const servers: Server[] = []
after(() => {
  for (const s of sockets) s.destroy()
  for (const s of servers) s.close()
})

function clientOf(port: number): S3Client {
  return new S3Client({
    region: 'us-east-1',
    endpoint: `http://127.0.0.1:${port}`,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    // Throws at 300 ms of no answer (by default the SDK only warns).
    requestHandler: { requestTimeout: 300, throwOnRequestTimeout: true },
  })
}

type SdkError = Error & { code?: string; $metadata?: { attempts?: unknown; httpStatusCode?: unknown } }

async function rejection(upload: { done(): Promise<unknown> }): Promise<SdkError> {
  return (await upload.done().then(
    () => assert.fail('resolved'),
    (err: unknown) => err,
  )) as SdkError
}

const cases: Array<[string, () => Promise<number>, ErrorCode]> = [
  ['a connection refused', closedPort, 'ERR_STORE'],
  [
    'a connection reset',
    async () => {
      const { server, port } = await listener((s) => s.resetAndDestroy())
      servers.push(server)
      return port
    },
    'ERR_STORE',
  ],
  [
    'no answer (the client’s requestTimeout)',
    async () => {
      const { server, port } = await listener((s) => {
        sockets.add(s)
        s.resume()
      })
      servers.push(server)
      return port
    },
    'ERR_TIMEOUT',
  ],
]

describe('Upload: a network error, as lib-storage callers read it', () => {
  for (const [what, port, code] of cases) {
    it(`${what}: done() rejects with the SDK error's name and $metadata, as lib-storage's does; its code stays ${code}, its cause the SDK's error`, async () => {
      const client = clientOf(await port())
      const params = () => ({ Bucket: 'b', Key: 'k', Body: 'hello' })
      const theirs = await rejection(new LibStorageUpload({ client, params: params() }))
      assert.equal(typeof theirs.$metadata?.attempts, 'number', "lib-storage's error has $metadata.attempts")
      const ours = await rejection(new Upload({ client, params: params() }))
      assert.equal(StreamSegmentError.is(ours, code), true, String(ours))
      assert.equal(
        ours.name,
        theirs.name,
        `${ours.name}: ${ours.message}; lib-storage's: ${theirs.name}: ${theirs.message}`,
      )
      assert.equal(typeof ours.$metadata, 'object', `no $metadata on ${ours.message}`)
      assert.equal(typeof ours.$metadata?.attempts, 'number')
      assert.equal(ours.$metadata?.httpStatusCode, undefined)
      const cause = ours.cause as SdkError
      assert.equal(cause?.name, theirs.name)
      assert.equal(cause?.code, theirs.code)
    })
  }
})

describe('Upload: no credentials, as lib-storage callers read it', () => {
  it("done() rejects named as the SDK's credential chain names its error ('CredentialsProviderError'); code ERR_AUTH", async () => {
    /** As @smithy/property-provider's: a ProviderError says whether the chain may try its next link. */
    class CredentialsProviderError extends Error {
      override name = 'CredentialsProviderError'
      readonly tryNextLink = false
    }
    const noCredentials = new CredentialsProviderError('Could not load credentials from any providers')
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${await closedPort()}`,
      forcePathStyle: true,
      maxAttempts: 1,
      credentials: async () => {
        throw noCredentials
      },
    })
    const params = () => ({ Bucket: 'b', Key: 'k', Body: 'hello' })
    const theirs = await rejection(new LibStorageUpload({ client, params: params() }))
    assert.equal(theirs, noCredentials, 'lib-storage rejects with the chain’s error')
    const ours = await rejection(new Upload({ client, params: params() }))
    assert.equal(StreamSegmentError.is(ours, 'ERR_AUTH'), true, String(ours))
    assert.equal(ours.name, theirs.name, `${ours.name}: ${ours.message}`)
    assert.equal(ours.cause, noCredentials)
  })
})

describe('Upload: no region, as lib-storage callers read it', () => {
  it("done() rejects with ERR_INVALID_ARGUMENT whose message has the SDK's words, which lib-storage's rejection has", async () => {
    // As the SDK's region resolver fails when none is configured (no AWS_REGION, no profile's).
    const client = new S3Client({
      endpoint: `http://127.0.0.1:${await closedPort()}`,
      forcePathStyle: true,
      maxAttempts: 1,
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      region: async () => {
        throw new Error('Region is missing')
      },
    })
    const params = () => ({ Bucket: 'b', Key: 'k', Body: 'hello' })
    const theirs = await rejection(new LibStorageUpload({ client, params: params() }))
    assert.equal(theirs.message, 'Region is missing')
    const ours = await rejection(new Upload({ client, params: params() }))
    assert.equal(StreamSegmentError.is(ours, 'ERR_INVALID_ARGUMENT'), true, String(ours))
    assert.ok(ours.message.includes(theirs.message), ours.message)
    assert.match(ours.message, /set AWS_REGION/)
  })
})
