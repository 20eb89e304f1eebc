/**
 * Bounds how many tasks run at once; the others wait in arrival order. A slot is taken
 * with `acquire` and given back with `release` (a request whose slot outlives the call
 * that started it: an upload holds one until its body is sent), or around one task by `run`.
 */
export class Limiter {
  /** The most slots ever taken at once. */
  peak = 0
  private active = 0
  private waiting: Array<() => void> = []

  constructor(readonly limit: number) {}

  /** Slots taken now. */
  get inUse(): number {
    return this.active
  }

  /** Takes a slot, waiting for one to be given back when all are taken. */
  async acquire(): Promise<void> {
    // A released slot passes straight to the next waiter, so `active` does not change then.
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve))
    else this.active++
    if (this.active > this.peak) this.peak = this.active
  }

  /** Gives a slot back: to the longest waiter, or to the pool. */
  release(): void {
    const next = this.waiting.shift()
    if (next) next()
    else this.active--
  }

  /** Runs `fn` in a slot. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire()
    try {
      return await fn()
    } finally {
      this.release()
    }
  }
}
