/**
 * `createS3Client`: an S3Client for S3Store, configured the SDK's usual way and tuned for
 * the store's calls (lib/store/s3.ts): keep-alive agents, a connect and an idle timeout,
 * no SDK retries or checksums, the SDK's messages under `debug`.
 */
import { Agent as HttpAgent } from 'node:http'
import { Agent as HttpsAgent } from 'node:https'
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3'
import createDebug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { checkOptionNames } from '../settings.js'
import { printableLog } from '../util/shell-words.js'
import { describeValue } from '../util/typed-arrays.js'
import { s3Sdk } from './s3-sdk.cjs'

const sdkLog = printableLog(createDebug('stream-segment:sdk'))
const sdkLogger = { trace: sdkLog, debug: sdkLog, info: sdkLog, warn: sdkLog, error: sdkLog }

export type CreateS3ClientOptions = S3ClientConfig & {
  /** Sockets per origin of the keep-alive agents, an integer ≥ 1 (default 64). */
  maxSockets?: number
  /** Time to connect before the attempt fails with a timeout (default 5000 ms; 0: none). */
  connectTimeoutMs?: number
  /** Time with no bytes moving on a request's socket before it fails with a timeout (default 30000 ms; 0: none). */
  idleTimeoutMs?: number
}

/**
 * The options of the SDK's S3ClientConfig (@aws-sdk/client-s3, the version package.json
 * pins), listed because a type has no keys at run time: the SDK takes any key and ignores
 * one it does not know, so a misspelt `endpiont` would silently leave the endpoint unset.
 */
// biome-ignore format: 67 names, packed
const SDK_OPTIONS = [
  'apiVersion', 'authSchemePreference', 'base64Decoder', 'base64Encoder', 'bodyLengthChecker', 'bucketEndpoint',
  'cacheMiddleware', 'checksumAlgorithms', 'clientContextParams', 'credentialDefaultProvider', 'credentials',
  'customUserAgent', 'defaultsMode', 'defaultUserAgentProvider', 'disableClockSkewCorrection', 'disableHostPrefix',
  'disableMultiregionAccessPoints', 'disableS3ExpressSessionAuth', 'endpoint', 'endpointProvider',
  'eventStreamSerdeProvider', 'expectContinueHeader', 'extensions', 'followRegionRedirects', 'forcePathStyle',
  'getAwsChunkedEncodingStream', 'httpAuthSchemeProvider', 'httpAuthSchemes', 'ignoreConfiguredEndpointUrls', 'logger',
  'maxAttempts', 'md5', 'profile', 'protocol', 'protocolSettings', 'region', 'requestChecksumCalculation',
  'requestHandler', 'requestStreamBufferSize', 'responseChecksumValidation', 'retryMode', 'retryStrategy', 'runtime',
  's3ExpressIdentityProvider', 'sdkStreamMixin', 'serviceConfiguredEndpoint', 'serviceId', 'sha1', 'sha256', 'signer',
  'signerConstructor', 'signingEscapePath', 'signingRegion', 'sigv4aSigningRegionSet', 'streamCollector',
  'streamHasher', 'systemClockOffset', 'tls', 'urlParser', 'useAccelerateEndpoint', 'useArnRegion',
  'useDualstackEndpoint', 'useFipsEndpoint', 'useGlobalEndpoint', 'userAgentAppId', 'utf8Decoder', 'utf8Encoder',
] as const satisfies readonly (keyof S3ClientConfig)[]

/** Compiles only while SDK_OPTIONS lists every option of S3ClientConfig: an SDK with a new one fails the build here. */
type EveryOption<Unlisted extends never> = Unlisted
export type SdkOptionsListed = EveryOption<Exclude<keyof S3ClientConfig, (typeof SDK_OPTIONS)[number]>>

/** createS3Client's own options, beside the SDK's. */
const OWN_OPTIONS = ['maxSockets', 'connectTimeoutMs', 'idleTimeoutMs'] as const satisfies readonly Exclude<
  keyof CreateS3ClientOptions,
  keyof S3ClientConfig
>[]

/** A region as the SDK takes one: a host name's label (it goes into AWS host names). */
const REGION = /^(?!-)[a-zA-Z0-9-]{1,63}(?<!-)$/

function regionFault(who: string, source: string, region: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(
    `${who}: ${source} ${JSON.stringify(region)}: not a region name (letters, digits and inner hyphens, e.g. us-east-1)`,
  )
}

/**
 * Checks the endpoint and the region a client made without them will take from the
 * environment: AWS_ENDPOINT_URL_S3 (else AWS_ENDPOINT_URL) an http:// or https:// URL,
 * AWS_REGION (else AWS_DEFAULT_REGION) a region name. Anything else would fail every
 * request, only once made and after the retries ("Invalid URL", "Region not accepted"),
 * not naming the variable; an empty AWS_REGION fails the SDK's constructor as a bare Error.
 */
export function checkS3Env(who: string, check: { endpoint?: boolean; region?: boolean } = {}): void {
  const env = process.env
  if (check.endpoint !== false) {
    const name = env.AWS_ENDPOINT_URL_S3 !== undefined ? 'AWS_ENDPOINT_URL_S3' : 'AWS_ENDPOINT_URL'
    const value = env[name]
    let protocol: string | undefined
    try {
      if (value !== undefined) protocol = new URL(value).protocol
    } catch {
      // Not a URL at all (`127.0.0.1:9000`, a bare host).
    }
    if (value !== undefined && protocol !== 'http:' && protocol !== 'https:') {
      throw StreamSegmentError.invalidArgument(
        `${who}: ${name} is ${JSON.stringify(value)}: not an http:// or https:// URL (e.g. http://127.0.0.1:9000)`,
      )
    }
  }
  if (check.region !== false) {
    const name = env.AWS_REGION !== undefined ? 'AWS_REGION' : 'AWS_DEFAULT_REGION'
    const value = env[name]
    if (value !== undefined && !REGION.test(value)) throw regionFault(who, `${name} is`, value)
  }
}

/**
 * An S3Client configured the SDK's usual way (credential chain, region,
 * `AWS_ENDPOINT_URL_S3`) and tuned for whole-buffer bodies: keep-alive agents, no
 * `Expect: 100-continue`, no SDK checksums, path-style addressing on a custom endpoint,
 * a connect and an idle timeout, no SDK retries (S3Store retries), and the SDK's log
 * messages under the `debug` namespace `stream-segment:sdk`.
 */
export function createS3Client(options: CreateS3ClientOptions = {}): S3Client {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw StreamSegmentError.invalidArgument(`createS3Client: options must be an object, got ${describeValue(options)}`)
  }
  // A name neither ours nor the SDK's would be ignored by the SDK without a word.
  checkOptionNames('createS3Client', options, [...OWN_OPTIONS, ...SDK_OPTIONS])
  const { maxSockets = 64, connectTimeoutMs = 5_000, idleTimeoutMs = 30_000, ...config } = options
  // Checked here: an agent takes -1 sockets as it is (every request it sends then waits for
  // ever), and the SDK's handler a timeout of NaN or -5 as none.
  const count = (name: string, v: number, min: number) => {
    if (!Number.isSafeInteger(v) || v < min) {
      throw StreamSegmentError.invalidArgument(
        `createS3Client: ${name} must be an integer ≥ ${min}, got ${describeValue(v)}`,
      )
    }
  }
  count('maxSockets', maxSockets, 1)
  count('connectTimeoutMs', connectTimeoutMs, 0)
  count('idleTimeoutMs', idleTimeoutMs, 0)
  checkS3Env('createS3Client', { endpoint: config.endpoint === undefined, region: config.region === undefined })
  if (typeof config.region === 'string' && !REGION.test(config.region)) {
    throw regionFault('createS3Client', 'region', config.region)
  }
  const endpoint = config.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL
  const region = config.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION
  const { S3Client } = s3Sdk()
  return new S3Client({
    requestHandler: {
      httpAgent: new HttpAgent({ keepAlive: true, maxSockets }),
      httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets }),
      connectionTimeout: connectTimeoutMs,
      // The socket's idle timeout (the handler's requestTimeout only warns by default).
      socketTimeout: idleTimeoutMs,
    },
    // S3Store retries by itself (one policy for every call, conditional writes included).
    maxAttempts: 1,
    expectContinueHeader: false,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // The SDK's own messages go to `debug`, not the console: among them a warning on every
    // failed request with a stream body, which S3Store sends again by itself.
    logger: sdkLogger,
    ...config,
    ...(endpoint !== undefined && { endpoint, forcePathStyle: config.forcePathStyle ?? true }),
    // A custom endpoint (radosgw, MinIO) needs some region to sign with.
    ...((region !== undefined || endpoint !== undefined) && { region: region ?? 'us-east-1' }),
  })
}

/**
 * What a `client` option takes: an S3Client of this package's @aws-sdk/client-s3, or of
 * another copy of it (an application with a version of its own, whose types are not this
 * one's): anything with a client's `send`, `config` and `middlewareStack` (ownS3Client).
 */
export type AnyS3Client =
  | S3Client
  | { send(...args: never[]): Promise<unknown>; config: object; middlewareStack: object }

/** The library's S3Client standing for each client of another copy of the SDK (one per client: one socket pool). */
const adapters = new WeakMap<object, S3Client>()

/**
 * `client` as an S3Client of the library's copy of @aws-sdk/client-s3: itself when it is
 * one; when it is an S3Client of another copy (an application with a version of its own,
 * under which npm nests the library's pinned one), one of the library's class that sends
 * each command through it, with its config: its credentials, region, endpoint, handler and
 * middleware. Undefined for anything else (no `send`, `config` and `middlewareStack`).
 */
export function ownS3Client(client: unknown): S3Client | undefined {
  const { S3Client: OwnS3Client } = s3Sdk()
  if (client instanceof OwnS3Client) return client
  const c = client as Partial<S3Client> | null
  const clientLike =
    typeof c === 'object' &&
    c !== null &&
    typeof c.send === 'function' &&
    typeof c.config === 'object' &&
    c.config !== null &&
    typeof c.middlewareStack === 'object' &&
    c.middlewareStack !== null
  if (!clientLike) return undefined
  const foreign = c as S3Client
  let adapter = adapters.get(foreign)
  if (adapter === undefined) {
    adapter = Object.create(OwnS3Client.prototype) as S3Client
    Object.defineProperties(adapter, {
      config: { get: () => foreign.config },
      middlewareStack: { get: () => foreign.middlewareStack },
      send: { value: (...args: Parameters<S3Client['send']>) => foreign.send(...args) },
      // The caller's client is theirs to destroy.
      destroy: { value: () => {} },
    })
    adapters.set(foreign, adapter)
  }
  return adapter
}
