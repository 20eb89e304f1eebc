// Benchmark (a program, not a test): what a process costs to start, each row a fresh
// `node` run again and again, side by side with Node's own start and with loading the AWS
// SDK's S3 client alone:
//   node                        `node -e 0`: the floor every command pays
//   @aws-sdk/client-s3          `node -e "require('@aws-sdk/client-s3')"`
//   import / require            the library loaded, ESM and CommonJS builds, nothing run
//   stream-segment --help, put, get, ls
//                               the CLI (bin/stream-segment.cjs) on a directory store in
//                               the temporary directory: put of a --mib file, get of it
//                               back to a file (compared with the source), ls
// Each row: median (min–max) over --runs runs of wall milliseconds and CPU milliseconds
// (the child's user + system time, read from /proc on Linux; "-" elsewhere; 10 ms ticks).
// One unmeasured run of each row first (the page cache).
//
//   node dist/esm/test/bench/startup.js [--runs 10] [--mib 1]
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import * as os from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { childrenCpuSeconds, medianRange } from '../helpers/bench.js'

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '10' },
    mib: { type: 'string', default: '1' },
  },
})
const runs = Number(args.runs)
const mib = Number(args.mib)
if (!(Number.isInteger(runs) && runs >= 1)) throw new Error(`--runs ${args.runs}: a positive integer`)
if (!(mib > 0)) throw new Error(`--mib ${args.mib}: a positive number`)

const bin = resolve('bin/stream-segment.cjs')
const esm = resolve('dist/esm/lib/index.js')
const cjs = resolve('dist/cjs/lib/index.js')
const env: NodeJS.ProcessEnv = { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' }
delete env.DEBUG

const dir = mkdtempSync(join(os.tmpdir(), 'ss-bench-startup-'))
const source = join(dir, 'source.bin')
const copy = join(dir, 'copy.bin')
const want = Buffer.alloc(Math.round(mib * 1024 * 1024))
for (let i = 0; i < want.length; i += 4096) want.writeUInt32LE(i >>> 0, i)
writeFileSync(source, want)
let containers = 0
const container = join(dir, 'container')

interface Row {
  name: string
  args: () => string[]
  /** Checks the run's effect (the get's file); throws when it is wrong. */
  check?: () => void
}

const rows: Row[] = [
  { name: 'node -e 0 (Node alone)', args: () => ['-e', '0'] },
  { name: "node, require('@aws-sdk/client-s3')", args: () => ['-e', "require('@aws-sdk/client-s3')"] },
  {
    name: 'the library imported (ESM build)',
    args: () => ['--input-type=module', '-e', `await import(${JSON.stringify(esm)})`],
  },
  { name: 'the library required (CommonJS build)', args: () => ['-e', `require(${JSON.stringify(cjs)})`] },
  { name: 'stream-segment --help', args: () => [bin, '--help'] },
  // Each put into a container of its own; the get and ls read the first one.
  {
    name: `stream-segment put (${mib} MiB file, directory store)`,
    args: () => [bin, 'put', source, join(dir, `put-${containers++}`)],
  },
  {
    name: 'stream-segment get (to a file, directory store)',
    args: () => [bin, 'get', container, copy],
    check: () => {
      if (!readFileSync(copy).equals(want)) throw new Error('get: the file read back differs from the one put')
    },
  },
  { name: 'stream-segment ls (directory store)', args: () => [bin, 'ls', container] },
]

function runOnce(row: Row): { wallMs: number; cpuMs: number } {
  const c0 = childrenCpuSeconds()
  const t0 = performance.now()
  const r = spawnSync(process.execPath, row.args(), { env, encoding: 'utf8' })
  const wallMs = performance.now() - t0
  const c1 = childrenCpuSeconds()
  if (r.status !== 0) throw new Error(`${row.name}: exit ${r.status ?? r.signal}: ${r.stderr}`)
  row.check?.()
  return { wallMs, cpuMs: c0 === undefined || c1 === undefined ? Number.NaN : (c1 - c0) * 1000 }
}

function main(): void {
  const put = spawnSync(process.execPath, [bin, 'put', source, container], { env, encoding: 'utf8' })
  if (put.status !== 0) throw new Error(`the container to read: put failed: ${put.stderr}`)
  const cpus = os.cpus()
  console.log(
    `# start-up: each row a fresh process, ${runs} runs (median (min–max)); ${cpus[0]?.model} × ${cpus.length} cores, node ${process.version}`,
  )
  console.log('| command | wall ms | CPU ms |')
  console.log('|---|---:|---:|')
  for (const row of rows) {
    runOnce(row) // the page cache
    const wall: number[] = []
    const cpu: number[] = []
    for (let i = 0; i < runs; i++) {
      const r = runOnce(row)
      wall.push(r.wallMs)
      cpu.push(r.cpuMs)
    }
    const cpuCell = cpu.some((x) => Number.isNaN(x)) ? '-' : medianRange(cpu, 0)
    console.log(`| ${row.name} | ${medianRange(wall, 0)} | ${cpuCell} |`)
  }
}

try {
  main()
} finally {
  rmSync(dir, { recursive: true, force: true })
}
