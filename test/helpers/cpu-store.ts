/**
 * Counts the CPU time a store's calls spend before they first yield: for MemoryStore that
 * is all of its work (copying bodies), which benchmarks subtract to get the writer's own.
 */
import type { ObjectStore } from '../../lib/store/types.js'
import { type CallInfo, WrappedStore } from './wrapped-store.js'

export class CpuCountingStore extends WrappedStore {
  cpuMicros = 0

  constructor(inner: ObjectStore) {
    super(inner)
  }

  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    const c0 = process.cpuUsage()
    const p = run()
    const c = process.cpuUsage(c0)
    this.cpuMicros += c.user + c.system
    return p
  }
}
