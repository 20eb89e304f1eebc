/**
 * A container's keys, from one listing: which checkpoints have which parts, each
 * object's size, and whether there is a commit point. Keys that do not parse as segment
 * keys or `inode` are left out: nothing here ever reads or touches them.
 */
import { StreamSegmentError } from '../errors.js'
import { checkpointPrefix, INODE_KEY, parseKey } from '../format/names.js'
import { MAX_CNO } from '../format/pointer.js'
import type { ListEntry, MultipartUpload, ObjectStore } from '../store/types.js'

export interface ContainerListing {
  /** Size of every segment object, by key. */
  sizes: Map<string, number>
  /** When every segment object was written (ms since the epoch), by key. */
  modified: Map<string, number>
  /** The ETag of every segment object, by key. */
  etags: Map<string, string>
  /** The parts of every checkpoint number seen, and their bytes. */
  byCno: Map<number, { parts: number[]; bytes: number }>
  hasInode: boolean
  /** When the inode object was last written (ms since the epoch), if there is one. */
  inodeModifiedMs?: number
}

/** Lists the container; ERR_NOT_FOUND when it has neither an inode nor a checkpoint. */
export async function listContainer(store: ObjectStore, signal?: AbortSignal): Promise<ContainerListing> {
  const sizes = new Map<string, number>()
  const modified = new Map<string, number>()
  const etags = new Map<string, string>()
  const byCno = new Map<number, { parts: number[]; bytes: number }>()
  let hasInode = false
  let inodeModifiedMs: number | undefined
  for await (const e of store.list('', { signal })) {
    const k = parseKey(e.key)
    if (k === undefined) continue
    if (k.kind === 'inode') {
      hasInode = true
      inodeModifiedMs = e.lastModifiedMs
      continue
    }
    sizes.set(e.key, e.size)
    modified.set(e.key, e.lastModifiedMs)
    etags.set(e.key, e.etag)
    let c = byCno.get(k.cno)
    if (c === undefined) byCno.set(k.cno, (c = { parts: [], bytes: 0 }))
    c.parts.push(k.part)
    c.bytes += e.size
  }
  if (!hasInode && byCno.size === 0) {
    throw StreamSegmentError.notFound(`${store.url}: no container here (no ${INODE_KEY} object, no checkpoints)`)
  }
  return { sizes, modified, etags, byCno, hasInode, inodeModifiedMs }
}

/** The multipart uploads open under the container's segment keys (others are never touched). */
export async function listOpenUploads(store: ObjectStore, signal?: AbortSignal): Promise<MultipartUpload[]> {
  const out: MultipartUpload[] = []
  for await (const u of store.listMultipart('', { signal })) if (parseKey(u.key)?.kind === 'segment') out.push(u)
  return out
}

/** Aborts an open multipart upload. */
export function abortUpload(store: ObjectStore, upload: MultipartUpload, signal?: AbortSignal): Promise<void> {
  return store.abortMultipart(upload.key, upload.uploadId, { signal })
}

/** Keys per delete request (S3's DeleteObjects takes at most 1000). */
export const DELETE_BATCH = 1000

/**
 * Deletes segment objects, in batches, in the order given (a caller that must delete
 * some before others orders them so). A batch never holds both part 0s and other parts:
 * a store deletes a batch's keys in any order, and one that fails part-way (S3's
 * DeleteObjects fails key by key) may have deleted any of them, so a part 0 put first is
 * gone before a data part of its checkpoint only when their batches differ. Anything that
 * is not a segment key is refused with ERR_INTERNAL: this code never deletes a key it
 * does not own. `onDeleted` hears how many are deleted after each batch.
 */
export async function deleteSegments(
  store: ObjectStore,
  keys: readonly string[],
  signal?: AbortSignal,
  onDeleted?: (deleted: number) => void,
): Promise<void> {
  for (const key of keys) {
    if (parseKey(key)?.kind !== 'segment')
      throw StreamSegmentError.internal(`refusing to delete ${key}: not a segment key`)
  }
  let i = 0
  while (i < keys.length) {
    const zero = isPart0(keys[i] as string)
    let end = i + 1
    while (end < keys.length && end - i < DELETE_BATCH && isPart0(keys[end] as string) === zero) end++
    await store.delete(keys.slice(i, end), { signal })
    i = end
    onDeleted?.(i)
  }
}

function isPart0(key: string): boolean {
  return key.endsWith('.0')
}

/** Deletes the commit point: the last step of removing a container. */
export function deleteInode(store: ObjectStore, signal?: AbortSignal): Promise<void> {
  return store.delete(INODE_KEY, { signal })
}

/**
 * The first of `keys` that the store does not hold, or undefined when it holds them all:
 * HEADs, `concurrency` at a time, in order.
 */
export async function firstMissing(
  store: ObjectStore,
  keys: readonly string[],
  signal?: AbortSignal,
  concurrency = 8,
): Promise<string | undefined> {
  for (let i = 0; i < keys.length; i += concurrency) {
    const batch = keys.slice(i, i + concurrency)
    const infos = await Promise.all(batch.map((key) => store.head(key, { signal })))
    const j = infos.indexOf(undefined)
    if (j >= 0) return batch[j]
  }
  return undefined
}

/** The objects of checkpoint `cno`, by key: one LIST of its prefix. */
export async function listCheckpoint(
  store: ObjectStore,
  cno: number,
  signal?: AbortSignal,
): Promise<Map<string, { size: number; lastModifiedMs: number }>> {
  const out = new Map<string, { size: number; lastModifiedMs: number }>()
  for await (const e of store.list(checkpointPrefix(cno), { signal })) {
    if (parseKey(e.key)?.kind === 'segment') out.set(e.key, { size: e.size, lastModifiedMs: e.lastModifiedMs })
  }
  return out
}

/**
 * The segment keys of checkpoints `from` to `to`: one listing, taken up at `from`'s keys
 * (`startAfter`) and read only until it passes `to`'s. Keys of lower numbers (a store
 * that ignores `startAfter`) are passed over.
 */
export async function checkpointKeys(
  store: ObjectStore,
  from: number,
  to: number,
  signal?: AbortSignal,
): Promise<Set<string>> {
  const out = new Set<string>()
  for await (const { entry, cno } of segmentsFrom(
    store.list('', { signal, startAfter: checkpointPrefix(from) }),
    from,
  )) {
    if (cno > to) break
    out.add(entry.key)
  }
  return out
}

/**
 * The segment objects of `listing` (a listing taken up at `from`'s keys, `startAfter`)
 * with their numbers, from `from` on, in order, up to the first key that is none: keys of
 * lower numbers (a store that ignores `startAfter`) and keys that are not the container's
 * are passed over, and `inode` and what sorts after it ends it (segment keys start with
 * digits).
 */
async function* segmentsFrom(
  listing: AsyncIterable<ListEntry>,
  from: number,
): AsyncGenerator<{ entry: ListEntry; cno: number }> {
  for await (const entry of listing) {
    const k = parseKey(entry.key)
    if (k?.kind !== 'segment') {
      if ((entry.key[0] as string) > '9') return
      continue
    }
    if (k.cno >= from) yield { entry, cno: k.cno }
  }
}

/**
 * Whether the container holds any checkpoint object: the first segment key of a listing
 * (they sort first; usually one page). Tells a container with nothing published (no
 * `inode` object, but checkpoints, or an `rm` stopped part-way) from no container at all.
 */
export async function hasCheckpointObjects(store: ObjectStore, signal?: AbortSignal): Promise<boolean> {
  for await (const _ of segmentsFrom(store.list('', { signal, startAfter: checkpointPrefix(1) }), 1)) return true
  return false
}

/** A segment object as a listing gives it: its size, ETag and time. */
export interface ListedObject {
  size: number
  etag: string
  lastModifiedMs: number
}

/**
 * The segment objects of numbers from `from` on, by key: one listing taken up at `from`'s
 * keys (`startAfter`). Keys of lower numbers (a store that ignores `startAfter`) are
 * passed over.
 */
export async function objectsFrom(
  store: ObjectStore,
  from: number,
  signal?: AbortSignal,
): Promise<Map<string, ListedObject>> {
  const out = new Map<string, ListedObject>()
  if (from > MAX_CNO) return out // past the last number: no key carries it
  for await (const { entry: e } of segmentsFrom(store.list('', { signal, startAfter: checkpointPrefix(from) }), from)) {
    out.set(e.key, { size: e.size, etag: e.etag, lastModifiedMs: e.lastModifiedMs })
  }
  return out
}

/** The segment objects of one checkpoint number, by key. */
export type CheckpointObjects = Map<string, { size: number; lastModifiedMs: number }>

/**
 * The numbers from `from` on that segment objects use, in order, each with its objects:
 * every one, past numbers no object uses. A number between used ones may be unused (a
 * cleaner deleted an abandoned attempt there after a writer had taken a number above
 * it), and a complete checkpoint above it is still one a roll-forward must reach, and
 * its objects still ones a writer's must not collide with. One listing taken up after the
 * objects below `from` (`startAfter`), read page by page as it is consumed: the keys above
 * the published number are few (a cleaner deletes what no writer rolls forward to), and a
 * run of numbers that abandoned attempts took costs one LIST per page, not one per
 * number. Keys of lower numbers (a store that ignores `startAfter`) are passed over.
 */
export async function* numbersTaken(
  store: ObjectStore,
  from: number,
  signal?: AbortSignal,
): AsyncGenerator<{ cno: number; objects: CheckpointObjects }> {
  if (from > MAX_CNO) return // past the last number: no key carries it
  let cno = from
  let objects: CheckpointObjects = new Map()
  // An interrupt is said as what was interrupted: the store alone says `list aborted`.
  const listing = interruptedAs(
    store.list('', { signal, startAfter: checkpointPrefix(from) }),
    `${store.url}: interrupted while looking for the checkpoint numbers taken from ${from} on (objects of earlier attempts that the next checkpoint must skip)`,
  )
  for await (const { entry: e, cno: n } of segmentsFrom(listing, from)) {
    if (n !== cno) {
      if (objects.size > 0) yield { cno, objects }
      cno = n
      objects = new Map()
    }
    objects.set(e.key, { size: e.size, lastModifiedMs: e.lastModifiedMs })
  }
  if (objects.size > 0) yield { cno, objects }
}

/** The entries of `listing`; an ERR_ABORTED it fails with becomes one that says `what`, the first its cause. */
async function* interruptedAs<T>(listing: AsyncIterable<T>, what: string): AsyncGenerator<T> {
  try {
    yield* listing
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_ABORTED')) throw StreamSegmentError.aborted(what, err)
    throw err
  }
}

/**
 * The first checkpoint number from `from` on above every one a segment object uses:
 * numbers an abandoned attempt took (a writer stopped before its flush published) are
 * skipped, so a writer's first object does not collide with them, and so is a number
 * no object uses below one that objects do (see numbersTaken): taken, it would put this
 * writer's checkpoint below a complete one that a roll-forward publishes, and its next
 * one on that checkpoint's number.
 */
export async function firstFreeCno(store: ObjectStore, from: number, signal?: AbortSignal): Promise<number> {
  let end = from
  for await (const { cno } of numbersTaken(store, from, signal)) end = cno + 1
  return end
}
