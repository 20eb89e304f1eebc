/**
 * Memory the kernel may back with transparent huge pages (Linux), from the package's
 * memory addon (`lib/native/memory.c`, built at install by node-gyp, optional): the dirty
 * tier's slabs and the GET pieces.
 *
 * Why: the dirty tier fills its slabs up to the dirty limit (96 MiB by default), a read
 * stream its pieces up to its read-ahead (160 MiB), and each fresh 4 KiB page of them
 * costs a fault: 4–5 CPU-seconds per GiB on the virtual machines the benchmarks run on
 * (docs/benchmarks.md, "Huge pages"), paid by every process that writes or reads. A
 * 2 MiB-aligned region advised MADV_HUGEPAGE is faulted in 2 MiB at a time when the
 * kernel has huge pages free: ~0.1–0.3 CPU-s/GiB there. When it has none, or THP is off,
 * the pages are ordinary ones and cost what they did.
 *
 * `STREAM_SEGMENT_HUGE_PAGES=0` turns it off (Buffer.allocUnsafeSlow instead).
 */
import { optionalRequire } from './optional-require.cjs'

/** The addon's exports (lib/native/memory.c; empty off Linux). */
interface NativeMemory {
  alloc(bytes: number, pieceBytes: number): ArrayBuffer[] | undefined
  ALIGN: number
}

/** Where node-gyp leaves the addon, from dist/{esm,cjs}/lib/util/ (optionalRequire's folder). */
const NATIVE_ADDON_PATH = '../../../../build/Release/stream_segment_memory.node'

/** The addon when it loads, exports `alloc`, and is not turned off. */
export const nativeMemory: NativeMemory | undefined = (() => {
  if (process.env.STREAM_SEGMENT_HUGE_PAGES === '0') return undefined
  const mod = optionalRequire<NativeMemory>(NATIVE_ADDON_PATH)
  return mod !== undefined && typeof mod.alloc === 'function' && Number.isInteger(mod.ALIGN) ? mod : undefined
})()

/** The largest region the addon maps in one call (memory.c's MAX_BYTES): it refuses more. */
const NATIVE_MAX_BYTES = 1024 * 1024 * 1024

/**
 * `bytes` of memory for a slab, its bytes unspecified and its pages not faulted in yet:
 * from the addon when `bytes` is a multiple of its alignment (2 MiB), at most 1 GiB, and
 * the mapping succeeds, else from Buffer.allocUnsafeSlow.
 */
export function allocSlabMemory(bytes: number): Buffer {
  if (nativeMemory !== undefined && bytes > 0 && bytes <= NATIVE_MAX_BYTES && bytes % nativeMemory.ALIGN === 0) {
    const memory = nativeMemory.alloc(bytes, bytes)?.[0]
    if (memory !== undefined) return Buffer.from(memory)
  }
  return Buffer.allocUnsafeSlow(bytes)
}

/**
 * A buffer of at least `bytes` for reads of a source: from allocSlabMemory rounded up to
 * the addon's alignment when `bytes` is 1 MiB or more (so less than half of it is never
 * used), else `bytes` from Buffer.allocUnsafeSlow. Its bytes are unspecified.
 */
export function allocLarge(bytes: number): Buffer {
  const align = nativeMemory?.ALIGN
  if (align === undefined || bytes < align / 2) return Buffer.allocUnsafeSlow(bytes)
  return allocSlabMemory(Math.ceil(bytes / align) * align)
}

/**
 * 2 MiB of memory as pieces of `pieceBytes` (a divisor of 2 MiB), each a buffer over its
 * own ArrayBuffer, their bytes unspecified and their pages not faulted in yet; undefined
 * without the addon or when the mapping fails. The memory goes back to the system once
 * every piece has been collected.
 */
export function allocPieces(pieceBytes: number): Buffer[] | undefined {
  if (nativeMemory === undefined || pieceBytes <= 0 || nativeMemory.ALIGN % pieceBytes !== 0) return undefined
  return nativeMemory.alloc(nativeMemory.ALIGN, pieceBytes)?.map((memory) => Buffer.from(memory))
}
