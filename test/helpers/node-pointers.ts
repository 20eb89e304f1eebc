/**
 * Containers whose block map has one node pointer crafted: checkpoint 1 of a little over
 * 6 MiB in objects of 3 MiB (leaves of 340 blocks under an index node in part 0), the
 * index entry for block FIRST repointed and part 0 sealed again, so that only the checks
 * of what a pointer names can tell.
 */
import assert from 'node:assert/strict'
import { type BlockMapNode, encodeNode } from '../../lib/format/node.js'
import { decodeObject, encodeObject } from '../../lib/format/object.js'
import { pointerLo, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from './pattern.js'

const BS = 4096
/** The first block of the leaf whose index entry is repointed, and of the leaf block 5 holds. */
export const FIRST = 680
const COUNT = 340
const SLOT_BLOCK = 5

/** 6 MiB of content whose block 5 is a valid leaf of checkpoint 1 (blocks 680.. as holes). */
export function leafContent(): Buffer {
  const data = Buffer.from(pattern(0, 6 * 1024 * 1024 + 1000, 11))
  const leaf: BlockMapNode = {
    level: 0,
    count: COUNT,
    cno: 1,
    keys: Uint32Array.from({ length: COUNT }, (_, i) => FIRST + i),
    ptrHi: new Uint32Array(COUNT),
    ptrLo: new Uint32Array(COUNT),
  }
  encodeNode(data.subarray(SLOT_BLOCK * BS, (SLOT_BLOCK + 1) * BS), leaf)
  return data
}

/** The settings the containers are written with: objects of 3 MiB, sent in one piece. */
export function settingsOf(format: 'stream' | 'parted') {
  return {
    format,
    segmentMaxObjectBytes: 3 << 20,
    streamSegmentBytes: 3 << 20,
    segmentMpuChunkSize: 3 << 20,
    dataCacheDirtyMaxBytesThreshold: 2 << 20,
    segmentBufferSize: 2 << 20,
  }
}

/** Writes `data` as checkpoint 1 of a new container in `store`. */
export async function writeCheckpoint1(store: MemoryStore, format: 'stream' | 'parted', data: Buffer): Promise<void> {
  const f = await SegmentFile.create(store, settingsOf(format))
  await f.write(0, data)
  await f.flush()
  await f.close()
}

/** Points part 0's index entry for block FIRST at (hi, lo) and seals part 0 again. */
export async function repointFirst(store: MemoryStore, to: { hi: number; lo: number }): Promise<void> {
  const p0 = decodeObject(await store.get('0000000001.0'), '0000000001.0')
  const index = p0.nodes.find((n) => n.level === 1)
  assert.ok(index, 'part 0 holds an index node above the leaves')
  const entry = [...index.keys.subarray(0, index.count)].indexOf(FIRST)
  assert.ok(entry >= 0, `an index entry starts at block ${FIRST}`)
  index.ptrHi[entry] = to.hi
  index.ptrLo[entry] = to.lo
  const { dataCount: _d, metaCount: _m, summaryCrc: _c, ...fields } = p0.header
  await store.put('0000000001.0', encodeObject(fields, p0.data, p0.nodes, p0.summary))
}

/** Where block 5 (a leaf, in leafContent) lies in part 1: the unit a pointer at it names. */
export async function leafBlockUnit(store: MemoryStore): Promise<number> {
  const p1 = decodeObject(await store.get('0000000001.1'), '0000000001.1')
  const slot = [...p1.summary.blockIndex.subarray(0, p1.summary.count)].indexOf(SLOT_BLOCK)
  assert.ok(slot >= 0, 'block 5 is in part 1')
  return (p1.layout.dataOffset + slot * BS) / UNIT_BYTES
}

/** A container of leafContent whose index entry for FIRST points at block 5, a data block. */
export async function pointedAtDataBlock(store: MemoryStore, format: 'stream' | 'parted'): Promise<number> {
  await writeCheckpoint1(store, format, leafContent())
  const unit = await leafBlockUnit(store)
  await repointFirst(store, { hi: 1, lo: pointerLo(1, unit) })
  return unit
}
