/**
 * `stream-segment get`: a checkpoint, or a byte range of it, to a file (`downloadFile`) or
 * to stdout (the read stream).
 */
import type { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { StreamSegmentError } from '../errors.js'
import { type DownloadResult, downloadFile } from '../streams/download-file.js'
import { createStreamSegmentReadStream } from '../streams/read-stream.js'
import { printable } from '../util/shell-words.js'
import { cnoOption, openContainer, optionName, type Parsed, positionals, readOptions } from './args.js'
import { amountLine, count, formatBytes, jsonLine, type Out, showProgress } from './output.js'

const GET_USAGE = 'get <url> [file|-] [-o file] [--range a-b] [--cno N] [--json]'

export async function get(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url, file] = positionals(p, 1, 2, GET_USAGE) as [string, string | undefined]
  const output = p.options.get('output')
  if (file !== undefined && output !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `get: two targets, ${file} and ${optionName(p, 'output')} ${output}: give one (usage: stream-segment ${GET_USAGE})`,
    )
  }
  const target = file ?? output ?? '-'
  const json = p.flags.has('json')
  if (target === '-' && json) {
    throw StreamSegmentError.invalidArgument(
      'get --json reports on stdout, where the data would go: give a file (get URL FILE, or -o FILE)',
    )
  }
  const { start, end, range, rangeName } = rangeOption(p)
  const cno = cnoOption(p)
  const reads = readOptions(p)
  // A file is written as its blocks come (downloadFile): there is no read-ahead to size.
  if (target !== '-' && reads.readAheadBytes !== undefined) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'readAheadBytes')} is for stdout (get URL -), not a file: a file is written as its blocks come`,
    )
  }
  const store = openContainer(url)
  // Binary data on a terminal garbles it: only when asked for explicitly (`-`, `-o -`).
  if (target === '-' && file === undefined && output === undefined && out.isTTY) {
    throw StreamSegmentError.invalidArgument(
      'get: not writing binary data to a terminal: give a file (get URL FILE, or -o FILE), ' +
        'redirect stdout, or give - to write to the terminal anyway',
    )
  }
  // On a terminal, a progress line on stderr while a file is written.
  let stopProgress: (() => void) | undefined
  let done = 0
  const clearProgress = () => {
    stopProgress?.()
    stopProgress = undefined
  }
  // A range starting at or past the end of the file reads nothing, which here is an error
  // rather than an empty result.
  const pastEnd = (size: number, which: string) => {
    if (start === undefined || start < size) return
    throw StreamSegmentError.range(
      `option ${rangeName} ${range}: starts at byte ${start}, at or past the end of ${which} ` +
        `(${size} bytes${size > 0 ? `, bytes 0-${size - 1}` : ''})`,
    )
  }
  try {
    if (target === '-') {
      const rs = createStreamSegmentReadStream({ store, start, end, cno, signal, ...reads })
      await pipeline(rs, out as Writable)
      pastEnd(rs.size, `checkpoint ${rs.file?.cno} of ${store.url}`)
      return 0
    }
    // Into a temporary file, renamed into place once complete (downloadFile).
    const got = await downloadFile(store, target, {
      start,
      end,
      cno,
      signal,
      ...reads,
      onStart: (file, total) => {
        pastEnd(file.size, `checkpoint ${file.cno} of ${store.url}`)
        if (err.isTTY) stopProgress = showProgress(err, () => ({ done, total }), amountLine('get'))
      },
      onProgress: (d) => {
        done = d
      },
    })
    clearProgress()
    report(out, json, store.url, target, got)
  } catch (e) {
    if ((e as { code?: string }).code === 'EPIPE') return 0 // the reader of stdout went away
    // Stdout failed (a full disk behind a redirect): the store of the output, not a bug.
    if (target === '-' && !StreamSegmentError.is(e) && e === (out as Writable).errored) {
      throw StreamSegmentError.store(`stdout: ${(e as Error).message}`, e)
    }
    throw e
  } finally {
    clearProgress()
  }
  return 0
}

/** Why `range` is no range, with the forms taken: a curl-style suffix (`-500`) or list is said to be none. */
function rangeHint(range: string): string {
  const forms = 'give a-b (bytes a to b, both included, from 0) or a- (from byte a to the end)'
  if (/^\s*-\d+\s*$/.test(range))
    return `asks for the last bytes (curl's -r ${range.trim()}), which get does not take: ${forms}`
  if (range.includes(',')) return `is several ranges, which get does not take (one per get): ${forms}`
  return `is not a range: ${forms}`
}

/** `--range a-b` (bytes a to b, both included) or `a-` (from a to the end): the end is clipped to the file later. */
function rangeOption(p: Parsed): { start?: number; end?: number; range?: string; rangeName: string } {
  const range = p.options.get('range')
  const rangeName = optionName(p, 'range')
  if (range === undefined) return { rangeName }
  // Spaces around the range are dropped, as around every number the commands take.
  const m = /^(\d+)-(\d*)$/.exec(range.trim())
  if (!m) throw StreamSegmentError.invalidArgument(`option ${rangeName}: ${JSON.stringify(range)} ${rangeHint(range)}`)
  const start = Number(m[1])
  if (!Number.isSafeInteger(start)) {
    // Past the end of any file (at most 2^53 - 1 bytes): as a start past this one's end.
    throw StreamSegmentError.range(`option ${rangeName}: ${range}: starts at byte ${m[1]}, past the end of any file`)
  }
  // An end past the file is clipped to it, however far past.
  const end = m[2] === '' ? undefined : Math.min(Number(m[2]), Number.MAX_SAFE_INTEGER)
  if (end !== undefined && end < start) {
    throw StreamSegmentError.invalidArgument(`option ${rangeName}: ${range} ends before it starts`)
  }
  return { start, end, range, rangeName }
}

/** What a download to a file did: one JSON line, or one line for people. */
function report(out: Out, json: boolean, url: string, target: string, got: DownloadResult): void {
  const t = got.timing
  const requests = Object.values(t.requests).reduce((a, b) => a + b, 0)
  if (json) {
    const r = {
      url,
      cno: got.cno,
      size: got.size,
      file: target,
      bytes: got.bytes,
      seconds: got.seconds,
      requests,
      timing: t,
    }
    out.write(jsonLine(r))
    return
  }
  out.write(
    `got ${formatBytes(got.bytes)} of checkpoint ${got.cno} into ${printable(target)} in ${got.seconds.toFixed(2)} s ` +
      `(${formatBytes(got.bytes / got.seconds)}/s, ${count(requests, 'request')})\n`,
  )
}
