/**
 * `openStore(location)`: the store rooted at a container, from a URL or an S3 client.
 *   s3://bucket/prefix     S3 (credentials, region and endpoint the SDK's usual way,
 *                          AWS_ENDPOINT_URL_S3 included, which must be an http(s) URL;
 *                          path-style on a custom endpoint)
 *   file:///dir or a path  a local directory (the embedded default)
 *   mem://name             memory, shared by name within the process
 * Schemes are matched case-insensitively (`S3://bucket/x` is S3). Anything else that starts
 * like a URL (`word:`) is ERR_INVALID_ARGUMENT with the fix in the message, never a local
 * directory: `s3:/bucket/x`, `s3:bucket/x`, `file:/x`, `s3//bucket/x`, `gs://…`, `https://…`.
 * A local directory named so is written as a path: `./s3:x`. What a message suggests (a
 * corrected URL, that path) is quoted as a shell needs it (shellWord), so that it pastes
 * back as one argument: `'./s3:my dir'`. A query or a fragment
 * (`?`, `#`: %3F, %23 in a path or prefix), a prefix with an empty, `.` or `..` segment and a
 * path starting with `~` are refused too.
 */
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { S3Client } from '@aws-sdk/client-s3'
import { StreamSegmentError } from '../errors.js'
import { checkOptionNames } from '../settings.js'
import { shellWord } from '../util/shell-words.js'
import { describeValue } from '../util/typed-arrays.js'
import { isObjectStore, prefixFault, quoteKey } from './common.js'
import { DirectoryStore } from './directory.js'
import { MemoryStore } from './memory.js'
import { type AnyS3Client, createS3Client, S3Store } from './s3.js'
import { checkS3Env } from './s3-client.js'
import type { ObjectStore } from './types.js'

export type StoreLocation = string | URL | { client: AnyS3Client; bucket: string; prefix?: string; checksums?: boolean }

let defaultClient: S3Client | undefined

const KNOWN = ['s3', 'file', 'mem'] as const
const USE = 'use s3://bucket/prefix, file:///dir or mem://name; a local directory is a path or a file:// URL'

/** What a URL with a known scheme but a malformed `//` should have been. */
function corrected(scheme: string, rest: string): string {
  const tail = rest.replace(/^\/+/, '')
  return scheme === 'file' ? `file:///${tail}` : `${scheme}://${tail}`
}

/**
 * Why a URL's `rest` has a query or a fragment, which no store reads: taken into the path or
 * prefix (or dropped, as fileURLToPath does) it would name another container.
 */
function suffixFault(rest: string, what: string, part: string): string | undefined {
  const at = rest.search(/[?#]/)
  if (at < 0) return undefined
  const query = rest[at] === '?'
  return `${what} takes no ${query ? 'query' : 'fragment'} (${rest.slice(at)}): write a ${rest[at]} of the ${part} as ${query ? '%3F' : '%23'}`
}

function invalid(text: string, message: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(`openStore: ${text}: ${message}`)
}

/** Hints for schemes people try: the store is S3 behind an endpoint, or a path. */
function unsupported(text: string, scheme: string): StreamSegmentError {
  const hint =
    scheme === 'http' || scheme === 'https'
      ? '; for an S3-compatible server set AWS_ENDPOINT_URL_S3 to its address and use s3://bucket/prefix'
      : scheme === 'gs'
        ? '; for Google Cloud Storage use its S3-compatible API (AWS_ENDPOINT_URL_S3=https://storage.googleapis.com and HMAC keys) with s3://bucket/prefix'
        : ''
  return invalid(text, `unsupported scheme ${scheme}:// (${USE})${hint}`)
}

/**
 * The local path of a `file://` URL (`file:///dir`, %-escapes decoded); ERR_INVALID_ARGUMENT
 * naming `who` for a host (`file://dir/x` reads `dir` as one) or a malformed escape.
 */
export function fileUrlPath(text: string, who = 'openStore'): string {
  const rest = text.replace(/^file:\/\//i, '')
  const bad = (message: string) => StreamSegmentError.invalidArgument(`${who}: ${text}: ${message}`)
  // `file://` alone would be `/`: a path left out, not the root asked for.
  if (rest === '') throw bad('no path: give file:///dir (file:/// for the root)')
  const suffix = suffixFault(rest, 'a file URL', 'path')
  if (suffix !== undefined) throw bad(suffix)
  try {
    return fileURLToPath(`file://${rest}`)
  } catch (err) {
    throw rest.startsWith('/')
      ? bad((err as Error).message)
      : bad(
          `a file URL has an empty host: did you mean ${shellWord(corrected('file', rest))}, or the path ${shellWord(rest)}?`,
        )
  }
}

export function openStore(location: StoreLocation, ...extra: never[]): ObjectStore {
  // No second argument: `openStore('s3://b/p', { client })` would open the URL with the
  // default client, not the one given (give { client, bucket, prefix } instead).
  if (extra[0] !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `openStore: takes one argument, the location; got a second: ${describeValue(extra[0])} (for your own S3 client give { client, bucket, prefix })`,
    )
  }
  if (typeof location !== 'string' && !(typeof location === 'object' && location !== null)) {
    // A number or a boolean would read as a relative path: `5` is not the folder ./5 by intent.
    const shown = typeof location === 'number' ? String(location) : typeof location
    throw StreamSegmentError.invalidArgument(
      `openStore: ${shown}: give a URL or path (a string or a URL) or { client, bucket, prefix }`,
    )
  }
  if (typeof location === 'object' && !(location instanceof URL)) {
    // The options of this form are the documented four: a misspelt prefix would otherwise
    // make the bucket's root the container.
    checkOptionNames('openStore', location, ['client', 'bucket', 'prefix', 'checksums'])
    if (typeof location.bucket !== 'string' || location.bucket === '') {
      throw StreamSegmentError.invalidArgument('openStore: { client, bucket, prefix } needs a bucket name')
    }
    // Only undefined is no prefix: a null is refused, as S3Store refuses it.
    if (location.prefix !== undefined && typeof location.prefix !== 'string') {
      throw StreamSegmentError.invalidArgument(
        `openStore: prefix must be a string, got ${describeValue(location.prefix)}`,
      )
    }
    return new S3Store({ ...location, prefix: location.prefix ?? '' })
  }
  const text = String(location)
  if (text === '') throw StreamSegmentError.invalidArgument('openStore: empty location')
  const url = /^([a-zA-Z][a-zA-Z0-9+.-]*):(\/\/)?(.*)$/s.exec(text)
  if (url === null) {
    // A path. A known scheme missing its colon (`s3//bucket/x`) is a typo, not a directory.
    const typo = /^([a-zA-Z][a-zA-Z0-9+.-]*)\/\/(.*)$/s.exec(text)
    const scheme = typo?.[1]?.toLowerCase()
    if (scheme !== undefined && (KNOWN as readonly string[]).includes(scheme)) {
      throw invalid(
        text,
        `did you mean ${shellWord(corrected(scheme, typo?.[2] ?? ''))}? (a local directory by that name: ${shellWord(`./${text}`)})`,
      )
    }
    // No shell expands `~` here: the folder `./~` is rarely what was meant.
    if (/^~(\/|$)/.test(text)) {
      throw invalid(
        text,
        `~ is not expanded: give the home directory's path (${shellWord(join(homedir(), text.slice(1)))}), or ${shellWord(`./${text}`)} for a folder named ~`,
      )
    }
    return new DirectoryStore(resolve(text))
  }
  const scheme = (url[1] as string).toLowerCase()
  const rest = url[3] ?? ''
  if (url[2] === undefined) {
    // `word:` without `//`: a misspelt URL, or a relative path that would be read as one.
    if ((KNOWN as readonly string[]).includes(scheme)) {
      throw invalid(
        text,
        `did you mean ${shellWord(corrected(scheme, rest))}? (a local directory by that name: ${shellWord(`./${text}`)})`,
      )
    }
    throw invalid(
      text,
      `not a URL this reads (${USE}); for a local directory named so, write ${shellWord(`./${text}`)}`,
    )
  }
  // resolve: `file:///d/` is the store `/d` names, with its url (a WAL is bound to the url).
  if (scheme === 'file') return new DirectoryStore(resolve(fileUrlPath(text)))
  if (scheme === 'mem') return new MemoryStore(rest)
  if (scheme === 's3') {
    const suffix = suffixFault(rest, 'an s3 URL', 'prefix')
    if (suffix !== undefined) throw invalid(text, suffix)
    const m = /^([^/]*)\/?(.*)$/s.exec(rest)
    const bucket = m?.[1] ?? ''
    if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) {
      const fix =
        bucket === '' && rest.replace(/^\/+/, '') !== '' ? `: did you mean ${shellWord(corrected('s3', rest))}?` : ''
      throw invalid(text, `expected s3://bucket/prefix with a valid bucket name${fix}`)
    }
    let prefix: string
    try {
      prefix = decodeURIComponent(m?.[2] ?? '')
    } catch {
      throw invalid(text, 'the prefix has a malformed %-escape')
    }
    const fault = prefixFault(prefix.replace(/^\/+/, ''))
    if (fault !== undefined) throw invalid(text, `prefix ${quoteKey(prefix)}: ${fault}`)
    if (defaultClient === undefined) checkS3Env(`openStore: ${text}`)
    defaultClient ??= createS3Client()
    return new S3Store({ client: defaultClient, bucket, prefix })
  }
  throw unsupported(text, scheme)
}

/**
 * The store itself when given one, else the store at `where` (openStore); `who` names the
 * caller when `where` is neither.
 */
export function storeAt(where: StoreLocation | ObjectStore, who: string): ObjectStore {
  if (isObjectStore(where)) return where
  if (typeof where !== 'string' && (typeof where !== 'object' || where === null)) {
    throw StreamSegmentError.invalidArgument(
      `${who}: give a store, a URL or path (a string or a URL) or { client, bucket, prefix }, got ${describeValue(where)}`,
    )
  }
  return openStore(where)
}
