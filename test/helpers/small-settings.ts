import { type Settings, TEST_HOOKS, type TestHooks, type WithHooks } from '../../lib/settings.js'

const KiB = 1024

/** Test hooks as the library takes them: under TEST_HOOKS, no option of the API. */
export function hooks(h: TestHooks): WithHooks {
  return { [TEST_HOOKS]: h }
}

/** Small nodes, limits and objects: deep trees, partials and many parts in a few hundred KiB. */
export const smallSettings: Partial<Settings> & WithHooks = {
  ...hooks({ maxNodeEntries: 4 }),
  dataCacheDirtyMaxBytesThreshold: 48 * KiB,
  dataCacheDirtyMaxBlocksThreshold: 0,
  segmentMaxObjectBytes: 64 * KiB,
  segmentMpuChunkSize: 16 * KiB,
  segmentMpuMaxConcurrency: 3,
}
