/** The store conformance suite, two writers, and 2 GiB end to end, on a real S3 server (radosgw). */
import { it } from 'node:test'
import type { S3Store } from '../../lib/store/s3.js'
import { runConflictTests } from '../helpers/conflict.js'
import { endToEnd } from '../helpers/e2e.js'
import { s3TestStore } from '../helpers/s3-env.js'
import { runStoreConformance } from './conformance.js'

runStoreConformance('s3 (radosgw)', () => s3TestStore(), {
  chunkedGet: true,
  // Each test store has a prefix of its own, which S3 counts in a key's 1024 bytes.
  keyBytes: (store) => 1024 - Buffer.byteLength((store as S3Store).prefix),
})
// radosgw's smallest multipart piece is 5 MiB.
runConflictTests('s3 (radosgw)', () => s3TestStore(), { segmentMpuChunkSize: 5 * 1024 * 1024 })

it('s3 (radosgw): a 2 GiB stream through pipeline reads back identical', async () => {
  await endToEnd(await s3TestStore(), Number(process.env.E2E_MIB ?? 2048))
})
