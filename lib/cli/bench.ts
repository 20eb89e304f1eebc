/** `stream-segment bench`: the streams against the store's own put and get, on a store of one's own. */
import { statfsSync } from 'node:fs'
import { cpus as cpuInfo, freemem, totalmem } from 'node:os'
import { dirname, resolve } from 'node:path'
import { StreamSegmentError } from '../errors.js'
import { DirectoryStore } from '../store/directory.js'
import { MemoryStore } from '../store/memory.js'
import { type BenchPass, type BenchResult, benchStore } from '../streams/bench.js'
import { MiB } from '../util/units.js'
import { openContainer, optionName, type Parsed, parseSize, positionals } from './args.js'
import { formatBytes, jsonLine, median, type Out, progressOnTerminal, table } from './output.js'

const BENCH_USAGE = 'bench <url> [--size N] [--rounds N] [--json]'

/**
 * The largest --size: a pass of 1 TiB takes some 20 minutes at 1 GiB/s. Far larger sizes
 * (2^50 bytes, a mistyped suffix) make the plain objects' key list alone outgrow the heap:
 * the process died with V8's fatal error, deaf to Ctrl-C while it built the list.
 */
const MAX_BENCH_BYTES = 1024 * 1024 * MiB

/** `n` bytes in GiB, one decimal: what the refusals below say. */
const gib = (n: number) => `${(n / (1024 * MiB)).toFixed(1)} GiB`

/**
 * The memory a bench of `bytes` on a memory store takes at most: the size (the container,
 * then the plain objects, each held whole), an eighth more (the container's block maps and
 * headers, copies on their way, garbage not yet collected), and 512 MiB for the process
 * and the source's chunks. Measured peaks: 315 MB at 64 MiB, 0.97 GB at 512 MiB, 2.6 GB
 * at 2 GiB.
 */
export function benchMemoryNeeded(bytes: number): number {
  return bytes + Math.ceil(bytes / 8) + 512 * MiB
}

/**
 * The bytes free for this user on the file system that would hold the folder `root` (its
 * nearest existing folder, when it is not made yet); undefined when that cannot be told.
 */
function diskFree(root: string): number | undefined {
  for (let at = resolve(root); ; at = dirname(at)) {
    try {
      const st = statfsSync(at)
      return st.bavail * st.bsize
    } catch {
      if (dirname(at) === at) return undefined // not even the root: the bench's own writes say why
    }
  }
}

/**
 * Why a bench of `bytes` cannot run in a folder with `free` bytes free, or undefined when it
 * fits (or `free` is not known). A directory store holds the container whole, then the
 * plain objects whole (the container deleted before): the size, and an eighth more for
 * the container's block maps and headers. Past the free space, the bench fills the disk
 * (every other writer on it fails meanwhile) before its own write fails.
 */
export function benchDiskShortfall(bytes: number, free: number | undefined): string | undefined {
  const need = bytes + Math.ceil(bytes / 8)
  if (free === undefined || need <= free) return undefined
  return `needs ${gib(need)} of disk (the size and an eighth more): more than is free there (${gib(free)})`
}

/** The memory this process can have: the machine's and what is available now (free, within a cgroup's limit). */
function memoryHere(): { total: number; available: number } {
  const constrained = process.constrainedMemory?.() ?? 0
  const total = constrained > 0 ? Math.min(totalmem(), constrained) : totalmem()
  // process.availableMemory came in Node 20.13; os.freemem before it (MemAvailable on Linux).
  const available = process.availableMemory?.() ?? freemem()
  return { total, available: Math.min(total, available) }
}

/**
 * Why a bench of `bytes` cannot run in memory (`memory`: the figures to judge by), or
 * undefined when it fits. Past the memory there is, the process grows until an allocation
 * fails or V8's fatal error ends it, deaf to Ctrl-C, swapping the machine on the way.
 */
export function benchMemoryShortfall(
  bytes: number,
  memory: { total: number; available: number } = memoryHere(),
): string | undefined {
  const need = benchMemoryNeeded(bytes)
  const needs = `needs ${gib(need)} of memory (the size, an eighth more, and 512 MiB)`
  if (need > memory.total) return `${needs}: more than this machine has (${gib(memory.total)})`
  if (need > memory.available) {
    return `${needs}: more than is available now (${gib(memory.available)} of ${gib(memory.total)})`
  }
  return undefined
}

export async function benchCommand(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url] = positionals(p, 1, 1, BENCH_USAGE) as [string]
  const sizeText = p.options.get('size')
  const bytes = sizeText === undefined ? 256 * MiB : parseSize(optionName(p, 'size'), sizeText)
  if (bytes < MiB) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'size')}: ${bytes} bytes; at least 1M (1048576): less measures the requests, not the bytes`,
    )
  }
  if (bytes > MAX_BENCH_BYTES) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'size')}: ${bytes} bytes; at most 1024G (${MAX_BENCH_BYTES}): each pass of each round moves that much`,
    )
  }
  const roundsText = p.options.get('rounds') ?? '3'
  const roundsDigits = roundsText.trim()
  if (!/^\d+$/.test(roundsDigits) || Number(roundsDigits) < 1 || Number(roundsDigits) > 100) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'rounds')}: ${JSON.stringify(roundsText)} is not a number from 1 to 100`,
    )
  }
  const rounds = Number(roundsDigits)
  const store = openContainer(url)
  const short =
    store instanceof MemoryStore
      ? benchMemoryShortfall(bytes)
      : store instanceof DirectoryStore
        ? benchDiskShortfall(bytes, diskFree(store.root))
        : undefined
  if (short !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `${sizeText === undefined ? 'bench: the default --size, 256M,' : `option ${optionName(p, 'size')}: ${sizeText.trim()}`} ` +
        `in ${store.url} ${short}; give a smaller size${store instanceof MemoryStore ? ', or a store on disk or S3' : ''}`,
    )
  }
  // On a terminal, the one progress line the other commands draw: the round and its pass.
  const progress = progressOnTerminal(err, (s: { round: number; pass: BenchPass }) => {
    return `bench: round ${s.round + 1}/${rounds}: ${s.pass}`
  })
  const report = progress.report
  let r: BenchResult
  try {
    r = await benchStore(store, {
      bytes,
      rounds,
      signal,
      onPass: report && ((round, pass) => report({ round, pass })),
    })
  } finally {
    progress.stop()
  }
  const gib = bytes / (1024 * MiB)
  const passes = [
    ['write stream (16 MiB objects)', r.rounds.map((x) => x.write)],
    ['read stream (cold, every byte checked)', r.rounds.map((x) => x.read)],
    ['store put (16 MiB objects, 4 at once)', r.rounds.map((x) => x.put)],
    ['store get (the same objects, 10 at once)', r.rounds.map((x) => x.get)],
  ] as const
  const rate = (xs: readonly { seconds: number }[]) => xs.map((x) => bytes / MiB / x.seconds)
  const cpu = (xs: readonly { cpuSeconds: number }[]) => xs.map((x) => x.cpuSeconds / gib)
  const ratio = (a: readonly { seconds: number }[], b: readonly { seconds: number }[]) => {
    const ra = rate(a)
    const rb = rate(b)
    return median(ra.map((x, i) => x / (rb[i] as number)))
  }
  const summary = {
    writeToPut: ratio(passes[0][1], passes[2][1]),
    readToGet: ratio(passes[1][1], passes[3][1]),
    firstByteMs: median(r.rounds.map((x) => x.read.firstByteMs)),
  }
  const cpus = cpuInfo()
  const machine = { node: process.version, cpu: cpus[0]?.model.trim() ?? 'unknown', cores: cpus.length }
  if (p.flags.has('json')) {
    out.write(jsonLine({ ...r, ...summary, machine }))
    return 0
  }
  const spread = (xs: number[], digits: number) =>
    `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`
  const rows: Array<Array<string | number>> = [['pass', 'MiB/s', 'CPU-s/GiB']]
  for (const [name, xs] of passes) rows.push([name, spread(rate(xs), 0), spread(cpu(xs), 2)])
  out.write(
    `bench of ${r.url}: ${formatBytes(bytes)} per pass, ${rounds} ${rounds === 1 ? 'round' : 'rounds'}, median (min-max); ` +
      `node ${machine.node}, ${machine.cpu} × ${machine.cores} cores\n` +
      `${table(rows, [false, true, true])}\n` +
      `write stream ${summary.writeToPut.toFixed(2)}x the store's put MiB/s, read stream ${summary.readToGet.toFixed(2)}x its get; ` +
      `first byte of a read after ${summary.firstByteMs.toFixed(0)} ms; everything written was deleted\n`,
  )
  return 0
}
