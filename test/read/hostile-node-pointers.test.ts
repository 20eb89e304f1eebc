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

/** The settings both suites write their containers with: objects of 3 MiB, sent in one piece. */
function settingsOf(format: 'stream' | 'parted') {
  return {
    format,
    segmentMaxObjectBytes: 3 << 20,
    streamSegmentBytes: 3 << 20,
    segmentMpuChunkSize: 3 << 20,
    dataCacheDirtyMaxBytesThreshold: 2 << 20,
    segmentBufferSize: 2 << 20,
  }
}

for (const format of ['stream', 'parted'] as const) {
  describe(`a node pointer at a data block that decodes as a node (${format})`, () => {
    it('fails the read and the read stream with ERR_CORRUPT naming the pointer', async () => {
      const store = new MemoryStore(`hostile-node-pointer-${format}`)
      const data = content()
      const f = await SegmentFile.create(store, settingsOf(format))
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

/**
 * A node pointer past its object's end, or into an object that is not there: the walk of
 * a read and the BlockMap's own loads (a writer's write over the blocks under it) say so
 * alike, naming the object and the offset: ERR_CORRUPT (the store's ERR_RANGE, exit code
 * 9 in the CLI, is no sign of damage) and ERR_NOT_FOUND saying a node points there.
 */
for (const format of ['stream', 'parted'] as const) {
  describe(`a node pointer past its object's end, or into no object (${format})`, () => {
    /** A container of checkpoint 1 whose index entry for block FIRST is repointed by `repoint`. */
    async function damaged(
      name: string,
      repoint: (p1Size: number) => { hi: number; lo: number },
    ): Promise<MemoryStore> {
      const store = new MemoryStore(`node-pointer-${name}-${format}`)
      const f = await SegmentFile.create(store, settingsOf(format))
      await f.write(0, pattern(0, 6 * 1024 * 1024 + 1000, 12))
      await f.flush()
      await f.close()
      const p0 = decodeObject(await store.get('0000000001.0'), '0000000001.0')
      const index = p0.nodes.find((n) => n.level === 1)
      assert.ok(index, 'part 0 holds an index node above the leaves')
      const entry = [...index.keys.subarray(0, index.count)].indexOf(FIRST)
      assert.ok(entry >= 0, `an index entry starts at block ${FIRST}`)
      const to = repoint((await store.head('0000000001.1'))?.size ?? 0)
      index.ptrHi[entry] = to.hi
      index.ptrLo[entry] = to.lo
      const { dataCount: _d, metaCount: _m, summaryCrc: _c, ...fields } = p0.header
      await store.put('0000000001.0', encodeObject(fields, p0.data, p0.nodes, p0.summary))
      return store
    }

    async function writeOver(store: MemoryStore): Promise<void> {
      const f = await SegmentFile.open(store)
      try {
        await f.write(FIRST * BS, Buffer.alloc(BS, 1))
      } finally {
        f.abort()
      }
    }

    it('past the end: ERR_CORRUPT for a read and for a write over its blocks', async () => {
      let past = 0
      const store = await damaged('past-end', (size) => {
        past = (Math.ceil(size / UNIT_BYTES) + 10) * UNIT_BYTES
        return { hi: 1, lo: pointerLo(1, past / UNIT_BYTES) }
      })
      const at = new RegExp(`0000000001\\.1.*${past}`)
      await rejectsCode(readWhole(store), 'ERR_CORRUPT', at)
      await rejectsCode(writeOver(store), 'ERR_CORRUPT', at)
    })

    it('into no object: ERR_NOT_FOUND saying the block map points there, for a read and for a write', async () => {
      const store = await damaged('no-object', () => ({ hi: 1, lo: pointerLo(7, 3) }))
      await rejectsCode(readWhole(store), 'ERR_NOT_FOUND', /0000000001\.7: no such object, but the block map/)
      await rejectsCode(
        writeOver(store),
        'ERR_NOT_FOUND',
        /0000000001\.7 meta block at 12288: no such object, but a block-map node/,
      )
    })
  })
}
