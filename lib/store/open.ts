/**
 * `openStore(location)`: the store rooted at a container, from a URL or an S3 client.
 *   s3://bucket/prefix     S3 (credentials, region and endpoint the SDK's usual way,
 *                          AWS_ENDPOINT_URL_S3 included; path-style on a custom endpoint)
 *   file:///dir or a path  a local directory (the embedded default)
 *   mem://name             memory, shared by name within the process
 */
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { S3Client } from '@aws-sdk/client-s3'
import { StreamSegmentError } from '../errors.js'
import { DirectoryStore } from './directory.js'
import { MemoryStore } from './memory.js'
import { createS3Client, S3Store } from './s3.js'
import type { ObjectStore } from './types.js'

export type StoreLocation = string | URL | { client: S3Client; bucket: string; prefix?: string; checksums?: boolean }

let defaultClient: S3Client | undefined

export function openStore(location: StoreLocation): ObjectStore {
  if (typeof location === 'object' && !(location instanceof URL)) {
    if (typeof location.bucket !== 'string' || location.bucket === '') {
      throw StreamSegmentError.invalidArgument('openStore: { client, bucket, prefix } needs a bucket name')
    }
    return new S3Store({ ...location, prefix: location.prefix ?? '' })
  }
  const text = String(location)
  if (text === '') throw StreamSegmentError.invalidArgument('openStore: empty location')
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(text)?.[1]?.toLowerCase()
  if (scheme === undefined) return new DirectoryStore(resolve(text))
  if (scheme === 'file') return new DirectoryStore(fileURLToPath(text))
  if (scheme === 'mem') return new MemoryStore(text.slice('mem://'.length))
  if (scheme === 's3') {
    const m = /^s3:\/\/([^/]+)\/?(.*)$/i.exec(text)
    if (!m?.[1] || !/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(m[1])) {
      throw StreamSegmentError.invalidArgument(
        `openStore: ${text}: expected s3://bucket/prefix with a valid bucket name`,
      )
    }
    defaultClient ??= createS3Client()
    return new S3Store({ client: defaultClient, bucket: m[1], prefix: decodeURIComponent(m[2] ?? '') })
  }
  throw StreamSegmentError.invalidArgument(
    `openStore: ${text}: unsupported scheme ${scheme}:// (use s3://, file:// or mem://)`,
  )
}

/** The store itself when given one, else the store at `where` (openStore). */
export function storeAt(where: StoreLocation | ObjectStore): ObjectStore {
  return typeof where === 'object' && 'list' in where && 'put' in where ? where : openStore(where)
}
