/**
 * How S3Store makes a call: its request made again after a failure that may pass, with
 * capped exponential backoff and full jitter, within the call's deadline; and what a
 * failure becomes: a StreamSegmentError whose code says what the caller can do about it.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import createDebug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { printableLog } from '../util/shell-words.js'
import { signalWithin } from '../util/signals.js'

const log = printableLog(createDebug('stream-segment:s3'))

/** A call's retries, their backoff and its deadline (see S3StoreOptions). */
export interface RetryPolicy {
  readonly maxRetries: number
  readonly retryBaseMs: number
  readonly retryMaxMs: number
  /** A call's whole time, its retries included (0: none). */
  readonly deadlineMs: number
}

/** A call as its messages name it: the operation, the object (`s3://bucket/key`) and the bucket. */
export interface Call {
  readonly op: string
  readonly where: string
  readonly bucket: string
}

/**
 * Runs one call of S3Store: its request, made again after a failure that may pass (`retryable`),
 * with capped exponential backoff and full jitter, within the call's deadline. Logs
 * each outcome and retry (with the request id), and maps failures to a
 * StreamSegmentError. `fn` gets the signal to give the request: the caller's, or the
 * deadline's, whichever fires first.
 */
export async function callS3<T>(
  policy: RetryPolicy,
  call: Call,
  signal: AbortSignal | undefined,
  fn: (signal: AbortSignal) => Promise<T>,
  onRetry: () => void,
): Promise<T> {
  const { op, where } = call
  if (signal?.aborted) throw StreamSegmentError.aborted(`${op} ${where} aborted`, signal.reason)
  // The caller's signal or the deadline, whichever fires first.
  const within = signalWithin(signal, policy.deadlineMs, () =>
    StreamSegmentError.timeout(`${op} ${where}: deadline of ${policy.deadlineMs} ms passed`),
  )
  try {
    return await tries(policy, call, signal, within.signal, fn, onRetry, within.timedOut)
  } finally {
    within.done()
  }
}

/** callS3's tries, each given `s` (the caller's signal or the deadline's). */
async function tries<T>(
  policy: RetryPolicy,
  call: Call,
  signal: AbortSignal | undefined,
  s: AbortSignal,
  fn: (signal: AbortSignal) => Promise<T>,
  onRetry: () => void,
  deadlinePassed: () => boolean,
): Promise<T> {
  const { op, where } = call
  const t0 = performance.now()
  let reclocked = false
  for (let attempt = 0; ; attempt++) {
    try {
      const out = await fn(s)
      if (log.enabled) {
        const status = (out as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode
        const bytes = out instanceof Uint8Array ? ` ${out.byteLength} B` : ''
        log('%s %s %s%s %d ms', op, where, status ?? 'ok', bytes, Math.round(performance.now() - t0))
      }
      return out
    } catch (err) {
      let mapped = mapError(call, err, signal)
      if (deadlinePassed() && !signal?.aborted) {
        mapped = StreamSegmentError.timeout(
          `${op} ${where}: no answer within the deadline of ${policy.deadlineMs} ms (${attempt + 1} tries)`,
          err,
        )
        log(
          '%s %s failed: %s after %d tries, %d ms',
          op,
          where,
          mapped.code,
          attempt + 1,
          Math.round(performance.now() - t0),
        )
        throw mapped
      }
      // Once per call: a request refused for its time, the SDK's clock now set by the server's.
      const reclock = !reclocked && clockCorrected(err)
      if (reclock) reclocked = true
      if ((!reclock && !retryable(mapped, err)) || attempt >= policy.maxRetries) {
        log('%s %s failed: %s %s, %d ms', op, where, mapped.code, mapped.message, Math.round(performance.now() - t0))
        throw mapped
      }
      const delay = Math.random() * Math.min(policy.retryMaxMs, policy.retryBaseMs * 2 ** attempt)
      onRetry()
      log(
        '%s %s: retry %d in %d ms after %s (request id %s)',
        op,
        where,
        attempt + 1,
        Math.round(delay),
        mapped.message,
        requestIdOf(err) ?? '-',
      )
      try {
        await sleep(delay, undefined, { signal: s })
      } catch {
        // The deadline or the caller's signal fired while waiting: the next try says which.
      }
    }
  }
}

export function mapError(call: Call, err: unknown, signal: AbortSignal | undefined): StreamSegmentError {
  if (StreamSegmentError.is(err)) return err
  const { op, where, bucket } = call
  if (signal?.aborted) return StreamSegmentError.aborted(`${op} ${where} aborted`, signal.reason ?? err)
  const status = statusOf(err)
  const name = nameOf(err)
  const what = `${op} ${where}: HTTP ${status ?? '-'} ${name}`
  const message = (err as SdkError | undefined)?.message
  if (name === 'AbortError') return StreamSegmentError.aborted(`${op} ${where} aborted`, err)
  // The client's configuration, found wanting before any request: trying again cannot help.
  if (name === 'CredentialsProviderError') {
    // With AWS_PROFILE set, the SDK's chain skips AWS_ACCESS_KEY_ID: "set it" would mislead.
    const profile = process.env.AWS_PROFILE
    const fix = profile
      ? `AWS_PROFILE is ${JSON.stringify(profile)}, and while it is set the SDK takes that profile's credentials (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, AWS_CONFIG_FILE or ~/.aws/config), not AWS_ACCESS_KEY_ID: is the profile there?`
      : 'set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the client credentials'
    return StreamSegmentError.auth(`${op} ${where}: no credentials found (${fix}): ${(err as Error).message}`, err)
  }
  if ((err as Error | undefined)?.message === 'Region is missing') {
    // The SDK's words kept: a caller may match them (lib-storage's Upload rejects with them).
    return StreamSegmentError.invalidArgument(
      `${op} ${where}: no region is configured (set AWS_REGION, or give the client a region): Region is missing`,
    )
  }
  if (TLS_REFUSALS.has(codeOf(err) ?? '')) {
    return StreamSegmentError.store(
      `${what}: the server's TLS certificate was refused (${codeOf(err)}), not retried: give the client the CA that signed it (an https agent's \`ca\`, or NODE_EXTRA_CA_CERTS=ca.pem for the process), or use the server's name${message ? `: ${message}` : ''}`,
      err,
    )
  }
  if (CONNECTION_LOST.has(codeOf(err) ?? '')) {
    // The SDK names these TimeoutError too (@smithy/node-http-handler), though nothing timed
    // out: the request may have landed, and ERR_TIMEOUT would say a time limit ran out.
    return StreamSegmentError.store(
      `${op} ${where}: the connection was closed before the answer came (${codeOf(err)}${message ? `: ${message}` : ''})`,
      err,
    )
  }
  if (name === 'TimeoutError' || codeOf(err) === 'ETIMEDOUT') {
    return StreamSegmentError.timeout(`${op} ${where}: timed out (${(err as Error).message})`, err)
  }
  if (status === 412 || name === 'PreconditionFailed') {
    return StreamSegmentError.conflict(`${what}: precondition failed`, err)
  }
  if (name === 'ConditionalRequestConflict') {
    // Not the condition found false (412): another operation on the key was under way, and
    // S3 asks for the request to be made again (see `retryable`). Past the retries, the key
    // is held by another writer as far as the caller can tell.
    return StreamSegmentError.conflict(`${what}: a conflicting operation on the key was under way`, err)
  }
  if (name === 'NoSuchBucket') return StreamSegmentError.notFound(`${what}: bucket ${bucket} does not exist`, err)
  if (name === 'RequestTimeTooSkewed') {
    // Seen only when the SDK could not set its clock by the server's (no Date, or
    // disableClockSkewCorrection): the keys are not the matter, this machine's clock is.
    return StreamSegmentError.auth(
      `${what}: the store refused the request's time as too far from its own clock: check this machine's clock`,
      err,
    )
  }
  if (status === 401 || status === 403 || AUTH_ERRORS.has(name)) {
    return StreamSegmentError.auth(
      `${what}: the store refused the credentials or the permission: check the access key and secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the profile), that they have not expired, and that they may use bucket ${bucket}`,
      err,
    )
  }
  if (status === 404 && BUCKET_LISTINGS.has(op)) {
    // S3 answers a bucket's listing 404 only as NoSuchBucket (above): another 404 there
    // comes from a server that is no S3 endpoint (a web server, a wrong path or port).
    return StreamSegmentError.store(
      `${what}: the endpoint answered 404 without S3's NoSuchBucket, not retried: is the endpoint (AWS_ENDPOINT_URL_S3, or the client's endpoint) an S3 server?`,
      err,
    )
  }
  if (status === 404 || name === 'NoSuchKey' || name === 'NotFound' || name === 'NoSuchUpload') {
    return StreamSegmentError.notFound(`${what}: not found`, err)
  }
  if (status === 416 || name === 'InvalidRange') return StreamSegmentError.range(`${what}: range not satisfiable`, err)
  if ((status !== undefined && status >= 300 && status < 400) || /Redirect/.test(name)) {
    // S3 redirects a request sent to another region's endpoint (301 PermanentRedirect,
    // 307 TemporaryRedirect); the SDK does not follow, and neither do we: not retried.
    const endpoint = (err as { Endpoint?: string } | undefined)?.Endpoint
    return StreamSegmentError.store(
      `${what}: the store redirected the request${endpoint ? ` to ${endpoint}` : ''} (wrong endpoint or region?)${message ? `: ${message}` : ''}`,
      err,
    )
  }
  if (status === 501 || status === 505) {
    // What the server does not implement (a conditional write, a header, the HTTP
    // version) it will not implement on the next try: not retried.
    return StreamSegmentError.store(
      `${what}: the store does not implement this request, not retried${message ? `: ${message}` : ''}`,
      err,
    )
  }
  if (status === 400 && name === 'Unknown' && op === 'HeadObject') {
    // A HEAD answer has no body, so no error code: say what a 400 there usually is.
    const region = (err as { $response?: { headers?: Record<string, string> } }).$response?.headers?.[
      'x-amz-bucket-region'
    ]
    const why = region
      ? `the bucket is in region ${region}: set AWS_REGION=${region}, or give the client that region`
      : "a HEAD answer names no error; an expired session token (AWS_SESSION_TOKEN) or a region other than the bucket's are the usual causes"
    return StreamSegmentError.store(`${what}: the store refused the request, not retried: ${why}`, err)
  }
  if (status !== undefined && status >= 400 && status < 500 && !retryable(StreamSegmentError.store(what), err)) {
    // A request the store refuses as it is (InvalidPart, EntityTooSmall, …): not retried.
    return StreamSegmentError.store(
      `${what}: the store refused the request, not retried${message ? `: ${message}` : ''}`,
      err,
    )
  }
  return StreamSegmentError.store(`${what}${message ? `: ${message}` : ''}`, err)
}

/** The requests that list a bucket: S3 has no 404 for them but NoSuchBucket. */
const BUCKET_LISTINGS: ReadonlySet<string> = new Set(['ListObjectsV2', 'ListMultipartUploads'])

/** Node's codes for a connection reset or closed under a request, before its answer. */
const CONNECTION_LOST = new Set(['ECONNRESET', 'EPIPE'])

/** Errors that say the credentials or the permission are wrong, whatever the status. */
export const AUTH_ERRORS: ReadonlySet<string> = new Set([
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'ExpiredToken',
  'InvalidToken',
  'TokenRefreshRequired',
  'AccessDenied',
  'CredentialsProviderError',
])

/**
 * Node's codes for a server certificate TLS verification refused (OpenSSL's X509_V_ERR_*,
 * and a name the certificate does not cover): the same on every try.
 */
const TLS_REFUSALS = new Set([
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_CHAIN_TOO_LONG',
  'CERT_REVOKED',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
])

/**
 * Whether a failed request may pass when made again: a timeout, a failure with no HTTP
 * answer (a reset or refused connection, a body cut short), throttling, a server error,
 * a body damaged on the way, a conditional request that met another operation on its key
 * (409 ConditionalRequestConflict: that operation may fail, as another writer's conditional
 * write whose own condition is false does, and the condition is checked again; one that
 * landed makes the next try a 412), or a 409 OperationAborted ("a conflicting conditional
 * operation is currently in progress against this resource. Try again.", AWS's words;
 * radosgw's answer to an object changed under its write). Never the other 409s (a bucket
 * that exists or is not empty, InvalidBucketState: they stay so), a precondition failed
 * (412), a missing key, a refused credential, a bad request, a request the server does not
 * implement (501, 505), a refused server certificate or an abort.
 */
function retryable(mapped: StreamSegmentError, err: unknown): boolean {
  if (mapped.code === 'ERR_TIMEOUT') return true
  if (mapped.code === 'ERR_CONFLICT') return nameOf(err) === 'ConditionalRequestConflict'
  if (mapped.code !== 'ERR_STORE' || TLS_REFUSALS.has(codeOf(err) ?? '')) return false
  const status = statusOf(err)
  const name = nameOf(err)
  return (
    status === undefined ||
    (status >= 500 && status !== 501 && status !== 505) ||
    status === 429 ||
    status === 408 ||
    name === 'BadDigest' ||
    name === 'XAmzContentSHA256Mismatch' ||
    name === 'SlowDown' ||
    name === 'RequestTimeout' ||
    name === 'OperationAborted'
  )
}

/**
 * Whether `err` refused the request's time (403 RequestTimeTooSkewed, or a HEAD's 403, which
 * names no error) and the SDK then set its clock by the server's Date: the request signed
 * again passes. (The SDK marks every error of a server whose clock is minutes off so, a
 * refused key or a missing one too: hence the status and name, and once per call.)
 */
function clockCorrected(err: unknown): boolean {
  const name = nameOf(err)
  return (
    (err as SdkError | undefined)?.$metadata?.clockSkewCorrected === true &&
    statusOf(err) === 403 &&
    (name === 'RequestTimeTooSkewed' || name === 'Unknown')
  )
}

function codeOf(err: unknown): string | undefined {
  return (err as { code?: string } | undefined)?.code
}

function requestIdOf(err: unknown): string | undefined {
  return (err as { $metadata?: { requestId?: string } } | undefined)?.$metadata?.requestId
}

type SdkError = {
  name?: string
  message?: string
  $metadata?: { httpStatusCode?: number; clockSkewCorrected?: boolean }
}

/** The HTTP status of an SDK error, when the request had an answer. */
export function statusOf(err: unknown): number | undefined {
  return (err as SdkError | undefined)?.$metadata?.httpStatusCode
}

/** An SDK error's name: S3's error code (NoSuchKey, SlowDown, …), or the kind of failure. */
export function nameOf(err: unknown): string {
  return (err as SdkError | undefined)?.name ?? 'Error'
}
