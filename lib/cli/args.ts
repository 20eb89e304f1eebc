/**
 * The command line as the commands read it: options by name (camelCase or kebab-case,
 * `--name value` or `--name=value`), positional arguments, sizes with K/M/G suffixes,
 * durations, checkpoint numbers and the read options.
 */
import { parseArgs as parseArgv } from 'node:util'
import { StreamSegmentError } from '../errors.js'
import { MAX_CNO } from '../format/pointer.js'
import { isSettingName, nearest } from '../settings.js'
import { openStore } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'
import { shellWord } from '../util/shell-words.js'
import { KiB, MiB } from '../util/units.js'

/** What a command accepts besides its positional arguments. */
export interface CommandSpec {
  /** Options taking a value, in camelCase; each is accepted in kebab case too. */
  values?: readonly string[]
  /** Options taking no value (flags), likewise. */
  flags?: readonly string[]
  /** One-letter aliases: letter → option. */
  short?: Readonly<Record<string, string>>
}

export interface Parsed {
  positional: string[]
  /** Options by their camelCase names. */
  options: Map<string, string>
  flags: Set<string>
  /** Each option as it was typed (`--keep-cnos`, `-o`), for messages. */
  typed: Map<string, string>
  help: boolean
  /** How many positionals came before a `--` ending the options (undefined: there was none). */
  beforeTerminator?: number
}

/**
 * The arguments after the command, tokenized by node:util's parseArgs (`--name value`,
 * `--name=value`, `-o value`, `--` ending the options, `-` a positional) and checked here,
 * so that every mistake is one line naming the option.
 */
export function parseCommand(args: readonly string[], spec: CommandSpec): Parsed {
  const config: Record<string, { type: 'string' | 'boolean'; short?: string }> = {}
  const kinds = new Map<string, 'string' | 'boolean'>([['help', 'boolean']])
  for (const name of spec.values ?? []) kinds.set(name, 'string')
  for (const name of spec.flags ?? []) kinds.set(name, 'boolean')
  for (const [name, type] of kinds) {
    config[name] = { type }
    config[kebab(name)] = { type }
  }
  const short: Record<string, string> = { h: 'help', ...spec.short }
  for (const [letter, name] of Object.entries(short))
    config[name] = { ...config[name], type: kinds.get(name) ?? 'boolean', short: letter }
  const { tokens } = parseArgv({
    args: [...args],
    options: config,
    strict: false,
    allowPositionals: true,
    tokens: true,
  })
  const p: Parsed = { positional: [], options: new Map(), flags: new Set(), typed: new Map(), help: false }
  // `--range -h` reads -h as the range: asked for help, not a range (a value `-h` is `--range=-h`).
  const helpAsked = (t: (typeof tokens)[number]) =>
    t.kind === 'option' && (t.name === 'help' || (!t.inlineValue && (t.value === '-h' || t.value === '--help')))
  if (tokens.some(helpAsked)) return { ...p, help: true }
  for (const t of tokens) {
    if (t.kind === 'positional') p.positional.push(t.value)
    if (t.kind === 'option-terminator') p.beforeTerminator = p.positional.length
    if (t.kind !== 'option') continue
    const name = camel(t.name)
    const kind = kinds.get(name)
    if (kind === undefined) {
      // `-model.pt` reads as the letters -m, -o…: the message names the argument as typed too.
      const arg = args[t.index] as string
      const typed = arg.startsWith('--') || arg.length <= 2 ? '' : ` in ${arg}`
      const more = typed === '' ? '' : '; an argument starting with - that is no option goes after --'
      // `--rnage`, `--dryrun`: said as the slip it is, as the library's own options are.
      const near = t.rawName.startsWith('--') ? nearest(t.name.replace(/-/g, ''), kinds.keys()) : undefined
      const meant = near === undefined ? '' : `did you mean --${kebab(near)}? `
      throw StreamSegmentError.invalidArgument(
        `unknown option ${t.rawName}${typed} (${meant}see stream-segment --help${more})`,
      )
    }
    p.typed.set(name, t.rawName)
    if (kind === 'boolean') {
      if (t.value !== undefined) throw StreamSegmentError.invalidArgument(`option ${t.rawName} takes no value`)
      p.flags.add(name)
      continue
    }
    // `--cno --json`: the next argument is another option, not this one's value. `-5` is
    // none (no option is a digit): it is the value, for the option to judge (`--range -5`).
    if (t.value === undefined || (!t.inlineValue && /^-[^\d]/.test(t.value))) {
      const got =
        t.value === undefined
          ? ''
          : ` (got ${t.value}; if that is the value, write --${kebab(name)}=${shellWord(t.value)})`
      throw StreamSegmentError.invalidArgument(`option ${t.rawName} needs a value${got}`)
    }
    // `--output=`, `--wal ''` (a variable unset in `--wal "$DIR"`): no value, whatever would read it.
    if (t.value === '') throw StreamSegmentError.invalidArgument(`option ${t.rawName} needs a value (got an empty one)`)
    // `-o a --output b`: which one was meant? Said, not guessed.
    if (p.options.has(name)) {
      throw StreamSegmentError.invalidArgument(`option ${t.rawName} is given more than once: give it once`)
    }
    p.options.set(name, t.value)
  }
  return p
}

export function camel(s: string): string {
  return s.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())
}

export function kebab(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
}

/** An option's name for messages: as typed, else in kebab case. */
export function optionName(p: Parsed, name: string): string {
  return p.typed.get(name) ?? `--${kebab(name)}`
}

/**
 * A settings error (`setting NAME = VALUE: …`, lib/settings.ts) in the words of the command
 * line: the setting or read option the user typed, and any other typed one the message
 * names, as typed (`--segment-mpu-chunk-size`, `--dataBlockSize`), not by the library's
 * name. Any other error is returned as it is.
 */
export function namedAsTyped(p: Parsed, e: unknown): unknown {
  // `put … --format parted` on a container made otherwise: the library names its option
  // (`format parted: the container at URL has stream`); said here as the option typed,
  // and that the container's own layout is not a choice.
  const own = StreamSegmentError.is(e, 'ERR_INVALID_ARGUMENT')
    ? /^(format|dataBlockSize|metaBlockSize) (\S+): (the container at .* has \S+)$/s.exec(e.message)
    : null
  const ownTyped = own === null ? undefined : p.typed.get(own[1] as string)
  if (own !== null && ownTyped !== undefined) {
    const what = own[1] === 'format' ? 'format' : 'block sizes'
    return new StreamSegmentError(
      'ERR_INVALID_ARGUMENT',
      `option ${ownTyped} = ${own[2]}: ${own[3]}: a container keeps the ${what} it was made with: leave the option out`,
      { cause: e },
    )
  }
  const m = StreamSegmentError.is(e, 'ERR_INVALID_ARGUMENT') ? /^setting (\w+) = /.exec(e.message) : null
  const typed = m === null ? undefined : p.typed.get(m[1] as string)
  if (m === null || typed === undefined) return e
  let rest = (e as Error).message.slice(m[0].length)
  for (const [name, as] of p.typed) {
    // Only the names of settings: an option such as --size is also a word of messages.
    if (!isSettingName(name) && !(READ_OPTIONS as readonly string[]).includes(name)) continue
    rest = rest.replace(new RegExp(`(?<![\\w-])${name}(?!\\w)`, 'g'), as)
  }
  return StreamSegmentError.invalidArgument(`option ${typed} = ${rest}`)
}

/**
 * The library's error for a checkpoint asked for by default when none is published (no
 * `inode` object: lib/admin/list.ts) names its API's option (`give a cno`): here, what the
 * commands that read one (inspect, verify, export) take, and where to find the numbers.
 */
export function unpublishedAsTyped(e: unknown): unknown {
  const m = StreamSegmentError.is(e, 'ERR_NOT_FOUND')
    ? /^(.*): no published checkpoint \(no (\S+) object\); give a cno$/s.exec(e.message)
    : null
  if (m === null) return e
  const [, url, inode] = m as unknown as [string, string, string]
  return new StreamSegmentError(
    'ERR_NOT_FOUND',
    `${url}: nothing is published yet (no ${inode} object): give --cno N to look at one of its checkpoints ` +
      `(stream-segment ls ${shellWord(url)} lists them)`,
    { cause: e },
  )
}

/** A number written right but past the exact integers (2^53 - 1), in `unit`: too large, not "not a number". */
function tooLarge(unit: string): string {
  return `too large (at most ${Number.MAX_SAFE_INTEGER}${unit})`
}

/**
 * Every number the commands take is read from `text` trimmed: spaces around a value are
 * dropped (a shell's `$(wc -l < f)` can leave some), none are taken inside it (`4 K`).
 */
function trimmed(text: string): string {
  return text.trim()
}

/**
 * An integer, with an optional binary size suffix (K, KiB, M, MiB, G, GiB, in any case),
 * nothing else (`5mb`, `16 KiBb` are no sizes); `option` names it in messages.
 */
export function parseSize(option: string, text: string): number {
  const m = /^(\d+)(k|kib|m|mib|g|gib)?$/i.exec(trimmed(text))
  const unit = { k: KiB, m: MiB, g: 1024 * MiB }[(m?.[2]?.[0] ?? '').toLowerCase() as 'k' | 'm' | 'g'] ?? 1
  const n = m ? Number(m[1]) * unit : Number.NaN
  if (!Number.isSafeInteger(n))
    throw StreamSegmentError.invalidArgument(
      `option ${option}: ${JSON.stringify(text)} is ${m ? tooLarge('') : 'not a size'}`,
    )
  return n
}

/**
 * The command's arguments, between `min` and `max` of them; else ERR_INVALID_ARGUMENT with
 * the usage, what came (quoted) and `hint` when given.
 */
export function positionals(p: Parsed, min: number, max: number, usage: string, hint?: string): string[] {
  const n = p.positional.length
  if (n < min || n > max) {
    const want = min === max ? `${min}` : max === min + 1 ? `${min} or ${max}` : `${min} to ${max}`
    const got = n === 0 ? 'none' : `${n}: ${p.positional.map((a) => JSON.stringify(a)).join(' ')}`
    const more = hint === undefined ? '' : `; ${hint}`
    throw StreamSegmentError.invalidArgument(
      `usage: stream-segment ${usage} (${want} argument${want === '1' ? '' : 's'}, got ${got}${more})`,
    )
  }
  return p.positional
}

/**
 * The store of a command's container argument. `-` is stdin or stdout to these commands,
 * never a container: read as a path, it would make or read a folder named `-` unasked.
 */
export function openContainer(url: string): ObjectStore {
  if (url === '-') {
    throw StreamSegmentError.invalidArgument(
      '"-" (stdin or stdout) is not a container: give its URL or path (a directory named - is ./-)',
    )
  }
  return openStore(url)
}

/** A whole number (digits only, spaces around ignored), at most 2^53 - 1; `option` names it in messages. */
export function parseWhole(option: string, text: string): number {
  const digits = trimmed(text)
  const n = /^\d+$/.test(digits) ? Number(digits) : Number.NaN
  if (!Number.isSafeInteger(n)) {
    const why = Number.isNaN(n) ? 'not a number' : tooLarge('')
    throw StreamSegmentError.invalidArgument(`option ${option}: ${JSON.stringify(text)} is ${why}`)
  }
  return n
}

/** A checkpoint number, 1 to MAX_CNO, written as parseWhole reads numbers; `option` names it in messages. */
export function parseCno(option: string, text: string): number {
  const digits = trimmed(text)
  const n = /^\d+$/.test(digits) ? Number(digits) : Number.NaN
  if (!(n >= 1 && n <= MAX_CNO)) {
    throw StreamSegmentError.invalidArgument(
      `option ${option}: ${JSON.stringify(text)} is not a checkpoint number (1..${MAX_CNO})`,
    )
  }
  return n
}

export function cnoOption(p: Parsed): number | undefined {
  const v = p.options.get('cno')
  return v === undefined ? undefined : parseCno(optionName(p, 'cno'), v)
}

export const READ_OPTIONS = [
  'readGetMaxBytes',
  'readMaxConcurrency',
  'readSummaryCacheBytes',
  'readAheadBytes',
] as const

export function readOptions(p: Parsed): Partial<Record<(typeof READ_OPTIONS)[number], number>> {
  const out: Partial<Record<(typeof READ_OPTIONS)[number], number>> = {}
  for (const name of READ_OPTIONS) {
    const v = p.options.get(name)
    if (v !== undefined) out[name] = parseSize(optionName(p, name), v)
  }
  return out
}

/** A duration: milliseconds, or a number with s, m, h or d; `option` names it in messages. */
export function parseDuration(option: string, text: string): number {
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(trimmed(text))
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m?.[2] ?? 'ms') as 'ms']
  const n = m ? Number(m[1]) * unit : Number.NaN
  if (!Number.isSafeInteger(n)) {
    throw StreamSegmentError.invalidArgument(
      `option ${option}: ${JSON.stringify(text)} is ${m ? tooLarge(' ms') : 'not a duration'}`,
    )
  }
  return n
}
