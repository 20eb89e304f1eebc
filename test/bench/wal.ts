// The cost of the WAL: BENCH_MIB (default 512) MiB written in 1 MiB writes into a directory
// store, then one flush, with no WAL and with each sync mode ('none', 'interval' at 100 ms,
// 'always'), and with 'always' and a background publish() every 64 MiB while writing (the
// flush then has only the tail left), in one process run. Prints writer CPU seconds per GiB (write + flush), the
// write and flush times, MB/s over both, the log's fsyncs and bytes, and peak RSS growth.
// The store and the log are in one temporary folder (the file system is printed).
// Run: npm run build && node dist/esm/test/bench/wal.js
import { execFileSync } from 'node:child_process'
import { promises as fs } from 'node:fs'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { WalOptions } from '../../lib/wal/wal.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const total = Number(process.env.BENCH_MIB ?? 512) * MiB
const writeSize = MiB
const source = Buffer.allocUnsafe(total)
fillBlocks(source, 0)

const cpuSeconds = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1e6
const root = await fs.mkdtemp(join(tmpdir(), 'ss-bench-wal-'))

async function run(name: string | undefined, wal: Omit<WalOptions, 'dir'> | undefined, i: number, publishEvery = 0) {
  const store = new DirectoryStore(join(root, `c${i}`))
  const dir = join(root, `wal${i}`)
  const file = await SegmentFile.create(store, wal === undefined ? {} : { wal: { dir, ...wal } })
  const rss0 = process.memoryUsage().rss
  let rss = rss0
  let walBytes = 0
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const publishes: Promise<unknown>[] = []
  for (let at = 0; at < total; at += writeSize) {
    await file.write(at, source.subarray(at, at + writeSize))
    if (publishEvery > 0 && (at + writeSize) % publishEvery === 0 && at + writeSize < total)
      publishes.push(file.publish())
    rss = Math.max(rss, process.memoryUsage().rss)
  }
  const writeS = (performance.now() - t0) / 1000
  if (wal !== undefined) {
    for (const name of await fs.readdir(dir))
      if (name.endsWith('.log')) walBytes += (await fs.stat(join(dir, name))).size
  }
  const t1 = performance.now()
  await file.flush()
  await Promise.all(publishes)
  const flushS = (performance.now() - t1) / 1000
  const cpu = cpuSeconds(process.cpuUsage(c0))
  await file.close()
  await fs.rm(join(root, `c${i}`), { recursive: true })
  await fs.rm(dir, { recursive: true, force: true })
  if (name === undefined) return
  const gib = total / 1024 ** 3
  console.log(
    `| ${name} | ${(cpu / gib).toFixed(2)} | ${writeS.toFixed(2)} | ${flushS.toFixed(2)} | ${(total / 1e6 / (writeS + flushS)).toFixed(0)} | ${(walBytes / MiB).toFixed(0)} | ${((rss - rss0) / MiB).toFixed(0)} |`,
  )
}

const fsType = execFileSync('df', ['--output=fstype', root], { encoding: 'utf8' }).split('\n')[1]?.trim()
console.log(
  `# wal: ${total / MiB} MiB in ${writeSize / MiB} MiB writes into a directory store, then one flush (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores, ${tmpdir()} on ${fsType})`,
)
console.log(
  '| WAL | writer CPU-s/GiB (write + flush) | write s | flush s | MB/s | log MiB at the flush | peak RSS growth MiB |',
)
console.log('|---|---:|---:|---:|---:|---:|---:|')
try {
  await run(undefined, undefined, 0) // let the JIT settle first
  await run('none (no WAL)', undefined, 1)
  await run("sync 'none'", { sync: 'none' }, 2)
  await run("sync 'interval', 100 ms", { sync: 'interval', intervalMs: 100 }, 3)
  await run("sync 'always'", { sync: 'always' }, 4)
  await run("sync 'always', publish() every 64 MiB", { sync: 'always' }, 5, 64 * MiB)
} finally {
  await fs.rm(root, { recursive: true, force: true })
}
