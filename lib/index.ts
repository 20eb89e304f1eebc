/**
 * stream-segment: write large byte streams to object storage while they are produced,
 * as self-describing StreamSegment checkpoints, and read them back.
 */
export type { FlushTiming } from './checkpoint.js'
export { crc32, crc32Implementation } from './crc32.js'
export type { BlockSource } from './dirty-tier.js'
export { ERROR_CODES, type ErrorCode, StreamSegmentError } from './errors.js'
export {
  createStreamSegmentReadStream,
  type ReadStreamOptions,
  StreamSegmentReadStream,
} from './read-stream.js'
export type { ReadKind, ReadOptions, ReadTiming } from './reader.js'
export { type OpenOptions, SegmentFile } from './segment-file.js'
export { dirtyLimitBytes, resolveSettings, type Settings, SPEC_DEFAULTS, STREAMING_PROFILE } from './settings.js'
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
export { fileSource, uploadFile } from './upload-file.js'
export {
  createStreamSegmentWriteStream,
  StreamSegmentWriteStream,
  type WriteStreamOptions,
} from './write-stream.js'
