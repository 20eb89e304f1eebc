import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { runStoreConformance } from './conformance.js'

runStoreConformance('memory', async () => new MemoryStore())
runStoreConformance('directory', async () => new DirectoryStore(mkdtempSync(join(tmpdir(), 'ss-dir-'))))
