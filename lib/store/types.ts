/**
 * The object store a container lives in, rooted at the container: keys are relative to
 * it (`inode`, `0000000007.1`). Every backend (memory, directory, S3) passes the same
 * conformance suite (`test/store/conformance.ts`), which pins these rules:
 *
 * - A failed precondition (`ifNoneMatch: '*'` on an existing key, `ifMatch` on a changed
 *   or missing key) is `ERR_CONFLICT`; a condition no store could check alike (an `ifMatch`
 *   that is empty, `*` or no entity tag, an `ifNoneMatch` other than `'*'`, both at once) is
 *   `ERR_INVALID_ARGUMENT` before any write; a missing key is `ERR_NOT_FOUND`; a range starting
 *   at or past the end is `ERR_RANGE`; a fired signal is `ERR_ABORTED`; any other failure
 *   of the backend is `ERR_STORE` with the backend's error as `cause`.
 * - Ranges are `{ start, end }` with `end` exclusive (clamped to the object's size), or
 *   `{ suffix }`: the last `suffix` bytes (all of them when the object is shorter).
 * - Metadata keys are lower-case ASCII ([a-z0-9-]; S3 lower-cases others); values are
 *   printable ASCII with no space at either end (S3 trims them), others ERR_INVALID_ARGUMENT.
 * - A completed multipart object is the concatenation of its parts in part-number order;
 *   every non-final part must be the same size (S3-compatible stores reject others).
 * - Writes are atomic: a reader sees the whole new object or none of it.
 * - Every conditional write carries a write id, stored as metadata `hf-write`. A
 *   conditional write that fails its precondition while the stored object carries the
 *   same write id is the same write, landed before (an answer lost and the request
 *   resent): it succeeds with the stored ETag.
 * - `createMultipart(key, { ifNoneMatch: '*' })` claims the key atomically, so that two
 *   writers can never both complete the same create-only object: the claim is an empty
 *   placeholder object put create-only (S3 ignores conditions on
 *   CompleteMultipartUpload), which the completed upload then replaces. An abort with
 *   `releaseClaim` (a writer giving up its own upload) deletes the placeholder too, while
 *   the key still holds it (empty, with the claim's write id), never an object completed
 *   or put there since; a plain abort (gc's) leaves it, as the mark of a checkpoint number
 *   in use. S3Store knows the claims only of the uploads it created (the MAX_OPEN_UPLOADS
 *   last used): of any other it leaves the placeholder. An empty object is never a valid
 *   segment, so a placeholder left by an abandoned upload is garbage (gc removes it).
 * - `uploadPartCopy` makes a part of a multipart upload from bytes [start, end) of an
 *   object of a store of the same kind, server-side where the backend can (S3's
 *   UploadPartCopy): the range must lie within the source (ERR_RANGE otherwise), a
 *   missing source is ERR_NOT_FOUND, and a source whose ETag is not `ifMatch` is
 *   ERR_CONFLICT: a replaced object is never copied silently. Its answer gives, where
 *   the store knows it, the MD5 of the bytes copied (`md5`, hex, as `listParts` gives
 *   it: on S3 the part's ETag when it has an MD5's form). An upload created with
 *   `unevenParts` may mix parts of any sizes (each non-final one still at least
 *   `minPartBytes`), as copies of arbitrary ranges need; stores that demand equal parts
 *   (R2) refuse such an upload at completion.
 * - The claim placeholder carries the upload's `metadata` (beside its write id), so that
 *   what an upload is for can be read back (`head`) while it is still open: S3 gives an
 *   open upload's metadata to nobody.
 * - `listParts` lists the parts an open upload holds, in part-number order, each with its
 *   size, its ETag (what `completeMultipart` takes) and, where the store knows it, the
 *   MD5 of its bytes (`md5`, hex). S3 gives no digest of its own: there `md5` is the ETag
 *   when it has an MD5's form, which AWS (without SSE-KMS or SSE-C) and radosgw make the
 *   MD5 of the part; elsewhere (KMS) it is not, and a caller comparing it with the MD5 of
 *   bytes it holds finds no match: never a false one. An unknown upload is ERR_NOT_FOUND.
 *   With `md5: false` (ListPartsOptions) the caller wants no digest, only sizes and ETags
 *   (`ls` summing what open uploads hold): a store that reads a part's bytes for its MD5
 *   (the directory store) then reads none, and the parts may come without `md5`.
 */

/** The metadata key holding a conditional write's id. */
export const WRITE_ID_METADATA = 'hf-write'

export type ByteRange = { start: number; end: number } | { suffix: number }

/**
 * A request body: one buffer, or several sent back to back (a writer's slab views, so
 * that nothing is copied before the store needs it). The store must not keep references
 * to the caller's buffers once the call has returned.
 */
export type Body = Uint8Array | readonly Uint8Array[]

/**
 * Standard headers stored with an object and returned with it by S3 (HeadObject,
 * GetObject). The memory and directory stores accept and ignore them.
 */
export interface ObjectAttributes {
  contentType?: string
  cacheControl?: string
  contentDisposition?: string
  contentEncoding?: string
  contentLanguage?: string
}

export interface PutOptions {
  /** `'*'`: create only; fails with ERR_CONFLICT if the key exists. */
  ifNoneMatch?: '*'
  /** Replace only if the current ETag is this one; ERR_CONFLICT otherwise (or if missing). */
  ifMatch?: string
  metadata?: Record<string, string>
  attributes?: ObjectAttributes
  /** The id stored in `hf-write`; a fresh random one when absent. Only for conditional puts. */
  writeId?: string
  signal?: AbortSignal
}

export interface CreateMultipartOptions {
  /** `'*'`: claim the key create-only (see above); ERR_CONFLICT if it exists. */
  ifNoneMatch?: '*'
  metadata?: Record<string, string>
  attributes?: ObjectAttributes
  /** Parts may differ in size (see above): for uploads made of copied ranges. */
  unevenParts?: boolean
  /**
   * The size of every part but the last, which holds at most this many bytes: for a caller
   * that cuts its object into equal pieces (the uploader's `segmentMpuChunkSize`). A store
   * may lay the parts out by it: the directory store writes each part in place, at
   * (partNumber − 1) × partBytes of one file, which its completion then makes the object
   * without joining copies. A part larger is ERR_INVALID_ARGUMENT there; S3 and the memory
   * store keep the rule of equal non-final parts as for any upload. A positive integer of at
   * most 5 GiB; not with `unevenParts`.
   */
  partBytes?: number
  signal?: AbortSignal
}

export interface AbortMultipartOptions {
  /**
   * Delete the upload's claim placeholder too, while it is still the claim's (see above):
   * the writer of a failed upload, so that its attempt is not listed until gc.
   */
  releaseClaim?: boolean
  signal?: AbortSignal
}

/** Where `uploadPartCopy` takes a part's bytes from: bytes [start, end) of `key` in `store`. */
export interface CopySource {
  /** A store of the same kind as the one copying (`canCopyFrom` says which). */
  store: ObjectStore
  key: string
  range: { start: number; end: number }
  /** Copy only if the source's ETag is this one; ERR_CONFLICT otherwise. */
  ifMatch?: string
}

export interface GetOptions {
  range?: ByteRange
  signal?: AbortSignal
}

export interface RequestOptions {
  signal?: AbortSignal
}

/** `listParts`' options. */
export interface ListPartsOptions extends RequestOptions {
  /**
   * false: no `md5` is wanted, only each part's size and ETag; a store that reads a part's
   * bytes for its MD5 (the directory store) then reads none of them, and may leave `md5`
   * out. Default true. Stores that get the digest for free (S3's ETag) may give it anyway.
   */
  md5?: boolean
}

export interface ListOptions extends RequestOptions {
  /** Only keys after this one, in lexicographic order of UTF-8 bytes (S3's StartAfter): a long listing taken up partway. */
  startAfter?: string
}

export interface ObjectInfo {
  size: number
  etag: string
  metadata: Record<string, string>
}

export interface ListEntry {
  key: string
  size: number
  etag: string
  /** When the object was written (ms since the epoch; S3 gives whole seconds). */
  lastModifiedMs: number
}

export interface CompletedPart {
  partNumber: number
  etag: string
}

/** A part an open multipart upload holds (`listParts`). */
export interface UploadedPart {
  partNumber: number
  size: number
  etag: string
  /** The MD5 of the part's bytes (hex), when the store can say; see `listParts`. */
  md5?: string
}

export interface MultipartUpload {
  key: string
  uploadId: string
  /** When the upload was created (ms since the epoch; S3 gives whole seconds). */
  initiatedMs: number
}

export interface ObjectStore {
  /** A human-readable location for messages: `s3://bucket/prefix`, a path, `mem://name`. */
  readonly url: string
  /** Requests this store made again after a failure that may pass, if it retries (S3Store). */
  readonly retries?: number
  /** The smallest non-final multipart piece the store takes, if it has a minimum (S3: 5 MiB). */
  readonly minPartBytes?: number
  /**
   * Optional: the time now (ms since the epoch) on the clock the store dates objects and
   * uploads by (`lastModifiedMs`, `initiatedMs`), as far as the store can tell (S3: its
   * answers so far; a directory: a file it makes for the purpose). Absent: this machine's
   * clock. The cleaner's grace period, and a writer's roll-forward and resume, measure ages
   * by it: against this machine's clock, a clock hours ahead of the server's made a live
   * writer's objects look hours old.
   */
  now?(): number | Promise<number>
  put(key: string, body: Body, options?: PutOptions): Promise<{ etag: string }>
  get(key: string, options?: GetOptions): Promise<Uint8Array>
  /**
   * Optional: `get`'s answer as a list of buffers, in order, which the caller owns (the same
   * ranges and errors); the reader takes its data this way when a store has it.
   */
  getChunks?(key: string, options?: GetOptions): Promise<Uint8Array[]>
  head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined>
  /** Every key under `prefix` (relative to the container; after `startAfter`), in lexicographic order of their UTF-8 bytes (S3's). */
  list(prefix?: string, options?: ListOptions): AsyncIterable<ListEntry>
  /** Deletes keys; missing keys are not an error. */
  delete(keys: string | readonly string[], options?: RequestOptions): Promise<void>
  createMultipart(key: string, options?: CreateMultipartOptions): Promise<string>
  uploadPart(
    key: string,
    uploadId: string,
    partNumber: number,
    body: Body,
    options?: RequestOptions,
  ): Promise<{ etag: string }>
  completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options?: RequestOptions,
  ): Promise<{ etag: string }>
  /**
   * Aborting an upload that no longer exists is not an error; nor is naming an upload's id
   * with another key than its own, which aborts nothing (S3 answers NoSuchUpload).
   */
  abortMultipart(key: string, uploadId: string, options?: AbortMultipartOptions): Promise<void>
  listMultipart(prefix?: string, options?: RequestOptions): AsyncIterable<MultipartUpload>
  /**
   * The parts an open upload holds, in part-number order (see above; absent: cannot say).
   * `md5: false`: sizes and ETags only, no part's bytes read for its MD5 (ListPartsOptions).
   */
  listParts?(key: string, uploadId: string, options?: ListPartsOptions): Promise<UploadedPart[]>
  /** Whether `uploadPartCopy` can take its bytes from objects of `source` (absent: never). */
  canCopyFrom?(source: ObjectStore): boolean
  /** A part made of a range of another object, server-side where the backend can (see above). */
  uploadPartCopy?(
    key: string,
    uploadId: string,
    partNumber: number,
    source: CopySource,
    options?: RequestOptions,
  ): Promise<{ etag: string; md5?: string }>
}
