/**
 * Resuming a file's upload (uploadFile): what an interrupted attempt left that the next
 * attempt may take instead of sending it again.
 *
 * What is recorded. Each segment object a file upload starts as a multipart upload
 * carries, as metadata on its claim (the empty placeholder that holds its key until it
 * completes, ObjectStore.createMultipart), the file's size and mtime, where the object's
 * data starts in the file, and the block and piece sizes. The placeholder is the one
 * place S3 lets anyone read back while the upload is open (an open upload's own metadata
 * is given to nobody), it lives and dies with the upload's key, it costs no request of
 * its own, and gc already knows it: an abandoned one is an unreached segment object.
 *
 * What is taken. The next attempt (`findLeftovers`) lists the container's open uploads,
 * reads each one's placeholder and keeps those of the same file (size, mtime, block and
 * piece sizes all equal), younger than `maxAgeMs`, under a number above the published
 * checkpoint's (a header's base inode is below its own number), and their parts (ListParts). The writer
 * lays the file out exactly as before (same settings, same file: the same objects, the
 * same pieces), and an object whose data starts where a leftover's did continues that
 * upload under its key (Uploader.openSegment): each piece is read from the file as
 * always, and a part the upload holds is kept only when its size and MD5 are those of
 * the piece's bytes; every other part is uploaded again over it. A store that cannot give
 * a part's MD5 (S3 with SSE-KMS: its ETag is not one) has nothing kept. Nothing is ever
 * taken unchecked against the file.
 *
 * Objects the interrupted attempt completed (`findCompleted`: the same metadata, on the
 * object now; its summary's block CRC-32s) are not pointed at: a new object laid out the
 * same way copies, server-side (UploadPartCopy, If-Match its ETag), each piece whose
 * every block is a live slot there with the CRC-32 of the file's block, and sends the
 * others. The summary vouches for the blocks it was built from, not for the bytes stored
 * under it: a copied part is kept only when the MD5 the copy answers with is that of
 * the piece's bytes read from the file now, and is uploaded over otherwise. So what the
 * checkpoint points at is always new, and young for gc; a source gc deleted meanwhile
 * only fails the copy, and the object's blocks go again.
 *
 * The continued object keeps the interrupted attempt's number (its key, header and block
 * pointers say `<old cno>.<part>`), as ARCHITECTURE §2 allows: a later checkpoint may
 * point into the parts of an abandoned attempt. The new writer's checkpoint number is
 * above it: an upload under a number not below the writer's is not continued
 * (Uploader.openSegment).
 * Its leaves point only into itself (it starts at a leaf's first block and takes every
 * block under its leaves), so no node of the old number points into a newer object.
 *
 * Beside another writer. The store's rules make a shared upload safe: a part kept is the
 * bytes checked, because completion names every part by its ETag and the store refuses a
 * part replaced since (S3 InvalidPart, the directory store's check): so the object that
 * completes is exactly one writer's plan, or the completion fails and that writer's
 * blocks go again in another object (an object failing is never an error of the flush).
 * An upload completed or aborted by the other writer fails this one's parts or
 * completion the same way. Which checkpoint is published is decided by the inode's
 * compare-and-swap as always: the loser gets ERR_CONFLICT. Nothing of another writer's
 * is deleted or aborted by a resume, except an upload this writer continued and then
 * gave up (aborted as any object given up: the other writer's object then fails too and
 * goes again).
 *
 * Beside gc. gc deletes unreached segment objects (placeholders among them) and aborts
 * open uploads once older than its grace period (1 hour by default), which protects a
 * live writer whose objects are younger than that (objects copied from are never pointed
 * at: they need no age limit). A continued upload is as old as the
 * interrupted attempt's claim, so a resume takes only uploads younger than `maxAgeMs`
 * (default 30 minutes, half gc's default grace): run gc with a grace longer than a
 * resumed upload's whole life, from its first attempt, as for any writer. A resumed
 * object gc deleted after all is found before publication (`checkContinued`, just before
 * the inode is written, by the ETag its completion gave: another writer may have found
 * its number free and written another object under the key): nothing is published then.
 * Leftovers not taken stay for gc: none is provably abandoned (it may be another live
 * writer's), so none is aborted.
 */
import debug from 'debug'
import { StreamSegmentError } from '../errors.js'
import { objectLayout } from '../format/header.js'
import { FORMAT_STREAM } from '../format/inode.js'
import { parseKey, segmentKey } from '../format/names.js'
import { decodeSummary } from '../format/summary.js'
import { storeNow } from '../store/common.js'
import type { ObjectStore } from '../store/types.js'
import { printableLog } from '../util/shell-words.js'
import { listOpenUploads, numbersTaken } from './listing.js'
import { readObjectHeader } from './object-header.js'
import { type CompletedLeftover, type Leftover, type Resumer, requestError } from './uploader.js'

const log = printableLog(debug('stream-segment:resume'))

/** Leftovers older than this are not taken by default (half gc's default grace period). */
export const DEFAULT_RESUME_MAX_AGE_MS = 30 * 60_000

/** The file an upload writes, as its objects record it. */
export interface FileIdentity {
  size: number
  mtimeMs: number
  blockSize: number
  pieceSize: number
}

const META = {
  size: 'ss-file-size',
  mtime: 'ss-file-mtime',
  first: 'ss-file-first',
  block: 'ss-block-size',
  piece: 'ss-piece-size',
} as const

/** The metadata recorded on the claim of an object whose data starts at byte `first`. */
export function resumeMetadata(id: FileIdentity, first: number): Record<string, string> {
  return {
    [META.size]: String(id.size),
    [META.mtime]: String(id.mtimeMs),
    [META.first]: String(first),
    [META.block]: String(id.blockSize),
    [META.piece]: String(id.pieceSize),
  }
}

/** Where an object of this file's upload started (its data's first byte), from its claim; undefined when not this file's. */
function firstByteOf(metadata: Record<string, string>, id: FileIdentity): number | undefined {
  const want = resumeMetadata(id, 0)
  for (const k of [META.size, META.mtime, META.block, META.piece]) if (metadata[k] !== want[k]) return undefined
  const text = metadata[META.first]
  if (text === undefined || !/^(0|[1-9][0-9]{0,15})$/.test(text)) return undefined
  const first = Number(text)
  return Number.isSafeInteger(first) && first < id.size && first % id.blockSize === 0 ? first : undefined
}

export interface FindOptions {
  /**
   * The published checkpoint's number: uploads under a number not above it are not taken
   * (an object's header names a base inode below its own number).
   */
  publishedCno?: number
  /** Uploads created longer ago than this are not taken (see the top comment). */
  maxAgeMs?: number
  signal?: AbortSignal
  now?: number
}

/**
 * The open uploads an interrupted upload of this file left in the container, by where
 * their objects' data started in the file (the one holding most parts when two did).
 * Reads: one listing of open uploads, then a HEAD and a ListParts for each candidate.
 */
export async function findLeftovers(
  store: ObjectStore,
  id: FileIdentity,
  options: FindOptions = {},
): Promise<Map<number, Leftover>> {
  const { signal, maxAgeMs = DEFAULT_RESUME_MAX_AGE_MS, publishedCno = 0 } = options
  const found = new Map<number, Leftover>()
  if (store.listParts === undefined) return found
  const listParts = store.listParts.bind(store)
  const uploads = await request(store, 'listMultipart', '', () => listOpenUploads(store, signal))
  // The uploads' ages by the store's clock, which dates them (once it has answered). Read
  // only for a candidate: a directory store makes a file, and its folders, to read it,
  // which would leave a container that does not exist yet made by an upload that failed.
  let now = options.now
  for (const u of uploads) {
    const k = parseKey(u.key)
    if (k?.kind !== 'segment' || k.part === 0 || k.cno <= publishedCno) continue
    now ??= await request(store, 'now', '', () => storeNow(store))
    if (now - u.initiatedMs > maxAgeMs) continue
    const claim = await request(store, 'head', u.key, () => store.head(u.key, { signal }))
    // A key no longer holding an empty claim was completed (or taken) by someone: not ours to continue.
    if (claim === undefined || claim.size !== 0) continue
    const first = firstByteOf(claim.metadata, id)
    if (first === undefined) continue
    let parts: Awaited<ReturnType<typeof listParts>>
    try {
      parts = await request(store, 'listParts', u.key, () => listParts(u.key, u.uploadId, { signal }))
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) continue // completed or aborted meanwhile
      throw err
    }
    if (parts.length === 0) continue
    const other = found.get(first)
    if (other !== undefined && other.parts.length >= parts.length) continue
    found.set(first, { key: u.key, cno: k.cno, part: k.part, uploadId: u.uploadId, parts })
  }
  log('%s: %d interrupted uploads of this file', store.url, found.size)
  return found
}

/**
 * The objects an interrupted upload of this file completed and never published (under a
 * number above the published one, without a part 0), by where their data started in the
 * file, with their summaries' block CRCs. Reads: a listing of the numbers above the
 * published one, then for each object a HEAD, its header and its summary. One that does not decode is skipped.
 */
export async function findCompleted(
  store: ObjectStore,
  id: FileIdentity,
  options: FindOptions = {},
): Promise<Map<number, CompletedLeftover>> {
  const { signal, publishedCno = 0 } = options
  const found = new Map<number, CompletedLeftover>()
  // The numbers above the published one that objects use, as firstFreeCno walks them
  // (each attempt takes a number above those before it).
  for await (const { cno, objects } of requests(store, 'list', '', numbersTaken(store, publishedCno + 1, signal))) {
    if (objects.has(segmentKey(cno, 0))) continue // a complete checkpoint, not an interrupted attempt
    for (const [key, { size }] of objects) {
      const k = parseKey(key)
      if (k?.kind !== 'segment' || size === 0) continue // a claim: its upload is open, or was abandoned
      const part = k.part
      try {
        const info = await request(store, 'head', key, () => store.head(key, { signal }))
        const first = info === undefined ? undefined : firstByteOf(info.metadata, id)
        if (info === undefined || first === undefined || found.has(first)) continue
        const { header } = await request(store, 'get', key, () =>
          readObjectHeader(store, cno, part, { format: FORMAT_STREAM, size: info.size, signal }),
        )
        if (2 ** header.dataShift !== id.blockSize || header.dataCount === 0) continue
        const layout = objectLayout(header, header)
        const range = { start: layout.summaryOffset, end: layout.summaryEnd }
        const bytes = await request(store, 'get', key, () => store.get(key, { range, signal }))
        const summary = decodeSummary(bytes, { count: header.dataCount, summaryCrc: header.summaryCrc, where: key })
        found.set(first, {
          key,
          etag: info.etag,
          blockSize: id.blockSize,
          crc: summary.crc.subarray(0, summary.count),
          live: summary.live.subarray(0, summary.count),
        })
      } catch (err) {
        // Gone meanwhile (gc), or not a readable object: nothing to copy from it.
        const skip = ['ERR_NOT_FOUND', 'ERR_CORRUPT', 'ERR_UNSUPPORTED', 'ERR_RANGE'] as const
        if (!skip.some((code) => StreamSegmentError.is(err, code))) throw err
        log('%s/%s: not taken (%s)', store.url, key, (err as Error).message)
      }
    }
  }
  log('%s: %d completed objects of an interrupted upload of this file', store.url, found.size)
  return found
}

/** A Resumer over leftovers found: records `id` on new objects, gives each leftover once. */
export class FileResumer implements Resumer {
  /** The uploads continued and completed, key and ETag of the object each made: objects of the checkpoint. */
  readonly continued: Array<{ key: string; etag: string }> = []

  constructor(
    private readonly id: FileIdentity,
    private readonly leftovers: Map<number, Leftover> = new Map(),
    private readonly completedObjects: Map<number, CompletedLeftover> = new Map(),
  ) {}

  metadata(first: number): Record<string, string> {
    return resumeMetadata(this.id, first)
  }

  take(first: number): Leftover | CompletedLeftover | undefined {
    // An open upload continued costs nothing; a completed object's pieces are copied.
    const left = this.leftovers.get(first) ?? this.completedObjects.get(first)
    this.leftovers.delete(first)
    this.completedObjects.delete(first)
    return left
  }

  completed(key: string, etag: string): void {
    this.continued.push({ key, etag })
  }
}

/**
 * Before publication: every object continued from an interrupted upload is still there,
 * the object its completion made (its ETag). ERR_STATE otherwise: gc deleted it (see the
 * top comment), and perhaps another writer, finding its number free, wrote another
 * object under the key since, which the checkpoint must not point into.
 */
export async function checkContinued(
  store: ObjectStore,
  objects: ReadonlyArray<{ key: string; etag: string }>,
  signal?: AbortSignal,
): Promise<void> {
  for (const { key, etag } of objects) {
    const info = await request(store, 'head', key, () => store.head(key, { signal }))
    if (info === undefined || info.size === 0) {
      throw StreamSegmentError.state(
        `${store.url}/${key}: an object continued from an interrupted upload is gone (deleted by gc?): nothing was published`,
      )
    }
    if (info.etag !== etag) {
      throw StreamSegmentError.state(
        `${store.url}/${key}: an object continued from an interrupted upload was replaced since it completed (ETag ${etag}, now ${info.etag}: deleted by gc and written again?): nothing was published`,
      )
    }
  }
}

/**
 * What `call`, the store's request `op` of `key`, gives. A rejection that is no Error (a
 * custom store's `undefined`, a string) is ERR_STORE naming the request (requestError):
 * as it is, it would pass the skips above (`StreamSegmentError.is`) and uploadFile's
 * caller would get the bare value, and checkContinued's, met in the flush's check of the
 * file (BlockSource.verify), would say that the file changed.
 */
async function request<T>(store: ObjectStore, op: string, key: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call()
  } catch (err) {
    throw requestError(err, op, store, key)
  }
}

/** The items of `listing`, a listing of `key` (`op`), its failure as `request` says it. */
async function* requests<T>(store: ObjectStore, op: string, key: string, listing: AsyncIterable<T>): AsyncGenerator<T> {
  try {
    yield* listing
  } catch (err) {
    throw requestError(err, op, store, key)
  }
}
