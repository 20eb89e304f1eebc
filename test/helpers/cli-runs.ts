/**
 * Many independent `stream-segment` invocations for the CLI tests: each as its own process,
 * several at once (`runAll`), or, for cases refused or failing before any data moves, all
 * in one process that loads the command once (`runBatch`).
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { bin, quietEnv } from './cli.js'

const BATCH = fileURLToPath(new URL('./cli-batch-child.js', import.meta.url))

/** What one invocation gave: as `spawnSync` gives it (stdout as bytes and as text). */
export interface CliRun {
  status: number | null
  stdout: Buffer
  text: string
  stderr: string
}

export interface CliCall {
  args: string[]
  /** Its working directory (default: this process's). */
  cwd?: string
  /** Its stdin, closed after it (default: closed at once, as `spawnSync` without input). */
  input?: string | Uint8Array
}

/** Runs `node bin/stream-segment.cjs …args` (or another program) with the debug log off; resolves once it has closed. */
export function runCli({ args, cwd, input }: CliCall, program = [bin]): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...program, ...args], { env: quietEnv(), cwd })
    const out: Buffer[] = []
    const err: Buffer[] = []
    child.stdout.on('data', (b: Buffer) => out.push(b))
    child.stderr.on('data', (b: Buffer) => err.push(b))
    // A command that fails before reading stdin closes it: EPIPE here, as spawnSync ignores it.
    child.stdin.on('error', () => {})
    child.stdin.end(input ?? '')
    child.on('error', reject)
    child.on('close', (status) => {
      const stdout = Buffer.concat(out)
      resolve({ status, stdout, text: String(stdout), stderr: Buffer.concat(err).toString() })
    })
  })
}

/** Runs every call, `limit` at a time; the results in the calls' order. */
export async function runAll(calls: readonly CliCall[], limit = 4): Promise<CliRun[]> {
  const results: CliRun[] = new Array(calls.length)
  let next = 0
  const lane = async () => {
    while (next < calls.length) {
      const i = next++
      results[i] = await runCli(calls[i] as CliCall)
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, calls.length) }, lane))
  return results
}

/** `runAll` of calls given by name: each result under its call's name. */
export async function runNamed<K extends string>(calls: Record<K, CliCall>, limit = 4): Promise<Record<K, CliRun>> {
  const names = Object.keys(calls) as K[]
  const results = await runAll(
    names.map((n) => calls[n]),
    limit,
  )
  return Object.fromEntries(names.map((n, i) => [n, results[i]])) as Record<K, CliRun>
}

/**
 * Runs every call in one process, one after the other (cli-batch-child.ts), each in its
 * `cwd` with stdin closed; the results in the calls' order. Not for a call that needs a
 * fresh process, its own stdin or output that is not text.
 */
export async function runBatch(calls: readonly Omit<CliCall, 'input'>[]): Promise<CliRun[]> {
  const r = await runCli({ args: [], input: '' }, [BATCH, JSON.stringify(calls)])
  if (r.status !== 0) throw new Error(`cli-batch-child exited ${r.status}: ${r.stderr}`)
  return (JSON.parse(r.text) as Array<{ status: number; stdout: string; stderr: string }>).map((c) => ({
    status: c.status,
    stdout: Buffer.from(c.stdout),
    text: c.stdout,
    stderr: c.stderr,
  }))
}
