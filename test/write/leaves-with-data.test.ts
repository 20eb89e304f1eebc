/**
 * A leaf is never split from its data: the blocks under one leaf lie in one object, and
 * that leaf is stored in it (the spec's *Every object describes itself*). Checked on the
 * published map of a file written front to back in every way objects leave before the
 * flush: partial segments under the dirty limit (both formats), objects sent whole,
 * objects filled in pieces, blocks written by reference. Before the flush, the leaf that
 * appends still go into waits until it is full; sent at once, its later blocks would go
 * to another object with the leaf stored again.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { segmentKey } from '../../lib/format/names.js'
import { pointerPart } from '../../lib/format/pointer.js'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { MapNode } from '../../lib/state/block-map.js'
import type { BlockSource } from '../../lib/state/dirty-tier.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024

interface Case {
  name: string
  size: number
  settings: Partial<Settings>
  byReference?: boolean
  /** Objects the layout must make at least, flush included. */
  minObjects: number
}

const CASES: Case[] = [
  { name: 'partial segments under the default limits', size: 48 * MiB, settings: {}, minObjects: 6 },
  { name: 'partial segments, PartedSegment', size: 48 * MiB, settings: { format: 'parted' }, minObjects: 6 },
  {
    name: 'objects sent whole (2 MiB target)',
    size: 48 * MiB,
    settings: { dataCacheDirtyMaxBytesThreshold: 16 * MiB, segmentBufferSize: 16 * MiB, streamSegmentBytes: 2 * MiB },
    minObjects: 12,
  },
  {
    name: 'objects filled in pieces (10 MiB target, 1 MiB pieces)',
    size: 48 * MiB,
    settings: {
      dataCacheDirtyMaxBytesThreshold: 32 * MiB,
      segmentBufferSize: 32 * MiB,
      streamSegmentBytes: 10 * MiB,
      segmentMpuChunkSize: MiB,
    },
    minObjects: 4,
  },
  {
    name: 'blocks written by reference, in pieces',
    size: 48 * MiB,
    settings: { streamSegmentBytes: 10 * MiB, segmentMpuChunkSize: MiB },
    byReference: true,
    minObjects: 4,
  },
]

async function write(store: MemoryStore, c: Case): Promise<number> {
  const f = await SegmentFile.create(store, c.settings)
  const all = Buffer.allocUnsafe(c.size)
  fillBlocks(all, 0)
  const source: BlockSource = { read: async (at, n) => all.subarray(at, at + n) }
  for (let at = 0; at < c.size; at += MiB) {
    if (c.byReference === true) await f.writeRef(at, MiB, source, at)
    else await f.write(at, all.subarray(at, at + MiB))
  }
  const { objects } = await f.flush()
  await f.close()
  return objects
}

/** Every leaf of the published map, loaded, with the key of the object it is stored in. */
async function leaves(
  store: MemoryStore,
): Promise<{ file: SegmentFile; leaves: Array<{ leaf: MapNode; key: string }> }> {
  const file = await SegmentFile.open(store, { readOnly: true })
  const blocks = file.size / fileState(file).blockSize
  await new Reader(fileState(file)).walk(0, blocks, false)
  const out: Array<{ leaf: MapNode; key: string }> = []
  const visit = (node: MapNode) => {
    for (let i = 0; i < node.count; i++) {
      const child = node.children?.[i]
      assert.ok(child !== undefined, `node at level ${node.level}: child ${i} not loaded`)
      if (child.level > 0) visit(child)
      else out.push({ leaf: child, key: segmentKey(node.hi[i] as number, pointerPart(node.lo[i] as number)) })
    }
  }
  visit(fileState(file).map.root)
  return { file, leaves: out }
}

describe('a leaf and its data', () => {
  for (const c of CASES) {
    it(`${c.name}: every leaf is stored in the one object that holds its blocks`, async () => {
      const store = new MemoryStore()
      const objects = await write(store, c)
      assert.ok(objects >= c.minObjects, `${objects} objects`)
      const { file, leaves: all } = await leaves(store)
      assert.equal(all.length, Math.ceil(c.size / 4096 / fileState(file).map.nodeCapacity), 'leaves')
      const apart: string[] = []
      for (const { leaf, key } of all) {
        const keys = new Set<string>()
        for (let i = 0; i < leaf.count; i++)
          keys.add(segmentKey(leaf.hi[i] as number, pointerPart(leaf.lo[i] as number)))
        if (keys.size !== 1 || !keys.has(key)) {
          apart.push(`leaf from block ${leaf.keys[0]} in ${key}, its blocks in ${[...keys].join(', ')}`)
        }
      }
      assert.deepEqual(apart, [], `${apart.length} of ${all.length} leaves apart from their data`)
      await file.close()
    })
  }
})
