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
import { decodeObject } from '../../lib/format/object.js'
import { pointerLo, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import {
  FIRST,
  leafBlockUnit,
  leafContent,
  pointedAtDataBlock,
  repointFirst,
  writeCheckpoint1,
} from '../helpers/node-pointers.js'
import { pattern } from '../helpers/pattern.js'

const BS = 4096

async function readWhole(store: ObjectStore): Promise<Buffer> {
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
      const data = leafContent()
      await writeCheckpoint1(store, format, data)
      assert.ok((await readWhole(store)).equals(data), 'the container reads back before the damage')

      // Part 0's index entry for block 680 repointed at block 5 in part 1, and part 0 sealed again.
      const unit = await leafBlockUnit(store)
      await repointFirst(store, { hi: 1, lo: pointerLo(1, unit) })
      const p0 = decodeObject(await store.get('0000000001.0'), '0000000001.0')
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

    it("fails the read too when the pointer's span is answered before the read bringing the object's header", async () => {
      const inner = new MemoryStore(`hostile-node-pointer-order-${format}`)
      const unit = await pointedAtDataBlock(inner, format)
      const store = craftedSpanFirst(inner, unit * UNIT_BYTES)
      await rejectsCode(
        readWhole(store),
        'ERR_CORRUPT',
        new RegExp(`0000000001\\.1: a node pointer names byte ${unit * UNIT_BYTES}, not a meta block`),
      )
    })
  })
}

/**
 * `inner`, whose ranged GETs of part 1 that do not take in byte `crafted` wait until one
 * that does has been answered: the span of the crafted pointer comes before the tail read
 * (or the head read) that brings part 1's header along, as a small GET may beside a larger
 * one.
 */
function craftedSpanFirst(inner: MemoryStore, crafted: number): ObjectStore {
  let answered: () => void = () => {}
  const first = new Promise<void>((resolve) => {
    answered = resolve
  })
  const store: ObjectStore = Object.create(inner)
  store.get = async (key, options) => {
    const r = key === '0000000001.1' ? options?.range : undefined
    const takesIt = r !== undefined && 'start' in r && r.start <= crafted && crafted < r.end
    if (r !== undefined && !takesIt) await first
    const bytes = await inner.get(key, options)
    if (takesIt) answered()
    return bytes
  }
  return store
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
      await writeCheckpoint1(store, format, pattern(0, 6 * 1024 * 1024 + 1000, 12))
      await repointFirst(store, repoint((await store.head('0000000001.1'))?.size ?? 0))
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
