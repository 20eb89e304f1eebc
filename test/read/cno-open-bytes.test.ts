/**
 * Part 0's bytes read by an open by checkpoint number (its end, head first its start:
 * header, summary, index nodes and the leaves below them), which the first read of that
 * object takes instead of GETting them again, are checked as a GET's answer is:
 * - damaged on storage (a flipped byte in the summary, in the index node under the root,
 *   in a leaf part 0 holds), the read fails with ERR_CORRUPT naming the object, as a
 *   read's own fetch does, and reads that do not need the damaged bytes still read;
 * - damaged on the way, in the open's answer only, the read asks the store again and
 *   returns the right bytes;
 * - taken once: a handle's second read of part 0 GETs what it needs.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeHeader, HEADER_BYTES, type Header, objectLayout } from '../../lib/format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../../lib/format/inode.js'
import { segmentKey } from '../../lib/format/names.js'
import { decodeNode } from '../../lib/format/node.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { olderCheckpointOfMany } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

const KiB = 1024
const MiB = 1024 * KiB
const SIZE = 24 * MiB
const KEY = segmentKey(1, 0)

/** Where things lie in checkpoint 1's part 0: its summary, the index node under the root, the last leaf. */
async function part0(store: MemoryStore, format: 'stream' | 'parted') {
  const bytes = await store.get(KEY)
  const f = format === 'parted' ? FORMAT_PARTED : FORMAT_STREAM
  const at = format === 'parted' ? 0 : bytes.byteLength - HEADER_BYTES
  const h: Header = decodeHeader(bytes.subarray(at, at + HEADER_BYTES), bytes.byteLength, {
    cno: 1,
    part: 0,
    format: f,
  })
  const layout = objectLayout(h, h)
  const { inode } = h
  assert.equal(inode.rootLevel, 2, 'root, index node, leaves')
  assert.equal(inode.rootPtrHi[0], 1)
  assert.equal(pointerPart(inode.rootPtrLo[0] as number), 0, 'the index node in part 0')
  const index = pointerUnit(inode.rootPtrLo[0] as number) * UNIT_BYTES
  const node = decodeNode(bytes.subarray(index, index + layout.metaBlockSize), { where: KEY, maxCno: 2 })
  const last = node.count - 1
  assert.equal(node.ptrHi[last], 1)
  assert.equal(pointerPart(node.ptrLo[last] as number), 0, 'the last leaf in part 0')
  const leaf = pointerUnit(node.ptrLo[last] as number) * UNIT_BYTES
  return { size: bytes.byteLength, summary: layout.summaryOffset, index, leaf }
}

async function flipStored(store: MemoryStore, offset: number): Promise<void> {
  const bytes = Buffer.from(await store.get(KEY))
  bytes[offset] = (bytes[offset] as number) ^ 0x20
  await store.put(KEY, bytes)
}

/**
 * A store that flips the byte at `offset` of part 0 in the answer to the first GET of it
 * (the open's), and logs the ranges of the GETs of part 0.
 */
function flipOnTheWay(inner: MemoryStore, size: number, offset: number | undefined) {
  const ranges: string[] = []
  const store = new Proxy(inner, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target)
      if (prop !== 'get') return typeof v === 'function' ? v.bind(target) : v
      return async (key: string, options?: GetOptions) => {
        const answer = await target.get(key, options)
        if (key !== KEY) return answer
        const range = options?.range
        ranges.push(JSON.stringify(range ?? {}))
        if (offset === undefined || ranges.length > 1) return answer
        const start = range === undefined ? 0 : 'suffix' in range ? size - answer.byteLength : range.start
        assert.ok(offset >= start && offset < start + answer.byteLength, `the open's answer holds byte ${offset}`)
        const bytes = Buffer.from(answer)
        bytes[offset - start] = (bytes[offset - start] as number) ^ 0x20
        return bytes
      }
    },
  }) as ObjectStore
  return { store, ranges }
}

const LAST = SIZE - 4 * KiB
const MIDDLE = 12 * MiB

async function readsAs(store: ObjectStore, at: number): Promise<void> {
  const r = await SegmentFile.open(store, { readOnly: true, cno: 1 })
  try {
    assert.ok(Buffer.from(await r.read(at, 4 * KiB)).equals(pattern(at, 4 * KiB, 2)), `bytes at ${at}`)
  } finally {
    await r.close()
  }
}

async function corrupt(store: ObjectStore, at: number, what: RegExp): Promise<void> {
  const r = await SegmentFile.open(store, { readOnly: true, cno: 1 })
  try {
    await assert.rejects(r.read(at, 4 * KiB), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), String(err))
      assert.ok((err as Error).message.includes(`${store.url}/${KEY}`), (err as Error).message)
      assert.match((err as Error).message, what)
      return true
    })
  } finally {
    await r.close()
  }
}

for (const format of ['stream', 'parted'] as const) {
  describe(`${format}: part 0's bytes read by an open by checkpoint number`, () => {
    it("damaged on storage in its summary: its data's reads fail naming it, the others read", async () => {
      const store = await olderCheckpointOfMany(format)
      const at = await part0(store, format)
      await flipStored(store, at.summary + 5)
      await corrupt(store, LAST, /summary/)
      await readsAs(store, MIDDLE)
    })

    it('damaged on storage in the index node under the root: reads fail naming it', async () => {
      const store = await olderCheckpointOfMany(format)
      const at = await part0(store, format)
      await flipStored(store, at.index + 100)
      await corrupt(store, MIDDLE, new RegExp(`meta block at ${at.index}`))
      await corrupt(store, LAST, new RegExp(`meta block at ${at.index}`))
    })

    it('damaged on storage in a leaf part 0 holds: reads under it fail naming it, the others read', async () => {
      const store = await olderCheckpointOfMany(format)
      const at = await part0(store, format)
      await flipStored(store, at.leaf + 100)
      await corrupt(store, LAST, new RegExp(`meta block at ${at.leaf}`))
      await readsAs(store, MIDDLE)
    })

    for (const where of ['summary', 'index', 'leaf'] as const) {
      it(`damaged on the way in the open's answer (${where}): the read asks the store again and reads right`, async () => {
        const inner = await olderCheckpointOfMany(format)
        const at = await part0(inner, format)
        const offset = where === 'summary' ? at.summary + 5 : at[where] + 100
        const { store, ranges } = flipOnTheWay(inner, at.size, offset)
        await readsAs(store, LAST)
        assert.ok(ranges.length >= 2, `part 0 read again: ${ranges.join(' ')}`)
      })
    }

    it('taken once: the first read takes the bytes, a later read of part 0 GETs', async () => {
      const inner = await olderCheckpointOfMany(format)
      const { store, ranges } = flipOnTheWay(inner, 0, undefined)
      const r = await SegmentFile.open(store, { readOnly: true, cno: 1 })
      assert.ok(Buffer.from(await r.read(MIDDLE, 4 * KiB)).equals(pattern(MIDDLE, 4 * KiB, 2)))
      assert.equal(ranges.length, 1, `the open's GET alone: ${ranges.join(' ')}`)
      assert.ok(Buffer.from(await r.read(LAST, 4 * KiB)).equals(pattern(LAST, 4 * KiB, 2)))
      assert.ok(ranges.length >= 2, `part 0's data: ${ranges.join(' ')}`)
      await r.close()
    })
  })
}
