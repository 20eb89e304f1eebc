/**
 * Buffers given back, kept to be used again: memory whose pages are faulted in already
 * (a new buffer of a few MiB is mapped afresh by the C allocator and faulted in page by
 * page). At most `maxBytes` are kept; giving one more lets the oldest go. With `idleMs`,
 * every kept buffer goes once that long has passed since one was last given back (the
 * timer does not keep the process alive). The newest buffer that fits is taken first.
 * The dirty tier's slabs (state/slab-pool.ts), the GET pieces (util/piece-pool.ts),
 * fileSource's reads (streams/upload-file.ts) and the bodies joined for a request
 * (store/common.ts) use it.
 */
export class BufferPool {
  private readonly kept: Buffer[] = []
  private keptBytes = 0
  private timer: NodeJS.Timeout | undefined

  constructor(
    readonly maxBytes: number,
    readonly idleMs?: number,
  ) {}

  /** Bytes kept now. */
  get bytes(): number {
    return this.keptBytes
  }

  /** A kept buffer of exactly `length` bytes (`exact`), or of at least `length`, out of the pool; undefined when none. */
  take(length: number, exact = false): Buffer | undefined {
    const i = this.kept.findLastIndex((b) => (exact ? b.byteLength === length : b.byteLength >= length))
    if (i < 0) return undefined
    const b = i === this.kept.length - 1 ? (this.kept.pop() as Buffer) : (this.kept.splice(i, 1)[0] as Buffer)
    this.keptBytes -= b.byteLength
    return b
  }

  /** Keeps each buffer (not one alone over maxBytes), letting the oldest go to make room. */
  give(buffers: Buffer | readonly Buffer[]): void {
    for (const b of Buffer.isBuffer(buffers) ? [buffers] : buffers) {
      if (b.byteLength > this.maxBytes) continue
      while (this.keptBytes + b.byteLength > this.maxBytes) this.keptBytes -= (this.kept.shift() as Buffer).byteLength
      this.kept.push(b)
      this.keptBytes += b.byteLength
    }
    if (this.idleMs === undefined || this.keptBytes === 0) return
    if (this.timer !== undefined) this.timer.refresh()
    else {
      this.timer = setTimeout(() => this.clear(), this.idleMs)
      this.timer.unref()
    }
  }

  /** Lets every kept buffer go. */
  clear(): void {
    clearTimeout(this.timer)
    this.timer = undefined
    this.kept.length = 0
    this.keptBytes = 0
  }
}
