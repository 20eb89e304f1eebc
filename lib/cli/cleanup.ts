/** `stream-segment gc` (the cleaner) and `rm` (the whole container). */
import {
  type GcProgress,
  type GcResult,
  gc,
  type RemoveProgress,
  type RemoveResult,
  removeContainer,
} from '../admin/index.js'
import { StreamSegmentError } from '../errors.js'
import { printable } from '../util/shell-words.js'
import { openContainer, optionName, type Parsed, parseCno, parseDuration, parseWhole, positionals } from './args.js'
import { count, formatBytes, formatDuration, jsonLine, type Out, progressOnTerminal } from './output.js'

export async function gcCommand(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url] = positionals(
    p,
    1,
    1,
    'gc <url> [--keep N] [--keep-cnos a,b] [--keep-newer-than T] [--grace T] [--dry-run] [--json]',
  )
  const opt = (name: string) => p.options.get(name)
  const duration = (name: string) => {
    const v = opt(name)
    return v === undefined ? undefined : parseDuration(optionName(p, name), v)
  }
  const options = {
    keep: keepOption(p),
    // Checkpoint numbers as --cno takes them: one past MAX_CNO names no checkpoint there can be.
    keepCnos: opt('keepCnos')
      ?.split(',')
      .map((c) => parseCno(optionName(p, 'keepCnos'), c)),
    keepNewerThanMs: duration('keepNewerThan'),
    graceMs: duration('grace'),
    dryRun: p.flags.has('dryRun'),
  }
  // On a terminal, a progress line on stderr: the maps walked, then the objects deleted.
  const progress = progressOnTerminal(err, gcLine)
  let r: GcResult
  try {
    r = await gc(openContainer(url as string), { ...options, signal, onProgress: progress.report })
  } catch (e) {
    throw keepCnosAsTyped(p, e)
  } finally {
    progress.stop()
  }
  if (p.flags.has('json')) {
    out.write(jsonLine(r))
    return 0
  }
  const verb = r.dryRun ? 'would delete' : 'deleted'
  out.write(
    `${printable(r.url)}: kept checkpoints ${r.kept.join(', ') || 'none'}; dropped ${r.dropped.join(', ') || 'none'}\n` +
      `${verb} ${count(r.deletedObjects, 'object')} (${formatBytes(r.deletedBytes)}), ` +
      `${r.dryRun ? 'would abort' : 'aborted'} ${count(r.abortedUploads, 'upload')}; ${formatBytes(r.storedBytes)} stored\n`,
  )
  if (r.youngObjects + r.youngUploads > 0) {
    // Garbage the grace period protects: say so, or a run that frees nothing looks broken.
    out.write(
      `left ${count(r.youngObjects, 'unreached object')} (${formatBytes(r.youngBytes)}) and ${count(r.youngUploads, 'upload')} ` +
        `younger than the grace period (${formatDuration(r.graceMs)}): a later gc deletes them ` +
        '(--grace 0 only when no writer is running)\n',
    )
  }
  if (r.heldObjects > 0) {
    // Kept whatever their age: without this line a run at --grace 0 that leaves them looks broken.
    out.write(
      `kept ${count(r.heldObjects, 'unreached object')} (${formatBytes(r.heldBytes)}) of ${r.heldCnos.length === 1 ? 'number' : 'numbers'} ` +
        `${r.heldCnos.join(', ')}, below a checkpoint a writer rolls forward to (they keep the numbers used, ` +
        'so that it reaches it): a gc after that checkpoint is published or superseded deletes them\n',
    )
  }
  if (r.stopped !== undefined) out.write(`stopped, nothing deleted: ${printable(r.stopped)}\n`)
  return 0
}

export async function rm(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url] = positionals(p, 1, 1, 'rm <url> [--yes] [--json]')
  // A person at a terminal: any of the three on one (`rm URL < /dev/null` typed there too).
  if ((process.stdin.isTTY || out.isTTY || err.isTTY) && !p.flags.has('yes')) {
    throw StreamSegmentError.invalidArgument(`rm deletes every object of ${url}: add --yes to confirm`)
  }
  // On a terminal, a progress line on stderr: the objects deleted.
  const progress = progressOnTerminal(
    err,
    (s: RemoveProgress) => `rm: deleting: ${s.deletedObjects} of ${count(s.objectsToDelete, 'object')} done`,
  )
  let r: RemoveResult
  try {
    r = await removeContainer(openContainer(url as string), { signal, onProgress: progress.report })
  } finally {
    progress.stop()
  }
  out.write(
    p.flags.has('json')
      ? jsonLine(r)
      : `${printable(r.url)}: deleted ${count(r.deletedObjects, 'object')} (${formatBytes(r.deletedBytes)}), aborted ${count(r.abortedUploads, 'upload')}\n`,
  )
  return 0
}

/**
 * `--keep N`, at least 1 (the published checkpoint is always kept), refused here so that
 * the message names the option as typed, not the API's `keep`.
 */
function keepOption(p: Parsed): number | undefined {
  const text = p.options.get('keep')
  if (text === undefined) return undefined
  const n = parseWhole(optionName(p, 'keep'), text)
  if (n < 1) {
    throw StreamSegmentError.invalidArgument(
      `option ${optionName(p, 'keep')}: ${JSON.stringify(text)} keeps no checkpoint: at least 1 (the published one); nothing was deleted`,
    )
  }
  return n
}

/**
 * gc's error for a kept checkpoint that does not exist names the API's option
 * (`gc: keepCnos names checkpoint 7`): here, the option as typed (`--keep-cnos`).
 */
function keepCnosAsTyped(p: Parsed, e: unknown): unknown {
  const api = ': gc: keepCnos names '
  if (!StreamSegmentError.is(e, 'ERR_NOT_FOUND') || !e.message.includes(api)) return e
  const message = e.message.replace(api, `: gc: ${optionName(p, 'keepCnos')} names `)
  return new StreamSegmentError('ERR_NOT_FOUND', message, { cause: e })
}

/** The progress line of gc: kept maps walked, then objects deleted. */
function gcLine(g: GcProgress): string {
  return g.phase === 'mark'
    ? `gc: walking the kept checkpoints' block maps: ${g.walkedCheckpoints} of ${g.keptCheckpoints} done, ${count(g.walkedNodes, 'node')} walked`
    : `gc: deleting: ${g.deletedObjects} of ${count(g.objectsToDelete, 'object')} done`
}
