// Benchmark (a program, not a test): the first read of a process. A fresh process opens a
// checkpoint and reads it once through createStreamSegmentReadStream, as a loader does:
// every GET piece it reads into is new memory, faulted in page by page. read.ts warms its
// process up first and measures what follows; this measures what it leaves out.
//
// Side by side in one run, alternating, each read a child process of its own: the pieces
// from the memory addon (2 MiB regions the kernel may back with huge pages) and in
// ordinary 4 KiB pages (STREAM_SEGMENT_HUGE_PAGES=0). On the directory store (a temporary
// directory of the local disk, the objects in the page cache) and on radosgw when
// AWS_ENDPOINT_URL_S3 is set. CPU-s/GiB is the child's (user + system) over the read.
//
//   node dist/esm/test/bench/first-read.js [--mib 1024] [--rounds 3]
import { spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { createS3Client } from '../../lib/store/s3.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { nativeMemory } from '../../lib/util/huge-memory.js'
import { ensureBucket, freshMemoryCost, freshSlabMemoryCost, medianRange } from '../helpers/bench.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024

interface Sample {
  cpu: number
  seconds: number
  bytes: number
  faults: number
  rss: number
}

/** The child: reads `url` once and prints its Sample as JSON. */
async function readOnce(url: string): Promise<void> {
  const rss0 = process.memoryUsage.rss()
  const r0 = process.resourceUsage()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  let bytes = 0
  let peak = rss0
  for await (const chunk of createStreamSegmentReadStream({ url })) {
    bytes += (chunk as Buffer).byteLength
    if ((bytes & (16 * MiB - 1)) < (chunk as Buffer).byteLength) peak = Math.max(peak, process.memoryUsage.rss())
  }
  const seconds = (performance.now() - t0) / 1000
  const c = process.cpuUsage(c0)
  const faults = process.resourceUsage().minorPageFault - r0.minorPageFault
  peak = Math.max(peak, process.memoryUsage.rss())
  const sample: Sample = { cpu: (c.user + c.system) / 1e6, seconds, bytes, faults, rss: peak - rss0 }
  process.stdout.write(`${JSON.stringify(sample)}\n`)
}

/** Writes `mib` MiB of patterned blocks to `url` through the write stream. */
async function writeContainer(url: string, mib: number): Promise<void> {
  const ws = createStreamSegmentWriteStream({ url })
  const chunk = Buffer.allocUnsafe(MiB)
  for (let i = 0; i < mib; i++) {
    fillBlocks(chunk, i * MiB)
    if (!ws.write(Buffer.from(chunk))) await once(ws, 'drain')
  }
  ws.end()
  await once(ws, 'finish')
}

const child = process.env.BENCH_FIRST_READ_URL
if (child !== undefined) {
  await readOnce(child)
} else {
  const { values: args } = parseArgs({
    options: { mib: { type: 'string', default: '1024' }, rounds: { type: 'string', default: '3' } },
  })
  const mib = Number(args.mib)
  const rounds = Number(args.rounds)
  if (!(Number.isInteger(mib) && mib > 0 && Number.isInteger(rounds) && rounds > 0))
    throw new Error('--mib and --rounds must be positive integers')
  const dir = await mkdtemp(join(process.env.BENCH_TMPDIR ?? tmpdir(), 'first-read-'))
  const stores: Array<[string, string]> = [['directory store', pathToFileURL(join(dir, 'c')).href]]
  let cleanup = async () => {}
  if (process.env.AWS_ENDPOINT_URL_S3 !== undefined) {
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true'
    const client = createS3Client()
    const bucket = 'stream-segment-bench'
    await ensureBucket(client, bucket)
    const prefix = `first-read-${Date.now().toString(36)}`
    stores.push(['radosgw, http GETs', `s3://${bucket}/${prefix}`])
    cleanup = async () => {
      const { removeContainer } = await import('../../lib/admin/remove.js')
      await removeContainer({ client, bucket, prefix })
      client.destroy()
    }
  }
  for (const [, url] of stores) await writeContainer(url, mib)

  console.log(
    `# first read of a process: ${mib} MiB, 16 MiB objects, ${rounds} rounds, median (min–max) (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores; memory addon ${nativeMemory === undefined ? 'absent' : 'present'}; fresh memory ${freshMemoryCost().toFixed(2)} CPU-s/GiB, fresh slab memory ${freshSlabMemoryCost().toFixed(2)})`,
  )
  console.log(
    '| store | pieces | CPU-s/GiB | MB/s | minor faults | peak RSS growth MiB | CPU ÷ 4 KiB pages, same round |',
  )
  console.log('|---|---|---:|---:|---:|---:|---:|')
  const modes: Array<[string, Record<string, string>]> = [
    ['4 KiB pages', { STREAM_SEGMENT_HUGE_PAGES: '0' }],
    ['memory addon', {}],
  ]
  for (const [store, url] of stores) {
    const samples = modes.map(() => [] as Sample[])
    for (let r = 0; r < rounds; r++) {
      for (const [m, [, env]] of modes.entries()) {
        const out = spawnSync(process.execPath, [process.argv[1] as string], {
          env: { ...process.env, ...env, BENCH_FIRST_READ_URL: url },
          encoding: 'utf8',
        })
        const line = out.stdout.trim().split('\n').pop() ?? ''
        if (out.status !== 0 || !line.startsWith('{')) throw new Error(`a read of ${url} failed: ${out.stderr}`)
        const sample = JSON.parse(line) as Sample
        if (sample.bytes !== mib * MiB) throw new Error(`read ${sample.bytes} bytes of ${mib * MiB}`)
        ;(samples[m] as Sample[]).push(sample)
      }
    }
    const gib = (mib * MiB) / 2 ** 30
    const cpu = samples.map((s) => s.map((x) => x.cpu / gib))
    for (const [m, [name]] of modes.entries()) {
      const s = samples[m] as Sample[]
      const ratio =
        m === 0
          ? '-'
          : medianRange(
              (cpu[m] as number[]).map((x, r) => x / (cpu[0]?.[r] as number)),
              2,
            )
      console.log(
        `| ${store} | ${name} | ${medianRange(cpu[m] as number[], 2)} | ${medianRange(
          s.map((x) => x.bytes / 1e6 / x.seconds),
          0,
        )} | ${medianRange(
          s.map((x) => x.faults),
          0,
        )} | ${medianRange(
          s.map((x) => x.rss / MiB),
          0,
        )} | ${ratio} |`,
      )
    }
  }
  await rm(dir, { recursive: true, force: true })
  await cleanup()
}
