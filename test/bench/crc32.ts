// Micro-benchmark of the CRC-32 implementations present here; lib/crc32.ts picks the
// fastest. Run: npm run build && node dist/esm/test/bench/crc32.js
import { randomBytes } from 'node:crypto'
import { cpus } from 'node:os'
import { crc32Implementation, crc32Implementations } from '../../lib/util/crc32.js'

const sizes = [4096, 64 * 1024, 16 * 1024 * 1024]
const budgetBytes = 2 * 1024 ** 3

console.log(`# CRC-32 throughput, GB/s (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores)`)
console.log(
  `| implementation | ${sizes.map((s) => `${s >= 1 << 20 ? `${s >> 20} MiB` : `${s >> 10} KiB`} inputs`).join(' | ')} |`,
)
console.log(`|---|${sizes.map(() => '---:').join('|')}|`)
for (const { name, fn } of crc32Implementations) {
  const cells = sizes.map((size) => {
    const buf = randomBytes(size)
    const n = Math.max(1, Math.floor(budgetBytes / 4 / size))
    for (let i = 0; i < Math.min(n, 100); i++) fn(buf) // warm up
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < n; i++) fn(buf)
    const ns = Number(process.hrtime.bigint() - t0)
    return ((n * size) / ns).toFixed(2)
  })
  console.log(`| ${name}${name === crc32Implementation ? ' (chosen)' : ''} | ${cells.join(' | ')} |`)
}
