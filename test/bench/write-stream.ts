// The write stream's own cost: the same bytes piped into a container through
//   - SegmentFile.write called in a loop (no stream: the floor),
//   - a streamx Writable adapter (what the write stream was built on before: `_writev`
//     awaiting the same writes, `_final` flushing; the baseline),
//   - createStreamSegmentWriteStream (node:stream's Writable),
// in 64 KiB and 1 MiB chunks, into the memory store (streaming profile), each round in
// the same process, variants alternating. Prints seconds, MB/s and the writer's CPU-s/GiB
// (the memory store's own copying excluded), from source start to commit.
// Run: npm run build && node dist/esm/test/bench/write-stream.js   (BENCH_MIB=… for 512, BENCH_ROUNDS=… for 3)
import { cpus } from 'node:os'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { Writable as StreamxWritable } from 'streamx'
import type { SegmentFile } from '../../lib/segment-file.js'
import { type Settings, STREAMING_PROFILE } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream, openForAppend } from '../../lib/streams/write-stream.js'
import { crc32Implementation } from '../../lib/util/crc32.js'
import type { FlushTiming } from '../../lib/write/flush.js'
import { median } from '../helpers/bench.js'
import { CpuCountingStore } from '../helpers/cpu-store.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const total = Number(process.env.BENCH_MIB ?? 512) * MiB
const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
const settings: Partial<Settings> = { ...STREAMING_PROFILE }

type Cb = (err: Error | null) => void

/** The baseline: a streamx Writable over the same calls (the write stream's former shape). */
class StreamxAdapter extends StreamxWritable {
  file: SegmentFile | undefined
  timing: FlushTiming | undefined
  private at = 0
  constructor(private readonly store: ObjectStore) {
    super({ highWaterMark: 64 * 1024 })
  }
  override _open(cb: Cb): void {
    openForAppend(this.store, settings).then((f) => {
      this.file = f
      cb(null)
    }, cb)
  }
  override _writev(batch: Uint8Array[], cb: Cb): void {
    this.take(batch).then(() => cb(null), cb)
  }
  override _final(cb: Cb): void {
    ;(this.file as SegmentFile).flush().then((t) => {
      this.timing = t
      cb(null)
    }, cb)
  }
  override _destroy(cb: Cb): void {
    ;(this.file as SegmentFile).close().then(
      () => cb(null),
      () => cb(null),
    )
  }
  private async take(batch: Uint8Array[]): Promise<void> {
    for (const chunk of batch) {
      await (this.file as SegmentFile).write(this.at, chunk)
      this.at += chunk.byteLength
    }
  }
}

declare module 'streamx' {
  interface Writable {
    _open(cb: Cb): void
    _destroy(cb: Cb): void
  }
}

function chunks(size: number): Readable {
  const chunk = Buffer.allocUnsafe(size)
  fillBlocks(chunk, 0)
  let left = total
  return new Readable({
    highWaterMark: size,
    read() {
      if (left === 0) return void this.push(null)
      left -= size
      this.push(chunk)
    },
  })
}

const VARIANTS = [
  'SegmentFile.write loop (floor)',
  'streamx Writable (baseline)',
  'node:stream Writable (ours)',
] as const

async function run(
  variant: (typeof VARIANTS)[number],
  size: number,
): Promise<{ s: number; cpu: number; objects: number }> {
  const store = new CpuCountingStore(new MemoryStore())
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  let timing: FlushTiming
  if (variant === VARIANTS[0]) {
    const file = await openForAppend(store, settings)
    let at = 0
    for await (const chunk of chunks(size)) {
      await file.write(at, chunk as Buffer)
      at += (chunk as Buffer).byteLength
    }
    timing = await file.flush()
    await file.close()
  } else if (variant === VARIANTS[1]) {
    const ws = new StreamxAdapter(store)
    await pipeline(chunks(size), ws as unknown as NodeJS.WritableStream)
    timing = ws.timing as FlushTiming
  } else {
    const ws = createStreamSegmentWriteStream({ store })
    await pipeline(chunks(size), ws)
    timing = ws.flushTiming as FlushTiming
  }
  const s = (performance.now() - t0) / 1000
  const u = process.cpuUsage(c0)
  return { s, cpu: (u.user + u.system) / 1e6 - store.cpuMicros / 1e6, objects: timing.objects }
}

console.log(
  `# write-stream: ${total / MiB} MiB, memory store, streaming profile, median of ${rounds} rounds (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores, CRC ${crc32Implementation})`,
)
console.log('| chunk | variant | s | MB/s | writer CPU-s/GiB | objects |')
console.log('|---|---|---:|---:|---:|---:|')
for (const size of [64 * 1024, MiB]) {
  await run(VARIANTS[2], size) // warm-up
  const results = new Map<string, Array<{ s: number; cpu: number; objects: number }>>()
  for (let r = 0; r < rounds; r++) {
    for (const v of VARIANTS) {
      const list = results.get(v) ?? []
      list.push(await run(v, size))
      results.set(v, list)
    }
  }
  for (const v of VARIANTS) {
    const list = results.get(v) ?? []
    const s = median(list.map((x) => x.s))
    const cpu = median(list.map((x) => x.cpu))
    console.log(
      `| ${size / 1024} KiB | ${v} | ${s.toFixed(2)} | ${(total / 1e6 / s).toFixed(0)} | ${(cpu / (total / 1024 ** 3)).toFixed(2)} | ${list[0]?.objects} |`,
    )
  }
}
