/**
 * Slabs of dirty-tier bytes that closed files gave back, kept for the next dirty tier of
 * this process. A slab's pages, once faulted in, cost nothing to write again; fresh ones
 * cost a page fault each, which on some virtual machines adds up to several CPU-seconds
 * per GiB, paid again by every file, as the allocator hands freed memory back to the
 * system. A process that writes one file or stream after another reuses its slabs this
 * way (the checkpoints of one open file share its tier already). Fresh slabs come from
 * util/huge-memory.ts, whose pages cost less to fault in where huge pages are at hand.
 *
 * - A slab is given back only when nothing may read it any more (DirtyTier.clear: the file
 *   is closing or rolling back, no request in flight) and no slot of it is pinned.
 * - Its bytes are left as they were: a tier hands out slots whose bytes are unspecified,
 *   and writes every byte of a slot before it is read or sent, as it does when it reuses
 *   a slot of its own.
 * - At most KEEP_BYTES are kept, and nothing once KEEP_MS have passed since a slab was
 *   last given back (a BufferPool: its timer does not keep the process alive).
 */
import { BufferPool } from '../util/buffer-pool.js'
import { allocSlabMemory } from '../util/huge-memory.js'

const KEEP_BYTES = 128 * 1024 * 1024
const KEEP_MS = 30_000

const pool = new BufferPool(KEEP_BYTES, KEEP_MS)

/** A slab of `bytes`: a kept one of that size, else a fresh one with its pages faulted in. */
export function takeSlab(bytes: number): Buffer {
  const kept = pool.take(bytes, true)
  if (kept !== undefined) return kept
  const slab = allocSlabMemory(bytes)
  slab.fill(0) // fault the pages in now, not on the write path
  return slab
}

/** Keeps `slabs` for the next tier, within KEEP_BYTES. */
export function giveSlabs(slabs: readonly Buffer[]): void {
  pool.give(slabs)
}

/** Lets every kept slab go. */
export function dropSlabs(): void {
  pool.clear()
}

/** Bytes kept now (for tests). */
export function keptSlabBytes(): number {
  return pool.bytes
}
