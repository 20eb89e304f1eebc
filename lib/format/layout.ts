/**
 * Sizes that follow from the layouts: what an object of given counts takes, how far a
 * pointer reaches, how many entries a node holds. Every size formula of the library is
 * here, so no other file re-derives one with bare numbers.
 */
import { HEADER_BYTES, SUMMARY_ENTRY_BYTES } from './header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from './inode.js'
import { nodeCapacity } from './node.js'
import { MAX_UNIT, UNIT_BYTES } from './pointer.js'

export { nodeCapacity }

/** The most one object can hold: a pointer addresses 2^18 units of 4 KiB in an object (1 GiB). */
export const MAX_OBJECT_BYTES = (MAX_UNIT + 1) * UNIT_BYTES

/** What `n` data blocks of `dataBlockSize` bytes take in an object: their slots and summary entries. */
export function dataSlotsBytes(n: number, dataBlockSize: number): number {
  return n * (dataBlockSize + SUMMARY_ENTRY_BYTES)
}

/**
 * Bytes an object with these counts takes: exactly in a StreamSegment container, at
 * most in a PartedSegment one (its header and summary are padded to a 4 KiB unit).
 */
export function objectBytes(
  dataBlocks: number,
  metaBlocks: number,
  dataBlockSize: number,
  metaBlockSize: number,
  format = FORMAT_STREAM,
): number {
  const padding = format === FORMAT_PARTED ? UNIT_BYTES : 0
  return dataSlotsBytes(dataBlocks, dataBlockSize) + metaBlocks * metaBlockSize + HEADER_BYTES + padding
}

/**
 * The smallest object limit a file can work with: a leaf never leaves its data, so an
 * object must hold a full leaf with all its blocks dirty; twice that leaves part 0 room
 * for index nodes beside it.
 */
export function minObjectBytes(nodeEntries: number, dataBlockSize: number, metaBlockSize: number): number {
  return 2 * (dataSlotsBytes(nodeEntries, dataBlockSize) + metaBlockSize) + HEADER_BYTES
}
