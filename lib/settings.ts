/**
 * The settings of a file handle, with the spec's names in camelCase and its defaults,
 * validated once: every error names the setting and the value.
 */
import { StreamSegmentError } from './errors.js'

const KiB = 1024
const MiB = 1024 * KiB
const GiB = 1024 * MiB

/** The most one object can hold: a pointer addresses 2^18 units of 4 KiB in an object. */
export const MAX_OBJECT_BYTES = GiB

/** A container's layout, chosen when it is created and fixed for its life (format/header.ts). */
export type ContainerFormat = 'stream' | 'parted'

export interface Settings {
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
  /** Entries per block-map node, at most what a meta block holds (0: that many). Small values make deep trees for tests. */
  maxNodeEntries: number
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
  maxNodeEntries: 0,
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

const SETTING_NAMES = Object.keys(SPEC_DEFAULTS) as Array<keyof Settings>

export function isSettingName(name: string): name is keyof Settings {
  return (SETTING_NAMES as string[]).includes(name)
}

/** The dirty-data limit: min(max(bytes threshold, blocks threshold × block size), segment buffer size). */
export function dirtyLimitBytes(s: Settings): number {
  return Math.min(
    Math.max(s.dataCacheDirtyMaxBytesThreshold, s.dataCacheDirtyMaxBlocksThreshold * s.dataBlockSize),
    s.segmentBufferSize,
  )
}

function bad(name: string, value: unknown, want: string): StreamSegmentError {
  return StreamSegmentError.invalidArgument(`setting ${name} = ${JSON.stringify(value)}: ${want}`)
}

function integer(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw bad(name, v, `must be an integer in ${min}..${max}`)
  }
  return v
}

function powerOfTwo(name: string, v: unknown, min: number, max: number): number {
  const n = integer(name, v, min, max)
  if ((n & (n - 1)) !== 0) throw bad(name, v, `must be a power of two in ${min}..${max}`)
  return n
}

/**
 * Settings from defaults and the caller's overrides. Unknown keys in `overrides` that
 * are not setting names are left to the caller (other options share the object).
 */
export function resolveSettings(
  overrides: Partial<Record<keyof Settings, unknown>> = {},
  base = SPEC_DEFAULTS,
): Settings {
  const v = { ...base } as Record<string, unknown>
  for (const name of SETTING_NAMES) if (overrides[name] !== undefined) v[name] = overrides[name]
  const s: Settings = {
    format: v.format as ContainerFormat,
    dataBlockSize: powerOfTwo('dataBlockSize', v.dataBlockSize, 4 * KiB, 16 * MiB),
    metaBlockSize: powerOfTwo('metaBlockSize', v.metaBlockSize, 4 * KiB, 64 * KiB),
    streamSegmentBytes: integer('streamSegmentBytes', v.streamSegmentBytes, 0, Number.MAX_SAFE_INTEGER),
    segmentMaxObjectBytes: integer('segmentMaxObjectBytes', v.segmentMaxObjectBytes, 1, MAX_OBJECT_BYTES),
    segmentMpuChunkSize: integer('segmentMpuChunkSize', v.segmentMpuChunkSize, 4 * KiB, 5 * GiB),
    segmentMpuMaxConcurrency: integer('segmentMpuMaxConcurrency', v.segmentMpuMaxConcurrency, 1, 64),
    dataCacheDirtyMaxBytesThreshold: integer(
      'dataCacheDirtyMaxBytesThreshold',
      v.dataCacheDirtyMaxBytesThreshold,
      0,
      Number.MAX_SAFE_INTEGER,
    ),
    dataCacheDirtyMaxBlocksThreshold: integer(
      'dataCacheDirtyMaxBlocksThreshold',
      v.dataCacheDirtyMaxBlocksThreshold,
      0,
      2 ** 32,
    ),
    segmentBufferSize: integer('segmentBufferSize', v.segmentBufferSize, 0, Number.MAX_SAFE_INTEGER),
    conflictPolicy: v.conflictPolicy as Settings['conflictPolicy'],
    conflictRetries: integer('conflictRetries', v.conflictRetries, 0, 1000),
    nodeCacheNodes: integer('nodeCacheNodes', v.nodeCacheNodes, 16, 2 ** 24),
    maxNodeEntries: 0,
  }
  const capacity = Math.floor((s.metaBlockSize - 16) / 12)
  const entries = integer('maxNodeEntries', v.maxNodeEntries, 0, capacity)
  if (entries !== 0 && entries < 3) throw bad('maxNodeEntries', entries, `must be 0 or 3..${capacity}`)
  s.maxNodeEntries = entries === 0 ? capacity : entries
  if (s.format !== 'stream' && s.format !== 'parted') throw bad('format', v.format, "must be 'stream' or 'parted'")
  if (s.conflictPolicy !== 'retry' && s.conflictPolicy !== 'fail') {
    throw bad('conflictPolicy', v.conflictPolicy, "must be 'retry' or 'fail'")
  }
  if (s.segmentMpuChunkSize % s.dataBlockSize !== 0) {
    throw bad('segmentMpuChunkSize', s.segmentMpuChunkSize, `must be a multiple of dataBlockSize (${s.dataBlockSize})`)
  }
  if (dirtyLimitBytes(s) < s.dataBlockSize) {
    throw bad(
      'dataCacheDirtyMaxBytesThreshold',
      s.dataCacheDirtyMaxBytesThreshold,
      `the dirty limit (${dirtyLimitBytes(s)} bytes) must hold at least one data block (${s.dataBlockSize})`,
    )
  }
  // A leaf never leaves its data, so an object must hold a full leaf with all its blocks
  // dirty; twice that leaves part 0 room for index nodes beside it.
  const minObject = 2 * (s.maxNodeEntries * (s.dataBlockSize + 16) + s.metaBlockSize) + 256
  if (s.segmentMaxObjectBytes < minObject) {
    throw bad(
      'segmentMaxObjectBytes',
      s.segmentMaxObjectBytes,
      `must hold two full leaves with their data (${minObject})`,
    )
  }
  return s
}
