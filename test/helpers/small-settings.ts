import type { Settings, TestHooks } from '../../lib/settings.js'

const KiB = 1024

/** Small nodes, limits and objects: deep trees, partials and many parts in a few hundred KiB. */
export const smallSettings: Partial<Settings> & TestHooks = {
  maxNodeEntries: 4,
  dataCacheDirtyMaxBytesThreshold: 48 * KiB,
  dataCacheDirtyMaxBlocksThreshold: 0,
  segmentMaxObjectBytes: 64 * KiB,
  segmentMpuChunkSize: 16 * KiB,
  segmentMpuMaxConcurrency: 3,
}
