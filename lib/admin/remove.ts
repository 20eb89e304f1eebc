/**
 * Removing a whole container: every open upload under its segment keys aborted, every
 * segment object deleted (part 0s first, so no checkpoint is ever openable without its
 * data), then the inode, last. Keys that are not segment keys or `inode` are left alone.
 */
import { abortUpload, deleteInode, deleteSegments, listContainer, listOpenUploads } from '../container/listing.js'
import { checkCallOptions } from '../settings.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { part0First } from './gc.js'

export interface RemoveResult {
  url: string
  deletedObjects: number
  deletedBytes: number
  abortedUploads: number
}

/** Deletes the container at `where`; ERR_NOT_FOUND when there is none. */
export async function removeContainer(
  where: StoreLocation | ObjectStore,
  options: { signal?: AbortSignal } = {},
): Promise<RemoveResult> {
  const store = storeAt(where, 'removeContainer')
  checkCallOptions('removeContainer', options, ['signal'])
  const { signal } = options
  const listing = await listContainer(store, signal)
  const uploads = await listOpenUploads(store, signal)
  for (const u of uploads) await abortUpload(store, u, signal)
  const keys = [...listing.sizes.keys()].sort(part0First)
  await deleteSegments(store, keys, signal)
  if (listing.hasInode) await deleteInode(store, signal)
  let bytes = 0
  for (const size of listing.sizes.values()) bytes += size
  return {
    url: store.url,
    deletedObjects: keys.length + (listing.hasInode ? 1 : 0),
    deletedBytes: bytes,
    abortedUploads: uploads.length,
  }
}
