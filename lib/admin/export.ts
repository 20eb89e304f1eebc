/**
 * `export`: one checkpoint's bytes as an ordinary object (or local file), which plain
 * tools (`aws s3 cp`, GetObject) read: byte for byte the file, zeros for holes. The
 * extents and the part plan are ./export-plan.ts's; this file reads, checks and writes.
 *
 * What it guarantees and bounds:
 * - The checkpoint's extents come from one walk of its block map (map-walk.ts), in file
 *   order: runs of blocks stored back to back in one object, and holes. A map that does
 *   not walk cleanly fails the export (ERR_CORRUPT / ERR_NOT_FOUND): nothing is written.
 * - Before anything is written, every object the map points data into is checked by its
 *   header and summary: the checkpoint's format and block sizes, and every pointer naming
 *   a live slot that holds its block; every object it points nodes into by its header,
 *   every node pointer naming one of its meta blocks (a data block may decode as a node).
 *   A pointer that does not fails the export (ERR_CORRUPT), as a read would: the extents
 *   come from the pointers alone.
 * - Into a store that copies server-side from the container's (S3 into S3), every run of
 *   at least `minPartBytes` is copied by UploadPartCopy of its range, with the source's
 *   listed ETag as If-Match; what is left (short runs, holes, and what a short neighbour
 *   borrows to reach the minimum) is read and sent, merged into parts of at least
 *   `minPartBytes` (but the last) and at most `sendPartBytes`. A part never mixes a copy
 *   and bytes sent. Parts are in file order, at most 10,000 (sizes grow until they fit).
 * - Nothing half-written is ever visible: a multipart upload shows nothing until its
 *   completion, which replaces any object at the key at once; on any failure it is
 *   aborted; a part's failure names the part and what it holds (explain). A checkpoint
 *   smaller than one part goes in one PutObject. A local file is written to a temporary
 *   file beside it, synced and renamed into place.
 * - The caller's signal cuts every request but two, whose answers are waited for once
 *   sent (ANSWER_WAIT_MS): the one that makes the object (the completion, or the
 *   PutObject), so that an export reported interrupted did not write it after all; and
 *   CreateMultipartUpload, so that the upload it made is known, and aborted.
 * - A source object deleted or replaced meanwhile (gc) fails the export: ERR_NOT_FOUND or
 *   ERR_CONFLICT naming the object.
 * - Every byte the export reads (into a file, or into a part it sends) is checked against
 *   its block's CRC-32 from the summary, whole slots at a time (readChecked): a block that
 *   does not match fails the export (ERR_CORRUPT naming the object and block), as a read
 *   would, and nothing is published. The CRCs come from the summaries checkSources reads
 *   anyway, kept for the blocks exported only: 4 bytes a block, where the walk's pointers
 *   hold 8. Runs copied server-side (UploadPartCopy) are never read here and are not checked:
 *   `verify` checks them, and `copy: false` sends (and checks) every byte.
 * - Memory: sent parts in flight hold at most `concurrency` × `sendPartBytes` bytes, or
 *   one part when a part is larger (parts grow past `sendPartBytes` when 10,000 would not
 *   hold the checkpoint: above ~160 GB with the defaults); copies hold none.
 */
import { randomBytes } from 'node:crypto'
import * as fs from 'node:fs/promises'
import { basename, dirname, join, resolve, sep } from 'node:path'
import { checkCommitPoint } from '../container/inode.js'
import { type ContainerListing, listContainer } from '../container/listing.js'
import { readObjectHeader } from '../container/object-header.js'
import { readExact, readExactChunks } from '../container/objects.js'
import { Uploader } from '../container/uploader.js'
import { StreamSegmentError, throwIfAborted } from '../errors.js'
import { objectLayout } from '../format/header.js'
import type { Inode } from '../format/inode.js'
import { INODE_KEY, parseKey } from '../format/names.js'
import { dataSlotAt, nodeOffsetProblem } from '../format/object.js'
import { hex32 } from '../format/pointer.js'
import { decodeSummary } from '../format/summary.js'
import { checkCallOptions, checkOptionNames, givenOr } from '../settings.js'
import { checkKey } from '../store/common.js'
import { DirectoryStore } from '../store/directory.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import { type AnyS3Client, createS3Client, S3Store, s3ObjectStore } from '../store/s3.js'
import type { ObjectAttributes, ObjectStore } from '../store/types.js'
import { sliceChunks } from '../util/chunks.js'
import { badBlockIn } from '../util/crc32.js'
import { Limiter } from '../util/limiter.js'
import { localFileError, writeFully } from '../util/local-fs.js'
import { givePieces } from '../util/piece-pool.js'
import { signalAfter } from '../util/signals.js'
import { asError, describeValue } from '../util/typed-arrays.js'
import { MiB } from '../util/units.js'
import { checkpointExtents, type Extent, type PlannedPart, partSizes, planParts } from './export-plan.js'
import { resolveCheckpoint } from './list.js'
import { isUnreadable, type Problem, type Reached, walkMap } from './map-walk.js'

/** An S3 object, named as the SDK names it. */
export interface S3ExportTarget {
  /** Default: the container's own client when it is on S3, else `createS3Client()`. */
  client?: AnyS3Client
  Bucket: string
  Key: string
  ContentType?: string
  Metadata?: Record<string, string>
  CacheControl?: string
  ContentDisposition?: string
  ContentEncoding?: string
  ContentLanguage?: string
}

/** An object in any ObjectStore (memory, directory, S3Store), by key relative to it. */
export interface StoreExportTarget {
  store: ObjectStore
  key: string
  metadata?: Record<string, string>
  attributes?: ObjectAttributes
}

/** An S3 object, an object of a store, or a local file path. */
export type ExportTarget = S3ExportTarget | StoreExportTarget | string

export interface ExportProgress {
  totalBytes: number
  /** Bytes copied server-side and bytes sent, of parts that completed. */
  copiedBytes: number
  sentBytes: number
}

const EXPORT_OPTIONS = [
  'cno',
  'signal',
  'onProgress',
  'concurrency',
  'copy',
  'minPartBytes',
  'sendPartBytes',
  'copyPartBytes',
] as const

export interface ExportOptions {
  /** The checkpoint (default: the published one). */
  cno?: number
  signal?: AbortSignal
  /** Called as parts complete (and file chunks are written). */
  onProgress?: (progress: ExportProgress) => void
  /** Requests in flight (default 8). */
  concurrency?: number
  /** Copy server-side where the stores allow it (default true). */
  copy?: boolean
  /** The smallest part but the last (default and least: the destination's minimum, else 5 MiB). */
  minPartBytes?: number
  /** The largest part sent (default 16 MiB; at least 2 × minPartBytes). */
  sendPartBytes?: number
  /** The largest part copied (default 256 MiB; at least 2 × minPartBytes, at most 5 GiB). */
  copyPartBytes?: number
}

export interface ExportResult {
  url: string
  cno: number
  size: number
  /** `s3://bucket/key`, the store's URL and key, or the file's path. */
  location: string
  /** Of the object written (absent for a file). */
  etag?: string
  /** Bytes copied server-side, and bytes the client sent (or wrote to the file). */
  copiedBytes: number
  sentBytes: number
  /** Parts of the multipart upload (0: one PutObject, or a file). */
  parts: number
  copyParts: number
  /** Requests that wrote: PutObject, or CreateMultipartUpload, UploadPart, UploadPartCopy, Complete. */
  requests: number
  /** Requests the stores made again after a failure that may pass (S3: throttling, timeouts). */
  retries: number
}

/**
 * Exports checkpoint `cno` (default: the published one) of the container at `where` to
 * `target`; see the top of this file for what it guarantees. The target and the options
 * are checked before any request.
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function exportObject(
  where: StoreLocation | ObjectStore,
  target: ExportTarget,
  options: ExportOptions = {},
): Promise<ExportResult> {
  const store = storeAt(where, 'exportObject')
  checkCallOptions('exportObject', options, EXPORT_OPTIONS) // before its onProgress and signal are wrapped
  const caller = callerProgress(options)
  try {
    return await exportOf(store, target, caller.options)
  } catch (err) {
    const thrown = caller.failed() // what onProgress threw, however the export's own failure wraps it
    if (thrown !== undefined) throw thrown.value
    throw asError(err, () => `exportObject of ${store.url}`)
  } finally {
    caller.done()
  }
}

/**
 * What the caller's own callback threw, carried past the wrapping the export's own
 * failures get (a local file's: localFileError; one that is no Error: asError) to
 * exportObject, which throws it as it was thrown.
 */
class CallerThrew {
  constructor(readonly value: unknown) {}
}

/**
 * The caller's `onProgress` as the export calls it: what it throws, or an async one
 * rejects with (its promise let go, that would be an unhandled rejection: the process
 * would crash), ends the export, which rejects with it as it was thrown; the export's
 * requests are aborted then (through a signal of its own below the caller's), and it is
 * not called again. `failed()`: what it threw; `done()` lets go of the caller's signal.
 */
function callerProgress(options: ExportOptions): {
  options: ExportOptions
  failed: () => CallerThrew | undefined
  done: () => void
} {
  const given = options.onProgress
  if (given === undefined) return { options, failed: () => undefined, done: () => {} }
  const parent = options.signal
  const stop = new AbortController()
  const onAbort = () => stop.abort(parent?.reason)
  if (parent?.aborted === true) onAbort()
  else parent?.addEventListener('abort', onAbort, { once: true })
  let failed: CallerThrew | undefined
  const fail = (err: unknown) => {
    failed ??= new CallerThrew(err)
    stop.abort(StreamSegmentError.aborted('exportObject: ended by what its onProgress threw', err))
    return failed
  }
  const onProgress = (p: ExportProgress) => {
    if (failed !== undefined) return
    let answer: unknown
    try {
      answer = given(p)
    } catch (err) {
      throw fail(err)
    }
    if (typeof (answer as PromiseLike<unknown> | undefined)?.then === 'function') {
      ;(answer as PromiseLike<unknown>).then(undefined, fail)
    }
  }
  return {
    options: { ...options, signal: stop.signal, onProgress },
    failed: () => failed,
    done: () => parent?.removeEventListener('abort', onAbort),
  }
}

async function exportOf(store: ObjectStore, target: ExportTarget, options: ExportOptions): Promise<ExportResult> {
  const concurrency = givenOr(options.concurrency, 8)
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw StreamSegmentError.invalidArgument(`exportObject: concurrency must be 1..64, got ${concurrency}`)
  }
  if (options.copy !== undefined && typeof options.copy !== 'boolean') {
    throw StreamSegmentError.invalidArgument(
      `exportObject: copy must be true or false, got ${describeValue(options.copy)}`,
    )
  }
  throwIfAborted(options.signal, `exportObject of ${store.url}`)
  if (typeof target === 'string') {
    // A file has no parts, but a bad value is the caller's mistake whatever the target:
    // refused alike, so that a call does not pass with a file and fail with an object.
    partSizes(undefined, options)
    const file = await checkFileTarget(store, target)
    const { inode, source } = await extentsToExport(store, options.cno, options.signal)
    const written = await exportToFile(source, inode.size, file, options)
    return { url: store.url, cno: inode.cno, size: inode.size, ...written }
  }
  const dest = destination(store, target)
  const sizes = partSizes(dest.store.minPartBytes, options)
  const own = await keyInContainer(store, dest)
  if (own !== undefined && parseKey(own) !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `exportObject: ${dest.location} is the container's own ${own === INODE_KEY ? 'inode' : 'segment object'} key: writing it would corrupt the container`,
    )
  }
  const from = await extentsToExport(store, options.cno, options.signal)
  const written = await exportToStore(dest, from, { ...options, ...sizes, concurrency })
  const { inode } = from
  return { url: store.url, cno: inode.cno, size: inode.size, ...written }
}

/** What an export reads: the checkpoint's extents, and the CRC-32s its stored blocks are checked against. */
interface Source {
  store: ObjectStore
  cno: number
  blockSize: number
  extents: Extent[]
  /** The summary CRC-32 of each stored block, in file order (a stored extent's `crc` indexes its first). */
  crcs: Uint32Array
}

/**
 * The extents of checkpoint `cno` (default: the published one, only when the commit point
 * is its part 0's inode, as verify and gc check), from one walk of its block map, every
 * object the map points data into checked first (checkSources), which gives its blocks' CRCs.
 */
async function extentsToExport(
  store: ObjectStore,
  cno: number | undefined,
  signal: AbortSignal | undefined,
): Promise<{ listing: ContainerListing; inode: Inode; source: Source }> {
  const listing = await listContainer(store, signal)
  const { inode } = await resolveCheckpoint(store, listing, cno, signal)
  if (cno === undefined) await checkCommitPoint(store, { inode, etag: undefined }, signal)
  const problems: Problem[] = []
  const walk = await walkMap(store, inode, problems, signal)
  const first = problems[0]
  if (first !== undefined) {
    throw new StreamSegmentError(first.code, `export of checkpoint ${inode.cno}: ${first.message}`)
  }
  const crcOf = await checkSources(store, listing, inode, walk.reached, signal)
  const blockSize = 2 ** inode.dataShift
  const { extents, crcs } = checkpointExtents(walk.reached, inode.size, blockSize, crcOf)
  return { listing, inode, source: { store, cno: inode.cno, blockSize, extents, crcs } }
}

/**
 * Writes the checkpoint's extents to `dest`: one PutObject when it fits one part, else a
 * multipart upload of copied and sent parts in file order, aborted on any failure.
 */
async function exportToStore(
  dest: Destination,
  from: { listing: ContainerListing; inode: Inode; source: Source },
  options: ExportOptions & { concurrency: number; minPartBytes: number; sendPartBytes: number; copyPartBytes: number },
): Promise<Omit<ExportResult, 'url' | 'cno' | 'size'>> {
  const { listing, inode, source } = from
  const { store, extents } = source
  const { signal } = options
  const retries0 = (store.retries ?? 0) + (dest.store === store ? 0 : (dest.store.retries ?? 0))
  const retries = () => (store.retries ?? 0) + (dest.store === store ? 0 : (dest.store.retries ?? 0)) - retries0
  const uploader = new Uploader(dest.store, 0, options.concurrency)
  const copy = options.copy !== false && uploader.canCopyFrom(store)
  const { minPartBytes, sendPartBytes, copyPartBytes } = options
  const plan = planParts(extents, inode.size, { minPartBytes, sendPartBytes, copyPartBytes, copy })
  // Parts sent are held in memory until their request ends; once they have grown past
  // sendPartBytes, fewer go at once, so that their bytes stay within what the options allow.
  let largestSent = 0
  for (const p of plan) if (p.kind === 'send') largestSent = Math.max(largestSent, p.end - p.start)
  const sending = new Limiter(
    Math.max(1, Math.min(options.concurrency, Math.floor((options.concurrency * sendPartBytes) / largestSent))),
  )
  const location = dest.location
  uploader.onRequestDone = () =>
    options.onProgress?.({
      totalBytes: inode.size,
      copiedBytes: uploader.copiedBytes,
      sentBytes: uploader.uploadedBytes,
    })
  const put = plan.length === 0 || (plan.length === 1 && plan[0]?.kind === 'send')
  if (put) {
    const body = await gather(source, 0, inode.size, signal)
    throwIfAborted(signal, `export of checkpoint ${inode.cno} to ${location}`)
    const answer = signalAfter(signal, ANSWER_WAIT_MS)
    const { etag } = await uploader
      .putObject(dest.key, body, { metadata: dest.metadata, attributes: dest.attributes, signal: answer.signal })
      .catch((err) => {
        throw answer.signal.aborted ? unknownOutcome(inode.cno, location, 'PutObject', err) : err
      })
      .finally(() => answer.done())
    return {
      location,
      etag,
      copiedBytes: 0,
      sentBytes: inode.size,
      parts: 0,
      copyParts: 0,
      requests: 1,
      retries: retries(),
    }
  }
  // The creation's answer is waited for too: cut, the upload it made would be left open
  // unknown (an export's has no claim to find it by), where nothing aborts it.
  const answer = signalAfter(signal, ANSWER_WAIT_MS)
  const mpu = uploader.openMultipart(
    dest.key,
    signal,
    { metadata: dest.metadata, attributes: dest.attributes, unevenParts: true },
    answer.signal,
  )
  // Set once every part is in: a failure then is the completion's, not a source's (explain).
  let completing = false
  try {
    for (const p of plan) {
      if (mpu.failure !== undefined) break
      if (p.kind === 'copy') {
        const etag = listing.etags.get(p.key)
        if (etag === undefined) {
          throw StreamSegmentError.notFound(
            `${store.url}/${p.key}: no such object, but checkpoint ${inode.cno} points into it`,
          )
        }
        await mpu.startCopy({ store, key: p.key, range: { start: p.at, end: p.at + p.end - p.start }, ifMatch: etag })
      } else {
        await sending.acquire()
        let held = true
        const release = () => {
          if (held) sending.release()
          held = false
        }
        try {
          await mpu.startPart(async () => {
            if (mpu.failure !== undefined) throw mpu.failure
            return { chunks: await gather(source, p.start, p.end, signal), done: release }
          })
        } catch (err) {
          release()
          throw err
        }
      }
    }
    await mpu.settled()
    completing = mpu.failure === undefined
    const { etag } = await mpu.complete(answer.signal)
    return {
      location,
      etag,
      copiedBytes: uploader.copiedBytes,
      sentBytes: uploader.uploadedBytes,
      parts: plan.length,
      copyParts: plan.filter((p) => p.kind === 'copy').length,
      requests: uploader.requests + 1,
      retries: retries(),
    }
  } catch (err) {
    const left = await mpu.abort()
    let failure: unknown
    if (completing) failure = answer.signal.aborted ? unknownOutcome(inode.cno, location, 'completion', err) : err
    else {
      // Parts are numbered in the order they are started: part n is plan[n - 1].
      const n = mpu.failedPart
      const part = n === undefined ? undefined : { number: n, ...(plan[n - 1] as PlannedPart) }
      failure = explain(mpu.failure ?? err, source, part)
    }
    throw left === undefined ? failure : leftOpen(failure, location, left)
  } finally {
    answer.done()
  }
}

/**
 * How long an abort waits for the answer to the request that makes the object (the
 * PutObject, or the completion), once sent. Cut, the request could land all the same, after
 * the export reported it interrupted; waited for, the export reports what happened: the
 * object made, it succeeds. A store that has not answered by then is cut all the same.
 * CreateMultipartUpload's answer is waited for alike, so that the upload it made is aborted.
 */
const ANSWER_WAIT_MS = 10_000

/** The error of an export cut while its last request (`what`) was under way: whether it landed is not known. */
function unknownOutcome(cno: number, location: string, what: string, cause: unknown): StreamSegmentError {
  return StreamSegmentError.aborted(
    `export of checkpoint ${cno}: aborted while its ${what} was under way, which did not answer within ${ANSWER_WAIT_MS} ms: whether ${location} was written is unknown`,
    cause,
  )
}

/**
 * Every object the map points data or nodes into, by its header, and its summary (a few
 * bytes per block) when it holds data: of the checkpoint's format and block sizes, each
 * node pointer naming a meta block, each data pointer a live slot that holds that very
 * block. ERR_CORRUPT (ERR_NOT_FOUND for an object missing) for the first that is not,
 * before anything is written: the extents come from the pointers alone.
 * Returns, per object, the summary CRC-32 of each pointer's slot (in `dataAt`'s order):
 * those of the slots exported only, not whole summaries, whose dead and unreached slots
 * can outnumber the checkpoint's blocks.
 */
async function checkSources(
  store: ObjectStore,
  listing: ContainerListing,
  inode: Inode,
  reached: ReadonlyMap<string, Reached>,
  signal: AbortSignal | undefined,
): Promise<Map<string, Uint32Array>> {
  const crcOf = new Map<string, Uint32Array>()
  const limiter = new Limiter(8)
  const failures: StreamSegmentError[] = []
  const fail = (err: StreamSegmentError) =>
    new StreamSegmentError(err.code, `export of checkpoint ${inode.cno}: ${err.message}`, { cause: err })
  await Promise.all(
    [...reached].map(([key, r]) =>
      limiter.run(async () => {
        if ((r.dataAt.length === 0 && r.nodes.length === 0) || failures.length > 0) return
        const url = `${store.url}/${key}`
        try {
          const size = listing.sizes.get(key)
          if (size === undefined) {
            throw StreamSegmentError.notFound(
              `${url}: no such object, but the block map points ${r.nodes.length} nodes and ${r.dataAt.length} blocks into it`,
            )
          }
          const k = parseKey(key) as { cno: number; part: number }
          const { header } = await readObjectHeader(store, k.cno, k.part, { format: inode.format, size, signal })
          if (header.dataShift !== inode.dataShift || header.metaShift !== inode.metaShift) {
            throw StreamSegmentError.corrupt(
              `${url}: header says blocks of 2^${header.dataShift} and nodes of 2^${header.metaShift} bytes, the checkpoint 2^${inode.dataShift} and 2^${inode.metaShift}`,
            )
          }
          const layout = objectLayout(header, header)
          for (const offset of r.nodes) {
            const problem = nodeOffsetProblem(layout, offset)
            if (problem !== undefined) throw StreamSegmentError.corrupt(`${url}: ${problem}`)
          }
          if (r.dataAt.length === 0) return
          const summary = decodeSummary(await readExact(store, key, layout.summaryOffset, layout.summaryEnd, signal), {
            count: header.dataCount,
            summaryCrc: header.summaryCrc,
            where: url,
          })
          const crcs = new Uint32Array(r.dataAt.length)
          for (let i = 0; i < r.dataAt.length; i++) {
            const at = r.dataAt.get(i)
            const block = r.dataBlock.get(i)
            const slot = dataSlotAt(layout, at)
            let problem: string | undefined
            if (slot < 0) problem = `not one of its ${header.dataCount} data slots`
            else if (summary.blockIndex[slot] !== block)
              problem = `slot ${slot}, which holds block ${summary.blockIndex[slot]}`
            else if (summary.live[slot] !== 1)
              problem = `slot ${slot}, which is dead (block ${block} was written again)`
            if (problem !== undefined) {
              throw StreamSegmentError.corrupt(`${url}: the block map points block ${block} at byte ${at}, ${problem}`)
            }
            crcs[i] = summary.crc[slot] as number
          }
          crcOf.set(key, crcs)
        } catch (err) {
          if (isUnreadable(err)) failures.push(fail(err))
          else throw err
        }
      }),
    ),
  )
  const first = failures[0]
  if (first !== undefined) throw first
  return crcOf
}

/**
 * The target's key as the container's store names it, when the target lies in the
 * container's store: the same store, or (S3) the same bucket at a prefix that holds the
 * container's, the rest of the container's prefix in the key (`{ store: <the bucket's
 * root>, key: 'p/inode' }`). Undefined when it lies elsewhere.
 */
async function keyInContainer(source: ObjectStore, dest: Destination): Promise<string | undefined> {
  if (source instanceof S3Store && dest.store instanceof S3Store && source.bucket === dest.store.bucket) {
    const key = dest.store.prefix + dest.key
    return key.startsWith(source.prefix) ? key.slice(source.prefix.length) : undefined
  }
  return (await sameStore(source, dest.store)) ? dest.key : undefined
}

/** Whether `a` and `b` are one store: the same object, URL, or directory (real paths). */
async function sameStore(a: ObjectStore, b: ObjectStore): Promise<boolean> {
  if (a === b || a.url === b.url) return true
  if (!(a instanceof DirectoryStore && b instanceof DirectoryStore)) return false
  const [ra, rb] = await Promise.all([realPath(a.root), realPath(b.root)])
  return ra === rb
}

/** The real path of `path`, or of its nearest existing ancestor with the rest appended. */
async function realPath(path: string): Promise<string> {
  const abs = resolve(path)
  try {
    return await fs.realpath(abs)
  } catch {
    const up = dirname(abs)
    return up === abs ? abs : join(await realPath(up), basename(abs))
  }
}

/** A FIFO, a device or a socket where a file is to be written: it would be replaced, its reader given nothing. */
function notRegularFile(what: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(
    `${what}: not a regular file (a FIFO, a device or a socket), which the file written would replace: name a regular file`,
  )
}

/** Links followed to where a chain of them ends, as Linux follows them (its MAXSYMLINKS). */
const MAX_SYMLINK_HOPS = 40

/** Where a checkpoint written to a local file goes (checkFileTarget). */
export interface FileTarget {
  /** The file replaced: the path given, or the file a symbolic link there names (the link stays). */
  path: string
  /** The permission bits of the regular file there, which the new one keeps; none when there is none. */
  mode: number | undefined
}

/**
 * Checks, before anything is read or written, a local file a checkpoint is to be written
 * to (`what` names the call in messages): ERR_INVALID_ARGUMENT for no path, a directory,
 * something that is not a regular file (a FIFO, a device, a socket: the new file would
 * replace it, a reader on it would get nothing), or a path inside the folder of the
 * directory container read (it would land among the container's objects); what a stat of
 * it cannot get past (a path through a file, no permission) as localFileError says. A file
 * not there yet is fine. The file is written beside what it replaces and renamed over it:
 * a symbolic link is followed (its target is replaced, the link stays), and the new file
 * keeps the old one's permission bits.
 */
export async function checkFileTarget(
  store: ObjectStore,
  path: string,
  what = `export to ${path}`,
): Promise<FileTarget> {
  if (typeof path !== 'string' || path === '') {
    throw StreamSegmentError.invalidArgument(`${what}: the file path must be a non-empty string`)
  }
  const missing = (err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined
    throw localFileError(err, path, what)
  }
  let target = path
  const link = await fs.lstat(path).catch(missing)
  if (link?.isSymbolicLink()) {
    // A link to nothing yet names where the file goes; through a chain of links, the last
    // one's target (renamed over a link, the file would replace that link, not create it).
    target = await fs.realpath(path).catch(async (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw localFileError(err, path, what)
      // There, but with no path to write beside and rename over: /dev/stdout on a pipe
      // (/proc/self/fd/1 names `pipe:[N]`), a shell's `>(command)`, a file deleted while open.
      const there = await fs.stat(path).catch(missing)
      if (there?.isFile()) {
        throw StreamSegmentError.invalidArgument(`${what}: names a file that has no path (deleted while open)`)
      }
      if (there !== undefined) throw notRegularFile(what)
      let end = path
      for (let hops = 0; ; hops++) {
        const next = resolve(dirname(end), await fs.readlink(end))
        if (!(await fs.lstat(next).catch(missing))?.isSymbolicLink()) return next
        if (hops === MAX_SYMLINK_HOPS) {
          throw StreamSegmentError.invalidArgument(`${what}: cannot be written as a file (too many symbolic links)`)
        }
        end = next
      }
    })
  }
  const stat = await fs.stat(target).catch(missing)
  if (stat?.isDirectory()) throw StreamSegmentError.invalidArgument(`${what}: is a directory: name a file`)
  // Not there yet, a name with a slash after it is a folder's: the file would be written
  // beside it, whole, before its rename onto that name failed.
  if (stat === undefined && (target.endsWith('/') || target.endsWith(sep))) {
    throw StreamSegmentError.invalidArgument(`${what}: ends in a slash, so it names a directory: name a file`)
  }
  if (stat !== undefined && !stat.isFile()) throw notRegularFile(what)
  if (store instanceof DirectoryStore) {
    const [root, file] = await Promise.all([realPath(store.root), realPath(target)])
    if (file === root || file.startsWith(root.endsWith(sep) ? root : root + sep)) {
      throw StreamSegmentError.invalidArgument(
        `${what}: inside the container's folder ${store.root}: writing there would corrupt the container`,
      )
    }
  }
  return { path: target, mode: stat?.isFile() ? stat.mode & 0o7777 : undefined }
}

/**
 * The error an export to a store fails with, `err` as its cause and its code (so whether
 * it is retryable) kept. A part's failure says what the part holds: the store's message
 * names the target key and the part number only, not the source object and bytes copied,
 * nor the checkpoint's bytes sent. A gc that deleted or replaced a source meanwhile shows
 * as a missing or changed object: say so. The caller's abort is left as it is.
 */
function explain(err: unknown, source: Source, part?: PlannedPart & { number: number }): unknown {
  if (!StreamSegmentError.is(err) || err.code === 'ERR_ABORTED') return err
  const gone = err.code === 'ERR_NOT_FOUND' || err.code === 'ERR_CONFLICT'
  if (!gone && part === undefined) return err
  const prefix = `export of checkpoint ${source.cno}: `
  // A sent part's source read (readChecked) names the checkpoint already: once is enough.
  let message = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message
  if (part !== undefined) message = `part ${part.number} (${partContents(part, source)}): ${message}`
  if (gone) message += ' (deleted or replaced while exporting: was the checkpoint collected by gc?)'
  return new StreamSegmentError(err.code, prefix + message, { cause: err })
}

/**
 * `err`, the export's failure, saying that its upload could not be aborted: it holds the
 * parts uploaded (and is billed) until something aborts it, and the target is outside any
 * container, where gc does not look. The code (so retryable) is kept.
 */
function leftOpen(err: unknown, location: string, left: { uploadId: string; err: unknown }): unknown {
  if (!StreamSegmentError.is(err)) return err
  const why = left.err instanceof Error ? left.err.message : String(left.err)
  return new StreamSegmentError(
    err.code,
    `${err.message}; its multipart upload ${left.uploadId} of ${location} could not be aborted (${why}): it stays open, holding the parts uploaded, until it is aborted`,
    { cause: err },
  )
}

/** What a part of the upload holds: the checkpoint's bytes, and where a copy takes them from. */
function partContents(part: PlannedPart, source: Source): string {
  const bytes = `the checkpoint's bytes [${part.start}, ${part.end})`
  if (part.kind === 'send') return `${bytes}, sent`
  const at = `[${part.at}, ${part.at + part.end - part.start})`
  return `${bytes}, copied from ${source.store.url}/${part.key} bytes ${at}`
}

const TARGET_FIELDS = new Set([
  'client',
  'Bucket',
  'Key',
  'ContentType',
  'Metadata',
  'CacheControl',
  'ContentDisposition',
  'ContentEncoding',
  'ContentLanguage',
])

const STORE_TARGET_FIELDS = ['store', 'key', 'metadata', 'attributes']

/** What an export calls of a { store, key } target's store. */
const TARGET_STORE_METHODS = ['put', 'get', 'createMultipart', 'uploadPart', 'completeMultipart', 'abortMultipart']

/** Whether `x` is a store an export can write to: its URL, and the calls an export makes of it. */
function isTargetStore(x: unknown): x is ObjectStore {
  if (typeof x !== 'object' || x === null) return false
  const s = x as Record<string, unknown>
  return typeof s.url === 'string' && TARGET_STORE_METHODS.every((m) => typeof s[m] === 'function')
}

/** ERR_INVALID_ARGUMENT unless `value`, a target's `name` field, is absent or an object. */
function checkRecord(name: string, value: unknown): void {
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
    throw StreamSegmentError.invalidArgument(
      `exportObject: the target's ${name} must be an object, got ${describeValue(value)}`,
    )
  }
}

/** Where an export to a store writes. */
interface Destination {
  store: ObjectStore
  key: string
  location: string
  metadata?: Record<string, string>
  attributes?: ObjectAttributes
}

/**
 * A `{ Bucket, Key, … }` target's fields, checked before anything is read or written (by
 * exportObject, and by Upload's constructor for its `exportTo`): no field it does not know,
 * a Bucket, a Key S3 takes (checkKey: within 1024 bytes of UTF-8, no empty, `.` or `..`
 * segment) that names an object (no `/` at its end), Metadata of strings. A bad Key would
 * otherwise fail only at the write, after the whole checkpoint was read.
 */
export function checkS3ExportTarget(target: S3ExportTarget | Omit<S3ExportTarget, 'client'>): void {
  for (const k of Object.keys(target)) {
    if (!TARGET_FIELDS.has(k)) {
      throw StreamSegmentError.invalidArgument(
        `exportObject: target field ${k} is not supported (supported: ${[...TARGET_FIELDS].join(', ')})`,
      )
    }
  }
  const { Bucket, Key } = target as Partial<S3ExportTarget>
  if (typeof Bucket !== 'string' || Bucket === '' || typeof Key !== 'string' || Key === '' || Key.endsWith('/')) {
    throw StreamSegmentError.invalidArgument(
      `exportObject: the target needs a Bucket and a Key not ending in / (got Bucket ${describeValue(Bucket)}, Key ${describeValue(Key)})`,
    )
  }
  checkRecord('Metadata', target.Metadata)
  try {
    checkKey(Key.replace(/^\/+/, ''))
  } catch (err) {
    throw StreamSegmentError.invalidArgument(`exportObject: the target's Key: ${(err as Error).message}`)
  }
}

/** The store and key to write, from the target: checked, with its metadata and attributes. */
function destination(source: ObjectStore, target: S3ExportTarget | StoreExportTarget): Destination {
  if (typeof target !== 'object' || target === null) {
    throw StreamSegmentError.invalidArgument(
      'exportObject: the target must be { Bucket, Key }, { store, key } or a file path',
    )
  }
  if ('store' in target) {
    // Checked here, before the container is read: a store of the wrong kind would
    // otherwise fail only at the first write, after the whole checkpoint was read.
    checkOptionNames('exportObject: the { store, key } target', target, STORE_TARGET_FIELDS)
    const { store, key } = target as { store: unknown; key: unknown }
    if (!isTargetStore(store)) {
      throw StreamSegmentError.invalidArgument(
        `exportObject: the target's store must be an ObjectStore (DirectoryStore, S3Store, MemoryStore or one with a url and put, get, createMultipart, uploadPart, completeMultipart and abortMultipart), got ${describeValue(store)}: to name a store by URL, open it (openStore)`,
      )
    }
    if (typeof key !== 'string' || key === '') {
      throw StreamSegmentError.invalidArgument(
        `exportObject: the target's key must be a non-empty string, got ${describeValue(key)}`,
      )
    }
    checkRecord('metadata', target.metadata)
    checkRecord('attributes', target.attributes)
    return {
      store,
      key,
      location: `${store.url}/${key}`,
      metadata: lowerKeys(target.metadata),
      attributes: target.attributes,
    }
  }
  checkS3ExportTarget(target)
  const { Bucket, Key } = target
  const client = target.client ?? (source instanceof S3Store ? source.client : createS3Client())
  // The store holds this one object, not a container: its prefix needs room for the key only.
  const slash = Key.lastIndexOf('/')
  const key = Key.slice(slash + 1)
  const store = s3ObjectStore({ client, bucket: Bucket, prefix: slash < 0 ? '' : Key.slice(0, slash + 1) }, key)
  return {
    store,
    key,
    location: `s3://${Bucket}/${Key}`,
    metadata: lowerKeys(target.Metadata),
    attributes: {
      contentType: target.ContentType,
      cacheControl: target.CacheControl,
      contentDisposition: target.ContentDisposition,
      contentEncoding: target.ContentEncoding,
      contentLanguage: target.ContentLanguage,
    },
  }
}

/** S3 stores metadata keys in lower case (the SDK sends them as given): so do we. */
function lowerKeys(m: Record<string, string> | undefined): Record<string, string> | undefined {
  return m === undefined ? undefined : Object.fromEntries(Object.entries(m).map(([k, v]) => [k.toLowerCase(), v]))
}

/** Zeros every hole's bytes are views of: a hole costs no memory of its own. */
const ZEROS = new Uint8Array(MiB)

/**
 * Bytes [start, end) of the file, as chunks in order: every stored stretch read (4 GETs
 * at a time) and checked (readChecked), every hole views of ZEROS (an export of a huge
 * sparse file holds only what is stored).
 */
async function gather(
  source: Source,
  start: number,
  end: number,
  signal: AbortSignal | undefined,
): Promise<Uint8Array[]> {
  const { extents } = source
  const out: Uint8Array[] = []
  const zeros = (n: number) => {
    for (let left = n; left > 0; left -= ZEROS.byteLength) out.push(ZEROS.subarray(0, Math.min(left, ZEROS.byteLength)))
  }
  const limiter = new Limiter(4)
  const reads: Promise<void>[] = []
  let pos = start
  for (let i = firstExtent(extents, start); i < extents.length && pos < end; i++) {
    const x = extents[i] as Extent
    const s = Math.max(pos, x.start)
    const e = Math.min(end, x.end)
    if (s > pos) zeros(s - pos) // extents cover the file, so there is none; kept exact all the same
    if (e <= s) continue
    if (x.key === undefined) zeros(e - s)
    else {
      const slot = out.push(ZEROS.subarray(0, 0)) - 1
      reads.push(
        limiter.run(async () => {
          // One buffer: the part holds it until its request ends, no pooled pieces to give back.
          const { bytes } = await readChecked(source, x, s, e, (key, from, to) =>
            readExact(source.store, key, from, to, signal).then((b) => [b]),
          )
          out[slot] = bytes[0] as Uint8Array
        }),
      )
    }
    pos = e
  }
  if (pos < end) zeros(end - pos)
  const settled = await Promise.allSettled(reads)
  const failed = settled.find((r) => r.status === 'rejected')
  if (failed !== undefined) throw (failed as PromiseRejectedResult).reason
  return out
}

/**
 * Bytes [s, e) of the stored extent `x`, checked against their blocks' CRC-32s: `read`
 * gets whole slots (a range starting or ending inside a block is widened to it: a CRC
 * covers a whole slot), and `bytes` are views of [s, e) in `chunks`, the chunks as read.
 * A block whose bytes do not match is ERR_CORRUPT naming the object, the block and the
 * byte where its slot starts; the chunks are then given back (givePieces).
 */
async function readChecked(
  source: Source,
  x: Extent,
  s: number,
  e: number,
  read: (key: string, from: number, to: number) => Promise<Uint8Array[]>,
): Promise<{ chunks: Uint8Array[]; bytes: Uint8Array[] }> {
  const { blockSize: bs, crcs } = source
  const key = x.key as string
  const first = Math.floor((s - x.start) / bs) // blocks of the extent
  const count = Math.ceil((e - x.start) / bs) - first
  const from = x.at + first * bs
  const chunks = await read(key, from, from + count * bs)
  const crc = (x.crc as number) + first
  // As the reader checks a run (badBlockIn).
  const bad = await badBlockIn(chunks, crcs, crc, count, bs)
  if (bad !== undefined) {
    givePieces(chunks)
    const where = `export of checkpoint ${source.cno}: ${source.store.url}/${key}`
    const i = bad.index
    if (i < 0)
      throw StreamSegmentError.corrupt(`${where}: blocks at byte ${from}: the run's CRC-32 does not match its blocks'`)
    throw StreamSegmentError.corrupt(
      `${where}: block ${x.start / bs + first + i} at byte ${from + i * bs} has CRC-32 ${hex32(bad.crc)}, the summary says ${hex32(crcs[crc + i] as number)}`,
    )
  }
  return { chunks, bytes: sliceChunks(chunks, s - x.start - first * bs, e - x.start - first * bs) }
}

/** The index of the extent holding byte `pos` (extents cover the file in order). */
function firstExtent(extents: readonly Extent[], pos: number): number {
  let lo = 0
  let hi = extents.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if ((extents[mid] as Extent).end <= pos) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Bytes read and written per step when exporting to a file. */
const FILE_CHUNK = 16 * MiB

/**
 * A temporary file's name beside `path`, of a fixed length (a name built on the file's own
 * could pass the file system's 255 bytes when the file's does not).
 */
export function temporaryBeside(path: string, what: string): string {
  return join(dirname(path), `.ss-${what}-${process.pid}-${randomBytes(6).toString('hex')}.tmp`)
}

/**
 * The temporary file `tmp` could not be created: said so, and where. ENOENT from a folder
 * that is there (/proc, which takes no new file) is no missing file but a place where no
 * file can be made: ERR_INVALID_ARGUMENT; otherwise the code localFileError gives.
 */
export async function temporaryFileError(err: unknown, tmp: string, what: string): Promise<Error> {
  if (StreamSegmentError.is(err)) return err
  const message = `${what}: the temporary file ${tmp} cannot be created beside it (${(err as Error).message})`
  if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
    const folder = await fs.stat(dirname(tmp)).catch(() => undefined)
    if (folder?.isDirectory()) return StreamSegmentError.invalidArgument(message)
  }
  const { code } = localFileError(err, tmp) as StreamSegmentError
  return new StreamSegmentError(code, message, { cause: err })
}

/**
 * Writes the file to a temporary file beside the target (holes left sparse), made with no
 * more access than the file it replaces and given its permission bits once the bytes are
 * written (a write clears setuid and setgid), syncs it and renames it into place; on the
 * first failure no chunk not yet started is read, and the temporary file is removed.
 */
async function exportToFile(
  source: Source,
  size: number,
  target: FileTarget,
  options: ExportOptions,
): Promise<Omit<ExportResult, 'url' | 'cno' | 'size'>> {
  const { signal } = options
  const { path, mode } = target
  const tmp = temporaryBeside(path, 'export')
  // The holes are the file's zeros once it is sized (left sparse): written, as an object's
  // holes are sent, so that progress and sentBytes end at the size.
  let written = size
  for (const x of source.extents) if (x.key !== undefined) written -= x.end - x.start
  // What the caller's onProgress throws comes as a CallerThrew (callerProgress).
  const report = () => options.onProgress?.({ totalBytes: size, copiedBytes: 0, sentBytes: written })
  // Made with no more than the replaced file's access bits (the umask may take more): one
  // others may not read must not be readable meanwhile, though its mode is set at the end.
  const fh = await fs.open(tmp, 'wx', mode === undefined ? 0o666 : mode & 0o777).catch(async (err) => {
    throw await temporaryFileError(err, tmp, `export to ${path}`)
  })
  try {
    await fh.truncate(size)
    if (written > 0 || size === 0) report()
    const limiter = new Limiter(4)
    const steps: Promise<void>[] = []
    let failed: { err: unknown } | undefined
    for (const x of source.extents) {
      if (x.key === undefined) continue
      for (let s = x.start; s < x.end; s += FILE_CHUNK) {
        const e = Math.min(s + FILE_CHUNK, x.end)
        steps.push(
          limiter.run(async () => {
            // The file is lost with the first failure: the chunks after it are not read.
            if (failed !== undefined) return
            try {
              // As the store's GET gives them (64 KiB buffers on S3 and the directory store).
              const { chunks, bytes } = await readChecked(source, x, s, e, (key, from, to) =>
                readExactChunks(source.store, key, from, to, signal),
              )
              await writeFully(fh, bytes, s)
              givePieces(chunks) // written: the store's pieces can be read into again
              written += e - s
              // Once a chunk failed (or the caller threw), the chunks still under way finish
              // unreported: a caller that threw to stop is not called again, a display not
              // moved on past an export that has failed.
              if (failed === undefined) report()
            } catch (err) {
              failed ??= { err }
            }
          }),
        )
      }
    }
    await Promise.all(steps)
    if (failed !== undefined) throw failed.err
    // Only now, after the bytes: a write by a process without CAP_FSETID (anyone but
    // root) clears the setuid and setgid bits, which set before it would be lost.
    if (mode !== undefined) await fh.chmod(mode)
    await fh.sync()
    await fh.close()
    await fs.rename(tmp, path)
  } catch (err) {
    await fh.close().catch(() => {})
    await fs.rm(tmp, { force: true }).catch(() => {})
    throw err instanceof CallerThrew ? err : localFileError(err, path, `export to ${path}`)
  }
  const dir = await fs.open(dirname(path), 'r').catch(() => undefined)
  await dir
    ?.sync()
    .catch(() => {})
    .finally(() => dir.close())
  return { location: path, copiedBytes: 0, sentBytes: written, parts: 0, copyParts: 0, requests: 0, retries: 0 }
}
