/** The admin wing: list, inspect, verify and export a container's checkpoints, on container/ and format/ only. */

export {
  type ExportOptions,
  type ExportProgress,
  type ExportResult,
  type ExportTarget,
  exportObject,
  type S3ExportTarget,
  type StoreExportTarget,
} from './export.js'
export { type GcOptions, type GcProgress, type GcResult, gc } from './gc.js'
export { type InspectReport, inspectCheckpoint, type ObjectReport } from './inspect.js'
export {
  type AbandonedCheckpoint,
  type CheckpointEntry,
  type CheckpointList,
  listCheckpoints,
  type OpenUploads,
} from './list.js'
export type { Problem } from './map-walk.js'
export { type RemoveProgress, type RemoveResult, removeContainer } from './remove.js'
export { type VerifyReport, verifyCheckpoint } from './verify.js'
