/**
 * stream-segment: write large byte streams to object storage while they are produced,
 * as self-describing StreamSegment checkpoints, and read them back.
 */

export { ERROR_CODES, type ErrorCode, StreamSegmentError } from './errors.js'
export type { ReadKind, ReadOptions, ReadTiming } from './read/reader.js'
export { type OpenOptions, SegmentFile } from './segment-file.js'
export { dirtyLimitBytes, resolveSettings, type Settings, SPEC_DEFAULTS, STREAMING_PROFILE } from './settings.js'
export type { BlockSource } from './state/dirty-tier.js'
export { DirectoryStore } from './store/directory.js'
export { MemoryStore } from './store/memory.js'
export { openStore, type StoreLocation } from './store/open.js'
export { createS3Client, S3Store, type S3StoreOptions } from './store/s3.js'
export type {
  ByteRange,
  CompletedPart,
  CreateMultipartOptions,
  GetOptions,
  ListEntry,
  MultipartUpload,
  ObjectInfo,
  ObjectStore,
  PutOptions,
  RequestOptions,
} from './store/types.js'
export { WRITE_ID_METADATA } from './store/types.js'
export {
  createStreamSegmentReadStream,
  type ReadStreamOptions,
  StreamSegmentReadStream,
} from './streams/read-stream.js'
export {
  createStreamSegmentWriteStream,
  StreamSegmentWriteStream,
  type WriteStreamOptions,
} from './streams/write-stream.js'
export { crc32, crc32Implementation } from './util/crc32.js'
export type { FlushTiming } from './write/flush.js'
export { fileSource, uploadFile } from './write/upload-file.js'
