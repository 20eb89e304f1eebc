// Writer CPU by value, two tables.
// 1. SegmentFile.write: 512 MiB in 16 MiB writes at 4 KiB blocks into the memory store,
//    then one flush. CPU seconds per GiB spent in write() calls (copy on intake, block
//    map, and the partial segments the writer waits for), the flush, objects and peak RSS.
// 2. The write stream with its default profile: 1 GiB in 1 MiB chunks, 3 rounds, median
//    (min–max), against baselines in the same process: an ideal writer that copies every
//    byte once and hashes every 4 KiB block (by value) or only hashes (by reference), on a
//    store that discards bodies; fs.createWriteStream (also with one fsync at the end)
//    and the same bytes as 16 MiB files each fsynced (the directory store's I/O alone)
//    against the directory store; the writer by reference (SegmentFile.writeRef, sending
//    ahead, then the flush); uploadFile of a local file in the page cache against reading
//    it in 16 MiB reads with a CRC-32 per block (and, on S3, against lib-storage's Upload
//    of fs.createReadStream of the file); and,
//    with AWS_ENDPOINT_URL_S3 set, S3Store.put of the same bytes in 16 MiB objects (4 in
//    flight) and lib-storage's Upload against the stream to that server (on createS3Client's
//    client, and last, on a client with the SDK's defaults).
//    The last two columns divide a row's CPU and MB/s by its baseline's in the same round
//    (the directory store by fs.createWriteStream; the S3 streams by Upload for CPU and by
//    S3Store.put with the same body check for MB/s): the disk's state and
//    radosgw's share of the 2 cores change between rounds, so each row is also compared
//    with its baseline round by round.
// Run: npm run build && node dist/esm/test/bench/write-cpu.js
//   BENCH_MIB (512) and BENCH_STREAM_MIB (1024) change the sizes, BENCH_ROUNDS (3) the
//   rounds, BENCH_TABLES=1 or 2 runs one table, BENCH_VARIANTS=1,3 some rows of table 2,
//   BENCH_WARM=n measures each row of table 2 after n unmeasured runs in the same process
//   (the steady state of a process that writes again and again: code compiled, memory
//   mapped; a fresh process pays for both in its first GiB, docs/benchmarks.md), and
//   BENCH_GC=0 leaves out the full collection forced before each measured run.
//   BENCH_TABLES=2 BENCH_CHILD=N runs row N of table 2 once in this process and prints its
//   sample as a line of JSON (how the parent runs each row; also for a profiler).
import { spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, mkdtemp, open, rm } from 'node:fs/promises'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Writable as NodeWritable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { S3Client } from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import type { Body, PutOptions, RequestOptions } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { crc32Blocks, crc32Implementation } from '../../lib/util/crc32.js'
import { Limiter } from '../../lib/util/limiter.js'
import { freshMemoryCost, freshSlabMemoryCost, median, otherThreadsCpu } from '../helpers/bench.js'
import { collect } from '../helpers/containers.js'
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
  let rss = process.memoryUsage.rss()
  const rss0 = rss
  let longest = 0
  // The store's CPU from here on, as the writer's: not that of create's requests.
  const store0 = store.cpuMicros
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  for (let at = 0; at < total; at += writeSize) {
    const w0 = performance.now()
    await file.write(at, source)
    longest = Math.max(longest, performance.now() - w0)
    rss = Math.max(rss, process.memoryUsage.rss())
  }
  const writeCpu = cpuSeconds(process.cpuUsage(c0))
  const writeStoreCpu = (store.cpuMicros - store0) / 1e6
  const writeS = (performance.now() - t0) / 1000
  const c1 = process.cpuUsage()
  const timing = await file.flush()
  const flushCpu = cpuSeconds(process.cpuUsage(c1))
  const storeCpu = (store.cpuMicros - store0) / 1e6
  rss = Math.max(rss, process.memoryUsage.rss())
  const gib = total / 1024 ** 3
  if (name === undefined) return // warm-up
  console.log(
    `| ${name} | ${((writeCpu - writeStoreCpu) / gib).toFixed(2)} | ${((writeCpu + flushCpu - storeCpu) / gib).toFixed(2)} | ${(storeCpu / gib).toFixed(2)} | ${writeS.toFixed(2)} | ${longest.toFixed(0)} | ${(timing.totalMs / 1000).toFixed(2)} | ${timing.objects} | ${((rss - rss0) / MiB).toFixed(0)} |`,
  )
  await file.close()
}

async function tableFiles() {
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
}

// --- table 2: streams ---

const streamTotal = Number(process.env.BENCH_STREAM_MIB ?? 1024) * MiB
/** BENCH_WARM=n: each measured run of the stream table follows n unmeasured ones in the same process. */
const warmRuns = Number(process.env.BENCH_WARM ?? 0)
if (!Number.isInteger(warmRuns) || warmRuns < 0)
  throw new Error(`BENCH_WARM=${process.env.BENCH_WARM}: a count of runs`)
/**
 * BENCH_GC=0: no forced full collection before a measured run. By default one runs first, so
 * that no garbage of an earlier run is collected inside the measurement; a process that
 * writes again and again is not collected that way between its writes.
 */
const forceGc = process.env.BENCH_GC !== '0'
if (process.env.BENCH_GC !== undefined && !['0', '1'].includes(process.env.BENCH_GC))
  throw new Error(`BENCH_GC=${process.env.BENCH_GC}: 0 or 1`)
const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
const child = process.env.BENCH_CHILD
const CHUNK = MiB
/** The source: 64 patterned 1 MiB chunks, handed out in turn and never changed. */
const chunks = Array.from({ length: 64 }, (_, i) => {
  const c = Buffer.allocUnsafe(CHUNK)
  fillBlocks(c, i * CHUNK)
  return c
})

/** A memory store that keeps only `inode`: segment bodies are dropped, so it costs nothing. */
class DiscardingStore extends MemoryStore {
  override put(key: string, body: Body, options?: PutOptions) {
    return super.put(key, key === 'inode' ? body : [], options)
  }
  override uploadPart(key: string, uploadId: string, n: number, _body: Body, options?: RequestOptions) {
    return super.uploadPart(key, uploadId, n, [], options)
  }
}

interface Sample {
  cpu: number
  seconds: number
  rss: number
  /** Minor page faults: memory the run touched for the first time in its process. */
  faults: number
  /** Of `cpu`, what threads other than the main one used (undefined off Linux). */
  otherThreads?: number
}

/** Writes streamTotal bytes of the source into `sink` (a Node or streamx Writable), honouring backpressure. */
async function feed(sink: NodeWritable | ReturnType<typeof createStreamSegmentWriteStream>): Promise<number> {
  const w = sink as unknown as NodeJS.EventEmitter & { write(c: Uint8Array): boolean; end(): void }
  let failed: unknown
  w.on('error', (err) => {
    failed = err
  })
  let peak = process.memoryUsage.rss()
  for (let at = 0, i = 0; at < streamTotal; at += CHUNK, i++) {
    if (failed !== undefined) throw failed
    if (!w.write(chunks[i % chunks.length] as Buffer)) await once(w, 'drain')
    if (i % 16 === 0) peak = Math.max(peak, process.memoryUsage.rss())
  }
  const finished = once(w, 'finish')
  w.end()
  await finished
  if (failed !== undefined) throw failed
  return Math.max(peak, process.memoryUsage.rss())
}

async function measure(fn: () => Promise<number | undefined>): Promise<Sample> {
  if (forceGc) global.gc?.()
  const rss0 = process.memoryUsage.rss()
  const c0 = process.cpuUsage()
  const f0 = process.resourceUsage().minorPageFault
  const o0 = otherThreadsCpu()
  const t0 = performance.now()
  const peak = (await fn()) ?? process.memoryUsage.rss()
  const c = process.cpuUsage(c0)
  const o1 = otherThreadsCpu()
  return {
    otherThreads: o0 === undefined || o1 === undefined ? undefined : o1 - o0,
    cpu: (c.user + c.system) / 1e6,
    seconds: (performance.now() - t0) / 1000,
    rss: Math.max(0, peak - rss0),
    faults: process.resourceUsage().minorPageFault - f0,
  }
}

/** A Writable (Node's) doing `each(chunk)` per chunk: the ideal writers and the bare source. */
async function ideal(each: (chunk: Buffer) => void): Promise<number> {
  const { Writable } = await import('node:stream')
  return feed(
    new Writable({
      highWaterMark: 64 * 1024,
      write(chunk: Buffer, _enc, cb) {
        each(chunk)
        cb()
      },
    }),
  )
}

/**
 * The source of the by-reference rows: the patterned chunks in one buffer, handed out as
 * views. The chunks repeat every REF_PERIOD bytes of the file; the buffer holds them twice,
 * so any read up to REF_PERIOD long is one view (a piece of sent-ahead data starts where a
 * leaf does, anywhere in the period).
 */
let refBytes: Buffer | undefined
const REF_PERIOD = chunks.length * CHUNK
function prepareReference(): void {
  refBytes = Buffer.allocUnsafe(2 * REF_PERIOD)
  for (const [i, c] of chunks.entries()) {
    c.copy(refBytes, i * CHUNK)
    c.copy(refBytes, REF_PERIOD + i * CHUNK)
  }
}

/**
 * The writer by reference alone: every block read from a source that hands out views (no
 * copy to leave out), hashed, placed and sent to a store that drops the bodies (ahead of
 * the flush, under StreamSegment); the flush included.
 */
async function byReference(settings: Partial<Settings>): Promise<number> {
  const all = refBytes
  if (all === undefined) throw new Error('prepareReference() first')
  const source = {
    async read(position: number, length: number) {
      const at = position % REF_PERIOD
      if (at + length <= all.byteLength) return all.subarray(at, at + length)
      // Longer than a period (no read here is): the bytes copied, a period at a time.
      const out = Buffer.allocUnsafe(length)
      for (let o = 0; o < length; ) {
        const from = (position + o) % REF_PERIOD
        const n = Math.min(length - o, REF_PERIOD - from)
        all.copy(out, o, from, from + n)
        o += n
      }
      return out
    },
  }
  const file = await SegmentFile.create(new DiscardingStore(), settings)
  let peak = process.memoryUsage.rss()
  for (let at = 0, i = 0; at < streamTotal; at += CHUNK, i++) {
    await file.writeRef(at, CHUNK, source, at)
    if (i % 16 === 0) peak = Math.max(peak, process.memoryUsage.rss())
  }
  await file.flush()
  await file.close()
  return Math.max(peak, process.memoryUsage.rss())
}

/**
 * The file the uploadFile rows read: streamTotal bytes of the source's chunks, written
 * once (by the parent, which passes its path to the children as BENCH_SOURCE_FILE).
 */
async function sourceFile(dir: string): Promise<string> {
  const given = process.env.BENCH_SOURCE_FILE
  if (given !== undefined) return given
  const path = join(dir, 'source')
  const fh = await open(path, 'wx')
  for (let at = 0, i = 0; at < streamTotal; at += CHUNK, i++) {
    await fh.write(chunks[i % chunks.length] as Buffer, 0, CHUNK, at)
  }
  await fh.close()
  process.env.BENCH_SOURCE_FILE = path
  return path
}

/** The peak RSS while `work` runs, sampled every 10 ms. */
async function withPeak(work: Promise<unknown>): Promise<number> {
  let peak = process.memoryUsage.rss()
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss())
  }, 10)
  try {
    await work
  } finally {
    clearInterval(timer)
  }
  return Math.max(peak, process.memoryUsage.rss())
}

const ring = Buffer.alloc(16 * MiB)
let ringAt = 0
const crcs = new Uint32Array(CHUNK / 4096)

/** "median (min–max)" of `xs`, or the one value. */
function stat(xs: number[], digits = 2): string {
  const med = median(xs)
  return xs.length > 1
    ? `${med.toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`
    : med.toFixed(digits)
}

/** A row of the stream table. */
interface Variant {
  name: string
  subtractSource: boolean
  /** Set-up not measured (run first in the variant's process). */
  prepare?: () => void | Promise<void>
  run: () => Promise<number | undefined>
  /** Environment its process gets on top of the parent's. */
  env?: Record<string, string>
  /** Rows (index, label) its CPU and its MB/s are divided by, round by round. */
  cpuVs?: [number, string]
  rateVs?: [number, string]
}

async function tableStreams() {
  const gib = streamTotal / 1024 ** 3
  const dir = await mkdtemp(join(process.env.BENCH_TMPDIR ?? tmpdir(), 'write-cpu-'))
  const s3 = process.env.AWS_ENDPOINT_URL_S3 !== undefined
  const bucket = 'stream-segment-bench'
  // Not the SDK's warning that its later versions need a newer Node amid the tables.
  if (s3) process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
  const client = s3 ? createS3Client() : undefined
  if (client) {
    const { CreateBucketCommand } = await import('@aws-sdk/client-s3')
    await client.send(new CreateBucketCommand({ Bucket: bucket })).catch(() => undefined)
  }
  let n = 0
  const cleanups: Array<() => Promise<void>> = []
  const variants: Variant[] = [
    {
      name: 'source alone (its cost, subtracted below where marked)',
      subtractSource: false,
      run: () => ideal(() => {}),
    },
    {
      name: 'ideal writer by value: copy once, CRC-32 per 4 KiB block (discarding)',
      subtractSource: true,
      run: () =>
        ideal((c) => {
          if (ringAt + c.byteLength > ring.byteLength) ringAt = 0
          ring.set(c, ringAt)
          crc32Blocks(ring.subarray(ringAt, ringAt + c.byteLength), 4096, crcs)
          ringAt += c.byteLength
        }),
    },
    {
      name: 'ideal writer by reference: CRC-32 per 4 KiB block only (discarding)',
      subtractSource: true,
      run: () => ideal((c) => crc32Blocks(c, 4096, crcs)),
    },
    {
      name: 'write stream, discarding store',
      subtractSource: true,
      run: () => feed(createStreamSegmentWriteStream({ store: new DiscardingStore() })),
    },
    {
      name: 'write stream with adoptChunks (chunks kept, not copied), discarding store',
      subtractSource: true,
      run: () => feed(createStreamSegmentWriteStream({ store: new DiscardingStore(), adoptChunks: true })),
    },
    {
      name: 'fs.createWriteStream, a file in the directory',
      subtractSource: false,
      run: () => plainFile(false),
    },
    {
      name: 'fs.createWriteStream as above, then one fsync at the end',
      subtractSource: false,
      run: () => plainFile(true),
    },
    {
      name: 'the same bytes as 16 MiB files, each written and fsynced (the directory store I/O without its writer)',
      subtractSource: false,
      run: async () => {
        const sub = join(dir, `files-${n++}`)
        await mkdir(sub)
        let peak = process.memoryUsage.rss()
        const per = (16 * MiB) / CHUNK
        for (let at = 0, k = 0; at < streamTotal; at += per * CHUNK, k++) {
          // The chunks as they are, in one writev (the store writes its slab views so).
          const views = Array.from({ length: per }, (_, j) => chunks[(at / CHUNK + j) % chunks.length] as Buffer)
          const fh = await open(join(sub, String(k)), 'wx')
          const { bytesWritten } = await fh.writev(views)
          if (bytesWritten !== per * CHUNK) throw new Error(`short write: ${bytesWritten} of ${per * CHUNK} bytes`)
          await fh.sync()
          await fh.close()
          peak = Math.max(peak, process.memoryUsage.rss())
        }
        cleanups.push(() => rm(sub, { recursive: true }))
        return peak
      },
    },
    {
      name: 'write stream, directory store',
      subtractSource: false,
      run: async () => {
        const root = join(dir, `c-${n++}`)
        cleanups.push(() => rm(root, { recursive: true }))
        return feed(createStreamSegmentWriteStream({ store: new DirectoryStore(root) }))
      },
    },
    {
      name: 'by reference: SegmentFile.writeRef in 1 MiB calls, then flush; 1 GiB target, 16 MiB pieces (discarding)',
      subtractSource: false,
      prepare: prepareReference,
      run: () => byReference({ streamSegmentBytes: 1024 * MiB }),
    },
    {
      name: 'by reference as above, PartedSegment (the flush builds and sends every object)',
      subtractSource: false,
      prepare: prepareReference,
      run: () => byReference({ format: 'parted' }),
    },
  ]
  /** The index of the row named `name`. */
  const rowOf = (name: string) => {
    const i = variants.findIndex((v) => v.name === name)
    if (i < 0) throw new Error(`no row ${name}`)
    return i
  }
  ;(variants[rowOf('write stream, directory store')] as Variant).cpuVs = [
    rowOf('fs.createWriteStream, a file in the directory'),
    'fs.createWriteStream',
  ]
  /** fs.createWriteStream into a file of the directory, then one fsync when `sync`. */
  async function plainFile(sync: boolean): Promise<number> {
    const path = join(dir, `plain-${n++}`)
    cleanups.push(() => rm(path))
    const peak = await feed(createWriteStream(path))
    if (sync) {
      const fh = await open(path, 'r+')
      await fh.sync()
      await fh.close()
    }
    return peak
  }
  /** A fresh S3Store under its own prefix, deleted after the run (radosgw rows). */
  let s3Store: ((unchecked?: boolean) => S3Store) | undefined
  /** Rows numbered after the others (so that earlier rows keep their numbers). */
  const lateRows: Variant[] = []
  if (client) {
    /** A store with the default body check (signed SHA-256 or Content-MD5), or none; on `on`, a client. */
    const store = (unchecked = false, on: S3Client = client) => {
      const st = new S3Store({
        client: on,
        bucket,
        prefix: `write-cpu-${Date.now().toString(36)}-${n++}/`,
        ...(unchecked && { unsignedPayload: true, contentMd5: false }),
      })
      cleanups.push(async () => {
        const keys: string[] = []
        for await (const e of st.list('')) keys.push(e.key)
        for (const u of await collect(st.listMultipart(''))) await st.abortMultipart(u.key, u.uploadId)
        await st.delete(keys)
      })
      return st
    }
    s3Store = store
    /** S3Store.put of the stream's bytes: 16 MiB objects, each the same 16 source chunks, 4 in flight. */
    const putObjects = (unchecked?: boolean) => async () => {
      const s = store(unchecked)
      const limiter = new Limiter(4)
      const running = new Set<Promise<void>>()
      let peak = 0
      const piece = 16 * MiB
      const parts = chunks.slice(0, 16)
      for (let at = 0, i = 0; at < streamTotal; at += piece, i++) {
        await limiter.acquire()
        const p: Promise<void> = s
          .put(`o${i}`, parts, { ifNoneMatch: '*' })
          .then(() => undefined)
          .finally(() => {
            limiter.release()
            running.delete(p)
          })
        running.add(p)
        peak = Math.max(peak, process.memoryUsage.rss())
      }
      await Promise.all(running)
      return peak
    }
    const put = variants.length
    const upload = put + 1
    const putUnchecked = put + 3
    const check = new S3Store({ client, bucket, prefix: '' }).unsignedPayload ? 'Content-MD5' : 'signed SHA-256'
    variants.push(
      {
        name: `S3Store.put, the same bytes in 16 MiB objects, 4 in flight, default body check: ${check} (radosgw)`,
        subtractSource: false,
        run: putObjects(),
      },
      {
        name: "lib-storage's Upload, 16 MiB parts, queue 4 (radosgw)",
        subtractSource: false,
        run: async () => {
          const { PassThrough } = await import('node:stream')
          const pass = new PassThrough({ highWaterMark: 64 * 1024 })
          const key = `write-cpu-upload-${Date.now().toString(36)}-${n++}`
          cleanups.push(async () => {
            const { DeleteObjectCommand } = await import('@aws-sdk/client-s3')
            await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
          })
          const up = new Upload({
            client,
            params: { Bucket: bucket, Key: key, Body: pass },
            partSize: 16 * MiB,
            queueSize: 4,
          })
          const done = up.done()
          const peak = await feed(pass)
          await done
          return peak
        },
      },
      {
        name: `write stream, S3Store, default body check: ${check} (radosgw)`,
        subtractSource: false,
        cpuVs: [upload, 'Upload'],
        rateVs: [put, 'S3Store.put'],
        run: () => feed(createStreamSegmentWriteStream({ store: store() })),
      },
      {
        name: 'S3Store.put as above, no body check: unsignedPayload: true, contentMd5: false (radosgw)',
        subtractSource: false,
        run: putObjects(true),
      },
      {
        name: 'write stream, S3Store with no body check (radosgw)',
        subtractSource: false,
        cpuVs: [upload, 'Upload'],
        rateVs: [putUnchecked, 'S3Store.put, unchecked'],
        run: () => feed(createStreamSegmentWriteStream({ store: store(true) })),
      },
      {
        name: 'write stream, S3Store with no body check, adoptChunks (radosgw)',
        subtractSource: false,
        cpuVs: [upload, 'Upload'],
        rateVs: [putUnchecked, 'S3Store.put, unchecked'],
        run: () => feed(createStreamSegmentWriteStream({ store: store(true), adoptChunks: true })),
      },
    )
    lateRows.push({
      // What a user of the Upload drop-in often has: a client with the SDK's defaults
      // (its own checksums on, no keep-alive tuning), not createS3Client's.
      name: `write stream, S3Store on an S3Client with the SDK's defaults, default body check: ${check} (radosgw)`,
      subtractSource: false,
      cpuVs: [upload, 'Upload'],
      rateVs: [put, 'S3Store.put'],
      run: async () => {
        const plain = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL_S3, forcePathStyle: true })
        try {
          return await feed(createStreamSegmentWriteStream({ store: store(false, plain) }))
        } finally {
          plain.destroy()
        }
      },
    })
  }
  // By reference from a file (uploadFile, the path a user takes): the file written once by
  // the parent, read from the page cache by every row.
  variants.push(
    {
      name: 'ideal upload of a local file by reference: 16 MiB reads into one buffer, CRC-32 per 4 KiB block (page cache)',
      subtractSource: false,
      prepare: () => sourceFile(dir).then(() => undefined),
      run: async () => {
        const fh = await open(await sourceFile(dir), 'r')
        const buf = Buffer.allocUnsafeSlow(16 * MiB)
        const crcs16 = new Uint32Array(buf.byteLength / 4096)
        let peak = process.memoryUsage.rss()
        for (let at = 0; at < streamTotal; at += buf.byteLength) {
          const { bytesRead } = await fh.read(buf, 0, buf.byteLength, at)
          crc32Blocks(buf.subarray(0, bytesRead), 4096, crcs16)
          peak = Math.max(peak, process.memoryUsage.rss())
        }
        await fh.close()
        return peak
      },
    },
    {
      name: 'uploadFile of that file: 1 GiB target, 16 MiB pieces (discarding)',
      subtractSource: false,
      prepare: () => sourceFile(dir).then(() => undefined),
      run: async () =>
        withPeak(uploadFile(await sourceFile(dir), new DiscardingStore(), { streamSegmentBytes: 1024 * MiB })),
    },
    {
      name: 'uploadFile of that file, PartedSegment (discarding)',
      subtractSource: false,
      prepare: () => sourceFile(dir).then(() => undefined),
      run: async () => withPeak(uploadFile(await sourceFile(dir), new DiscardingStore(), { format: 'parted' })),
    },
  )
  const fileRows = variants.length - 3
  if (client && s3Store) {
    // The file to radosgw: uploadFile (spec defaults: one 1 GiB object filled in 16 MiB
    // pieces, 4 in flight) against what a user of lib-storage writes for a file.
    const st = s3Store
    const uploadOfFile = variants.length
    variants.push(
      {
        name: "lib-storage's Upload of fs.createReadStream(that file), 16 MiB parts, queue 4 (radosgw)",
        subtractSource: false,
        prepare: () => sourceFile(dir).then(() => undefined),
        run: async () => {
          const key = `write-cpu-upload-file-${Date.now().toString(36)}-${n++}`
          cleanups.push(async () => {
            const { DeleteObjectCommand } = await import('@aws-sdk/client-s3')
            await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
          })
          const body = createReadStream(await sourceFile(dir))
          const up = new Upload({
            client,
            params: { Bucket: bucket, Key: key, Body: body },
            partSize: 16 * MiB,
            queueSize: 4,
          })
          return withPeak(up.done())
        },
      },
      {
        name: 'uploadFile of that file, spec defaults (radosgw)',
        subtractSource: false,
        cpuVs: [uploadOfFile, 'Upload of the file'],
        rateVs: [uploadOfFile, 'Upload of the file'],
        prepare: () => sourceFile(dir).then(() => undefined),
        run: async () => withPeak(uploadFile(await sourceFile(dir), st())),
      },
      {
        name: 'uploadFile of that file, spec defaults, no body check (radosgw)',
        subtractSource: false,
        cpuVs: [uploadOfFile, 'Upload of the file'],
        rateVs: [uploadOfFile, 'Upload of the file'],
        prepare: () => sourceFile(dir).then(() => undefined),
        run: async () => withPeak(uploadFile(await sourceFile(dir), st(true))),
      },
    )
  }
  // The same rows with slabs of ordinary 4 KiB pages (no huge pages: STREAM_SEGMENT_HUGE_PAGES=0).
  const smallPages = { STREAM_SEGMENT_HUGE_PAGES: '0' }
  const dirStream = variants[rowOf('write stream, directory store')] as Variant
  lateRows.push({ ...dirStream, name: `${dirStream.name}, slabs in 4 KiB pages`, env: smallPages })
  const s3Stream = variants.find((v) => v.name.startsWith('write stream, S3Store, default body check'))
  if (s3Stream !== undefined)
    lateRows.push({ ...s3Stream, name: `${s3Stream.name}, slabs in 4 KiB pages`, env: smallPages })
  variants.push(...lateRows)
  if (child === undefined)
    console.log(
      `\n# write-cpu, streams: ${streamTotal / MiB} MiB in 1 MiB chunks, default profile, ${rounds} rounds${warmRuns > 0 ? `, each run after ${warmRuns} unmeasured in its process` : ''}${forceGc ? '' : ', no forced collection before a run'}, median (min–max) (node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores, CRC ${crc32Implementation}; fresh memory ${freshMemoryCost().toFixed(2)} CPU-s/GiB, fresh slab memory ${freshSlabMemoryCost().toFixed(2)})`,
    )
  if (child === undefined) {
    console.log(
      '| variant | CPU-s/GiB | of which other threads | MB/s | peak RSS growth MiB | minor faults per GiB | CPU ÷ baseline, same round | MB/s ÷ baseline, same round |',
    )
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|')
  }
  if (child !== undefined) {
    // One variant, one round, in a process of its own: its peak RSS is its own.
    const variant = /^\d+$/.test(child) ? variants[Number(child)] : undefined
    // BENCH_CHILD=N is also run by hand (docs/benchmarks.md): a row it lacks is named, as for BENCH_VARIANTS.
    if (variant === undefined) {
      await rm(dir, { recursive: true, force: true })
      client?.destroy()
      throw new Error(
        `BENCH_CHILD=${child}: no row ${child} here (rows 0 to ${variants.length - 1}${client ? '' : '; the radosgw rows need AWS_ENDPOINT_URL_S3'})`,
      )
    }
    await variant.prepare?.()
    // Unmeasured runs first: the measured one finds the code compiled and the memory mapped.
    for (let w = 0; w < warmRuns; w++) {
      await variant.run()
      for (const c of cleanups.splice(0)) await c()
    }
    const sample = await measure(variant.run)
    // What the run stored is deleted (radosgw keeps it in memory), after the measurement as
    // for every row: unlinking a GiB of fsynced files takes the kernel tenths of a second.
    for (const c of cleanups) await c()
    process.stdout.write(`${JSON.stringify(sample)}\n`)
    await rm(dir, { recursive: true, force: true })
    client?.destroy()
    return
  }
  const results = variants.map(() => [] as Sample[])
  // BENCH_VARIANTS=0,3,9 runs only those rows (0, the source alone, is always run).
  const only = process.env.BENCH_VARIANTS?.split(',').map(Number)
  // A row this run does not have (the radosgw rows need AWS_ENDPOINT_URL_S3) is refused, not
  // passed over: the table would lack it, and its ratios.
  const missing = only?.filter((i) => !Number.isInteger(i) || variants[i] === undefined)
  if (missing !== undefined && missing.length > 0) {
    await rm(dir, { recursive: true, force: true })
    client?.destroy()
    throw new Error(
      `BENCH_VARIANTS=${process.env.BENCH_VARIANTS}: no row ${missing.join(', ')} here (rows 0 to ${variants.length - 1}${client ? '' : '; the radosgw rows need AWS_ENDPOINT_URL_S3'})`,
    )
  }
  const chosen = [...variants.keys()].filter((i) => i === 0 || only === undefined || only.includes(i))
  // The file rows' file, made once: sourceFile sets BENCH_SOURCE_FILE, which the children inherit.
  if (chosen.some((i) => i >= fileRows)) await sourceFile(dir)
  for (let r = 0; r < rounds; r++) {
    for (const i of chosen) {
      const out = spawnSync(process.execPath, ['--expose-gc', fileURLToPath(import.meta.url)], {
        env: { ...process.env, ...(variants[i] as Variant).env, BENCH_TABLES: '2', BENCH_CHILD: String(i) },
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      })
      const line = out.stdout.trim().split('\n').pop() ?? ''
      if (out.status !== 0 || !line.startsWith('{')) throw new Error(`variant ${i} failed: ${out.stderr}`)
      ;(results[i] as Sample[]).push(JSON.parse(line) as Sample)
    }
  }
  const sourceMed = median((results[0] as Sample[]).map((s) => s.cpu))
  const cpuOf = (i: number) =>
    (results[i] as Sample[]).map((s) => (s.cpu - ((variants[i] as Variant).subtractSource ? sourceMed : 0)) / gib)
  /** Row i's figures divided by row j's of the same round, as "median (min–max) × label". */
  const ratio = (mine: number[], vs: [number, string] | undefined, theirs: (j: number) => number[]) => {
    if (vs === undefined || (results[vs[0]] as Sample[]).length !== mine.length) return '-'
    const base = theirs(vs[0])
    return `${stat(mine.map((x, r) => x / (base[r] as number)))} × ${vs[1]}`
  }
  for (const [i, v] of variants.entries()) {
    const rs = results[i] as Sample[]
    if (rs.length === 0) continue
    const cpu = cpuOf(i)
    const rate = (j: number) => (results[j] as Sample[]).map((s) => streamTotal / 1e6 / s.seconds)
    console.log(
      `| ${v.name}${v.subtractSource ? ' (beyond the source)' : ''} | ${stat(cpu)} | ${
        rs.every((s) => s.otherThreads !== undefined) ? stat(rs.map((s) => (s.otherThreads as number) / gib)) : '-'
      } | ${stat(rate(i), 0)} | ${stat(
        rs.map((s) => s.rss / MiB),
        0,
      )} | ${stat(
        rs.map((s) => s.faults / gib),
        0,
      )} | ${ratio(cpu, v.cpuVs, cpuOf)} | ${ratio(rate(i), v.rateVs, rate)} |`,
    )
  }
  await rm(dir, { recursive: true, force: true })
  client?.destroy()
}

const tables = process.env.BENCH_TABLES ?? '1,2'
// A table this program does not have is refused, not an empty run that exits 0.
const noTable = tables.split(',').filter((t) => t !== '1' && t !== '2')
if (noTable.length > 0) throw new Error(`BENCH_TABLES=${tables}: no table ${noTable.join(', ')} (tables 1, 2)`)
// Each run of the stream table is a child process: its own peak RSS, its own JIT.
if (tables.includes('1')) await tableFiles()
if (tables.includes('2')) await tableStreams()
