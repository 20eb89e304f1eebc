/**
 * `stream-segment ls`, `inspect` and `verify`: what a container holds, read only; a
 * write-ahead log folder for `inspect --wal`.
 */
import {
  type AbandonedCheckpoint,
  type CheckpointEntry,
  type CheckpointList,
  inspectCheckpoint,
  listCheckpoints,
  type OpenUploads,
  type Problem,
  verifyCheckpoint,
} from '../admin/index.js'
import { problemCount } from '../admin/map-walk.js'
import { DEFAULT_RESUME_MAX_AGE_MS } from '../container/resume.js'
import { type ErrorCode, StreamSegmentError } from '../errors.js'
import { printable } from '../util/shell-words.js'
import { isoTime } from '../util/time.js'
import { inspectWal } from '../wal/wal.js'
import { cnoOption, openContainer, optionName, type Parsed, positionals } from './args.js'
import { EXIT_CODES } from './exit-codes.js'
import { amountLine, count, formatBytes, jsonLine, type Out, showProgress, table } from './output.js'

export async function ls(p: Parsed, out: Out, _err: Out, signal: AbortSignal): Promise<number> {
  const [url] = positionals(p, 1, 1, 'ls <url> [--json]')
  const store = openContainer(url as string)
  const list = await listCheckpoints(store, { signal })
  if (p.flags.has('json')) {
    out.write(jsonLine({ url: store.url, ...list }))
    return 0
  }
  const rows: Array<Array<string | number>> = [['cno', 'size', 'objects', 'bytes', 'only', 'time', 'state']]
  for (const c of list.checkpoints) {
    rows.push([
      c.cno,
      c.size < 0 ? '?' : c.size,
      c.objects,
      c.bytes,
      c.uniqueBytes < 0 ? '?' : c.uniqueBytes,
      c.timeMs ? isoTime(c.timeMs) : '-',
      stateText(c, list),
    ])
  }
  out.write(`${table(rows, [true, true, true, true, true, false, false])}\n`)
  out.write(`stored: ${list.storedBytes} bytes; "only": the bytes only that checkpoint holds, what dropping it frees\n`)
  if (list.inodeError !== undefined) out.write(`inode object unreadable: ${printable(list.inodeError)}\n`)
  for (const a of list.abandoned) {
    out.write(
      `abandoned: checkpoint ${a.cno} (${count(a.parts, 'part')}, ${count(a.bytes, 'byte')}, no part 0): not openable${abandonedUploads(a)}\n`,
    )
  }
  const line = uploadsLine(list.uploads)
  if (line !== undefined) out.write(line)
  return 0
}

/** What an abandoned checkpoint's open uploads hold, after its line's "not openable". */
function abandonedUploads(a: AbandonedCheckpoint): string {
  const n = a.openUploads ?? 0
  if (n === 0) return ''
  const held =
    a.openUploadBytes === undefined || a.openUploadBytes < 0
      ? 'bytes unknown'
      : `holding ${count(a.openUploadBytes, 'byte')} so far`
  return `; ${n === 1 ? 'its upload is' : `${n} of its uploads are`} still open, ${held}`
}

/**
 * The line on the container's open multipart uploads, or undefined when there are none:
 * how many, what their parts hold (not in "stored"), and what becomes of them.
 */
function uploadsLine(u: OpenUploads): string | undefined {
  if (u.refused !== undefined)
    return `open uploads: not known (the store refused to list them: ${printable(u.refused)})\n`
  if (u.count === 0) return undefined
  const held =
    u.bytes < 0
      ? "bytes unknown (the store cannot list an upload's parts)"
      : u.unsized > 0
        ? `holding at least ${count(u.bytes, 'byte')} (${formatBytes(u.bytes)}) so far (${u.unsized} not sized)`
        : `holding ${count(u.bytes, 'byte')} (${formatBytes(u.bytes)}) so far`
  return (
    `open uploads: ${u.count}, ${held}, not in "stored": a put of the same file resumes one younger than ` +
    `${DEFAULT_RESUME_MAX_AGE_MS / 60_000} minutes; gc aborts those older than its grace period; rm aborts them\n`
  )
}

/** A checkpoint's state as `ls` shows it. */
function stateText(c: CheckpointEntry, list: CheckpointList): string {
  // Which one is published is not known: no state that says (the line after the table says why).
  const state = c.state === 'unknown' ? 'unknown (inode unreadable)' : c.state
  if (c.error !== undefined) return `${state}, unreadable: ${c.error}`
  if (c.state !== 'unpublished') return state
  const built = `unpublished, built on ${c.baseCno}`
  if (!c.rollsForward) return `${built}: never published`
  const rivals = rivalsOnTheWay(c, list.checkpoints)
  if (rivals === undefined) return `${built}: rolled forward by the next writer`
  return `${built}: may be rolled forward (a writer publishes at most one of ${rivals.map((r) => r.cno).join(', ')}, each built on ${rivals[0]?.baseCno})`
}

/**
 * The first set of roll-forward candidates built on the same checkpoint met from `c` down
 * to the published one (its own rivals, or those of one it was built on): a roll-forward
 * publishes at most one of them, so which way it goes is not known. Undefined when there
 * is none: the next writer rolls `c` forward.
 */
function rivalsOnTheWay(c: CheckpointEntry, all: readonly CheckpointEntry[]): CheckpointEntry[] | undefined {
  const candidates = all.filter((x) => x.rollsForward === true)
  for (let at: CheckpointEntry | undefined = c; at !== undefined; ) {
    const base: number = at.baseCno
    const same = candidates.filter((x) => x.baseCno === base)
    if (same.length > 1) return same
    at = candidates.find((x) => x.cno === base)
  }
  return undefined
}

export async function inspect(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const walDir = p.options.get('wal')
  if (walDir !== undefined) return inspectWalFolder(p, walDir, out)
  const [url] = positionals(p, 1, 1, 'inspect <url> [--cno N] [--json]')
  const store = openContainer(url as string)
  const r = await inspectCheckpoint(store, { cno: cnoOption(p), signal })
  if (p.flags.has('json')) {
    out.write(jsonLine(r))
    return problemsFound('inspect', r, err)
  }
  if (r.error !== undefined) {
    // Its entry (the inode object, or its part 0) cannot be read: nothing more to show than its problem.
    out.write(`${checkpointName(r.cno)} of ${printable(r.url)}: unreadable: ${printable(r.error)}\n`)
    for (const pr of r.problems) out.write(problemLine(pr))
    return problemsFound('inspect', r, err)
  }
  out.write(
    `checkpoint ${r.cno} of ${printable(r.url)}${r.published ? ' (published)' : ''}: ${r.format}, ${r.size} bytes, ` +
      `blocks ${r.dataBlockSize}, meta blocks ${r.metaBlockSize}, made ${isoTime(r.mtimeMs)}\n` +
      `block map: height ${r.tree.height}, ${count(r.tree.nodes, 'node')} (${count(r.tree.leaves, 'leaf', 'leaves')}), ` +
      `${count(r.tree.dataPointers, 'data pointer')}, ${count(r.tree.holes, 'hole')}; ${count(r.objects.length, 'object')}\n`,
  )
  const rows: Array<Array<string | number>> = [
    ['object', 'size', 'flags', 'data', 'meta', 'summary', 'dead', 'nodes→', 'blocks→', 'base', 'created'],
  ]
  for (const o of r.objects) {
    const h = o.header
    rows.push([
      `${o.key}${o.own ? '' : ' (older)'}`,
      o.size,
      h?.flags.join(',') || '-',
      h?.dataCount ?? '-',
      h?.metaCount ?? '-',
      h?.summaryCount ?? '-',
      o.deadSlots ?? '-',
      o.reachedNodes,
      o.reachedBlocks,
      h?.baseCno ?? '-',
      h ? isoTime(h.createdMs) : o.placeholder ? 'empty claim of an upload never completed' : (o.error ?? '-'),
    ])
  }
  out.write(`${table(rows, [false, true, false, true, true, true, true, true, true, true, false])}\n`)
  for (const pr of r.problems) out.write(problemLine(pr))
  return problemsFound('inspect', r, err)
}

/** `inspect --wal DIR`: what a replay would find, read without changing anything. */
async function inspectWalFolder(p: Parsed, dir: string, out: Out): Promise<number> {
  positionals(p, 0, 0, 'inspect --wal <dir> [--json]')
  if (p.options.has('cno')) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'cno')} is for a container's checkpoint, not with ${optionName(p, 'wal')}`,
    )
  }
  const r = await inspectWal(dir)
  if (p.flags.has('json')) {
    out.write(jsonLine(r))
    return 0
  }
  const lock =
    r.lockedBy === undefined ? 'not locked' : `locked by pid ${r.lockedBy.pid} on ${printable(r.lockedBy.host)}`
  out.write(
    `WAL ${printable(r.dir)} of ${printable(r.container ?? '(no container yet)')}: ${r.records} records, ` +
      `${formatBytes(r.payloadBytes)} written, ${lock}\n`,
  )
  const rows: Array<Array<string | number>> = [['file', 'base cno', 'first record', 'records', 'bytes', 'cut']]
  for (const g of r.generations) {
    rows.push([g.path, g.baseCno, g.firstSeq, g.records, g.bytes, g.cutBytes > 0 ? `${g.cutBytes} bytes` : '-'])
  }
  out.write(`${table(rows, [false, true, true, true, true, false])}\n`)
  for (const g of r.generations)
    if (g.cutReason !== undefined) out.write(`torn or bad tail: ${printable(g.cutReason)}\n`)
  if (r.dropped !== undefined) out.write(`removed unread at the next open: ${printable(r.dropped.reason)}\n`)
  return 0
}

export async function verify(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url] = positionals(p, 1, 1, 'verify <url> [--cno N] [--json]')
  const store = openContainer(url as string)
  const t0 = performance.now()
  // On a terminal, the bytes read so far, drawn a few times a second.
  let done = 0
  const stop = err.isTTY ? showProgress(err, () => ({ done }), amountLine('verify')) : undefined
  let r: Awaited<ReturnType<typeof verifyCheckpoint>>
  try {
    r = await verifyCheckpoint(store, {
      cno: cnoOption(p),
      signal,
      onProgress: (b) => {
        done = b
      },
    })
  } finally {
    stop?.()
  }
  const s = (performance.now() - t0) / 1000
  if (p.flags.has('json')) out.write(jsonLine({ ...r, seconds: s }))
  else {
    for (const pr of r.problems) out.write(problemLine(pr))
    out.write(
      `${checkpointName(r.cno)} of ${printable(r.url)}: ${count(r.objects, 'object')}, ${count(r.nodes, 'node')}, ${count(r.dataPointers, 'data pointer')}, ` +
        `${count(r.slots, 'data slot')} checked, ${formatBytes(r.bytesRead)} read in ${s.toFixed(2)} s: ` +
        `${r.problems.length === 0 ? 'ok' : count(problemCount(r.problems), 'problem')}\n`,
    )
  }
  return problemsFound('verify', r, err)
}

/** A problem as one line for people: where and what may quote an object's bytes. */
function problemLine(pr: Problem): string {
  return `${pr.code} ${pr.what} ${printable(pr.where)}: ${printable(pr.message)}\n`
}

/** A report's checkpoint: by number, or (cno 0: its inode object could not be read) the published one. */
function checkpointName(cno: number): string {
  return cno === 0 ? 'the published checkpoint' : `checkpoint ${cno}`
}

/** 0 when a report found no problem; else one line on stderr and the exit code of the worst. */
function problemsFound(
  command: string,
  r: { problems: readonly Problem[]; cno: number; url: string },
  err: Out,
): number {
  if (r.problems.length === 0) return 0
  const code = worstCode(r.problems)
  err.write(
    `stream-segment: ${code}: ${command} found ${count(problemCount(r.problems), 'problem')} in ${checkpointName(r.cno)} of ${printable(r.url)}\n`,
  )
  return EXIT_CODES[code]
}

/** Worst first, as docs/cli.md lists them: bytes that fail a check, then bytes gone, then a newer layout. */
const BY_SEVERITY: readonly Problem['code'][] = ['ERR_CORRUPT', 'ERR_NOT_FOUND', 'ERR_UNSUPPORTED']

/** The worst code among `problems` (not the first's: they are in key order). */
function worstCode(problems: readonly Problem[]): ErrorCode {
  return (
    BY_SEVERITY.find((code) => problems.some((x) => x.code === code)) ?? ((problems[0] as Problem).code as ErrorCode)
  )
}
