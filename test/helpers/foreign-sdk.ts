/**
 * An S3Client of another copy of `@aws-sdk/client-s3` than the library's, as an application
 * with a version of its own gets one (npm nests the library's pinned version under it): the
 * SDK's module loaded once more, so that its classes are not the library's.
 */
import { createRequire } from 'node:module'
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3'

export function foreignS3Client(config: S3ClientConfig): S3Client {
  const require = createRequire(import.meta.url)
  const path = require.resolve('@aws-sdk/client-s3')
  const cached = require.cache[path]
  delete require.cache[path]
  try {
    const sdk = require('@aws-sdk/client-s3') as { S3Client: typeof S3Client }
    return new sdk.S3Client(config)
  } finally {
    if (cached !== undefined) require.cache[path] = cached
  }
}
