/**
 * A store that models a network link in front of another store (object_store's
 * ThrottledStore), for benchmarks and backpressure tests:
 * - every request waits `latencyMs` (time to first byte) before it moves any bytes;
 * - request bodies (put, uploadPart) and response bodies (get) then flow through one
 *   shared link of `bandwidth` bytes/s, split evenly between the transfers in progress,
 *   each also capped at `perRequestBandwidth` (one connection's limit);
 * - the inner store is called when the transfer has finished, so nothing lands early.
 * It counts requests by operation, bytes each way, and the peak number in flight.
 */
import type { ObjectStore } from '../../lib/store/types.js'
import { type CallInfo, type StoreOp, WrappedStore } from './wrapped-store.js'

export interface LinkModel {
  latencyMs: number
  /** Bytes per second shared by all transfers; Infinity for none. */
  bandwidth: number
  /** Bytes per second one request can reach; Infinity for none. */
  perRequestBandwidth?: number
}

interface Transfer {
  remaining: number
  done: () => void
}

const TICK_MS = 2

export class ThrottledStore extends WrappedStore {
  readonly requests: Partial<Record<StoreOp, number>> = {}
  bytesUp = 0
  bytesDown = 0
  inFlight = 0
  peakInFlight = 0
  private transfers = new Set<Transfer>()
  private timer: NodeJS.Timeout | undefined
  private last = 0

  constructor(
    inner: ObjectStore,
    readonly link: LinkModel,
  ) {
    super(inner)
  }

  get totalRequests(): number {
    return Object.values(this.requests).reduce((a, b) => a + (b ?? 0), 0)
  }

  resetCounters(): void {
    for (const k of Object.keys(this.requests)) delete this.requests[k as StoreOp]
    this.bytesUp = this.bytesDown = this.peakInFlight = 0
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>, bytesDown: (r: T) => number): Promise<T> {
    this.requests[call.op] = (this.requests[call.op] ?? 0) + 1
    this.peakInFlight = Math.max(this.peakInFlight, ++this.inFlight)
    try {
      if (this.link.latencyMs > 0) await new Promise((r) => setTimeout(r, this.link.latencyMs))
      await this.transfer(call.bytesUp)
      this.bytesUp += call.bytesUp
      const result = await run()
      const down = bytesDown(result)
      await this.transfer(down)
      this.bytesDown += down
      return result
    } finally {
      this.inFlight--
    }
  }

  private transfer(bytes: number): Promise<void> {
    if (bytes === 0 || (this.link.bandwidth === Number.POSITIVE_INFINITY && !this.link.perRequestBandwidth)) {
      return Promise.resolve()
    }
    return new Promise((done) => {
      this.transfers.add({ remaining: bytes, done })
      if (this.timer === undefined) {
        this.last = performance.now()
        this.timer = setInterval(() => this.tick(), TICK_MS)
      }
    })
  }

  private tick(): void {
    const now = performance.now()
    const seconds = (now - this.last) / 1000
    this.last = now
    // Share the link evenly; what a capped transfer cannot use goes to the others.
    let budget = this.link.bandwidth * seconds
    const cap = (this.link.perRequestBandwidth ?? Number.POSITIVE_INFINITY) * seconds
    let active = [...this.transfers]
    while (active.length > 0 && budget > 1e-9) {
      const share = Math.min(budget / active.length, cap)
      const next: Transfer[] = []
      for (const t of active) {
        const take = Math.min(share, t.remaining)
        t.remaining -= take
        budget -= take
        if (t.remaining > 0 && take === share && share < cap) next.push(t)
      }
      if (share >= cap) break
      active = next
    }
    for (const t of this.transfers) {
      if (t.remaining <= 0.5) {
        this.transfers.delete(t)
        t.done()
      }
    }
    if (this.transfers.size === 0) {
      clearInterval(this.timer)
      this.timer = undefined
    }
  }
}
