// Micro-benchmark of the CRC-32 implementations present here; lib/util/crc32.ts picks
// the fastest. Run: npm run build && node dist/esm/test/bench/crc32.js
import { randomBytes } from 'node:crypto'
import { cpus } from 'node:os'
import { crc32BlocksWith, crc32Implementation, crc32Implementations } from '../../lib/util/crc32.js'

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

// The summary holds one CRC per 4 KiB block, so a run of blocks costs one call per block,
// unless the implementation hashes many blocks in one call (the addon's crc32Blocks): both
// against one call over the whole run (no per-block CRCs: the floor for the bytes).
console.log('\n# Per-block CRC-32s of 1 MiB runs (256 blocks of 4 KiB), GB/s')
console.log(
  '| implementation | one call per 4 KiB block | one call per run of blocks | one call per 1 MiB run (no per-block CRCs) |',
)
console.log('|---|---:|---:|---:|')
{
  const run = randomBytes(1024 * 1024)
  const view = new Uint8Array(run.buffer, run.byteOffset, run.byteLength)
  const into = new Uint32Array(256)
  const rate = (f: () => void) => {
    for (let i = 0; i < 50; i++) f()
    const n = Math.floor(budgetBytes / 4 / run.byteLength)
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < n; i++) f()
    return ((n * run.byteLength) / Number(process.hrtime.bigint() - t0)).toFixed(2)
  }
  for (const impl of crc32Implementations) {
    const { name, fn } = impl
    const perBlock = rate(() => {
      for (let b = 0; b < 256; b++) into[b] = fn(view.subarray(b * 4096, (b + 1) * 4096))
    })
    const batched = impl.blocks === undefined ? '—' : rate(() => crc32BlocksWith(impl, view, 4096, into))
    const whole = rate(() => fn(view))
    console.log(`| ${name} | ${perBlock} | ${batched} | ${whole} |`)
  }
}
