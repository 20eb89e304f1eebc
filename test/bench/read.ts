// Benchmark (a program, not a test): reading a checkpoint back.
//
// 1. Cold open + sequential read of a 1 GiB checkpoint made of ~16 MiB objects, through
//    createStreamSegmentReadStream (verifying every block), against raw ranged GETs of
//    the same data bytes (the physical limit: the same GET size and GETs in flight, no
//    open, no nodes, no summaries, no checks, the store's pieces given back as the reader
//    gives them; the ranges computed beforehand).
//    On radosgw also the SDK's own GetObject of the same ranges, each body drained chunk
//    by chunk (a baseline no one here wrote), also reading every byte once (a CRC-32 of
//    each chunk: what a consumer that looks at the bytes pays, as the stream's checks do),
//    and the whole pass once per S3Store GET path
//    (`getPath` 'http': node:net into 64 KiB pieces; 'sdk': the SDK's body stream, as its
//    chunks), both over the same objects. Throughput ratios, CPU-s/GiB of each, the
//    stream's first byte against the first raw GET, and requests by kind; and, per GiB
//    read by each pass, V8's mark-compact collections and the process's minor page faults.
//    Then the reads that hand no chunks to a consumer: SegmentFile.readInto of the whole
//    checkpoint into one buffer made once, and downloadFile to a local file against the
//    stream piped into fs.createWriteStream (files in the temporary directory).
// 2. Cold random 4 KiB reads: requests per read after open and latency, on a
//    fresh handle per read (the cold case), and on one handle for many reads.
//
// Stores: ThrottledStore over MemoryStore with the two link models of stream-flush.ts,
// the directory store (the embedded default) in a temporary directory of the local disk,
// and radosgw when AWS_ENDPOINT_URL_S3 is set (test/rgw/rgw.sh).
//
// CPU-s/GiB is the whole process's CPU time (user + system) over the pass, per GiB read:
// the store's own copying and the link model count for both columns alike. "First" is
// the time to the first answer: raw's first GET, the stream's first chunk (after its cold
// open: the inode, then the index nodes, then leaves with summaries, then a data GET).
//
//   node dist/esm/test/bench/read.js [--mib 1024] [--object-mib 16] [--random 100] [--rounds 3]
//     [--only memory|dir|s3] [--links directory,general] [--ahead-mib N] [--get-path http,sdk]
//     (--random 0: no random reads;
//     --ahead-mib: the stream's readAheadBytes, default readGetMaxBytes × readMaxConcurrency)
import { createWriteStream } from 'node:fs'
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import { GetObjectCommand } from '@aws-sdk/client-s3'
import { decodeHeader, HEADER_BYTES, objectLayout } from '../../lib/format/header.js'
import { parseKey } from '../../lib/format/names.js'
import type { ReadKind } from '../../lib/read/reader.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { type ChunkedGet, hasChunkedGet } from '../../lib/store/common.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { S3Store } from '../../lib/store/s3.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { crc32 } from '../../lib/util/crc32.js'
import { givePieces } from '../../lib/util/piece-pool.js'
import { freshMemoryCost, median, percentile } from '../helpers/bench.js'
import { fillBlocks } from '../helpers/pattern.js'
import { s3TestStore } from '../helpers/s3-env.js'
import { type LinkModel, ThrottledStore } from '../helpers/throttled-store.js'

const MiB = 1024 * 1024
const { values: args } = parseArgs({
  options: {
    mib: { type: 'string', default: '1024' },
    'object-mib': { type: 'string', default: '16' },
    random: { type: 'string', default: '100' },
    rounds: { type: 'string', default: '3' },
    only: { type: 'string' },
    links: { type: 'string', default: 'directory,general' },
    'ahead-mib': { type: 'string' },
    'get-path': { type: 'string', default: 'http,sdk' },
  },
})
const total = Number(args.mib) * MiB
const objectBytes = Number(args['object-mib']) * MiB
const randomReads = Number(args.random)
const rounds = Number(args.rounds)
const GET_MAX = 16 * MiB
const CONCURRENCY = 10

const ALL_LINKS: Array<[string, LinkModel]> = [
  ['directory', { latencyMs: 10, bandwidth: 4e9, perRequestBandwidth: 1.5e9 }],
  ['general purpose', { latencyMs: 40, bandwidth: 1.4e9, perRequestBandwidth: 400e6 }],
]
const STORES = ['memory', 'dir', 's3']
if (args.only !== undefined && !STORES.includes(args.only))
  throw new Error(`--only ${args.only}: no such store (${STORES.join(', ')})`)
if (args.only === 's3' && !process.env.AWS_ENDPOINT_URL_S3)
  throw new Error(`--only s3: needs radosgw: bash test/rgw/rgw.sh start && eval "$(bash test/rgw/rgw.sh env)"`)
const wanted = (args.links as string).split(',').map((s) => s.trim())
const LINKS = ALL_LINKS.filter(([name]) => wanted.some((w) => w !== '' && name.startsWith(w)))
if (LINKS.length === 0 && (args.only === undefined || args.only === 'memory'))
  throw new Error(`--links ${args.links}: no such link (directory, general)`)

/** Writes the checkpoint: `objectBytes` of dirty data make one partial object. */
async function build(store: ObjectStore): Promise<number> {
  const f = await SegmentFile.create(store, {
    dataCacheDirtyMaxBytesThreshold: objectBytes,
    segmentBufferSize: 2 * objectBytes,
  })
  const chunk = Buffer.allocUnsafe(MiB)
  for (let at = 0; at < total; at += MiB) {
    fillBlocks(chunk, at)
    await f.write(at, chunk)
  }
  const t = await f.flush()
  await f.close()
  return t.objects
}

/** Every object's data region, cut into GETs of at most GET_MAX (computed before timing). */
async function dataRanges(store: ObjectStore): Promise<Array<{ key: string; start: number; end: number }>> {
  const out: Array<{ key: string; start: number; end: number }> = []
  for await (const e of store.list('')) {
    const k = parseKey(e.key)
    if (k?.kind !== 'segment') continue
    const h = decodeHeader(await store.get(e.key, { range: { suffix: HEADER_BYTES } }), e.size, k)
    const dataEnd = objectLayout(h, h).metaOffset
    for (let at = 0; at < dataEnd; at += GET_MAX)
      out.push({ key: e.key, start: at, end: Math.min(dataEnd, at + GET_MAX) })
  }
  return out
}

/** Seconds of process CPU (user + system) since `from`. */
function cpuSeconds(from: NodeJS.CpuUsage): number {
  const u = process.cpuUsage(from)
  return (u.user + u.system) / 1e6
}

/** Mark-compact collections so far (V8's major GCs), counted as Node reports them. */
let majorGcs = 0
new PerformanceObserver((list) => {
  for (const e of list.getEntries() as Array<PerformanceEntry & { detail?: { kind?: number } }>)
    if (e.detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majorGcs++
}).observe({ entryTypes: ['gc'] })

/** What a pass made the process's memory do: mark-compacts and minor page faults, per GiB read. */
interface MemoryWork {
  majorGcs: number
  faults: number
}

/** Starts counting; the function returned ends the count (after letting the last GC entries arrive). */
function countMemoryWork(): () => Promise<MemoryWork> {
  const gc0 = majorGcs
  const f0 = process.resourceUsage().minorPageFault
  return async () => {
    const faults = process.resourceUsage().minorPageFault - f0
    await new Promise((r) => setTimeout(r, 20))
    const gib = total / (1024 * MiB)
    return { majorGcs: (majorGcs - gc0) / gib, faults: faults / gib }
  }
}

async function raw(
  store: ObjectStore,
  ranges: Array<{ key: string; start: number; end: number }>,
): Promise<{ seconds: number; cpu: number; firstMs: number; memory: MemoryWork }> {
  const counted = countMemoryWork()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  let next = 0
  let bytes = 0
  let firstMs = -1
  const worker = async () => {
    while (next < ranges.length) {
      const r = ranges[next++] as { key: string; start: number; end: number }
      // The body as the store read it (S3Store: its pieces), never joined, and its pieces
      // given back as the reader gives them: the store's GET path alone, its memory reused.
      const range = { start: r.start, end: r.end }
      const got = hasChunkedGet(store) ? await store.getChunks(r.key, { range }) : [await store.get(r.key, { range })]
      if (firstMs < 0) firstMs = performance.now() - t0
      for (const c of got) bytes += c.byteLength
      givePieces(got)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  if (bytes < total) throw new Error(`raw read ${bytes} bytes`)
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuSeconds(c0)
  return { seconds, cpu, firstMs, memory: await counted() }
}

/**
 * The baseline no one here wrote: the SDK's own GetObject of the same ranges, as many in
 * flight, each body drained chunk by chunk (nothing kept; with `readBytes`, a CRC-32 of
 * each chunk, else nothing checked).
 */
async function sdkDrain(
  s3: S3Store,
  ranges: Array<{ key: string; start: number; end: number }>,
  readBytes = false,
): Promise<{ seconds: number; cpu: number; firstMs: number; memory: MemoryWork }> {
  const counted = countMemoryWork()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  let next = 0
  let bytes = 0
  let firstMs = -1
  let crc = 0
  const worker = async () => {
    while (next < ranges.length) {
      const r = ranges[next++] as { key: string; start: number; end: number }
      const out = await s3.client.send(
        new GetObjectCommand({ Bucket: s3.bucket, Key: s3.prefix + r.key, Range: `bytes=${r.start}-${r.end - 1}` }),
      )
      for await (const chunk of out.Body as AsyncIterable<Uint8Array>) {
        if (firstMs < 0) firstMs = performance.now() - t0
        bytes += chunk.byteLength
        if (readBytes) crc = crc32(chunk, crc)
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  if (bytes < total) throw new Error(`SDK drain read ${bytes} bytes`)
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuSeconds(c0)
  return { seconds, cpu, firstMs, memory: await counted() }
}

async function sequential(store: ObjectStore) {
  const counted = countMemoryWork()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const rs = createStreamSegmentReadStream({
    store,
    readGetMaxBytes: GET_MAX,
    readMaxConcurrency: CONCURRENCY,
    ...(args['ahead-mib'] !== undefined && { readAheadBytes: Number(args['ahead-mib']) * MiB }),
  })
  let bytes = 0
  let firstMs = -1
  for await (const c of rs) {
    if (firstMs < 0) firstMs = performance.now() - t0
    bytes += (c as Uint8Array).byteLength
  }
  if (bytes !== total) throw new Error(`stream read ${bytes} bytes`)
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuSeconds(c0)
  return { seconds, cpu, firstMs, timing: rs.timing, memory: await counted() }
}

/**
 * The checkpoint read whole into memory the caller owns: a cold open, then one
 * `SegmentFile.readInto` into `target` (made and faulted in once, outside the pass), the
 * same GET size and GETs in flight as the stream.
 */
async function into(store: ObjectStore, target: Buffer) {
  const counted = countMemoryWork()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const f = await SegmentFile.open(store, {
    readOnly: true,
    readGetMaxBytes: GET_MAX,
    readMaxConcurrency: CONCURRENCY,
  })
  const n = await f.readInto(0, target)
  await f.close()
  if (n !== total) throw new Error(`readInto read ${n} bytes`)
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuSeconds(c0)
  return { seconds, cpu, memory: await counted() }
}

/**
 * The checkpoint to a local file, the two ways a user has: `downloadFile` (cold open, each
 * GET's checked pieces written where they go), and the read stream piped into
 * `fs.createWriteStream`. The same GET size and GETs in flight; the file is removed after.
 */
async function toFile(store: ObjectStore, dir: string, how: 'download' | 'pipe') {
  const path = join(dir, `read-bench-${how}.bin`)
  const counted = countMemoryWork()
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const read = { readGetMaxBytes: GET_MAX, readMaxConcurrency: CONCURRENCY }
  if (how === 'download') await downloadFile(store, path, read)
  else await pipeline(createStreamSegmentReadStream({ store, ...read }), createWriteStream(path))
  const seconds = (performance.now() - t0) / 1000
  const cpu = cpuSeconds(c0)
  const { size } = await stat(path)
  await rm(path)
  if (size !== total) throw new Error(`${how} wrote ${size} bytes`)
  return { seconds, cpu, memory: await counted() }
}

/** Random 4 KiB reads: on a fresh handle each (requests after its open), then on one handle. */
async function random(store: ThrottledStore | CountingStore) {
  let seed = 12345
  const rnd = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
    return seed / 2 ** 32
  }
  const offsets = Array.from({ length: randomReads }, () => Math.floor(rnd() * (total - 4096)))
  const cold: number[] = []
  const coldMs: number[] = []
  for (const at of offsets) {
    const f = await SegmentFile.open(store, { readOnly: true })
    const before = store.totalRequests
    const t0 = performance.now()
    await f.read(at, 4096)
    coldMs.push(performance.now() - t0)
    cold.push(store.totalRequests - before)
  }
  const f = await SegmentFile.open(store, { readOnly: true })
  const warm: number[] = []
  const warmMs: number[] = []
  for (const at of offsets) {
    const before = store.totalRequests
    const t0 = performance.now()
    await f.read(at, 4096)
    warmMs.push(performance.now() - t0)
    warm.push(store.totalRequests - before)
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
  return { cold, coldMs, warm, warmMs, mean }
}

/** Counts requests of a store without changing it (radosgw, the directory store). */
class CountingStore extends ThrottledStore {
  constructor(readonly base: ObjectStore & ChunkedGet) {
    super(base, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
  }

  /** The store's chunked GET, counted as a GET (the reader takes it when the store has it). */
  getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
    return this.around(
      { op: 'get', key, bytesUp: 0, signal: options?.signal },
      () => this.base.getChunks(key, options),
      (cs) => cs.reduce((n, c) => n + c.byteLength, 0),
    )
  }
}

const KINDS: ReadKind[] = ['inode', 'header', 'meta', 'summary', 'data']

interface Round {
  raw: number
  stream: number
  ratio: number
  rawCpu: number
  streamCpu: number
  /** The SDK's GetObject drained (radosgw only; NaN elsewhere). */
  sdk: number
  sdkCpu: number
  /** The same, reading every byte once (a CRC-32 of each chunk). */
  sdkReadCpu: number
  streamToSdk: number
  rawFirstMs: number
  streamFirstMs: number
  firstRatio: number
  /** readInto the caller's memory. */
  into: number
  intoToRaw: number
  intoCpu: number
  /** To a local file: downloadFile, and the stream piped into fs.createWriteStream. */
  download: number
  downloadCpu: number
  pipe: number
  pipeCpu: number
}

/** Column `k` over the rounds as "median (min–max)", or '-' where a round has none. */
function spread(rs: Round[], k: keyof Round, digits: number): string {
  const xs = rs.map((r) => r[k])
  if (xs.some((x) => Number.isNaN(x))) return '-'
  const f = (x: number) => x.toFixed(digits)
  return `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`
}

/** One summary row: median (min–max) of each column over the rounds. */
function summaryRow(name: string, rs: Round[]): string {
  const col = (k: keyof Round, digits: number) => spread(rs, k, digits)
  return (
    `| ${name} | ${rs.length} | ${col('raw', 0)} | ${col('sdk', 0)} | ${col('stream', 0)} | ${col('ratio', 2)} | ` +
    `${col('streamToSdk', 2)} | ${col('rawCpu', 2)} | ${col('sdkCpu', 2)} | ${col('sdkReadCpu', 2)} | ${col('streamCpu', 2)} | ` +
    `${col('rawFirstMs', 0)} | ${col('streamFirstMs', 0)} | ${col('firstRatio', 2)} |`
  )
}

async function benchStore(name: string, store: ThrottledStore | CountingStore, inner: ObjectStore, s3?: S3Store) {
  const ranges = await dataRanges(inner)
  const rows: string[] = []
  const memoryRows: string[] = []
  const intoRows: string[] = []
  const fileRows: string[] = []
  const measured: Round[] = []
  const files = await mkdtemp(join(tmpdir(), 'read-bench-files-'))
  const target = Buffer.alloc(total, 1) // faulted in now, reused by every readInto pass
  // A warm-up pass of each, not reported: the first pass pays for page faults and compilation.
  await raw(store, ranges)
  if (s3 !== undefined) await sdkDrain(s3, ranges)
  await sequential(store)
  await into(store, target)
  await toFile(store, files, 'download')
  await toFile(store, files, 'pipe')
  const gib = total / (1024 * MiB)
  const f = (x: number, d: number) => (Number.isNaN(x) ? '-' : x.toFixed(d))
  for (let r = 0; r < rounds; r++) {
    // The cold first byte is compared with the first raw GET of a cold process-wide pass.
    const rw = await raw(store, ranges)
    const sdk = s3 === undefined ? undefined : await sdkDrain(s3, ranges)
    const sdkRead = s3 === undefined ? undefined : await sdkDrain(s3, ranges, true)
    const seq = await sequential(store)
    const mine = await into(store, target)
    // The two file passes take turns going first: each finds the page cache as the other left it.
    const pipeFirst = r % 2 === 1 ? await toFile(store, files, 'pipe') : undefined
    const download = await toFile(store, files, 'download')
    const pipe = pipeFirst ?? (await toFile(store, files, 'pipe'))
    const t = seq.timing
    const kinds = KINDS.map((k) => `${t?.requests[k]}`).join(' / ')
    const m: Round = {
      raw: total / MiB / rw.seconds,
      stream: total / MiB / seq.seconds,
      ratio: rw.seconds / seq.seconds,
      rawCpu: rw.cpu / gib,
      streamCpu: seq.cpu / gib,
      sdk: sdk === undefined ? Number.NaN : total / MiB / sdk.seconds,
      sdkCpu: sdk === undefined ? Number.NaN : sdk.cpu / gib,
      sdkReadCpu: sdkRead === undefined ? Number.NaN : sdkRead.cpu / gib,
      streamToSdk: sdk === undefined ? Number.NaN : sdk.seconds / seq.seconds,
      rawFirstMs: rw.firstMs,
      streamFirstMs: seq.firstMs,
      firstRatio: seq.firstMs / rw.firstMs,
      into: total / MiB / mine.seconds,
      intoToRaw: rw.seconds / mine.seconds,
      intoCpu: mine.cpu / gib,
      download: total / MiB / download.seconds,
      downloadCpu: download.cpu / gib,
      pipe: total / MiB / pipe.seconds,
      pipeCpu: pipe.cpu / gib,
    }
    measured.push(m)
    rows.push(
      `| ${name} | ${r + 1} | ${f(m.raw, 0)} | ${f(m.sdk, 0)} | ${f(m.stream, 0)} | ${f(m.ratio, 2)} | ${f(m.streamToSdk, 2)} | ` +
        `${f(m.rawCpu, 2)} | ${f(m.sdkCpu, 2)} | ${f(m.sdkReadCpu, 2)} | ${f(m.streamCpu, 2)} | ${f(rw.firstMs, 0)} | ${f(seq.firstMs, 0)} | ` +
        `${ranges.length} | ${kinds} |`,
    )
    const work = (w: MemoryWork | undefined) =>
      w === undefined ? '- | -' : `${w.majorGcs.toFixed(1)} | ${Math.round(w.faults)}`
    memoryRows.push(`| ${name} | ${r + 1} | ${work(rw.memory)} | ${work(sdk?.memory)} | ${work(seq.memory)} |`)
    intoRows.push(
      `| ${name} | ${r + 1} | ${f(m.into, 0)} | ${f(m.intoToRaw, 2)} | ${f(m.intoCpu, 2)} | ${f(m.rawCpu, 2)} | ` +
        `${f(m.streamCpu, 2)} | ${work(mine.memory)} |`,
    )
    fileRows.push(
      `| ${name} | ${r + 1} | ${f(m.download, 0)} | ${f(m.downloadCpu, 2)} | ${f(m.pipe, 0)} | ${f(m.pipeCpu, 2)} | ` +
        `${work(download.memory)} | ${work(pipe.memory)} |`,
    )
  }
  await rm(files, { recursive: true, force: true })
  const of = (k: keyof Round, digits: number) => spread(measured, k, digits)
  intoRows.push(
    `| ${name} | median (min–max) | ${of('into', 0)} | ${of('intoToRaw', 2)} | ${of('intoCpu', 2)} | ${of('rawCpu', 2)} | ${of('streamCpu', 2)} | - | - |`,
  )
  fileRows.push(
    `| ${name} | median (min–max) | ${of('download', 0)} | ${of('downloadCpu', 2)} | ${of('pipe', 0)} | ${of('pipeCpu', 2)} | - | - | - | - |`,
  )
  const summary = summaryRow(name, measured)
  if (randomReads <= 0) return { rows, memoryRows, intoRows, fileRows, summary, randomRow: undefined }
  const rnd = await random(store)
  const randomRow =
    `| ${name} | ${Math.max(...rnd.cold)} | ${rnd.mean(rnd.cold).toFixed(2)} | ${percentile(rnd.coldMs, 50).toFixed(1)} | ` +
    `${percentile(rnd.coldMs, 99).toFixed(1)} | ${rnd.mean(rnd.warm).toFixed(2)} | ${percentile(rnd.warmMs, 50).toFixed(1)} | ` +
    `${percentile(rnd.warmMs, 99).toFixed(1)} |`
  return { rows, memoryRows, intoRows, fileRows, summary, randomRow }
}

async function main() {
  console.log(
    `# read benchmark: ${total / MiB} MiB checkpoint of ~${objectBytes / MiB} MiB objects, 4 KiB blocks; ` +
      `GETs of <= ${GET_MAX / MiB} MiB, ${CONCURRENCY} in flight; ${randomReads} random reads ` +
      `(node ${process.version}, ${cpus()[0]?.model}, ${cpus().length} cores; fresh memory ${freshMemoryCost().toFixed(2)} CPU-s/GiB)`,
  )
  const seqRows: string[] = []
  const memoryRows: string[] = []
  const intoRows: string[] = []
  const fileRows: string[] = []
  const summaryRows: string[] = []
  const randomRows: string[] = []
  if (args.only === undefined || args.only === 'memory') {
    const mem = new MemoryStore()
    const objects = await build(mem)
    console.log(`# memory: ${objects} objects`)
    for (const [name, link] of LINKS) {
      console.log(
        `# ${name}: ${link.latencyMs} ms per request, ${link.bandwidth / 1e6} MB/s shared, ${(link.perRequestBandwidth ?? 0) / 1e6} MB/s per request`,
      )
      const r = await benchStore(`throttled ${name}`, new ThrottledStore(mem, link), mem)
      seqRows.push(...r.rows)
      memoryRows.push(...r.memoryRows)
      intoRows.push(...r.intoRows)
      fileRows.push(...r.fileRows)
      summaryRows.push(r.summary)
      if (r.randomRow !== undefined) randomRows.push(r.randomRow)
    }
  }
  if (args.only === undefined || args.only === 'dir') {
    // The embedded default: a directory on the local disk, its objects in the page cache.
    const root = await mkdtemp(join(tmpdir(), 'read-bench-'))
    try {
      const dir = new DirectoryStore(root)
      const t0 = performance.now()
      const objects = await build(dir)
      console.log(
        `# directory store ${root}: ${objects} objects written in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      )
      const r = await benchStore('directory store', new CountingStore(dir), dir)
      seqRows.push(...r.rows)
      memoryRows.push(...r.memoryRows)
      intoRows.push(...r.intoRows)
      fileRows.push(...r.fileRows)
      summaryRows.push(r.summary)
      if (r.randomRow !== undefined) randomRows.push(r.randomRow)
    } finally {
      await rm(root, { recursive: true, force: true })
    }
  }
  if ((args.only === undefined || args.only === 's3') && process.env.AWS_ENDPOINT_URL_S3) {
    // Not the SDK's warning that its later versions need a newer Node amid the tables.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
    const s3 = await s3TestStore()
    const t0 = performance.now()
    const objects = await build(s3)
    console.log(
      `# radosgw ${process.env.AWS_ENDPOINT_URL_S3}: ${objects} objects written in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    )
    for (const path of (args['get-path'] as string).split(',').map((x) => x.trim())) {
      if (path !== 'http' && path !== 'sdk') throw new Error(`--get-path ${path}: not http or sdk`)
      // The same objects, read through a store with this GET path.
      const store = new S3Store({ client: s3.client, bucket: s3.bucket, prefix: s3.prefix, getPath: path })
      const r = await benchStore(`radosgw, ${path} GETs`, new CountingStore(store), store, store)
      seqRows.push(...r.rows)
      memoryRows.push(...r.memoryRows)
      intoRows.push(...r.intoRows)
      fileRows.push(...r.fileRows)
      summaryRows.push(r.summary)
      if (r.randomRow !== undefined) randomRows.push(r.randomRow)
    }
  }
  console.log('\nCold open + sequential read (MiB/s), vs raw ranged GETs of the same data bytes and the SDK drain')
  console.log(
    '| store | round | raw GETs MiB/s | SDK drain MiB/s | stream MiB/s | stream/raw | stream/SDK | raw CPU-s/GiB | SDK CPU-s/GiB | SDK reading the bytes CPU-s/GiB | stream CPU-s/GiB | raw first GET ms | stream first byte ms | raw GETs | stream requests inode / header / meta / summary / data |',
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|')
  for (const row of seqRows) console.log(row)
  console.log('\nMemory work per GiB read: mark-compact collections (V8) and minor page faults (the process)')
  console.log(
    '| store | round | raw GETs mark-compacts | raw GETs faults | SDK drain mark-compacts | SDK drain faults | stream mark-compacts | stream faults |',
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of memoryRows) console.log(row)
  console.log(
    "\nInto the caller's memory: SegmentFile.readInto of the whole checkpoint (cold open) into one buffer made once, every block checked",
  )
  console.log(
    '| store | round | readInto MiB/s | readInto/raw MiB/s | readInto CPU-s/GiB | raw CPU-s/GiB | stream CPU-s/GiB | readInto mark-compacts | readInto faults |',
  )
  console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of intoRows) console.log(row)
  console.log(
    '\nTo a local file (the temporary directory): downloadFile, and the stream piped into fs.createWriteStream; every block checked in both',
  )
  console.log(
    '| store | round | downloadFile MiB/s | downloadFile CPU-s/GiB | stream → file MiB/s | stream → file CPU-s/GiB | downloadFile mark-compacts | downloadFile faults | stream → file mark-compacts | stream → file faults |',
  )
  console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of fileRows) console.log(row)
  console.log('\nMedian (min–max) over the rounds')
  console.log(
    '| store | rounds | raw GETs MiB/s | SDK drain MiB/s | stream MiB/s | stream/raw | stream/SDK | raw CPU-s/GiB | SDK CPU-s/GiB | SDK reading the bytes CPU-s/GiB | stream CPU-s/GiB | raw first GET ms | stream first byte ms | first byte / first GET |',
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of summaryRows) console.log(row)
  if (randomRows.length === 0) return
  console.log('\nRandom 4 KiB reads: requests per read after open, and latency (ms)')
  console.log(
    '| store | cold: max requests | cold: mean requests | cold p50 ms | cold p99 ms | one handle: mean requests | p50 ms | p99 ms |',
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|')
  for (const row of randomRows) console.log(row)
}

await main()
