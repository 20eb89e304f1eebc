/** uploadFile's resume on a real S3 server (radosgw; test/helpers/resume.ts): parts checked by their ETag, the MD5. */
import { runResumeTests } from '../helpers/resume.js'
import { s3TestStore } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

// radosgw's smallest multipart piece is 5 MiB.
runResumeTests('s3 (radosgw)', () => s3TestStore(), { pieceSize: 5 * MiB, fileBytes: 60 * MiB })
