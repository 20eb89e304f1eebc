/**
 * The main job: pipe a file into a container on the embedded default store (a local
 * directory), print the flush's timing, then read the container back and compare.
 *
 *   node dist/esm/examples/pipe-file.js [file] [container]
 *
 * Without a file it makes a 256 MiB sample (DEMO_MIB to change); both live in DEMO_DIR
 * (default .tmp/), the container as DEMO_DIR/demo-container. Exits non-zero if what is
 * read back differs.
 */
import { createHash, randomFillSync } from 'node:crypto'
import { createReadStream, createWriteStream, existsSync, mkdirSync, statSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { createStreamSegmentWriteStream, openStore, SegmentFile } from '../lib/index.js'

const MiB = 1024 * 1024

async function makeSample(path: string, bytes: number): Promise<void> {
  mkdirSync(dirname(path), { recursive: true })
  const chunk = Buffer.allocUnsafe(MiB)
  async function* data() {
    for (let at = 0; at < bytes; at += MiB) yield randomFillSync(chunk).subarray(0, Math.min(MiB, bytes - at))
  }
  await pipeline(data, createWriteStream(path))
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const b of createReadStream(path)) h.update(b as Buffer)
  return h.digest('hex')
}

const demoDir = process.env.DEMO_DIR ?? '.tmp'
const file = resolve(process.argv[2] ?? `${demoDir}/demo-input.bin`)
const container = resolve(process.argv[3] ?? `${demoDir}/demo-container`)
if (process.argv[2] === undefined && !existsSync(file)) {
  const mib = Number(process.env.DEMO_MIB ?? 256)
  console.log(`making a ${mib} MiB sample file at ${file}`)
  await makeSample(file, mib * MiB)
}
const size = statSync(file).size

const t0 = performance.now()
const writer = createStreamSegmentWriteStream({ url: container })
await pipeline(createReadStream(file, { highWaterMark: MiB }), writer)
const seconds = (performance.now() - t0) / 1000
const timing = writer.flushTiming
console.log(
  `wrote ${size} bytes from ${file} into ${container} in ${seconds.toFixed(2)} s (${(size / MiB / seconds).toFixed(0)} MiB/s)`,
)
console.log('FlushTiming', timing)

// Read it back through a fresh handle, 16 MiB at a time into one buffer, and compare hashes.
const reader = await SegmentFile.open(openStore(container), { readOnly: true })
const h = createHash('sha256')
const buffer = Buffer.allocUnsafe(16 * MiB)
for (let at = 0; at < reader.size; ) {
  const n = await reader.readInto(at, buffer) // every block checked against its CRC-32
  h.update(buffer.subarray(0, n))
  at += n
}
await reader.close()
const [got, want] = [h.digest('hex'), await sha256File(file)]
console.log(
  `read back checkpoint ${reader.cno}: ${reader.size} bytes, sha256 ${got} ${got === want ? 'matches' : `DIFFERS from ${want}`}`,
)
process.exitCode = got === want && reader.size === size ? 0 : 1
