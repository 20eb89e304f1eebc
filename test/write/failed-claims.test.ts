/** runFailedClaimTests (helpers/failed-claims.ts) on the memory and directory stores. */
import { join } from 'node:path'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { runFailedClaimTests } from '../helpers/failed-claims.js'

runFailedClaimTests('memory', async () => new MemoryStore())
runFailedClaimTests('directory', async (dir) => new DirectoryStore(join(dir, 'store')))
