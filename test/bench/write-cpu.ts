// Writer CPU by value: 512 MiB in 16 MiB writes at 4 KiB blocks into the memory store,
// then one flush. Prints CPU seconds per GiB spent in write() calls (copy on intake, block
// map, and the partial segments the writer waits for), the flush, objects and peak RSS.
// Run: npm run build && node dist/esm/test/bench/write-cpu.js   (BENCH_MIB=… to change the size)
import { cpus } from 'node:os'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { crc32Implementation } from '../../lib/util/crc32.js'
import { CpuCountingStore } from '../helpers/cpu-store.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const total = Number(process.env.BENCH_MIB ?? 512) * MiB
const writeSize = 16 * MiB
const source = Buffer.allocUnsafe(writeSize)
fillBlocks(source, 0)

const cpuSeconds = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1e6

async function run(name: string | undefined, settings: Partial<Settings>) {
  const store = new CpuCountingStore(new MemoryStore())
  const file = await SegmentFile.create(store, settings)
  let rss = process.memoryUsage().rss
  const rss0 = rss
  let longest = 0
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  for (let at = 0; at < total; at += writeSize) {
    const w0 = performance.now()
    await file.write(at, source)
    longest = Math.max(longest, performance.now() - w0)
    rss = Math.max(rss, process.memoryUsage().rss)
  }
  const writeCpu = cpuSeconds(process.cpuUsage(c0))
  const writeStoreCpu = store.cpuMicros / 1e6
  const writeS = (performance.now() - t0) / 1000
  const c1 = process.cpuUsage()
  const timing = await file.flush()
  const flushCpu = cpuSeconds(process.cpuUsage(c1))
  const storeCpu = store.cpuMicros / 1e6
  rss = Math.max(rss, process.memoryUsage().rss)
  const gib = total / 1024 ** 3
  if (name === undefined) return // warm-up
  console.log(
    `| ${name} | ${((writeCpu - writeStoreCpu) / gib).toFixed(2)} | ${((writeCpu + flushCpu - storeCpu) / gib).toFixed(2)} | ${(storeCpu / gib).toFixed(2)} | ${writeS.toFixed(2)} | ${longest.toFixed(0)} | ${(timing.totalMs / 1000).toFixed(2)} | ${timing.objects} | ${((rss - rss0) / MiB).toFixed(0)} |`,
  )
  await file.close()
}

console.log(
  `# write-cpu: ${total / MiB} MiB in ${writeSize / MiB} MiB writes, 4 KiB blocks, memory store (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores, CRC ${crc32Implementation})`,
)
console.log(
  '| settings | writer CPU-s/GiB in write() | writer CPU-s/GiB, write + flush | memory store CPU-s/GiB (its copies, excluded) | write s | longest write ms | flush s | objects | peak RSS growth MiB |',
)
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
await run(undefined, {}) // let the JIT settle first
await run('spec defaults (8 MiB dirty limit: partials while writing)', {})
await run('limits raised, nothing sent ahead (the flush writes everything)', {
  dataCacheDirtyMaxBytesThreshold: 2 * total,
  segmentBufferSize: 2 * total,
  streamSegmentBytes: 0,
})
await run('PartedSegment, limits raised (the flush builds and writes everything)', {
  format: 'parted',
  dataCacheDirtyMaxBytesThreshold: 2 * total,
  segmentBufferSize: 2 * total,
})
await run('limits raised, 1 GiB target (objects filled a piece at a time while writing)', {
  dataCacheDirtyMaxBytesThreshold: 2 * total,
  segmentBufferSize: 2 * total,
  streamSegmentBytes: 1024 * MiB,
})
