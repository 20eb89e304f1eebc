/**
 * Views of bytes [from, to) of what `chunks` hold in order: a chunk wholly inside is given as
 * it is, and no view is empty.
 */
export function sliceChunks(chunks: readonly Uint8Array[], from: number, to: number): Uint8Array[] {
  const out: Uint8Array[] = []
  if (to <= from) return out
  let base = 0
  for (const c of chunks) {
    const end = base + c.byteLength
    if (end > from && base < to && end > base) {
      const a = Math.max(from, base) - base
      const b = Math.min(to, end) - base
      out.push(a === 0 && b === c.byteLength ? c : c.subarray(a, b))
    }
    base = end
    if (base >= to) break
  }
  return out
}
