/**
 * A hostile block map whose index nodes under one window of a read point into one object
 * from some 200,000 entries (40 nodes of 5,460, all at one node). The read's walk of that
 * level must fail with ERR_CORRUPT for the node, not with a RangeError from the size of
 * the level: with a read window of 1 GiB a level may hold that many entries of a map.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { objectLayout } from '../../lib/format/header.js'
import { FORMAT_STREAM, INODE_KEY } from '../../lib/format/index.js'
import { encodeInodeObject, type Inode } from '../../lib/format/inode.js'
import { type BlockMapNode, nodeCapacity } from '../../lib/format/node.js'
import { decodeObject, encodeObject } from '../../lib/format/object.js'
import { pointerLo, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'

const MBS = 64 * 1024
const BS = 4096
const NODES = 40
const PART0 = '0000000001.0'

/**
 * Checkpoint 1 made over: root (level 4) → one level-3 node → NODES level-2 nodes, each
 * entry of which points back at the level-3 node (it fails its checks as a level-1 node).
 */
async function wideMap(): Promise<{ store: MemoryStore; size: number }> {
  const store = new MemoryStore('read-wide-level')
  const f = await SegmentFile.create(store, { metaBlockSize: MBS })
  await f.write(0, Buffer.alloc(BS, 1))
  await f.flush()
  await f.close()
  const p0 = decodeObject(await store.get(PART0), PART0)
  const fan = nodeCapacity(MBS)
  const size = NODES * fan * BS
  const { dataCount: _d, metaCount: _m, summaryCrc: _c, ...fields } = p0.header
  const layout = objectLayout({ dataCount: p0.summary.count, metaCount: NODES + 1 }, fields)
  const lo = (j: number) => pointerLo(0, (layout.metaOffset + j * MBS) / UNIT_BYTES)
  const node = (level: number, keys: number[], ptrLo: number[]): BlockMapNode => ({
    level,
    count: keys.length,
    cno: 1,
    keys: Uint32Array.from(keys),
    ptrHi: new Uint32Array(keys.length).fill(1),
    ptrLo: Uint32Array.from(ptrLo),
  })
  const top = node(
    3,
    Array.from({ length: NODES }, (_, k) => k * fan),
    Array.from({ length: NODES }, (_, k) => lo(k + 1)),
  )
  const wide = Array.from({ length: NODES }, (_, k) =>
    node(
      2,
      Array.from({ length: fan }, (_, i) => k * fan + i),
      Array.from({ length: fan }, () => lo(0)),
    ),
  )
  const inode: Inode = {
    ...p0.header.inode,
    format: FORMAT_STREAM,
    size,
    rootLevel: 4,
    rootCount: 1,
    rootKeys: new Uint32Array(4),
    rootPtrHi: Uint32Array.of(1, 0, 0, 0),
    rootPtrLo: Uint32Array.of(lo(0), 0, 0, 0),
  }
  await store.put(PART0, encodeObject({ ...fields, inode }, p0.data, [top, ...wide], p0.summary))
  await store.put(INODE_KEY, encodeInodeObject(inode))
  return { store, size }
}

describe('a read over a level of some 200,000 node pointers into one object', () => {
  it('fails with ERR_CORRUPT for the node they point at', async () => {
    const { store, size } = await wideMap()
    const f = await SegmentFile.open(store, {
      readOnly: true,
      readGetMaxBytes: 64 * 1024 * 1024,
      readMaxConcurrency: 16,
    })
    // One scan window of 1 GiB covers the whole file: its walk meets every entry at once.
    const err = await f.read(0, size).then(
      () => undefined,
      (e: unknown) => e,
    )
    await f.close()
    assert.ok(err instanceof Error, 'the read failed')
    assert.equal((err as { code?: string }).code, 'ERR_CORRUPT', String(err))
    assert.match(err.message, /0000000001\.0/)
  })
})
