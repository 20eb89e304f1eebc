/**
 * The commit point of a container: the `inode` object, and the part 0s that may take it.
 * Every read and write of `inode` goes through here.
 *
 * - Readers GET it alone (one request); writers also need its ETag, for the If-Match that
 *   publishes the next checkpoint, so they HEAD it first. A missing `inode` is
 *   ERR_NOT_FOUND ("no container here"), a damaged one ERR_CORRUPT naming the key.
 * - Publishing replaces exactly the version read (If-Match), or creates the first one
 *   (If-None-Match: *); another writer's publication in between is ERR_CONFLICT, and the
 *   store's write id makes a resent write that landed count as ours.
 * - Roll-forward (ARCHITECTURE §2) publishes the next checkpoint when its part 0 is
 *   complete and was built on exactly the inode published now, so it can never skip or
 *   undo a checkpoint.
 */
import debug from 'debug'
import { mayBeDamagedOnTheWay, StreamSegmentError } from '../errors.js'
import { decodeInodeObject, encodeInode, encodeInodeObject, INODE_BYTES, type Inode } from '../format/inode.js'
import { INODE_KEY, segmentKey } from '../format/names.js'
import { storeNow } from '../store/common.js'
import type { ObjectStore } from '../store/types.js'
import { printableLog } from '../util/shell-words.js'
import { asError } from '../util/typed-arrays.js'
import { listCheckpoint, numbersTaken } from './listing.js'
import { readObjectHeader } from './object-header.js'
import { type OpenedBytes, part0OpenBytes } from './opened.js'

const log = printableLog(debug('stream-segment:flush'))

/** The inode published now and its ETag (undefined when the store gave none: readers). */
export interface Published {
  inode: Inode
  etag: string | undefined
}

function noContainer(store: ObjectStore): StreamSegmentError {
  return StreamSegmentError.notFound(`${store.url}: no container here (no ${INODE_KEY} object)`)
}

/**
 * ERR_NOT_FOUND for a container with checkpoints but no `inode` object: nothing is
 * published (or an `rm` stopped part-way), and a checkpoint is opened by its number.
 */
export function nothingPublished(store: ObjectStore, cause?: unknown): StreamSegmentError {
  return StreamSegmentError.notFound(
    `${store.url}: no published checkpoint (no ${INODE_KEY} object); give a cno`,
    cause,
  )
}

/** Whether a not-found error says the bucket itself is missing (S3's NoSuchBucket). */
function missingBucket(err: StreamSegmentError): boolean {
  return (err.cause as { name?: string } | undefined)?.name === 'NoSuchBucket'
}

/** What a read of `inode` asks for at most. */
const INODE_READ_BYTES = 64 * 1024

function decodeAt(store: ObjectStore, bytes: Uint8Array): Inode {
  try {
    return decodeInodeObject(bytes)
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_CORRUPT')) {
      throw StreamSegmentError.corrupt(`${store.url}/${INODE_KEY}: ${err.message}`, err)
    }
    throw err
  }
}

/** Whether the container has a commit point (a checkpoint was published). */
export async function hasInode(store: ObjectStore, signal?: AbortSignal): Promise<boolean> {
  return (await store.head(INODE_KEY, { signal })) !== undefined
}

/**
 * The published inode. `withEtag`: a writer's read (HEAD, GET, HEAD: the ETag is that of
 * the bytes read); otherwise one GET. ERR_NOT_FOUND when the container has none.
 */
export async function readInode(
  store: ObjectStore,
  options: { withEtag?: boolean; signal?: AbortSignal | undefined } = {},
): Promise<Published> {
  const { withEtag = false, signal } = options
  // A bounded read: an `inode` object is 128 bytes, and a hostile one of gigabytes must not
  // be held (what is read past 128 bytes fails its decoding all the same). An empty one has
  // no first byte to range over: it reads as 0 bytes.
  const get = () =>
    store.get(INODE_KEY, { range: { start: 0, end: INODE_READ_BYTES }, signal }).catch((err) => {
      if (StreamSegmentError.is(err, 'ERR_RANGE')) return new Uint8Array(0)
      // A HEAD says only that nothing is there; the GET says why (a missing bucket is named
      // as such, not as a missing container).
      throw StreamSegmentError.is(err, 'ERR_NOT_FOUND') && !missingBucket(err) ? noContainer(store) : err
    })
  // Bytes damaged on the way (a flipped bit) fail the decoding as bytes damaged on storage
  // do: the object is read once more before it is reported.
  if (!withEtag) {
    try {
      return { inode: decodeAt(store, await get()), etag: undefined }
    } catch (err) {
      if (!mayBeDamagedOnTheWay(err)) throw err
      return { inode: decodeAt(store, await get()), etag: undefined }
    }
  }
  // The ETag must be the one of the bytes read: a publication between the HEAD and the
  // GET would pair an old ETag with a new inode, and the writer would build on the new one
  // a checkpoint that can only be published by a roll-forward. So: HEAD, GET, HEAD again,
  // until both HEADs agree.
  let readAgain = true
  for (let attempt = 1; ; attempt++) {
    const before = await store.head(INODE_KEY, { signal })
    if (before === undefined) {
      await get() // says why: no container, or no bucket
      throw noContainer(store) // created meanwhile: open again
    }
    const bytes = await get()
    const after = await store.head(INODE_KEY, { signal })
    if (after?.etag === before.etag) {
      try {
        return { inode: decodeAt(store, bytes), etag: before.etag }
      } catch (err) {
        // Damaged on the way, perhaps (as above): read once more, the ETag with it.
        if (!mayBeDamagedOnTheWay(err) || !readAgain) throw err
        readAgain = false
        continue
      }
    }
    if (attempt >= 16) {
      throw StreamSegmentError.conflict(
        `${store.url}/${INODE_KEY}: it changed on every read (16 times): too many writers`,
      )
    }
  }
}

/**
 * Reads the commit point again (after a conflict): the inode and ETag now, or undefined
 * when there is none any more.
 */
export async function reloadInode(store: ObjectStore, signal?: AbortSignal): Promise<Published | undefined> {
  try {
    return await readInode(store, { withEtag: true, signal })
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
    throw err
  }
}

/**
 * Publishes `inode`: replaces the version `etag` names, or creates the first one when
 * `etag` is undefined. Returns the new ETag; ERR_CONFLICT when another writer got there first.
 */
export async function publishInode(
  store: ObjectStore,
  inode: Inode,
  etag: string | undefined,
  signal?: AbortSignal,
): Promise<{ etag: string; bytes: number }> {
  const body = encodeInodeObject(inode)
  const options = etag === undefined ? { ifNoneMatch: '*' as const, signal } : { ifMatch: etag, signal }
  // A rejection that is no Error (a custom store's) would pass the flush's judgements of
  // the outcome (a conflict, a store failure, an abort) as none of them.
  try {
    const put = await store.put(INODE_KEY, body, options)
    return { etag: put.etag, bytes: body.byteLength }
  } catch (err) {
    throw asError(err, () => `put of ${store.url}/${INODE_KEY}`)
  }
}

/**
 * The inode stored in checkpoint `cno`'s part 0 (opening an older checkpoint), its
 * format detected unless `format`, the container's, is given; in a known format, read
 * with as much of the object as a reader's first read of it takes (`opened`, for the
 * file's readers: container/objects.ts part0OpenBytes). ERR_NOT_FOUND when the
 * checkpoint has no part 0 (never complete, or abandoned).
 */
export async function readCheckpointInode(
  store: ObjectStore,
  cno: number,
  options: { format?: number | undefined; size?: number | undefined; signal?: AbortSignal | undefined } = {},
): Promise<{ inode: Inode; opened: OpenedBytes | undefined }> {
  const key = segmentKey(cno, 0)
  let size = options.size
  if (size === undefined) {
    const info = await store.head(key, { signal: options.signal })
    if (info === undefined) throw StreamSegmentError.notFound(`${store.url}: checkpoint ${cno} has no part 0 (${key})`)
    size = info.size
  }
  const { format, signal } = options
  const read = await readObjectHeader(store, cno, 0, { format, size, reach: part0OpenBytes(size), signal })
  return { inode: read.header.inode, opened: read.opened }
}

/**
 * Whether `inode` (checkpoint `inode.cno`, whose part 0 this writer stored) was published at
 * some point, given the inode published now: the published checkpoints form a chain, each
 * part 0 naming the inode it was built on, so it is walked back from `now` until it passes
 * `inode.cno`. A writer whose inode write failed its condition learns this way that another
 * writer rolled its checkpoint forward (and perhaps published more on top since).
 *
 * A part 0 on the way that is gone (a cleaner dropped its checkpoint, superseded longer
 * ago than its grace period; or an `rm` under way) hides the answer: `inode` may have been
 * published, superseded, and dropped with it, when this flush took longer than the grace
 * period (a hung inode write). Taken for "not published", the writer would report a
 * conflict it did not lose, or publish its view again on top of checkpoints built on its
 * own, undoing their writes. So it is "not published" only when the part 0 naming the
 * checkpoint gone was stored before `inode`'s (by the store's clock, in one listing each):
 * had `inode` been published, every checkpoint above it on the chain was built after its
 * part 0 was stored. Otherwise ERR_CONFLICT saying that the outcome is unknown.
 */
export async function wasPublished(
  store: ObjectStore,
  inode: Inode,
  now: Inode,
  signal?: AbortSignal,
): Promise<boolean> {
  let cur = now
  /** The checkpoint whose part 0 named `cur` (undefined: `cur` is `now`). */
  let above: number | undefined
  while (cur.cno > inode.cno) {
    try {
      const base = (await readObjectHeader(store, cur.cno, 0, { format: cur.format, signal })).header.baseInode
      above = cur.cno
      cur = base
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
      if (above !== undefined && (await storedBefore(store, above, inode.cno, signal))) return false
      throw StreamSegmentError.conflict(
        `${store.url}: checkpoint ${inode.cno}: its inode write failed its condition (checkpoint ${now.cno} is published now), and whether checkpoint ${inode.cno} was published is unknown: ${segmentKey(cur.cno, 0)}, on the published chain above it, is gone (a cleaner dropped checkpoint ${cur.cno}: its grace period is shorter than this flush took; or the container is being removed), so whether another writer rolled ${inode.cno} forward and built on it cannot be told; its part 0 (${segmentKey(inode.cno, 0)}) is kept`,
        err,
      )
    }
  }
  return cur.cno === inode.cno && sameInode(cur, inode)
}

/** Whether checkpoint `a`'s part 0 was stored before checkpoint `b`'s (both listed, one LIST each). */
async function storedBefore(store: ObjectStore, a: number, b: number, signal?: AbortSignal): Promise<boolean> {
  const [at, bt] = await Promise.all(
    [a, b].map(async (cno) => (await listCheckpoint(store, cno, signal)).get(segmentKey(cno, 0))?.lastModifiedMs),
  )
  // Whole seconds on S3: a time below the other's is earlier all the same.
  return at !== undefined && bt !== undefined && at < bt
}

/**
 * That the commit point is the inode its checkpoint's part 0 carries, field for field: a
 * writer builds on it, and an export copies it, only then (verify and gc check the same).
 * One header read. ERR_CORRUPT naming `inode` when they differ or the part 0 is missing
 * (ERR_CONFLICT when `inode` was replaced meanwhile: gc may have dropped the checkpoint
 * read); a part 0 whose header does not check out fails with its own error.
 */
export async function checkCommitPoint(store: ObjectStore, published: Published, signal?: AbortSignal): Promise<void> {
  const { inode } = published
  const key = segmentKey(inode.cno, 0)
  let part0: Inode
  try {
    part0 = (await readObjectHeader(store, inode.cno, 0, { format: inode.format, signal })).header.inode
  } catch (err) {
    if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    const now = await reloadInode(store, signal)
    const moved = published.etag !== undefined ? now?.etag !== published.etag : now?.inode.cno !== inode.cno
    if (now !== undefined && moved) {
      throw StreamSegmentError.conflict(`${store.url}/${INODE_KEY}: replaced while it was being read: open again`)
    }
    throw StreamSegmentError.corrupt(
      `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, which has no part 0 (${key})`,
      err,
    )
  }
  if (!sameInode(part0, inode)) {
    throw StreamSegmentError.corrupt(
      `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0 (${key}): nothing is built on either`,
    )
  }
}

/**
 * Whether two inodes are the same, field for field (as their encodings are). Either may be
 * the NULL inode: the base of a new container's first checkpoint, which a part 0 above the
 * published one carries when its writer lost the race to create the container.
 */
export function sameInode(a: Inode, b: Inode): boolean {
  return Buffer.from(inodeBytes(a)).equals(inodeBytes(b))
}

function inodeBytes(x: Inode): Uint8Array {
  const out = new Uint8Array(INODE_BYTES)
  encodeInode(out, 0, x)
  return out
}

/** What a writer opening a container finds above the published checkpoint. */
export interface Above {
  /** The checkpoint rolled forward to, when one was (see rollForward). */
  rolled: Published | undefined
  /** One past the highest checkpoint number objects use: the writer's next checkpoint starts there. */
  firstFree: number
}

/**
 * Roll-forward, and the numbers taken above the published checkpoint. A writer opening
 * the container looks at every number above the published one that objects use, in
 * order (container/listing.ts numbersTaken: usually one LIST, which finds none), past
 * numbers none uses: a cleaner may have emptied one below a checkpoint whose writer had
 * taken its number first. A complete part 0 among them built on exactly the inode
 * published then (its writer stopped between part 0 and the inode; an abandoned attempt,
 * there still or deleted since, may have pushed it above the next number) and older than
 * `afterMs` (so that its writer, if alive, has had time to publish it itself: rolling a
 * live writer's checkpoint forward would race its inode write) is published, If-Match the
 * version read, and the look goes on above it; so a roll-forward never skips or undoes a
 * checkpoint. Before it is published, `check` reads what the checkpoint added (its part 0
 * whole, the nodes it wrote, the objects they name: admin/verify.ts checkUnpublished): a
 * header alone says nothing of the bytes below it. A part 0 built on another inode, one
 * whose header or content does not check out or that is gone by the time it is read, a
 * conflict (another writer published meanwhile) leave things as they are. The numbers
 * taken are skipped by the writer's next checkpoint (`firstFree`), and the unused ones
 * among them: after a conflict too, the look goes on to the last one taken.
 */
export async function rollForward(
  store: ObjectStore,
  published: Inode,
  etag: string,
  options: {
    afterMs: number
    /**
     * What is wrong with checkpoint `inode` on top of checkpoint `publishedCno`, given the
     * objects listed above that number: one message per problem; none to publish it.
     */
    check: (inode: Inode, publishedCno: number, objects: ReadonlyMap<string, { size: number }>) => Promise<string[]>
    signal?: AbortSignal | undefined
  },
): Promise<Above> {
  const { afterMs, signal } = options
  let current: Published = { inode: published, etag }
  let rolled: Published | undefined
  let firstFree = published.cno + 1
  // Every object above the published number so far: a checkpoint may point into the
  // objects of unpublished numbers below its own (see admin/verify.ts checkUnpublished).
  const above = new Map<string, { size: number }>()
  // Another writer published meanwhile: nothing more is rolled forward (the commit point is
  // no longer the one read), but the look goes on, to skip the numbers taken above.
  let lost = false
  let now: number | undefined
  for await (const { cno, objects: keys } of numbersTaken(store, published.cno + 1, signal)) {
    firstFree = cno + 1
    if (lost) continue
    for (const [key, o] of keys) above.set(key, o)
    const part0 = keys.get(segmentKey(cno, 0))
    if (part0 === undefined) continue // an abandoned attempt
    // By the clock that dates it, read once (a directory store makes a file to read it).
    now ??= await storeNow(store)
    const age = now - part0.lastModifiedMs
    if (age < afterMs) {
      // Its writer may be alive, its inode write in flight: leave it to that writer.
      log('checkpoint %d: part 0 is %d ms old, under %d: not rolled forward', cno, age, afterMs)
      continue
    }
    const size = part0.size
    let base: Inode
    let inode: Inode
    try {
      ;({ baseInode: base, inode } = (
        await readObjectHeader(store, cno, 0, { format: published.format, size, signal })
      ).header)
    } catch (err) {
      // ERR_NOT_FOUND: deleted since the listing (a cleaner, or its writer giving it up).
      const skip = ['ERR_CORRUPT', 'ERR_UNSUPPORTED', 'ERR_NOT_FOUND'] as const
      if (!skip.some((code) => StreamSegmentError.is(err, code))) throw err
      log('checkpoint %d: part 0 not rolled forward: %s', cno, (err as Error).message)
      continue
    }
    if (!sameInode(base, current.inode)) {
      log('checkpoint %d: part 0 built on another inode than checkpoint %d: not rolled forward', cno, current.inode.cno)
      continue
    }
    const problems = await options.check(inode, current.inode.cno, above)
    if (problems.length > 0) {
      log('checkpoint %d: not rolled forward, %d problems: %s', cno, problems.length, problems[0])
      continue
    }
    try {
      const put = await publishInode(store, inode, current.etag, signal)
      log('checkpoint %d: rolled forward (its part 0 was complete, the inode not replaced)', cno)
      current = rolled = { inode, etag: put.etag }
    } catch (err) {
      if (!StreamSegmentError.is(err, 'ERR_CONFLICT')) throw err
      log('checkpoint %d: not rolled forward, another writer published meanwhile', cno)
      lost = true
    }
  }
  return { rolled, firstFree }
}

/** The container's format, from its `inode` object; undefined when that is unreadable. */
export async function containerFormat(store: ObjectStore, signal?: AbortSignal): Promise<number | undefined> {
  try {
    return (await readInode(store, { signal })).inode.format
  } catch (err) {
    if (
      StreamSegmentError.is(err, 'ERR_CORRUPT') ||
      StreamSegmentError.is(err, 'ERR_UNSUPPORTED') ||
      StreamSegmentError.is(err, 'ERR_NOT_FOUND')
    ) {
      return undefined
    }
    throw err
  }
}
