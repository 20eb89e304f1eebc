/**
 * A store that fails on purpose, for fault tests (mountpoint-s3's FailureClient):
 * rules pick calls by operation, key pattern and count, and then
 * - 'error':       the call fails with ERR_STORE before reaching the inner store;
 * - 'hang':        the call never answers until its signal fires (then ERR_ABORTED) or
 *                  `release()` lets it through;
 * - 'lose-answer': the call reaches the inner store (the write lands), then fails with
 *                  ERR_STORE as if the answer had been lost on the way back;
 * - 'late':        the call reaches the inner store (the write lands), then fails with
 *                  ERR_TIMEOUT as if its deadline had passed before the answer came.
 * Every call is logged in `calls`, in order, with its outcome.
 */
import { StreamSegmentError } from '../../lib/errors.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { type CallInfo, type StoreOp, WrappedStore } from './wrapped-store.js'

export interface FailRule {
  ops?: StoreOp[]
  key?: RegExp
  /** Fail the nth matching call (1-based); every matching call when absent. */
  nth?: number
  /** How many matching calls from the nth on fail (default 1 with nth, unlimited without). */
  times?: number
  mode?: 'error' | 'hang' | 'lose-answer' | 'late'
}

interface RuleState {
  rule: FailRule
  seen: number
  fired: number
}

export class FailingStore extends WrappedStore {
  readonly calls: Array<CallInfo & { outcome: 'ok' | 'failed' | 'hung' | 'lost' }> = []
  private rules: RuleState[] = []
  private waiting = new Set<() => void>()

  constructor(inner: ObjectStore, rules: FailRule[] = []) {
    super(inner)
    for (const r of rules) this.addRule(r)
  }

  addRule(rule: FailRule): this {
    this.rules.push({ rule, seen: 0, fired: 0 })
    return this
  }

  clearRules(): void {
    this.rules = []
  }

  /** Lets every hung call through to the inner store. */
  release(): void {
    for (const wake of this.waiting) wake()
    this.waiting.clear()
  }

  count(op: StoreOp, outcome?: 'ok' | 'failed' | 'hung' | 'lost'): number {
    return this.calls.filter((c) => c.op === op && (outcome === undefined || c.outcome === outcome)).length
  }

  /** Resolves once a call of one of `ops` hangs (polled every 5 ms). */
  async hangOf(...ops: StoreOp[]): Promise<void> {
    while (!ops.some((op) => this.count(op, 'hung') > 0)) await new Promise((r) => setTimeout(r, 5))
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const mode = this.match(call)
    const entry = { ...call, outcome: 'ok' as 'ok' | 'failed' | 'hung' | 'lost' }
    this.calls.push(entry)
    if (mode === 'error') {
      entry.outcome = 'failed'
      throw StreamSegmentError.store(`injected failure: ${call.op} ${call.key}`)
    }
    if (mode === 'hang') {
      entry.outcome = 'hung'
      await new Promise<void>((resolve, reject) => {
        if (call.signal?.aborted) {
          reject(StreamSegmentError.aborted(`${call.op} ${call.key} aborted while hung`, call.signal.reason))
          return
        }
        const wake = () => resolve()
        this.waiting.add(wake)
        call.signal?.addEventListener(
          'abort',
          () => {
            this.waiting.delete(wake)
            reject(StreamSegmentError.aborted(`${call.op} ${call.key} aborted while hung`, call.signal?.reason))
          },
          { once: true },
        )
      })
    }
    const result = await run()
    if (mode === 'lose-answer') {
      entry.outcome = 'lost'
      throw StreamSegmentError.store(`injected lost answer: ${call.op} ${call.key} landed`)
    }
    if (mode === 'late') {
      entry.outcome = 'lost'
      throw StreamSegmentError.timeout(`injected deadline: ${call.op} ${call.key} landed after it`)
    }
    return result
  }

  private match(call: CallInfo): FailRule['mode'] | undefined {
    for (const s of this.rules) {
      const { rule } = s
      if (rule.ops !== undefined && !rule.ops.includes(call.op)) continue
      if (rule.key !== undefined && !rule.key.test(call.key)) continue
      s.seen++
      const first = rule.nth ?? 1
      const times = rule.times ?? (rule.nth === undefined ? Number.POSITIVE_INFINITY : 1)
      if (s.seen >= first && s.fired < times) {
        s.fired++
        return rule.mode ?? 'error'
      }
    }
    return undefined
  }
}
