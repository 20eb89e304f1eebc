import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { runConflictTests } from '../helpers/conflict.js'

const root = mkdtempSync(join(tmpdir(), 'ss-conflict-dir-'))
after(() => rmSync(root, { recursive: true, force: true }))
let n = 0

// Small pieces so the racing flushes write multipart objects whose keys collide.
runConflictTests('memory', async () => new MemoryStore(), { segmentMpuChunkSize: 256 * 1024 })
runConflictTests('directory', async () => new DirectoryStore(join(root, `c${++n}`)), {
  segmentMpuChunkSize: 256 * 1024,
})
