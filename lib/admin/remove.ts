/**
 * Removing a whole container: every open upload under its segment keys aborted, every
 * segment object deleted (part 0s first, so no checkpoint is ever openable without its
 * data), then the inode, last. Keys that are not segment keys or `inode` are left alone.
 * A writer still making the container's first checkpoint (no inode yet) finds the
 * objects gone before it creates the inode, and publishes nothing (write/flush.ts).
 * A directory store is then swept of what crashed writers left (temporary files, their
 * sidecars, locks), so that the folder holds none of the store's own leftovers.
 */
import { abortUpload, deleteInode, deleteSegments, listContainer, listOpenUploads } from '../container/listing.js'
import { checkCallOptions } from '../settings.js'
import { sweepStoreLeftovers } from '../store/directory.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
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
 */
export async function removeContainer(
  where: StoreLocation | ObjectStore,
  options: { signal?: AbortSignal; onProgress?: (progress: RemoveProgress) => void } = {},
): Promise<RemoveResult> {
  const store = storeAt(where, 'removeContainer')
  checkCallOptions('removeContainer', options, ['signal', 'onProgress'])
  const { signal, onProgress } = options
  const listing = await listContainer(store, signal)
  const uploads = await listOpenUploads(store, signal)
  for (const u of uploads) await abortUpload(store, u, signal)
  const keys = [...listing.sizes.keys()].sort(part0First)
  const objectsToDelete = keys.length + (listing.hasInode ? 1 : 0)
  onProgress?.({ deletedObjects: 0, objectsToDelete })
  await deleteSegments(store, keys, signal, (deletedObjects) => onProgress?.({ deletedObjects, objectsToDelete }))
  if (listing.hasInode) {
    await deleteInode(store, signal)
    onProgress?.({ deletedObjects: objectsToDelete, objectsToDelete })
  }
  await sweepStoreLeftovers(store)
  let bytes = 0
  for (const size of listing.sizes.values()) bytes += size
  return {
    url: store.url,
    deletedObjects: objectsToDelete,
    deletedBytes: bytes,
    abortedUploads: uploads.length,
  }
}
