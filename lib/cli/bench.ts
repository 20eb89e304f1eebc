/** `stream-segment bench`: the streams against the store's own put and get, on a store of one's own. */
import { cpus as cpuInfo } from 'node:os'
import { StreamSegmentError } from '../errors.js'
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
