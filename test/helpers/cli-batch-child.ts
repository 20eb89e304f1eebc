/**
 * Several `stream-segment` invocations in one process, one after the other, for the CLI
 * tests with many cases that are each refused or fail before any data moves: the process
 * loads the command once rather than once per case. Each call runs the `main` that
 * bin/stream-segment.cjs runs (dist/cjs), in its own working directory, with stdout and
 * stderr of its own. Usage: node cli-batch-child.js '<calls as JSON>'; stdin is the calls'
 * stdin (the tests close it at once); prints every result as JSON.
 */
import { createRequire } from 'node:module'
import { Writable } from 'node:stream'
import type { main as cliMain } from '../../lib/cli.js'

/** A stream (not a terminal) that keeps what is written, as a pipe to the test would. */
function kept() {
  const chunks: Buffer[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(Buffer.from(chunk))
      callback()
    },
  })
  return { stream, text: () => Buffer.concat(chunks).toString() }
}

const { main } = createRequire(import.meta.url)('../../../cjs/lib/cli.js') as { main: typeof cliMain }
const calls = JSON.parse(process.argv[2] ?? '[]') as Array<{ args: string[]; cwd?: string }>
const home = process.cwd()
const results: Array<{ status: number; stdout: string; stderr: string }> = []
for (const { args, cwd } of calls) {
  process.chdir(cwd ?? home)
  const out = kept()
  const err = kept()
  const status = await main(args, out.stream, err.stream)
  results.push({ status, stdout: out.text(), stderr: err.text() })
}
process.chdir(home)
process.stdout.write(JSON.stringify(results))
