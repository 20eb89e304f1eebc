/**
 * The 64 KiB pieces GET bodies are read into (S3Store's `http` path and
 * DirectoryStore.getChunks), kept when their reader gives them back, to be read into again.
 *
 * Why: a read stream keeps up to its read-ahead (160 MiB by default) in pieces for a while,
 * long enough for V8 to move them to its old generation. Pieces freed only by its
 * mark-compact collections make the process's external memory climb, which starts more
 * of those collections, and the C allocator hands much of the freed memory back to the
 * system, to be faulted in again (docs/benchmarks.md, "Reads"). Pieces read into again
 * cost neither; the stream hands its consumer copies, which die young.
 *
 * The ownership rule, which keeps a piece from being read into while anything can still
 * see its bytes:
 * - `takePiece` makes or reuses a piece; a store that answers `getChunks` with pieces it
 *   took calls `lendPieces` on the answer. From then on the caller of `getChunks` owns
 *   them, and any other holder (a `get` answered by one piece, say) never gives them back.
 * - `givePieces(views)`: the caller is done with every view of these pieces. Only a view
 *   covering a whole lent piece counts, and a piece is given back once: the first give
 *   ends the loan, so a second, or a view of a piece never lent, is ignored.
 * - A store whose read fails gives the pieces it took back with `returnPieces`, before
 *   lending them: nothing saw them, and a read that fails must not cost the pool.
 * - At most KEEP_BYTES are kept, and none once KEEP_MS have passed since one was last
 *   given back (a BufferPool: its timer does not keep the process alive).
 */
import { BufferPool } from './buffer-pool.js'
import { allocPieces } from './huge-memory.js'

/** The size of a piece. */
export const PIECE_BYTES = 64 * 1024

const KEEP_BYTES = 128 * 1024 * 1024
const KEEP_MS = 30_000

const pool = new BufferPool(KEEP_BYTES, KEEP_MS)
/** Pieces made and never taken yet: the rest of the last 2 MiB of huge-page memory (util/huge-memory.ts). */
let fresh: Buffer[] = []
/** Memory of pieces made here, and of those lent out now. */
const made = new WeakSet<ArrayBuffer>()
const lent = new WeakSet<ArrayBuffer>()
/**
 * Memory of pieces in the pool now: one given or returned twice would be taken twice, and
 * two GETs would read into it at once. A second give is ignored.
 */
const kept = new WeakSet<ArrayBuffer>()
let reused = 0
/** Pieces taken and not given back (in use, or dropped unreturned to the collector). */
let out = 0

/**
 * A piece of PIECE_BYTES: one given back, else a new one (made 2 MiB at a time in memory
 * the kernel may back with huge pages, where the addon is). Its bytes are unspecified.
 */
export function takePiece(): Buffer {
  out++
  const p = pool.take(PIECE_BYTES, true)
  if (p !== undefined) {
    kept.delete(p.buffer as ArrayBuffer)
    reused++
    return p
  }
  if (fresh.length === 0) fresh = allocPieces(PIECE_BYTES)?.reverse() ?? [Buffer.allocUnsafeSlow(PIECE_BYTES)]
  const piece = fresh.pop() as Buffer
  made.add(piece.buffer as ArrayBuffer)
  return piece
}

/** The caller of getChunks now owns these pieces (those made here) and may give them back. */
export function lendPieces(pieces: readonly Uint8Array[]): void {
  for (const p of pieces) if (whole(p) && made.has(p.buffer as ArrayBuffer)) lent.add(p.buffer as ArrayBuffer)
}

/** Whether `v` is a whole piece lent out now: what givePieces would keep. */
export function isLentPiece(v: Uint8Array): boolean {
  return whole(v) && lent.has(v.buffer as ArrayBuffer)
}

/** The caller is done with every view of these pieces: each whole lent one is kept. */
export function givePieces(views: readonly Uint8Array[]): void {
  const back: Buffer[] = []
  for (const v of views) {
    if (!isLentPiece(v)) continue
    lent.delete(v.buffer as ArrayBuffer)
    keep(back, v.buffer as ArrayBuffer)
  }
  if (back.length > 0) pool.give(back)
  out -= back.length
}

/**
 * Pieces a store took and never lent (its read failed: nothing can still read into them,
 * nobody saw them): kept, to be read into again. Other views are ignored.
 */
export function returnPieces(pieces: readonly Uint8Array[]): void {
  const back: Buffer[] = []
  for (const p of pieces) {
    if (!whole(p) || !made.has(p.buffer as ArrayBuffer) || lent.has(p.buffer as ArrayBuffer)) continue
    keep(back, p.buffer as ArrayBuffer)
  }
  if (back.length > 0) pool.give(back)
  out -= back.length
}

/** Lets every kept piece go, and those made but not taken yet. */
export function dropPieces(): void {
  pool.clear()
  fresh = []
}

/**
 * Bytes kept now, how many pieces takePiece has reused, and how many it handed out and
 * were not given back (for tests and benchmarks).
 */
export function pieceStats(): { keptBytes: number; reused: number; out: number } {
  return { keptBytes: pool.bytes, reused, out }
}

/** Adds the piece of memory `m` to `back`, unless it is in the pool already or in `back`. */
function keep(back: Buffer[], m: ArrayBuffer): void {
  if (kept.has(m)) return
  kept.add(m)
  back.push(Buffer.from(m))
}

function whole(v: Uint8Array): boolean {
  return v.byteOffset === 0 && v.byteLength === PIECE_BYTES && v.buffer.byteLength === PIECE_BYTES
}
