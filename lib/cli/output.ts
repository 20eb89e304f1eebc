/**
 * What the commands print: byte counts, durations and tables on stdout, progress lines on
 * a terminal's stderr; and a local file's error as the library's.
 */
import { StreamSegmentError } from '../errors.js'
import { printable } from '../util/shell-words.js'
import { KiB, MiB } from '../util/units.js'

const PROGRESS_MS = 250

/** A file-system error as the library's: a missing path is ERR_NOT_FOUND, anything else a bad argument. */
export function fsError(err: unknown, what: string): unknown {
  const code = (err as { code?: unknown }).code
  if (StreamSegmentError.is(err) || typeof code !== 'string') return err
  if (code === 'ENOENT') return StreamSegmentError.notFound(`${what}: no such file or directory`)
  return StreamSegmentError.invalidArgument(`${what}: ${(err as Error).message}`)
}

/** `n` and its noun, singular for one: `count(1, 'object')` is "1 object", `count(2, 'leaf', 'leaves')` "2 leaves". */
export function count(n: number, noun: string, plural = `${noun}s`): string {
  return `${n} ${n === 1 ? noun : plural}`
}

export function formatBytes(n: number): string {
  if (n < KiB) return `${Math.round(n)} B`
  if (n < MiB) return `${(n / KiB).toFixed(1)} KiB`
  if (n < 1024 * MiB) return `${(n / MiB).toFixed(1)} MiB`
  return `${(n / 1024 / MiB).toFixed(2)} GiB`
}

/**
 * `value` as one line of JSON for --json, with DEL and the C1 controls escaped as JSON
 * escapes too (JSON.stringify escapes only C0 ones): quoted bytes of an object (the one-byte
 * CSI 0x9b) reach no terminal raw, and the line is the same JSON.
 */
export function jsonLine(value: unknown): string {
  return `${JSON.stringify(value).replace(/[\u007f-\u009f]/g, (c) => `\\u${(c.codePointAt(0) as number).toString(16).padStart(4, '0')}`)}\n`
}

/** Rows as columns, every cell printable. */
export function table(rows: Array<Array<string | number>>, right: boolean[]): string {
  const cells = rows.map((r) => r.map((c) => printable(String(c))))
  // A loop, not Math.max(...column): spread over a column of some 120,000 rows (ls of a
  // long history, inspect of a checkpoint of that many objects) overflows the stack.
  const widths = (cells[0] ?? []).map(() => 0)
  for (const r of cells) {
    r.forEach((c, j) => {
      widths[j] = Math.max(widths[j] ?? 0, c.length)
    })
  }
  return cells
    .map((r) =>
      r
        .map((c, j) => (right[j] ? c.padStart(widths[j] as number) : c.padEnd(widths[j] as number)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
}

export type Out = NodeJS.WritableStream & { isTTY?: boolean }

export interface ProgressSample {
  /** Bytes done: uploaded (by reference) or taken in (by value). */
  done: number
  /** Bytes to do, when known (by reference: the file's size). */
  total?: number
  /** Requests with bodies in flight (SegmentFile.progress). */
  requestsInFlight: number
}

/**
 * The put progress line: bytes done (of the total, with a percentage, when known), the
 * rate, requests in flight. Uploaded bytes count block-map nodes, summaries, headers and
 * objects sent again too, so `done` is capped at `total`.
 */
export function progressLine(s: ProgressSample, seconds: number): string {
  const done = s.total === undefined ? s.done : Math.min(s.done, s.total)
  const pct = s.total ? Math.floor((done / s.total) * 100) : 100
  const amount = s.total === undefined ? formatBytes(done) : `${formatBytes(done)} of ${formatBytes(s.total)} (${pct}%)`
  const rate = seconds > 0 ? `${formatBytes(done / seconds)}/s` : '-'
  const n = s.requestsInFlight
  return `put: ${amount}  ${rate}  ${n} ${n === 1 ? 'request' : 'requests'} in flight`
}

/**
 * Draws a progress line, `line` of what `sample` gives, on `err` now and a few times a
 * second; the function returned draws it once more, as it ends, then clears it.
 */
export function showProgress<S>(err: Out, sample: () => S, line: (s: S, seconds: number) => string): () => void {
  const t0 = performance.now()
  const draw = () => err.write(`\r\x1b[K${line(sample(), (performance.now() - t0) / 1000)}`)
  draw()
  const timer = setInterval(draw, PROGRESS_MS)
  return () => {
    clearInterval(timer)
    draw()
    err.write('\r\x1b[K')
  }
}

/**
 * A progress line on `err` when it is a terminal, drawn from the first report on (see
 * showProgress): `report`, to be given a call as its onProgress, is undefined off a
 * terminal; `stop` ends the line, if one was drawn.
 */
export function progressOnTerminal<S>(
  err: Out,
  line: (s: S, seconds: number) => string,
): { report: ((s: S) => void) | undefined; stop: () => void } {
  let sample: S | undefined
  let stop: (() => void) | undefined
  const report = (s: S) => {
    sample = s
    stop ??= showProgress(err, () => sample as S, line)
  }
  return { report: err.isTTY ? report : undefined, stop: () => stop?.() }
}

/** Bytes done of a command's work, and the total when it is known. */
export interface Amount {
  done: number
  total?: number
}

/**
 * The progress line of `verb` (get, export, verify): bytes done of the total, with a
 * percentage, or bytes alone when the total is not known.
 */
export function amountLine(verb: string): (s: Amount) => string {
  return (s) => {
    if (s.total === undefined) return `${verb}: ${formatBytes(s.done)}`
    const pct = s.total > 0 ? Math.floor((Math.min(s.done, s.total) / s.total) * 100) : 100
    return `${verb}: ${formatBytes(s.done)} of ${formatBytes(s.total)} (${pct}%)`
  }
}

/** Milliseconds as parseDuration reads them, in the largest unit that divides them: `1h`, `90s`, `250ms`. */
export function formatDuration(ms: number): string {
  for (const [unit, n] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= n && ms % n === 0) return `${ms / n}${unit}`
  }
  return `${ms}ms`
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2
}
