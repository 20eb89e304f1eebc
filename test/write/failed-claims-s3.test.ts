/** runFailedClaimTests (helpers/failed-claims.ts) on radosgw: S3Store releases the claims it made. */
import { runFailedClaimTests } from '../helpers/failed-claims.js'
import { s3TestStore } from '../helpers/s3-env.js'

runFailedClaimTests('s3 (radosgw)', () => s3TestStore())
