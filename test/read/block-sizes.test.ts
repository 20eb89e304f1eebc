/**
 * A container's block sizes are its own. The format allows data blocks up to 16 MiB under
 * 4 KiB meta blocks, which this library's writer does not make (its objects must hold two
 * full leaves with their data, at most 1 GiB); a reader still opens and reads such a
 * container, whole and through the read stream, and a writer refuses it naming the
 * container, not a setting the caller did not give.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { emptyInode, encodeInodeObject, FORMAT_STREAM } from '../../lib/format/inode.js'
import { encodeObject } from '../../lib/format/object.js'
import { pointerLo } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { crc32 } from '../../lib/util/crc32.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'

const DATA_SHIFT = 24 // 16 MiB blocks
const META_SHIFT = 12

/** A one-block container of 16 MiB data blocks: part 0 holds the block, the inode's root points at it. */
async function bigBlockContainer(store: MemoryStore): Promise<Buffer> {
  const now = Date.now()
  const data = pattern(0, 1 << DATA_SHIFT, 3)
  const inode = emptyInode({ format: FORMAT_STREAM, dataShift: DATA_SHIFT, metaShift: META_SHIFT, ctimeMs: now })
  inode.cno = 1
  inode.size = data.byteLength
  inode.rootCount = 1
  inode.rootPtrHi[0] = 1
  inode.rootPtrLo[0] = pointerLo(0, 0)
  const summary = {
    count: 1,
    blockIndex: new Uint32Array([0]),
    live: new Uint8Array([1]),
    crc: new Uint32Array([crc32(data)]),
  }
  const fields = {
    format: FORMAT_STREAM,
    flags: 1,
    dataShift: DATA_SHIFT,
    metaShift: META_SHIFT,
    cno: 1,
    part: 0,
    createdMs: now,
    baseInode: emptyInode(),
    inode,
  }
  await store.put('0000000001.0', encodeObject(fields, data, [], summary))
  await store.put('inode', encodeInodeObject(inode))
  return data
}

it('a container of 16 MiB data blocks: read whole and through the read stream', async () => {
  const store = new MemoryStore('sixteen-mib-blocks')
  const data = await bigBlockContainer(store)
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    assert.equal(f.size, data.byteLength)
    assert.ok(Buffer.from(await f.read(0, f.size)).equals(data), 'SegmentFile.read')
    assert.ok(Buffer.from(await f.read(5_000_000, 100)).equals(data.subarray(5_000_000, 5_000_100)), 'a small read')
  } finally {
    await f.close()
  }
  assert.ok((await drain(createStreamSegmentReadStream({ store }))).equals(data), 'the read stream')
})

it('a writer refuses it: ERR_UNSUPPORTED naming the container and its block sizes', async () => {
  const store = new MemoryStore('sixteen-mib-blocks-writer')
  await bigBlockContainer(store)
  await rejectsCode(
    SegmentFile.open(store),
    'ERR_UNSUPPORTED',
    /mem:\/\/.*16777216-byte data blocks and 4096-byte meta blocks.*read-only handle reads it/,
  )
})
