/**
 * A block-map node: one meta block (metaBlockSize bytes, 4 KiB by default).
 *
 * ```text
 *  0                   1                   2                   3
 *  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |           magic (u32) 0x444e5353, bytes "SSND"                |   0
 * +---------------+---------------+-------------------------------+
 * |   level (u8)  | flags (u8) = 0|      count (u16) 1..capacity  |   4
 * +---------------+---------------+-------------------------------+
 * |           cno (u32): the checkpoint that wrote this node      |   8
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |  crc (u32): CRC-32 of bytes 0..12 then 16..metaBlockSize      |  12
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * |  entries: count × { key u32, ptrLo u32, ptrHi u32 }           |  16
 * |  ... then zero to the end of the block                        |
 * +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 * ```
 *
 * level 0 is a leaf: key = file block index, pointer = data block (ZERO allowed: a hole).
 * level L >= 1 is an index node: key = first block index under the child, pointer = a
 * node of level L-1 (never ZERO). Levels stop at MAX_ROOT_LEVEL - 1 = 7. capacity =
 * floor((metaBlockSize - 16) / 12), 340 at 4 KiB. Keys strictly increase and lie in
 * [minKey, maxKeyExclusive) as the parent bounds them; pointer cno <= node cno <= maxCno;
 * DIRTY never. In memory: typed arrays of length `count` (decode) or >= count (encode).
 */

import { StreamSegmentError } from '../errors.js'
import { crc32 } from '../util/crc32.js'
import { MAX_META_SHIFT, MAX_ROOT_LEVEL, MIN_META_SHIFT } from './inode.js'
import { dataView, firstNonZero, hex32, isUint, MAX_CNO, pointerProblem } from './pointer.js'

export const NODE_MAGIC = 0x444e5353
export const NODE_HEADER_BYTES = 16
export const NODE_ENTRY_BYTES = 12
export const MAX_NODE_LEVEL = MAX_ROOT_LEVEL - 1
const N_MAGIC = 0
const N_LEVEL = 4
const N_FLAGS = 5
const N_COUNT = 6
const N_CNO = 8
const N_CRC = 12

export interface BlockMapNode {
  level: number
  count: number
  cno: number
  keys: Uint32Array
  ptrHi: Uint32Array
  ptrLo: Uint32Array
}

export interface NodeExpectation {
  /** The level the parent implies. */
  level?: number
  /** Keys must lie in [minKey, maxKeyExclusive); defaults 0 and 2^32. */
  minKey?: number
  maxKeyExclusive?: number
  /** The cno of the pointer that led here: the node must say it was written then. */
  cno?: number
  /** The newest checkpoint the node may belong to. */
  maxCno: number
  /** Prefix for messages, e.g. "0000000007.0 meta block 3". */
  where: string
}

export function nodeCapacity(metaBlockSize: number): number {
  return Math.floor((metaBlockSize - NODE_HEADER_BYTES) / NODE_ENTRY_BYTES)
}

function isMetaBlockSize(n: number): boolean {
  return n >= 2 ** MIN_META_SHIFT && n <= 2 ** MAX_META_SHIFT && (n & (n - 1)) === 0
}

/** The node's CRC: bytes 0..12, then 16..end (the crc field skipped). */
function nodeCrc(bytes: Uint8Array): number {
  return crc32(bytes.subarray(N_CRC + 4), crc32(bytes.subarray(0, N_CRC)))
}

/** What is wrong with the node's entries (level, count and cno already in range), or undefined. */
function entriesProblem(n: BlockMapNode, minKey: number, maxKeyExclusive: number): string | undefined {
  const bounds = { maxCno: n.cno, allowZero: n.level === 0 }
  for (let i = 0; i < n.count; i++) {
    const key = n.keys[i]!
    if (key < minKey || key >= maxKeyExclusive) return `key ${i} (${key}) is outside [${minKey}, ${maxKeyExclusive})`
    if (i > 0 && key <= n.keys[i - 1]!) return `key ${i} (${key}) is not above key ${i - 1} (${n.keys[i - 1]})`
    const problem = pointerProblem(n.ptrHi[i]!, n.ptrLo[i]!, bounds)
    if (problem !== undefined) return `entry ${i} (key ${key}): ${problem}`
  }
  return undefined
}

/** Encodes `node` into the whole meta block `into` (its length is the meta block size). */
export function encodeNode(into: Uint8Array, node: BlockMapNode): void {
  const fail = (msg: string) => StreamSegmentError.invalidArgument(`node: ${msg}`)
  if (!isMetaBlockSize(into.length)) throw fail(`${into.length} bytes is not a meta block size`)
  const capacity = nodeCapacity(into.length)
  if (!isUint(node.level, MAX_NODE_LEVEL)) throw fail(`level ${node.level} is not in 0..${MAX_NODE_LEVEL}`)
  if (!isUint(node.count, capacity) || node.count === 0) throw fail(`count ${node.count} is not in 1..${capacity}`)
  if (!isUint(node.cno, MAX_CNO) || node.cno === 0) throw fail(`cno ${node.cno} is not in 1..${MAX_CNO}`)
  if (node.keys.length < node.count || node.ptrHi.length < node.count || node.ptrLo.length < node.count) {
    throw fail(`arrays shorter than count ${node.count}`)
  }
  const problem = entriesProblem(node, 0, 2 ** 32)
  if (problem !== undefined) throw fail(problem)
  into.fill(0)
  const v = dataView(into)
  v.setUint32(N_MAGIC, NODE_MAGIC, true)
  v.setUint8(N_LEVEL, node.level)
  v.setUint16(N_COUNT, node.count, true)
  v.setUint32(N_CNO, node.cno, true)
  for (let i = 0; i < node.count; i++) {
    const at = NODE_HEADER_BYTES + i * NODE_ENTRY_BYTES
    v.setUint32(at, node.keys[i]!, true)
    v.setUint32(at + 4, node.ptrLo[i]!, true)
    v.setUint32(at + 8, node.ptrHi[i]!, true)
  }
  v.setUint32(N_CRC, nodeCrc(into), true)
}

/**
 * Decodes one meta block. Checks, in order: length, magic, CRC, level, flags, count, cno,
 * entries (key order and range, pointers), the unused tail zero.
 */
export function decodeNode(bytes: Uint8Array, expected: NodeExpectation): BlockMapNode {
  const { where } = expected
  const fail = (msg: string) => StreamSegmentError.corrupt(`${where}: node ${msg}`)
  if (!isMetaBlockSize(bytes.length)) throw fail(`is ${bytes.length} bytes, not a meta block size`)
  const v = dataView(bytes)
  const magic = v.getUint32(N_MAGIC, true)
  if (magic !== NODE_MAGIC) throw fail(`magic ${hex32(magic)} is not ${hex32(NODE_MAGIC)}`)
  const stored = v.getUint32(N_CRC, true)
  const computed = nodeCrc(bytes)
  if (stored !== computed) throw fail(`CRC ${hex32(stored)} stored, ${hex32(computed)} computed`)
  const level = v.getUint8(N_LEVEL)
  if (level > MAX_NODE_LEVEL) throw fail(`level ${level} is above ${MAX_NODE_LEVEL}`)
  if (expected.level !== undefined && level !== expected.level) throw fail(`level ${level}, expected ${expected.level}`)
  const flags = v.getUint8(N_FLAGS)
  if (flags !== 0) throw fail(`flags 0x${flags.toString(16)}, expected 0`)
  const count = v.getUint16(N_COUNT, true)
  const capacity = nodeCapacity(bytes.length)
  if (count === 0 || count > capacity) throw fail(`count ${count} is not in 1..${capacity}`)
  const cno = v.getUint32(N_CNO, true)
  if (cno === 0 || cno > expected.maxCno) throw fail(`cno ${cno} is not in 1..${expected.maxCno}`)
  if (expected.cno !== undefined && cno !== expected.cno) throw fail(`cno ${cno}, expected ${expected.cno}`)
  const node: BlockMapNode = {
    level,
    count,
    cno,
    keys: new Uint32Array(count),
    ptrHi: new Uint32Array(count),
    ptrLo: new Uint32Array(count),
  }
  for (let i = 0; i < count; i++) {
    const at = NODE_HEADER_BYTES + i * NODE_ENTRY_BYTES
    node.keys[i] = v.getUint32(at, true)
    node.ptrLo[i] = v.getUint32(at + 4, true)
    node.ptrHi[i] = v.getUint32(at + 8, true)
  }
  const problem = entriesProblem(node, expected.minKey ?? 0, expected.maxKeyExclusive ?? 2 ** 32)
  if (problem !== undefined) throw fail(problem)
  const junk = firstNonZero(bytes, NODE_HEADER_BYTES + count * NODE_ENTRY_BYTES, bytes.length)
  if (junk >= 0) throw fail(`byte ${junk}, past ${count} entries, is not zero`)
  return node
}
