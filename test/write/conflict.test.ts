import { MemoryStore } from '../../lib/store/memory.js'
import { runConflictTests } from '../helpers/conflict.js'

// Small pieces so the racing flushes write multipart objects whose keys collide.
runConflictTests('memory', async () => new MemoryStore(), { segmentMpuChunkSize: 256 * 1024 })
