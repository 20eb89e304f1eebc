// Benchmark (a program, not a test): a local file put into the directory store by reference
// (uploadFile, what `stream-segment put FILE DIR` runs: the spec's defaults, one 1 GiB object
// filled in 16 MiB pieces), three ways side by side in this one process, the order turned
// each round:
//   copy          the baseline: the file copied with fs.createReadStream piped into
//                 fs.createWriteStream, then one fsync (what a plain copy to the disk costs)
//   in place      uploadFile: each piece written in place in the object's file, which the
//                 completion publishes after an fsync (the store's uploads with partBytes)
//   joined        uploadFile on a store that makes its uploads without partBytes: each piece
//                 a file of its own, joined into a new file by the completion
// Seconds, s/GiB, MB/s, CPU-s/GiB (this process: the main thread, libuv's threads and the
// kernel work charged to them) and peak RSS growth, median (min–max). Every object written is
// read back and compared with the file (SHA-256): the program exits 1 if one differs.
//
//   node dist/esm/test/bench/dir-put.js [--mib 1024] [--rounds 3] [--dir PATH]
// --dir puts the containers and the file under PATH (default: the OS's temporary folder).
import { createHash } from 'node:crypto'
import { createReadStream, createWriteStream, mkdtempSync, rmSync } from 'node:fs'
import { open } from 'node:fs/promises'
import * as os from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { CreateMultipartOptions } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { medianRange } from '../helpers/bench.js'
import { writeBlocksFile } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const { values: args } = parseArgs({
  options: {
    mib: { type: 'string', default: '1024' },
    rounds: { type: 'string', default: '3' },
    dir: { type: 'string' },
  },
})
const size = Number(args.mib) * MiB
const rounds = Number(args.rounds)
if (!Number.isInteger(size) || size <= 0) throw new Error(`--mib ${args.mib}: a positive count of MiB`)
if (!Number.isInteger(rounds) || rounds <= 0) throw new Error(`--rounds ${args.rounds}: a positive count`)

/** A directory store whose multipart uploads are made without partBytes: parts in files of their own, joined. */
class JoiningStore extends DirectoryStore {
  override createMultipart(key: string, options?: CreateMultipartOptions): Promise<string> {
    const { partBytes: _, ...rest } = options ?? {}
    return super.createMultipart(key, rest)
  }
}

const ways = ['copy', 'in place', 'joined'] as const
type Way = (typeof ways)[number]
interface Sample {
  seconds: number
  cpu: number
  rss: number
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const chunk of createReadStream(path, { highWaterMark: 16 * MiB })) h.update(chunk as Buffer)
  return h.digest('hex')
}

async function sha256Container(root: string): Promise<string> {
  const f = await SegmentFile.open(new DirectoryStore(root), { readOnly: true })
  const h = createHash('sha256')
  for (let p = 0; p < f.size; p += 16 * MiB) h.update(await f.read(p, Math.min(16 * MiB, f.size - p)))
  await f.close()
  return h.digest('hex')
}

/** Runs `work`; its wall seconds, CPU seconds of this process and peak RSS growth (sampled every 10 ms). */
async function measure(work: () => Promise<unknown>): Promise<Sample> {
  global.gc?.()
  const rss0 = process.memoryUsage.rss()
  let peak = rss0
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss())
  }, 10)
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  try {
    await work()
  } finally {
    clearInterval(timer)
  }
  const c = process.cpuUsage(c0)
  return {
    seconds: (performance.now() - t0) / 1000,
    cpu: (c.user + c.system) / 1e6,
    rss: Math.max(0, Math.max(peak, process.memoryUsage.rss()) - rss0),
  }
}

async function main(): Promise<void> {
  const base = mkdtempSync(join(args.dir ?? os.tmpdir(), 'ss-bench-dir-put-'))
  const file = join(base, 'file.bin')
  let bad = false
  try {
    const want = writeBlocksFile(file, size, 5) // its SHA-256; the file stays in the page cache
    const cpus = os.cpus()
    console.log(
      `# a ${size / MiB} MiB file in the page cache put into a directory store (${base}), ${rounds} rounds, median (min–max)`,
    )
    console.log(
      `# machine: ${cpus[0]?.model} × ${cpus.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    )
    const samples = new Map<Way, Sample[]>(ways.map((w) => [w, []]))
    let n = 0
    for (let round = 0; round < rounds; round++) {
      // Turned each round, so that no way always follows the same one (the disk's writeback).
      const order = ways.map((_, i) => ways[(i + round) % ways.length] as Way)
      for (const way of order) {
        const root = join(base, `c${n++}`)
        let got: string
        if (way === 'copy') {
          const out = join(base, `copy-${n}`)
          ;(samples.get(way) as Sample[]).push(
            await measure(async () => {
              await pipeline(createReadStream(file, { highWaterMark: 16 * MiB }), createWriteStream(out))
              const fh = await open(out, 'r')
              await fh.sync()
              await fh.close()
            }),
          )
          got = await sha256File(out)
          rmSync(out)
        } else {
          const store = way === 'in place' ? new DirectoryStore(root) : new JoiningStore(root)
          ;(samples.get(way) as Sample[]).push(await measure(() => uploadFile(file, store)))
          got = await sha256Container(root)
          rmSync(root, { recursive: true })
        }
        if (got !== want) {
          console.error(`${way}, round ${round + 1}: the bytes read back differ from the file's`)
          bad = true
        }
      }
    }
    const gib = size / 2 ** 30
    console.log('| way | seconds | s/GiB | MB/s | CPU-s/GiB | CPU ÷ copy | peak RSS growth MiB |')
    console.log('|---|---:|---:|---:|---:|---:|---:|')
    const copyCpu = (samples.get('copy') as Sample[]).map((s) => s.cpu)
    const label: Record<Way, string> = {
      copy: 'copy: fs.createReadStream → fs.createWriteStream, one fsync (baseline)',
      'in place': 'uploadFile, pieces written in place (partBytes)',
      joined: 'uploadFile, pieces in files of their own, joined at completion',
    }
    for (const way of ways) {
      const s = samples.get(way) as Sample[]
      const ratio = s.map((x, i) => x.cpu / (copyCpu[i] as number))
      console.log(
        `| ${label[way]} | ${medianRange(
          s.map((x) => x.seconds),
          2,
        )} | ${medianRange(
          s.map((x) => x.seconds / gib),
          2,
        )} | ${medianRange(
          s.map((x) => size / 1e6 / x.seconds),
          0,
        )} | ${medianRange(
          s.map((x) => x.cpu / gib),
          2,
        )} | ${way === 'copy' ? '-' : medianRange(ratio, 2)} | ${medianRange(
          s.map((x) => x.rss / MiB),
          0,
        )} |`,
      )
    }
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
  if (bad) process.exit(1)
}

await main()
