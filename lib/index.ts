/**
 * stream-segment: write large byte streams to object storage while they are produced,
 * as self-describing StreamSegment checkpoints, and read them back.
 *
 * The library is laid out in wings, one job each, from the bottom up:
 *
 *   errors.ts, util/   the error class; one limiter, the CRC-32 choice, units
 *   format/            one owner file per on-storage layout; layout.ts: every size formula
 *   store/, settings.ts  the ObjectStore interface and its memory, directory and S3 stores;
 *                      every setting, resolved in one place
 *   container/         the only code that calls a store: the inode (read, publish by
 *                      compare-and-swap, roll forward), object headers (format detection),
 *                      summaries and node spans, the uploader (every PutObject and multipart
 *                      lifecycle), listing
 *   state/             the open file's state (FileState), block map and dirty tier
 *   wal/               the write-ahead log: its local files, replay order, lock and binding
 *   read/              the reader: plans a read, walks the block map, checks every block
 *   write/             the write paths, object plans, send-ahead, the flush in phases
 *   admin/             list, inspect, verify, gc, remove and export, on container/ and format/ only
 *   segment-file.ts    SegmentFile, the handle users hold
 *   streams/           the write and read streams, Upload, uploadFile and downloadFile, thin adapters over it
 *   cli.ts, cli/       the CLI: its entry (usage, the command table, exit) and one file per
 *                      command group, over args.ts (parsing) and output.ts (printing)
 *   index.ts           this file
 *
 * The dependency rule, checked by `npm run lint` (scripts/check-deps.mjs): a wing imports
 * only itself and the wings listed before it; admin/ never
 * imports read/, write/ or state/; nothing outside container/ and store/ calls an
 * ObjectStore method; no import cycles.
 */

export {
  type AbandonedCheckpoint,
  type CheckpointEntry,
  type CheckpointList,
  type ExportOptions,
  type ExportProgress,
  type ExportResult,
  type ExportTarget,
  exportObject,
  type GcOptions,
  type GcProgress,
  type GcResult,
  gc,
  type InspectReport,
  inspectCheckpoint,
  listCheckpoints,
  type ObjectReport,
  type OpenUploads,
  type Problem,
  type RemoveProgress,
  type RemoveResult,
  removeContainer,
  type S3ExportTarget,
  type StoreExportTarget,
  type VerifyReport,
  verifyCheckpoint,
} from './admin/index.js'
export { ERROR_CODES, type ErrorCode, StreamSegmentError } from './errors.js'
export type { ReadKind, ReadOptions, ReadTiming } from './read/reader.js'
export { type CreateOptions, type OpenOptions, SegmentFile } from './segment-file.js'
export {
  type ContainerFormat,
  type ContainerShape,
  dirtyLimitBytes,
  READ_DEFAULTS,
  resolveSettings,
  type Settings,
  SPEC_DEFAULTS,
  STREAMING_PROFILE,
  type WriteSettings,
} from './settings.js'
export type { BlockSource } from './state/dirty-tier.js'
export { DirectoryStore } from './store/directory.js'
export { MemoryStore } from './store/memory.js'
export { openStore, type StoreLocation } from './store/open.js'
export {
  type AnyS3Client,
  type CreateS3ClientOptions,
  createS3Client,
  S3Store,
  type S3StoreOptions,
} from './store/s3.js'
export type {
  AbortMultipartOptions,
  Body,
  ByteRange,
  CompletedPart,
  CopySource,
  CreateMultipartOptions,
  GetOptions,
  ListEntry,
  ListOptions,
  ListPartsOptions,
  MultipartUpload,
  ObjectAttributes,
  ObjectInfo,
  ObjectStore,
  PutOptions,
  RequestOptions,
  UploadedPart,
} from './store/types.js'
export { WRITE_ID_METADATA } from './store/types.js'
export { type DownloadFileOptions, type DownloadResult, downloadFile } from './streams/download-file.js'
export type { StreamLocation } from './streams/options.js'
export {
  createStreamSegmentReadStream,
  type ReadStreamOptions,
  StreamSegmentReadStream,
} from './streams/read-stream.js'
export {
  type BodyDataTypes,
  type Configuration,
  type LibStorageAbortController,
  type Options,
  PARAMS as UPLOAD_PARAMS,
  type Progress,
  type RawDataPart,
  type ServiceClients,
  Upload,
  type UploadOptions,
  type UploadParams,
  type UploadResult,
} from './streams/upload.js'
export { type FileVersion, fileSource, type UploadFileOptions, uploadFile } from './streams/upload-file.js'
export {
  createStreamSegmentWriteStream,
  StreamSegmentWriteStream,
  type WriteProgress,
  type WriteStreamEvents,
  type WriteStreamOptions,
} from './streams/write-stream.js'
export { checkedCrc32 as crc32, crc32Implementation } from './util/crc32.js'
export type { WalDropped, WalGeneration, WalReport, WalSync } from './wal/log.js'
export { inspectWal, type WalOptions, type WalReplay } from './wal/wal.js'
export type { FlushTiming } from './write/flush.js'
