/**
 * Every setting of the library, resolved in one place, with one message style
 * ("setting NAME = VALUE: must be …"), checked once before any request.
 *
 * - The container's shape (`format`, `dataBlockSize`, `metaBlockSize`) is chosen when a
 *   container is created and fixed for its life: opening a container takes its own.
 * - The write settings are the spec's, in camelCase, with the spec's defaults; the write
 *   stream applies STREAMING_PROFILE on top unless asked for the spec's.
 * - The read options bound a reader's requests and memory.
 * - Test hooks (`TestHooks`) are not settings: they make deep trees in small files, and
 *   are neither exported from the package nor offered by the CLI. They ride under the
 *   symbol TEST_HOOKS, so no name a caller can type reaches them.
 */
import { isSignal, StreamSegmentError } from './errors.js'
import { MAX_OBJECT_BYTES, minObjectBytes, nodeCapacity } from './format/layout.js'
import { MAX_CNO } from './format/pointer.js'
import type { ObjectStore } from './store/types.js'
import { describeValue, showValue } from './util/typed-arrays.js'
import { GiB, KiB, MiB } from './util/units.js'

/** S3's limit on the pieces of one multipart upload: an object is at most this many segmentMpuChunkSize pieces. */
export const MAX_PIECES = 10_000

export { MAX_OBJECT_BYTES }

/** A container's layout, chosen when it is created and fixed for its life (format/header.ts). */
export type ContainerFormat = 'stream' | 'parted'

/** What a container is made of: fixed at create. */
export interface ContainerShape {
  /**
   * The layout of a new container: 'stream' (StreamSegment, tail first: data is sent while
   * it is written) or 'parted' (PartedSegment, head first: each object is built whole
   * before it is sent, so nothing is sent ahead and streamSegmentBytes does not apply).
   * Opening a container takes its own; asking for another one is an error.
   */
  format: ContainerFormat
  /** Size of a data block: a power of two, 4 KiB … 16 MiB. */
  dataBlockSize: number
  /** Size of a block-map node (meta block): a power of two, 4 KiB … 64 KiB. */
  metaBlockSize: number
}

/** How a writer sends, and how much it may hold: may differ between sessions on one container. */
export interface WriteSettings {
  /** Target size of objects sent while writing; 0 sends nothing ahead. Capped at segmentMaxObjectBytes. */
  streamSegmentBytes: number
  /** Largest object written, counting data, leaves, summary and header (≤ 1 GiB). */
  segmentMaxObjectBytes: number
  /** Size of each non-final piece of a multipart object. */
  segmentMpuChunkSize: number
  /** Objects or pieces in flight at once. */
  segmentMpuMaxConcurrency: number
  dataCacheDirtyMaxBytesThreshold: number
  dataCacheDirtyMaxBlocksThreshold: number
  segmentBufferSize: number
  /** On a conflict at the inode: 'retry' re-flushes under a new checkpoint (last writer wins); 'fail' throws ERR_CONFLICT. */
  conflictPolicy: 'retry' | 'fail'
  /** Conflict retries before giving up with ERR_CONFLICT. */
  conflictRetries: number
  /** Clean block-map nodes kept in memory (each one meta block plus ~100 bytes). */
  nodeCacheNodes: number
  /**
   * After each flush that publishes, run the cleaner in the background keeping this many
   * newest checkpoints (admin/gc.ts, with retainGraceMs as its grace); 0 (the default) never
   * deletes anything. Its failures are logged, never thrown.
   */
  retainCheckpoints: number
  /** With retainCheckpoints: objects younger than this are never deleted (default 1 hour). */
  retainGraceMs: number
  /**
   * A writer opening the container publishes a complete, unpublished checkpoint built on
   * the published one (its writer stopped between part 0 and the inode) only when its
   * part 0 is at least this old (default 60 s): a younger one may belong to a live writer
   * whose inode write is in flight.
   */
  rollForwardAfterMs: number
}

/** The settings of a file handle. */
export interface Settings extends ContainerShape, WriteSettings {}

/** A reader's bounds. */
export interface ReadOptions {
  /** Largest data GET: contiguous blocks of one object coalesce up to this (default 16 MiB). */
  readGetMaxBytes?: number
  /** Data GETs in flight at once (default 10); the walk's node and summary reads have as many slots beside them. */
  readMaxConcurrency?: number
  /** Memory for cached object summaries (default 64 MiB; ~9 bytes per data block). */
  readSummaryCacheBytes?: number
}

/** For tests only: not a setting, not exported from the package. */
export interface TestHooks {
  /** Entries per block-map node, 3 … what a meta block holds: small values make deep trees. */
  maxNodeEntries?: number
  /**
   * How long an abort waits for the answer of a request that decides what is published
   * (the inode write, the request that makes a part 0 visible), 1 … 60000 ms; 10 s unless given.
   */
  abortWaitMs?: number
}

/** Settings as a file handle holds them: resolved, with the node fan-out they imply. */
export interface FileSettings extends Settings {
  /** Entries per block-map node: what a meta block holds, unless a test hook asked for fewer. */
  maxNodeEntries: number
  /** The test hook of that name, when given. */
  abortWaitMs?: number
}

/**
 * The key a settings object carries TestHooks under, for tests: a symbol not exported from
 * the package, so no option of the API (checkOptionNames sees only string names), and kept
 * by the spreads that pass settings on.
 */
export const TEST_HOOKS: unique symbol = Symbol('stream-segment: test hooks')

/**
 * The key of a piece size derived, not chosen (Upload's `partSize`): the handle rounds it
 * up to a whole data block of the container it writes, which an existing container's
 * inode says, so the one who derives it cannot know the block size. It takes the place of
 * segmentMpuChunkSize. Under a symbol, as TEST_HOOKS, so no option of the API reaches it.
 */
export const PART_BYTES: unique symbol = Symbol('stream-segment: part bytes')

/** Settings as the library's own callers pass them: perhaps with test hooks, or a part size (PART_BYTES). */
export type WithHooks = { [TEST_HOOKS]?: TestHooks; [PART_BYTES]?: number }

/** The test hooks `options` carries, if any. */
export function hooksOf(options: object): TestHooks | undefined {
  return (options as WithHooks)[TEST_HOOKS]
}

/** The spec's defaults: with these, nothing is sent ahead (the dirty limit is below one piece). */
export const SPEC_DEFAULTS: Readonly<Settings> = Object.freeze({
  format: 'stream',
  dataBlockSize: 4 * KiB,
  metaBlockSize: 4 * KiB,
  streamSegmentBytes: GiB,
  segmentMaxObjectBytes: GiB,
  segmentMpuChunkSize: 16 * MiB,
  segmentMpuMaxConcurrency: 4,
  dataCacheDirtyMaxBytesThreshold: 8 * MiB,
  dataCacheDirtyMaxBlocksThreshold: 32,
  segmentBufferSize: 100 * MiB,
  conflictPolicy: 'retry',
  conflictRetries: 8,
  nodeCacheNodes: 65536,
  retainCheckpoints: 0,
  retainGraceMs: 3_600_000,
  rollForwardAfterMs: 60_000,
})

/**
 * The write stream's default profile: objects of 16 MiB sent whole while the stream is
 * written, within a 96 MiB dirty limit (room for the 4 objects in flight and the one
 * being gathered). Chosen by test/bench/stream-flush.ts: the flush is left with about
 * one object (0.1–0.3 s on the modelled links against 1–1.3 s when the flush writes
 * everything), 32 objects per 512 MiB, and memory stays within the limit.
 */
export const STREAMING_PROFILE: Readonly<Partial<Settings>> = Object.freeze({
  streamSegmentBytes: 16 * MiB,
  dataCacheDirtyMaxBytesThreshold: 96 * MiB,
  segmentBufferSize: 96 * MiB,
})

export const READ_DEFAULTS: Readonly<Required<ReadOptions>> = Object.freeze({
  readGetMaxBytes: 16 * MiB,
  readMaxConcurrency: 10,
  readSummaryCacheBytes: 64 * MiB,
})

/** How one setting is checked: an integer range, a power of two in a range, or one of some strings. */
type Rule =
  | { kind: 'integer'; min: number; max: number }
  | { kind: 'power of two'; min: number; max: number }
  | { kind: 'one of'; values: readonly string[] }

const int = (min: number, max = Number.MAX_SAFE_INTEGER): Rule => ({ kind: 'integer', min, max })
const pow2 = (min: number, max: number): Rule => ({ kind: 'power of two', min, max })

const SETTING_RULES: Readonly<Record<keyof Settings, Rule>> = {
  format: { kind: 'one of', values: ['stream', 'parted'] },
  dataBlockSize: pow2(4 * KiB, 16 * MiB),
  metaBlockSize: pow2(4 * KiB, 64 * KiB),
  streamSegmentBytes: int(0),
  segmentMaxObjectBytes: int(1, MAX_OBJECT_BYTES),
  segmentMpuChunkSize: int(4 * KiB, 5 * GiB),
  segmentMpuMaxConcurrency: int(1, 64),
  dataCacheDirtyMaxBytesThreshold: int(0),
  dataCacheDirtyMaxBlocksThreshold: int(0, 2 ** 32),
  segmentBufferSize: int(0),
  conflictPolicy: { kind: 'one of', values: ['retry', 'fail'] },
  conflictRetries: int(0, 1000),
  nodeCacheNodes: int(16, 2 ** 24),
  retainCheckpoints: int(0, 1_000_000),
  retainGraceMs: int(0),
  rollForwardAfterMs: int(0),
}

const READ_RULES: Readonly<Record<keyof ReadOptions, Rule>> = {
  readGetMaxBytes: int(4 * KiB, GiB),
  readMaxConcurrency: int(1, 256),
  readSummaryCacheBytes: int(0),
}

const SETTING_NAMES = Object.keys(SETTING_RULES) as Array<keyof Settings>

/**
 * An option's value, or `dflt` when it is not given: only undefined is not given. A null
 * (from JSON, say) is a value, and the option's check refuses it; `??` would take it for
 * the default without a word.
 */
export function givenOr<T>(value: T | undefined, dflt: T): T {
  return value === undefined ? dflt : value
}

/**
 * ERR_INVALID_ARGUMENT for a name in `options` that `who` does not take (a misspelt
 * setting would otherwise be ignored without a word), suggesting the nearest it does: its
 * own option names, and the setting and read option names when it takes those. A name
 * whose value is undefined counts as not given.
 */
export function checkOptionNames(
  who: string,
  options: object,
  own: readonly string[],
  takes: { settings?: boolean; read?: boolean } = {},
): void {
  const known = new Set<string>(own)
  if (takes.settings) for (const n of SETTING_NAMES) known.add(n)
  if (takes.read) for (const n of Object.keys(READ_RULES)) known.add(n)
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined || known.has(name)) continue
    const near = nearest(name, known)
    throw StreamSegmentError.invalidArgument(
      `${who}: unknown option ${JSON.stringify(name)}${near === undefined ? '' : ` (did you mean ${near}?)`}`,
    )
  }
}

/**
 * What every call checks of its options: an object, its `signal`, when given, an
 * AbortSignal, and its `onStart` and `onProgress` callbacks, when given, functions; else
 * ERR_INVALID_ARGUMENT naming `who`.
 */
export function checkCommonOptions(
  who: string,
  options: unknown,
): asserts options is { signal?: unknown; onStart?: unknown; onProgress?: unknown } {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw StreamSegmentError.invalidArgument(`${who}: options must be an object, got ${describeValue(options)}`)
  }
  const { signal } = options as { signal?: unknown }
  if (signal !== undefined && !isSignal(signal)) {
    throw StreamSegmentError.invalidArgument(`${who}: signal must be an AbortSignal, got ${describeValue(signal)}`)
  }
  for (const name of ['onStart', 'onProgress'] as const) {
    const f = (options as Record<string, unknown>)[name]
    if (f !== undefined && typeof f !== 'function') {
      throw StreamSegmentError.invalidArgument(`${who}: ${name} must be a function, got ${describeValue(f)}`)
    }
  }
  checkCno(who, (options as { cno?: unknown }).cno)
}

/**
 * A checkpoint number, when given: an integer in 1..MAX_CNO (what an object's key and a
 * pointer can name); else ERR_INVALID_ARGUMENT naming `who`. Checked before any request:
 * past MAX_CNO no object can be named, and a writer would report it as not published yet.
 */
export function checkCno(who: string, cno: unknown): asserts cno is number | undefined {
  if (cno !== undefined && (typeof cno !== 'number' || !Number.isInteger(cno) || cno < 1 || cno > MAX_CNO)) {
    throw StreamSegmentError.invalidArgument(
      `${who}: cno must be a checkpoint number (an integer in 1..${MAX_CNO}), got ${describeValue(cno)}`,
    )
  }
}

/**
 * The `start` and `end` options of a read of a range: offsets, the end (inclusive) not
 * before the start, as fs.createReadStream refuses; and, as there, an end of Infinity
 * (fs's own default) for the end of the file.
 */
export function checkByteRange(who: string, options: { start?: unknown; end?: unknown }): void {
  for (const name of ['start', 'end'] as const) {
    const v = options[name]
    if (name === 'end' && v === Number.POSITIVE_INFINITY) continue
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)) {
      throw StreamSegmentError.invalidArgument(
        `${who}: ${name} must be a byte offset (an integer ≥ 0), got ${describeValue(v)}`,
      )
    }
  }
  const { start, end } = options as { start?: number; end?: number }
  if (start !== undefined && end !== undefined && end < start) {
    throw StreamSegmentError.invalidArgument(
      `${who}: end ${end} is before start ${start} (end is the last byte to read, inclusive)`,
    )
  }
}

/** A call's options as checkCommonOptions checks them, with no name but `own` (see checkOptionNames). */
export function checkCallOptions(who: string, options: unknown, own: readonly string[]): void {
  checkCommonOptions(who, options)
  checkOptionNames(who, options, own)
}

/**
 * The known name closest to `name` by edit distance, in any case, if close enough to be a
 * slip, or that it starts (4 letters or more): the "did you mean" of option checks, the
 * command line's included.
 */
export function nearest(name: string, known: Iterable<string>): string | undefined {
  const lower = name.toLowerCase()
  const names = [...known] // looked through twice: an iterator (a Map's keys) only once
  let best: string | undefined
  if (lower.length >= 4) {
    for (const k of names) if (k.toLowerCase().startsWith(lower)) best ??= k
  }
  if (best !== undefined) return best
  let bestDistance = Math.max(2, Math.floor(name.length / 4)) + 1
  for (const k of names) {
    const d = editDistance(name.toLowerCase(), k.toLowerCase())
    if (d < bestDistance) {
      best = k
      bestDistance = d
    }
  }
  return best
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const next = [i]
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(
        (row[j] as number) + 1,
        (next[j - 1] as number) + 1,
        (row[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1),
      )
    }
    row = next
  }
  return row[b.length] as number
}

/** Whether `name` is a setting (not a read option or a test hook). */
export function isSettingName(name: string): name is keyof Settings {
  return (SETTING_NAMES as string[]).includes(name)
}

/** The error for a value that breaks its setting's rule. */
export function badSetting(name: string, value: unknown, want: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(`setting ${name} = ${showValue(value)}: ${want}`)
}

/**
 * Each setting the caller gave, checked alone. A writer opening a container does this
 * before any request; the checks of the settings together need the container's block
 * sizes, which only its inode says.
 */
export function checkSettingValues(overrides: object): void {
  resolve<Settings>(SETTING_RULES, overrides, SPEC_DEFAULTS)
}

function check(name: string, v: unknown, rule: Rule): unknown {
  if (rule.kind === 'one of') {
    if (typeof v !== 'string' || !rule.values.includes(v)) {
      throw badSetting(name, v, `must be ${rule.values.map((x) => `'${x}'`).join(' or ')}`)
    }
    return v
  }
  const n = v as number
  const isInt = typeof v === 'number' && Number.isSafeInteger(v) && n >= rule.min && n <= rule.max
  if (rule.kind === 'integer' && !isInt) throw badSetting(name, v, `must be an integer in ${rule.min}..${rule.max}`)
  if (rule.kind === 'power of two' && (!isInt || (n & (n - 1)) !== 0)) {
    throw badSetting(name, v, `must be a power of two in ${rule.min}..${rule.max}`)
  }
  return v
}

/** Each of `rules`' names from `overrides`, or else `base`, checked. */
function resolve<T>(rules: Readonly<Record<string, Rule>>, overrides: object, base: object): T {
  const given = overrides as Record<string, unknown>
  const defaults = base as Record<string, unknown>
  const out: Record<string, unknown> = {}
  // Only undefined is not given: a null (from JSON, say) is a value, and refused as one.
  for (const [name, rule] of Object.entries(rules)) {
    out[name] = check(name, given[name] === undefined ? defaults[name] : given[name], rule)
  }
  return out as T
}

/**
 * The dirty-data limit of `settings` as a caller gives them (exported): those not given
 * take the spec's defaults, and each given is checked, as a handle checks it. A profile
 * alone (STREAMING_PROFILE) gives that profile's limit, not NaN.
 */
export function dirtyLimitBytes(settings: Partial<Settings>): number {
  if (typeof settings !== 'object' || settings === null) {
    throw StreamSegmentError.invalidArgument(
      `dirtyLimitBytes: settings must be an object, got ${describeValue(settings)}`,
    )
  }
  checkOptionNames('dirtyLimitBytes', settings, [], { settings: true })
  return dirtyLimit(resolve<Settings>(SETTING_RULES, settings, SPEC_DEFAULTS))
}

/** The dirty-data limit: min(max(bytes threshold, blocks threshold × block size), segment buffer size). */
export function dirtyLimit(s: Settings): number {
  return Math.min(
    Math.max(s.dataCacheDirtyMaxBytesThreshold, s.dataCacheDirtyMaxBlocksThreshold * s.dataBlockSize),
    s.segmentBufferSize,
  )
}

/**
 * Settings from the caller's overrides over `base` over the spec's defaults, checked each
 * alone and then together. `base` is a profile (STREAMING_PROFILE, a configuration's
 * settings): partial, as the write stream layers one, its names checked as the
 * overrides' are. A name that is no setting is refused, naming the nearest (a misspelt
 * setting would otherwise take its default without a word).
 * Exported: the way a caller checks settings before giving them; it returns the settings
 * alone, not what a handle derives from them.
 */
export function resolveSettings(
  overrides: Partial<Record<keyof Settings, unknown>> = {},
  base: Partial<Record<keyof Settings, unknown>> = SPEC_DEFAULTS,
): Settings {
  if (typeof overrides === 'object' && overrides !== null) {
    checkOptionNames('resolveSettings', overrides, [], { settings: true })
  }
  if (typeof base !== 'object' || base === null) {
    throw StreamSegmentError.invalidArgument(`resolveSettings: base must be an object, got ${describeValue(base)}`)
  }
  checkOptionNames('resolveSettings: base', base, [], { settings: true })
  // A base's undefined is not given, as an override's is: it leaves the default.
  const layered: Record<string, unknown> = { ...SPEC_DEFAULTS }
  for (const [name, value] of Object.entries(base)) if (value !== undefined) layered[name] = value
  const { maxNodeEntries, abortWaitMs, ...settings } = resolveFor('write', overrides, layered as unknown as Settings)
  return settings
}

/**
 * resolveSettings for the library's own callers, whose options objects hold other names
 * beside the settings (a handle's `cno`, `wal`, read options): the names are left to the
 * caller, which checks them against everything it takes (checkOptionNames).
 */
export function resolveFileSettings(
  overrides: Partial<Record<keyof Settings, unknown>> & WithHooks = {},
  base: Readonly<Settings> = SPEC_DEFAULTS,
): FileSettings {
  return resolveFor('write', overrides, base)
}

/**
 * A read-only handle's settings: checked as resolveFileSettings checks them, but for the
 * combinations only a writer needs (objects that hold two full leaves with their data,
 * pieces, the dirty limit). A container's block sizes are its own: one with blocks this
 * library would not write (16 MiB data blocks under 4 KiB meta blocks, which the format
 * allows) is still read.
 */
export function resolveReadSettings(
  overrides: Partial<Record<keyof Settings, unknown>> & WithHooks = {},
  base: Readonly<Settings> = SPEC_DEFAULTS,
): FileSettings {
  return resolveFor('read', overrides, base)
}

function resolveFor(
  use: 'read' | 'write',
  overrides: Partial<Record<keyof Settings, unknown>> & WithHooks,
  base: Readonly<Settings>,
): FileSettings {
  if (typeof overrides !== 'object' || overrides === null) {
    throw StreamSegmentError.invalidArgument(`settings must be an object, got ${describeValue(overrides)}`)
  }
  const s = resolve<Settings>(SETTING_RULES, overrides, base)
  const part = overrides[PART_BYTES]
  if (part !== undefined) {
    // Within the rule whenever the part is: 5 GiB is a whole number of the largest data blocks.
    const piece = Math.ceil(part / s.dataBlockSize) * s.dataBlockSize
    s.segmentMpuChunkSize = check('segmentMpuChunkSize', piece, SETTING_RULES.segmentMpuChunkSize) as number
  }
  const capacity = nodeCapacity(s.metaBlockSize)
  const { maxNodeEntries, abortWaitMs } = hooksOf(overrides) ?? {}
  const entries = givenOr(maxNodeEntries, capacity)
  if (!Number.isSafeInteger(entries) || entries < 3 || entries > capacity) {
    throw badSetting('maxNodeEntries', entries, `must be an integer in 3..${capacity}`)
  }
  if (use === 'write') checkForWriting(s, entries)
  if (abortWaitMs === undefined) return { ...s, maxNodeEntries: entries }
  if (!Number.isSafeInteger(abortWaitMs) || abortWaitMs < 1 || abortWaitMs > 60_000) {
    throw badSetting('abortWaitMs', abortWaitMs, 'must be an integer in 1..60000')
  }
  return { ...s, maxNodeEntries: entries, abortWaitMs }
}

/** The combinations a writer needs: pieces of whole blocks, a dirty limit, objects that can hold leaves. */
function checkForWriting(s: Settings, entries: number): void {
  if (s.segmentMpuChunkSize % s.dataBlockSize !== 0) {
    throw badSetting(
      'segmentMpuChunkSize',
      s.segmentMpuChunkSize,
      `must be a multiple of dataBlockSize (${s.dataBlockSize})`,
    )
  }
  if (dirtyLimit(s) < s.dataBlockSize) {
    const want = `the dirty limit (${dirtyLimit(s)} bytes) must hold at least one data block (${s.dataBlockSize})`
    // Named is the setting that made it so small: segmentBufferSize caps the limit, and it
    // alone is at fault when below a block (the thresholds may be the defaults, not given).
    if (s.segmentBufferSize < s.dataBlockSize) throw badSetting('segmentBufferSize', s.segmentBufferSize, want)
    throw badSetting(
      'dataCacheDirtyMaxBytesThreshold',
      s.dataCacheDirtyMaxBytesThreshold,
      `${want}, with dataCacheDirtyMaxBlocksThreshold ${s.dataCacheDirtyMaxBlocksThreshold}`,
    )
  }
  const minObject = minObjectBytes(entries, s.dataBlockSize, s.metaBlockSize)
  if (minObject > MAX_OBJECT_BYTES) {
    // No segmentMaxObjectBytes can hold them: the block sizes are what is wrong.
    let largest = 0
    for (let d = 4 * KiB; minObjectBytes(entries, d, s.metaBlockSize) <= MAX_OBJECT_BYTES; d *= 2) {
      largest = d
    }
    throw badSetting(
      'dataBlockSize',
      s.dataBlockSize,
      `with metaBlockSize ${s.metaBlockSize} (${entries} entries per leaf), two full leaves with their data take ` +
        `${minObject} bytes, more than the largest object (${MAX_OBJECT_BYTES}); at most ${largest} with this metaBlockSize`,
    )
  }
  if (s.segmentMaxObjectBytes < minObject) {
    throw badSetting(
      'segmentMaxObjectBytes',
      s.segmentMaxObjectBytes,
      `must hold two full leaves with their data (${minObject})`,
    )
  }
  // An object goes up in pieces of segmentMpuChunkSize, at most MAX_PIECES of them (S3's
  // limit): a largest object that needs more would fail every flush that makes one.
  if (s.segmentMaxObjectBytes > MAX_PIECES * s.segmentMpuChunkSize) {
    const least = Math.ceil(s.segmentMaxObjectBytes / MAX_PIECES / s.dataBlockSize) * s.dataBlockSize
    throw badSetting(
      'segmentMaxObjectBytes',
      s.segmentMaxObjectBytes,
      `an object that large needs more than ${MAX_PIECES} pieces of segmentMpuChunkSize (${s.segmentMpuChunkSize} bytes); ` +
        `make segmentMaxObjectBytes at most ${MAX_PIECES * s.segmentMpuChunkSize}, or segmentMpuChunkSize at least ${least}`,
    )
  }
}

/** Settings the store at hand cannot take are refused before any request: a multipart piece under its minimum. */
export function checkForStore(s: Settings, store: ObjectStore): void {
  const min = store.minPartBytes
  if (min !== undefined && s.segmentMpuChunkSize < min) {
    throw badSetting(
      'segmentMpuChunkSize',
      s.segmentMpuChunkSize,
      `the store at ${store.url} takes multipart pieces of at least ${min} bytes`,
    )
  }
}

/** A reader's options, defaults filled in, checked. */
export function resolveReadOptions(o: ReadOptions = {}): Required<ReadOptions> {
  return resolve<Required<ReadOptions>>(READ_RULES, o, READ_DEFAULTS)
}
