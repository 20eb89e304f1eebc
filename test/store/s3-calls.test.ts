/**
 * S3Store's retry policy and failure mapping (lib/store/s3-calls.ts) on failures made up
 * here, without a server: which answers become which code, which are tried again, and the
 * deadline and the caller's signal. The same policy against a real server, with faults
 * injected on the wire: s3-faults.test.ts.
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { describe, it } from 'node:test'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { S3Client } from '@aws-sdk/client-s3'
import { StreamSegmentError } from '../../lib/errors.js'
import { S3Store } from '../../lib/store/s3.js'
import { type Call, callS3, type RetryPolicy } from '../../lib/store/s3-calls.js'

const call: Call = { op: 'PutObject', where: 's3://bkt/prefix/key', bucket: 'bkt' }
const policy: RetryPolicy = { maxRetries: 3, retryBaseMs: 1, retryMaxMs: 2, deadlineMs: 0 }

/** An error as the SDK makes it: a name (S3's code), an HTTP status when there was an answer. */
function sdkError(name: string, status?: number, extra: Record<string, unknown> = {}): Error {
  const err = new Error(`${name} from the server`)
  err.name = name
  Object.assign(err, extra, status === undefined ? {} : { $metadata: { httpStatusCode: status } })
  return err
}

/** Runs a call whose tries fail with `errors` in turn, then succeed; its outcome and tries. */
async function run(errors: Error[], p: RetryPolicy = policy, signal?: AbortSignal) {
  let tries = 0
  let retries = 0
  try {
    const value = await callS3(
      p,
      call,
      signal,
      async () => {
        const err = errors[tries++]
        if (err !== undefined) throw err
        return 'stored'
      },
      () => {
        retries++
      },
    )
    return { value, tries, retries }
  } catch (err) {
    return { err: err as StreamSegmentError, tries, retries }
  }
}

describe('S3 calls: retries and failure mapping', () => {
  it('a failure that may pass is tried again, with every retry counted', async () => {
    for (const err of [
      sdkError('SlowDown', 503),
      sdkError('InternalError', 500),
      sdkError('TooManyRequests', 429),
      sdkError('RequestTimeout', 400),
      sdkError('BadDigest', 400),
      sdkError('XAmzContentSHA256Mismatch', 400),
      sdkError('TimeoutError'),
      Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
    ]) {
      const r = await run([err, err])
      assert.deepEqual([r.value, r.tries, r.retries], ['stored', 3, 2], err.name)
    }
  })

  it('a failure that cannot pass is not tried again, and its code says what it was', async () => {
    const cases: Array<[Error, string, RegExp]> = [
      [sdkError('NoSuchKey', 404), 'ERR_NOT_FOUND', /PutObject s3:\/\/bkt\/prefix\/key: HTTP 404 NoSuchKey: not found/],
      [sdkError('NoSuchBucket', 404), 'ERR_NOT_FOUND', /bucket bkt does not exist/],
      [sdkError('PreconditionFailed', 412), 'ERR_CONFLICT', /precondition failed/],
      [sdkError('AccessDenied', 403), 'ERR_AUTH', /refused the credentials or the permission.*bucket bkt/],
      [sdkError('SignatureDoesNotMatch', 400), 'ERR_AUTH', /check the access key and secret/],
      [sdkError('InvalidRange', 416), 'ERR_RANGE', /range not satisfiable/],
      [sdkError('EntityTooSmall', 400), 'ERR_STORE', /the store refused the request, not retried/],
      [
        sdkError('NotImplemented', 501),
        'ERR_STORE',
        /HTTP 501 NotImplemented: the store does not implement this request, not retried/,
      ],
      [
        sdkError('PermanentRedirect', 301, { Endpoint: 'bkt.s3.eu-west-1.amazonaws.com' }),
        'ERR_STORE',
        /redirected the request to bkt\.s3\.eu-west-1/,
      ],
      [sdkError('CredentialsProviderError'), 'ERR_AUTH', /no credentials found/],
      [
        Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }),
        'ERR_STORE',
        /TLS certificate was refused \(DEPTH_ZERO_SELF_SIGNED_CERT\), not retried: .*NODE_EXTRA_CA_CERTS=ca\.pem.*self-signed certificate/,
      ],
      [
        Object.assign(new Error("Hostname/IP does not match certificate's altnames"), {
          code: 'ERR_TLS_CERT_ALTNAME_INVALID',
        }),
        'ERR_STORE',
        /TLS certificate was refused \(ERR_TLS_CERT_ALTNAME_INVALID\), not retried/,
      ],
    ]
    for (const [err, code, re] of cases) {
      const r = await run([err, err])
      assert.equal(r.err?.code, code, `${err.name}: ${r.err?.message}`)
      assert.match(r.err?.message ?? '', re)
      assert.equal(r.err?.cause, err, `${err.name}: the SDK's error is the cause`)
      assert.deepEqual([r.tries, r.retries], [1, 0], `${err.name} is not tried again`)
    }
  })

  it('a connection reset or closed under a request is ERR_STORE, tried again; only a time limit run out is ERR_TIMEOUT', async () => {
    // As @smithy/node-http-handler rejects them: a reset or a broken pipe named TimeoutError.
    const lost = (code: string, message: string) => Object.assign(new Error(message), { code, name: 'TimeoutError' })
    for (const err of [lost('ECONNRESET', 'socket hang up'), lost('EPIPE', 'write EPIPE')]) {
      const r = await run([err, err, err, err])
      assert.equal(r.err?.code, 'ERR_STORE', `${err.code}: ${r.err?.message}`)
      assert.equal(r.err?.retryable, true)
      assert.match(
        r.err?.message ?? '',
        new RegExp(`^PutObject s3://bkt/prefix/key: the connection was closed before the answer came \\(${err.code}: `),
      )
      assert.doesNotMatch(r.err?.message ?? '', /timed out/)
      assert.equal(r.err?.cause, err)
      assert.deepEqual([r.tries, r.retries], [4, 3], `${err.code} is tried again`)
    }
    // The socket's idle timeout (no code) and a connect timeout stay ERR_TIMEOUT.
    const idle = Object.assign(new Error('Connection timed out after 2000 ms'), { name: 'TimeoutError' })
    const connect = Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' })
    for (const err of [idle, connect]) {
      const r = await run([err, err, err, err])
      assert.equal(r.err?.code, 'ERR_TIMEOUT', r.err?.message)
      assert.match(r.err?.message ?? '', /timed out/)
    }
  })

  it('a 409 ConditionalRequestConflict (a conflicting operation under way) is tried again; past the retries it is ERR_CONFLICT', async () => {
    const conflict = sdkError('ConditionalRequestConflict', 409)
    const r = await run([conflict, conflict])
    assert.deepEqual([r.value, r.tries, r.retries], ['stored', 3, 2])
    const kept = await run([conflict, conflict, conflict, conflict])
    assert.equal(kept.err?.code, 'ERR_CONFLICT', kept.err?.message)
    assert.match(kept.err?.message ?? '', /HTTP 409 ConditionalRequestConflict/)
    assert.deepEqual([kept.tries, kept.retries], [4, 3])
    // A 412 is the condition found false: not tried again.
    const failed = await run([sdkError('PreconditionFailed', 412)])
    assert.deepEqual([failed.err?.code, failed.tries], ['ERR_CONFLICT', 1])
  })

  it('a 409 OperationAborted (a conflicting operation in progress, "try again") is tried again; other 409s are not', async () => {
    const aborted = sdkError('OperationAborted', 409)
    const r = await run([aborted, aborted])
    assert.deepEqual([r.value, r.tries, r.retries], ['stored', 3, 2])
    const kept = await run([aborted, aborted, aborted, aborted])
    assert.equal(kept.err?.code, 'ERR_STORE', kept.err?.message)
    assert.match(kept.err?.message ?? '', /HTTP 409 OperationAborted/)
    assert.deepEqual([kept.tries, kept.retries], [4, 3])
    // A state that stays as it is until someone changes it: not tried again.
    for (const name of ['BucketAlreadyExists', 'BucketNotEmpty', 'InvalidBucketState', 'Conflict']) {
      const other = await run([sdkError(name, 409)])
      assert.deepEqual([other.err?.code, other.tries], ['ERR_STORE', 1], name)
      assert.match(other.err?.message ?? '', /the store refused the request, not retried/, name)
    }
  })

  it("a request refused for its time is made once more after the SDK set its clock by the server's; nothing else is", async () => {
    const corrected = (name: string, status: number) =>
      sdkError(name, undefined, { $metadata: { httpStatusCode: status, clockSkewCorrected: true } })
    const skewed = corrected('RequestTimeTooSkewed', 403)
    const once = await run([skewed])
    assert.deepEqual([once.value, once.tries, once.retries], ['stored', 2, 1])
    // A HEAD's 403 names no error.
    const head = await run([corrected('Unknown', 403)])
    assert.deepEqual([head.value, head.tries], ['stored', 2])
    // Refused again after the correction: the clock is not what is wrong, or not only.
    const twice = await run([skewed, skewed])
    assert.deepEqual([twice.err?.code, twice.tries], ['ERR_AUTH', 2])
    // The SDK marks every error of a server whose clock is off: a refused key or a missing one stays so.
    for (const [name, status, code] of [
      ['AccessDenied', 403, 'ERR_AUTH'],
      ['NoSuchKey', 404, 'ERR_NOT_FOUND'],
    ] as const) {
      const r = await run([corrected(name, status)])
      assert.deepEqual([r.err?.code, r.tries], [code, 1], name)
    }
    // Without the correction (disableClockSkewCorrection): ERR_AUTH naming the clock, not tried again.
    const off = await run([sdkError('RequestTimeTooSkewed', 403)])
    assert.deepEqual([off.err?.code, off.tries], ['ERR_AUTH', 1])
    assert.match(off.err?.message ?? '', /too far from its own clock: check this machine's clock$/)
  })

  it('tries stop after maxRetries, the last failure given', async () => {
    const errors = Array.from({ length: 10 }, (_, i) => sdkError('InternalError', 500 + 2 * (i % 2)))
    const r = await run(errors)
    assert.equal(r.err?.code, 'ERR_STORE')
    assert.match(r.err?.message ?? '', /HTTP 502 InternalError/)
    assert.deepEqual([r.tries, r.retries], [4, 3])
  })

  it('the deadline ends a call that keeps failing, as ERR_TIMEOUT with its tries; the caller signal as ERR_ABORTED', async () => {
    let tries = 0
    const t0 = performance.now()
    const late = await callS3(
      { maxRetries: 1_000, retryBaseMs: 5, retryMaxMs: 5, deadlineMs: 100 },
      call,
      undefined,
      async () => {
        tries++
        throw sdkError('SlowDown', 503)
      },
      () => {},
    ).catch((err: StreamSegmentError) => err)
    assert.ok(StreamSegmentError.is(late, 'ERR_TIMEOUT'), String(late))
    assert.match(late.message, new RegExp(`no answer within the deadline of 100 ms \\(${tries} tries\\)`))
    assert.ok(tries > 1 && performance.now() - t0 < 2_000, `${tries} tries`)

    const controller = new AbortController()
    controller.abort(new Error('user stop'))
    const r = await run([], policy, controller.signal)
    assert.equal(r.err?.code, 'ERR_ABORTED')
    assert.equal(r.tries, 0, 'an aborted call makes no request')
    assert.equal((r.err?.cause as Error | undefined)?.message, 'user stop')
  })

  it("a signal that outlives its calls (a file's own) holds nothing of them once they end", async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const long = new AbortController().signal
    const deadline = { ...policy, deadlineMs: 60_000 }
    const calls = async (n: number) => {
      for (let i = 0; i < n; i++)
        await callS3(
          deadline,
          call,
          long,
          async () => 'stored',
          () => {},
        )
    }
    await calls(1_000)
    gc()
    const before = process.memoryUsage().heapUsed
    await calls(200_000)
    gc()
    const grown = process.memoryUsage().heapUsed - before
    assert.equal(getEventListeners(long, 'abort').length, 0, 'no listener left on the signal')
    // AbortSignal.any([signal, deadline]) per call kept ~60 bytes per call here (Node 20): 12 MB.
    assert.ok(grown < 4 * 1024 * 1024, `the heap grew by ${(grown / 1024 / 1024).toFixed(1)} MiB over 200,000 calls`)
  })
})

describe('S3Store: a failed request with a body of several chunks, on a client with no logger', () => {
  it("prints nothing to the console (the SDK warns there that it does not retry a stream body's request)", async () => {
    // Every request fails before an answer, as one aborted or cut off does.
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: 'http://127.0.0.1:9',
      forcePathStyle: true,
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      requestHandler: {
        handle: async () => {
          throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })
        },
      },
    })
    const store = new S3Store({ client, bucket: 'bkt', prefix: 'p/', maxRetries: 0 })
    const warned: unknown[][] = []
    const warn = console.warn
    console.warn = (...args: unknown[]) => warned.push(args)
    try {
      // Two chunks go as a stream body (never joined into a copy).
      await assert.rejects(store.put('k', [Buffer.alloc(1000, 1), Buffer.alloc(1000, 2)]), (err) =>
        StreamSegmentError.is(err),
      )
      await assert.rejects(store.put('k', Buffer.alloc(1000, 1)), (err) => StreamSegmentError.is(err))
    } finally {
      console.warn = warn
    }
    assert.deepEqual(warned, [])
  })
})
