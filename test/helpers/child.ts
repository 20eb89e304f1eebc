/**
 * Runs a Node program (a compiled test helper) as its own process, for the tests that kill
 * a writer with SIGKILL at a chosen moment and look at what it left.
 */
import { type ChildProcess, spawn } from 'node:child_process'

export interface ChildRun {
  /** Every line it printed on stdout, in order. */
  lines: string[]
  /** Whether it ended by our SIGKILL. */
  killed: boolean
}

export interface ChildWatch {
  /** Called with each stdout line as it comes (with every line so far); `kill` SIGKILLs it after `ms` (default at once). */
  onLine?: (line: string, lines: readonly string[], kill: (ms?: number) => void) => void
  /** SIGKILL it this long after it starts, whatever it printed. */
  killAfterMs?: number
}

/**
 * Resolves once the program has exited and its output is read, with its lines: after our
 * SIGKILL, or by itself with exit code 0. Any other end (an exit code, another signal, a failed spawn) rejects
 * with its stderr.
 */
export function runNode(program: string, args: readonly string[], watch: ChildWatch = {}): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [program, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    const lines: string[] = []
    let pending = ''
    let stderr = ''
    let killing = false
    const kill = (ms = 0) => {
      if (killing) return
      killing = true
      setTimeout(() => child.kill('SIGKILL'), ms)
    }
    if (watch.killAfterMs !== undefined) kill(watch.killAfterMs)
    child.stdout.on('data', (d: Buffer) => {
      pending += d.toString()
      const parts = pending.split('\n')
      pending = parts.pop() ?? ''
      for (const line of parts) {
        lines.push(line)
        watch.onLine?.(line, lines, kill)
      }
    })
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString()
    })
    child.on('error', reject)
    // 'close', not 'exit': a child's stdio can still hold lines when it has exited (its last
    // lines, or those written before our SIGKILL), and a run judged on fewer lines than it
    // printed takes a finished write for one never acknowledged.
    child.on('close', (code, signal) => {
      if (signal === 'SIGKILL' && killing) resolve({ lines, killed: true })
      else if (code === 0) resolve({ lines, killed: false })
      else reject(new Error(`${program} exited ${code ?? signal}: ${stderr}`))
    })
  })
}

/**
 * What `child` prints, gathered as it comes: its stdout and stderr so far as text ('' for
 * one not piped), decoded whole (a character may straddle two chunks).
 */
export function collected(child: ChildProcess): { stdout: () => string; stderr: () => string } {
  const out: Buffer[] = []
  const err: Buffer[] = []
  child.stdout?.on('data', (b: Buffer) => out.push(b))
  child.stderr?.on('data', (b: Buffer) => err.push(b))
  return { stdout: () => Buffer.concat(out).toString(), stderr: () => Buffer.concat(err).toString() }
}

/**
 * Calls `fn` on each item, at most `limit` at a time (independent child-process runs, which
 * wait on their children's I/O more than they use a core); resolves with the results in the
 * items' order. After a failure no item starts: rejects with a failure once the
 * calls under way have ended.
 */
export async function atMost<T, R>(limit: number, items: readonly T[], fn: (item: T, index: number) => Promise<R>) {
  const results: R[] = new Array(items.length)
  let next = 0
  let failed = false
  const lane = async () => {
    while (next < items.length && !failed) {
      const i = next++
      try {
        results[i] = await fn(items[i] as T, i)
      } catch (err) {
        failed = true
        throw err
      }
    }
  }
  const ends = await Promise.allSettled(Array.from({ length: Math.min(limit, items.length) }, lane))
  const first = ends.find((e) => e.status === 'rejected')
  if (first !== undefined) throw (first as PromiseRejectedResult).reason
  return results
}
