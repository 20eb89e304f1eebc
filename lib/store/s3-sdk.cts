// The SDK's S3 client module (`@aws-sdk/client-s3`), required when first used: an S3
// store made or a client created. A program that only uses the directory or memory store
// never loads it, and importing the library stays cheap (the SDK takes about 0.1 s of a
// process's start). This file is always CommonJS, so the `require` works from both
// builds; its literal name lets bundlers see the dependency. The package declares no
// `exports`, so this resolves to the module a caller's `import { S3Client } from
// '@aws-sdk/client-s3'` gets (its `main`): their clients are instances of its S3Client.
import type * as S3Sdk from '@aws-sdk/client-s3'

let loaded: typeof S3Sdk | undefined

export function s3Sdk(): typeof S3Sdk {
  loaded ??= require('@aws-sdk/client-s3') as typeof S3Sdk
  return loaded
}
