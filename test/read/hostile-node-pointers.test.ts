/**
 * A node pointer must name a meta block. A file's own content may hold a 4 KiB block that
 * decodes as a valid node (here a leaf of checkpoint 1 mapping 340 blocks to holes): an
 * index entry resealed to point at that data block must fail the read with ERR_CORRUPT,
 * not read those 340 blocks as zeros. In both formats, whole reads and the read stream.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { FORMAT_PARTED } from '../../lib/format/inode.js'
import { type BlockMapNode, encodeNode } from '../../lib/format/node.js'
import { decodeObject, encodeObject } from '../../lib/format/object.js'
import { pointerLo, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'

const BS = 4096
const FIRST = 680
const COUNT = 340
const SLOT_BLOCK = 5

/** 6 MiB of content whose block 5 is a valid leaf of checkpoint 1 (blocks 680.. as holes). */
function content(): Buffer {
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

async function readWhole(store: MemoryStore): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

for (const format of ['stream', 'parted'] as const) {
  describe(`a node pointer at a data block that decodes as a node (${format})`, () => {
    it('fails the read and the read stream with ERR_CORRUPT naming the pointer', async () => {
      const store = new MemoryStore(`hostile-node-pointer-${format}`)
      const data = content()
      const f = await SegmentFile.create(store, {
        format,
        segmentMaxObjectBytes: 3 << 20,
        streamSegmentBytes: 3 << 20,
        segmentMpuChunkSize: 3 << 20,
        dataCacheDirtyMaxBytesThreshold: 2 << 20,
        segmentBufferSize: 2 << 20,
      })
      await f.write(0, data)
      await f.flush()
      await f.close()
      assert.ok((await readWhole(store)).equals(data), 'the container reads back before the damage')

      // Where block 5 lies in part 1.
      const p1 = decodeObject(await store.get('0000000001.1'), '0000000001.1')
      const slot = [...p1.summary.blockIndex.subarray(0, p1.summary.count)].indexOf(SLOT_BLOCK)
      assert.ok(slot >= 0, 'block 5 is in part 1')
      const unit = (p1.layout.dataOffset + slot * BS) / UNIT_BYTES
      // Part 0's index entry for block 680 repointed there, and part 0 sealed again.
      const p0 = decodeObject(await store.get('0000000001.0'), '0000000001.0')
      const index = p0.nodes.find((n) => n.level === 1)
      assert.ok(index, 'part 0 holds an index node above the leaves')
      const entry = [...index.keys.subarray(0, index.count)].indexOf(FIRST)
      assert.ok(entry >= 0, `an index entry starts at block ${FIRST}`)
      index.ptrHi[entry] = 1
      index.ptrLo[entry] = pointerLo(1, unit)
      const { dataCount: _d, metaCount: _m, summaryCrc: _c, ...fields } = p0.header
      await store.put('0000000001.0', encodeObject(fields, p0.data, p0.nodes, p0.summary))
      assert.equal(p0.header.format === FORMAT_PARTED, format === 'parted')

      const notAMetaBlock = new RegExp(
        `0000000001\\.1: a node pointer names byte ${unit * UNIT_BYTES}, not a meta block`,
      )
      await rejectsCode(readWhole(store), 'ERR_CORRUPT', notAMetaBlock)
      const err = await drain(createStreamSegmentReadStream({ store })).then(
        () => assert.fail('the read stream returned data'),
        (e: unknown) => e,
      )
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), String(err))
      assert.match(err.message, notAMetaBlock)
    })
  })
}
