/**
 * Buffers given back, kept to be used again: memory whose pages are faulted in already
 * (a new buffer of a few MiB is mapped afresh by the C allocator and faulted in page by
 * page). At most `maxBytes` are kept; giving one more lets the oldest go. The dirty
 * tier's slabs (state/slab-pool.ts), fileSource's reads (streams/upload-file.ts) and the
 * bodies joined for a request (store/common.ts) use it.
 */
export class BufferPool {
  private readonly kept: Buffer[] = []
  private keptBytes = 0

  constructor(readonly maxBytes: number) {}

  /** Bytes kept now. */
  get bytes(): number {
    return this.keptBytes
  }

  /** A kept buffer of exactly `length` bytes (`exact`), or of at least `length`, out of the pool; undefined when none. */
  take(length: number, exact = false): Buffer | undefined {
    const i = this.kept.findIndex((b) => (exact ? b.byteLength === length : b.byteLength >= length))
    if (i < 0) return undefined
    const b = this.kept.splice(i, 1)[0] as Buffer
    this.keptBytes -= b.byteLength
    return b
  }

  /** Keeps `b` (not when it alone is over maxBytes), letting the oldest go to make room. */
  give(b: Buffer): void {
    if (b.byteLength > this.maxBytes) return
    while (this.keptBytes + b.byteLength > this.maxBytes) this.keptBytes -= (this.kept.shift() as Buffer).byteLength
    this.kept.push(b)
    this.keptBytes += b.byteLength
  }

  /** Lets every kept buffer go. */
  clear(): void {
    this.kept.length = 0
    this.keptBytes = 0
  }
}
