/**
 * Removing a whole container: every open upload under its segment keys aborted, every
 * segment object deleted (part 0s first, so no checkpoint is ever openable without its
 * data), then the inode, last. Keys that are not segment keys or `inode` are left alone.
 * A writer still making the container's first checkpoint (no inode yet) finds the
 * objects gone before it creates the inode, and publishes nothing (write/flush.ts).
 * A directory store is then swept of what crashed writers left (temporary files, their
 * sidecars, locks), and its own folders removed when empty, then its root when that is
 * empty too (removeEmptyStoreFolders): the container's folder goes unless something else
 * (a user's file, a key that is not the container's) is in it.
 */
import { abortUpload, deleteInode, deleteSegments, listContainer, listOpenUploads } from '../container/listing.js'
import { StreamSegmentError, throwIfAborted } from '../errors.js'
import { checkCallOptions } from '../settings.js'
import { removeEmptyStoreFolders, sweepStoreLeftovers } from '../store/directory.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { asError } from '../util/typed-arrays.js'
import { part0First } from './gc.js'

export interface RemoveResult {
  url: string
  deletedObjects: number
  deletedBytes: number
  abortedUploads: number
}

/** How far a removal has come: objects deleted (the inode last), of how many. */
export interface RemoveProgress {
  deletedObjects: number
  objectsToDelete: number
}

/**
 * Deletes the container at `where`; ERR_NOT_FOUND when there is none. `onProgress` is
 * called as the deletions start and after each batch of them, the inode's last.
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function removeContainer(
  where: StoreLocation | ObjectStore,
  options: { signal?: AbortSignal; onProgress?: (progress: RemoveProgress) => void } = {},
): Promise<RemoveResult> {
  const store = storeAt(where, 'removeContainer')
  return await removeOf(store, options).catch((err) => {
    throw asError(err, () => `removeContainer of ${store.url}`)
  })
}

async function removeOf(
  store: ObjectStore,
  options: { signal?: AbortSignal; onProgress?: (progress: RemoveProgress) => void },
): Promise<RemoveResult> {
  checkCallOptions('removeContainer', options, ['signal', 'onProgress'])
  const { signal, onProgress } = options
  throwIfAborted(signal, `removeContainer of ${store.url}`)
  const listing = await listContainer(store, signal)
  const uploads = await listOpenUploads(store, signal)
  const keys = [...listing.sizes.keys()].sort(part0First)
  const objectsToDelete = keys.length + (listing.hasInode ? 1 : 0)
  const done = { aborted: 0, deleted: 0 }
  try {
    for (const u of uploads) {
      await abortUpload(store, u, signal)
      done.aborted++
    }
    onProgress?.({ deletedObjects: 0, objectsToDelete })
    await deleteSegments(store, keys, signal, (deletedObjects) => {
      done.deleted = deletedObjects
      onProgress?.({ deletedObjects, objectsToDelete })
    })
    if (listing.hasInode) {
      await deleteInode(store, signal)
      onProgress?.({ deletedObjects: objectsToDelete, objectsToDelete })
    }
  } catch (err) {
    throw partly(store.url, err, done, uploads.length, keys.length)
  }
  await sweepStoreLeftovers(store)
  await removeEmptyStoreFolders(store)
  let bytes = 0
  for (const size of listing.sizes.values()) bytes += size
  return {
    url: store.url,
    deletedObjects: objectsToDelete,
    deletedBytes: bytes,
    abortedUploads: uploads.length,
  }
}

/**
 * A failure (or an interrupt) part-way through the removal, said with how far it came: an
 * interrupted rm leaves a container whose inode may name a checkpoint with no part 0 left
 * (gc and readers then refuse it), which only removing it again ends.
 */
function partly(
  url: string,
  thrown: unknown,
  done: { aborted: number; deleted: number },
  toAbort: number,
  toDelete: number,
): unknown {
  // One that is no Error is said as one, with how far the removal came.
  const failure = asError(thrown, () => `removeContainer of ${url}`)
  if (!StreamSegmentError.is(failure)) return failure
  let what: string
  if (done.aborted < toAbort) what = `aborted ${done.aborted} of the ${toAbort} open uploads and deleted nothing`
  else if (done.deleted < toDelete)
    what = `deleted ${done.deleted} of the ${toDelete} segment objects (part 0s first; some of the batch that failed may be gone too), not the inode`
  // Its delete cut after the store had it, the inode may be gone too: a second run then finds no container.
  else what = `deleted the ${toDelete} segment objects, the inode maybe not`
  return new StreamSegmentError(
    failure.code,
    `${url}: removeContainer: ${what}, then: ${failure.message}; removing it again deletes the rest`,
    { cause: failure },
  )
}
