/**
 * A container's keys, from one listing: which checkpoints have which parts, each
 * object's size, and whether there is a commit point. Keys that do not parse as segment
 * keys or `inode` are left out: nothing here ever reads or touches them.
 */
import { StreamSegmentError } from '../errors.js'
import { INODE_KEY, parseKey } from '../format/names.js'
import type { ObjectStore } from '../store/types.js'

export interface ContainerListing {
  /** Size of every segment object, by key. */
  sizes: Map<string, number>
  /** The parts of every checkpoint number seen, and their bytes. */
  byCno: Map<number, { parts: number[]; bytes: number }>
  hasInode: boolean
}

/** Lists the container; ERR_NOT_FOUND when it has neither an inode nor a checkpoint. */
export async function listContainer(store: ObjectStore, signal?: AbortSignal): Promise<ContainerListing> {
  const sizes = new Map<string, number>()
  const byCno = new Map<number, { parts: number[]; bytes: number }>()
  let hasInode = false
  for await (const e of store.list('', { signal })) {
    const k = parseKey(e.key)
    if (k === undefined) continue
    if (k.kind === 'inode') {
      hasInode = true
      continue
    }
    sizes.set(e.key, e.size)
    let c = byCno.get(k.cno)
    if (c === undefined) byCno.set(k.cno, (c = { parts: [], bytes: 0 }))
    c.parts.push(k.part)
    c.bytes += e.size
  }
  if (!hasInode && byCno.size === 0) {
    throw StreamSegmentError.notFound(`${store.url}: no container here (no ${INODE_KEY} object, no checkpoints)`)
  }
  return { sizes, byCno, hasInode }
}
