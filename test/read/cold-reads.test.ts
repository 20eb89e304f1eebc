/**
 * Requests of cold reads, counted on a wrapped store (never timed):
 * - a cold 4 KiB read after open (a fresh handle per read) costs at most 3 requests, in
 *   every layout: one object, many objects (leaves written with the object after their
 *   data), a deep map (TestHooks maxNodeEntries: many index levels in part 0), blocks
 *   written again after their object was sent, or in a later checkpoint (their leaves, in
 *   part 0, come with its index nodes);
 * - one across the end of an object's data costs at most 4 (both objects' data, the leaf
 *   naming the second block, the index node); the last blocks that come with a leaf span
 *   are checked like any others;
 * - where blocks were written again after their object was sent, their leaf goes again
 *   with them and names blocks of two objects: a read across them costs at most 5;
 * - a sequential read stream starts its first data GET after the few node reads on the
 *   way to the first leaf, long before the map under the rest of the range is walked.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeHeader, HEADER_BYTES, objectLayout } from '../../lib/format/header.js'
import { parseKey, segmentKey } from '../../lib/format/names.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const KiB = 1024
const MiB = 1024 * KiB

interface Layout {
  name: string
  size: number
  settings: Partial<Settings> & WithHooks
  /** Objects the layout must make at least. */
  minObjects: number
  /** Ranges [offset, length) written again after the whole file, before the flush. */
  again?: Array<[number, number]>
  /** Flush the whole file first: `again` makes a second checkpoint on top of it. */
  againLater?: boolean
  /** Requests a cold 4 KiB read across two objects' data may cost (4 unless said). */
  maxAcross?: number
}

/** Partial segments, then three ranges written again: their leaves go again with them (to part 0). */
const WRITTEN_AGAIN: Layout = {
  name: 'blocks written again after their object was sent',
  size: 24 * MiB,
  settings: { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB },
  minObjects: 8,
  again: [
    [3 * MiB + 40 * 4096, 3 * 4096],
    [9 * MiB + 7 * 4096, 4096],
    [17 * MiB, 64 * 4096],
  ],
  maxAcross: 5,
}

const LAYOUTS: Layout[] = [
  { name: 'one object', size: 3 * MiB, settings: {}, minObjects: 1 },
  {
    name: 'many objects',
    size: 24 * MiB,
    settings: { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB },
    minObjects: 8,
  },
  {
    name: 'a deep map (4 entries per node)',
    size: 8 * MiB,
    settings: { ...hooks({ maxNodeEntries: 4 }), dataCacheDirtyMaxBytesThreshold: MiB, segmentBufferSize: 2 * MiB },
    minObjects: 4,
  },
  WRITTEN_AGAIN,
  { ...WRITTEN_AGAIN, name: 'a second checkpoint changing a few blocks', againLater: true },
]

/** Where each block of the published file is stored, by the map: object key and byte offset. */
async function blockObjects(store: MemoryStore): Promise<Map<number, { key: string; offset: number }>> {
  const file = await SegmentFile.open(store, { readOnly: true })
  const blocks = file.size / fileState(file).blockSize
  await new Reader(fileState(file)).walk(0, blocks, false)
  const out = new Map<number, { key: string; offset: number }>()
  for (let b = 0; b < blocks; b++) {
    const leaf = fileState(file).map.leafOf(b)
    assert.ok(leaf !== undefined, `block ${b}: no leaf`)
    const i = leaf.search(b)
    const lo = leaf.lo[i] as number
    out.set(b, { key: segmentKey(leaf.hi[i] as number, pointerPart(lo)), offset: pointerUnit(lo) * UNIT_BYTES })
  }
  await file.close()
  return out
}

/** A store that logs each GET: key, range start, and how many GETs had answered when it went out. */
function logging(inner: ObjectStore) {
  const log: Array<{ key: string; start: number; answeredBefore: number }> = []
  let answered = 0
  const store = new Proxy(inner, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target)
      if (prop !== 'get') return typeof v === 'function' ? v.bind(target) : v
      return async (key: string, options?: GetOptions) => {
        const range = options?.range
        log.push({ key, start: range !== undefined && 'start' in range ? range.start : -1, answeredBefore: answered })
        try {
          return await target.get(key, options)
        } finally {
          answered++
        }
      }
    },
  })
  return { store, log }
}

/** The requests each read costs on a fresh handle (cold, after the open), its bytes checked against `want`. */
async function coldReads(
  store: ThrottledStore,
  want: Uint8Array,
  reads: ReadonlyArray<readonly [number, number]>,
): Promise<number[]> {
  const counts: number[] = []
  for (const [at, length] of reads) {
    const f = await SegmentFile.open(store, { readOnly: true })
    const before = store.totalRequests
    const got = await f.read(at, length)
    counts.push(store.totalRequests - before)
    assert.ok(Buffer.from(got).equals(want.subarray(at, at + length)), `bytes at ${at}`)
    await f.close()
  }
  return counts
}

async function build(store: ObjectStore, layout: Layout): Promise<{ want: Buffer; objects: number }> {
  const f = await SegmentFile.create(store, layout.settings)
  const want = Buffer.alloc(layout.size)
  for (let at = 0; at < layout.size; at += MiB) {
    const b = pattern(at, MiB, 5)
    b.copy(want, at)
    await f.write(at, b)
  }
  const before = layout.againLater === true ? (await f.flush()).objects : 0
  for (const [at, length] of layout.again ?? []) {
    const b = pattern(at, length, 6)
    b.copy(want, at)
    await f.write(at, b)
  }
  const { objects } = await f.flush()
  await f.close()
  return { want, objects: before + objects }
}

describe('cold reads', () => {
  for (const layout of LAYOUTS) {
    it(`${layout.name}: every cold 4 KiB read after open costs at most 3 requests`, async () => {
      const inner = new MemoryStore()
      const { want, objects } = await build(inner, layout)
      assert.ok(objects >= layout.minObjects, `${objects} objects`)
      const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
      const blocks = layout.size / 4096
      const stride = Math.max(1, Math.floor(blocks / 250)) | 1
      // Block-aligned reads, and unaligned ones inside a block's object (a 4 KiB read that
      // straddles two objects needs both objects' data).
      const reads: Array<[number, number]> = []
      for (let b = 0; b < blocks; b += stride) reads.push([b * 4096, 4096], [b * 4096 + 100, 4096 - 200])
      const counts = await coldReads(store, want, reads)
      const max = Math.max(...counts)
      const mean = counts.reduce((a, b) => a + b, 0) / counts.length
      assert.ok(max <= 3, `max ${max} requests (mean ${mean.toFixed(2)}) over ${counts.length} cold reads`)
      assert.equal(store.requests.head ?? 0, 0, 'no HEAD')
    })
  }

  // A 4 KiB read across the end of an object's data needs both objects' data and the leaf
  // naming the second block (after the index node): 4 requests, the first object's last
  // blocks coming with its leaf span. The blocks of one leaf lie in two objects only when
  // some were written again after their object was sent: the leaf goes again with them,
  // and a read of a block it left behind needs that block's object's summary as well,
  // which no leaf span brings (up to 5: part 0's index nodes with the leaves below them,
  // the other leaf, two objects' data, one summary).
  const ACROSS: Layout[] = [
    { name: 'partial segments', size: 24 * MiB, settings: LAYOUTS[1]?.settings ?? {}, minObjects: 8 },
    WRITTEN_AGAIN,
    {
      name: 'objects sent whole',
      size: 64 * MiB,
      settings: {
        dataCacheDirtyMaxBytesThreshold: 64 * MiB,
        segmentBufferSize: 64 * MiB,
        streamSegmentBytes: 16 * MiB,
      },
      minObjects: 4,
    },
  ]
  for (const layout of ACROSS) {
    it(`${layout.name}: a cold 4 KiB read across two objects' data costs at most ${layout.maxAcross ?? 4} requests`, async () => {
      const inner = new MemoryStore()
      const { want } = await build(inner, layout)
      const where = await blockObjects(inner)
      const across: number[] = []
      for (let b = 1; b < layout.size / 4096; b++) {
        if (where.get(b - 1)?.key !== where.get(b)?.key) across.push(b * 4096 - 2048)
      }
      assert.ok(across.length >= layout.minObjects - 1, `${across.length} boundaries`)
      // A range written again starts in the middle of a leaf, whose blocks then lie in two objects.
      for (const [at] of layout.again ?? []) assert.ok(across.includes(at - 2048), `a read across ${at}`)
      const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
      const counts = await coldReads(
        store,
        want,
        across.map((at) => [at, 4096]),
      )
      const max = layout.maxAcross ?? 4
      assert.ok(
        Math.max(...counts) <= max,
        `requests per read across two objects (at most ${max}): ${counts.join(' ')}`,
      )
    })
  }

  // A small file is one small object (its data, a leaf, the summary, the header): its leaf
  // span's tail read starts at byte 0 and brings the data along, whichever block is read;
  // head first, its head read reaches through the data after the leaf.
  for (const [format, size] of [
    ['stream', 20 * KiB],
    ['stream', 100 * KiB],
    ['stream', 128 * KiB],
    ['parted', 20 * KiB],
    ['parted', 128 * KiB],
  ] as const) {
    it(`${format}: a file of ${size / KiB} KiB: every cold read of up to 4 KiB after open is one GET`, async () => {
      const inner = new MemoryStore()
      const want = pattern(0, size, 9)
      const w = await SegmentFile.create(inner, { format })
      await w.write(0, want)
      assert.equal((await w.flush()).objects, 1)
      await w.close()
      const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
      const reads: Array<[number, number]> = []
      for (let at = 0; at < size; at += 4096 + 1000) reads.push([at, Math.min(4096, size - at)])
      const counts = await coldReads(store, want, reads)
      assert.deepEqual(new Set(counts), new Set([1]), `requests per cold read: ${counts.join(' ')}`)
    })
  }

  it("a damaged summary in part 0 fails the reads of part 0's data, not the others", async () => {
    const inner = new MemoryStore()
    const { want } = await build(inner, WRITTEN_AGAIN)
    const where = await blockObjects(inner)
    const part0 = [...where.values()].find((w) => w.key.endsWith('.0'))?.key as string
    const bytes = Buffer.from(await inner.get(part0))
    const k = parseKey(part0)
    assert.ok(k?.kind === 'segment')
    const h = decodeHeader(bytes.subarray(bytes.byteLength - HEADER_BYTES), bytes.byteLength, k)
    const { summaryOffset } = objectLayout(h, h)
    bytes[summaryOffset + 5] = (bytes[summaryOffset + 5] as number) ^ 1
    await inner.put(part0, bytes)
    // Blocks stored in other objects read as ever: one under a leaf that part 0 does not
    // hold (block 4900: no range near it was written again), one under a leaf part 0
    // holds (block 2100: block 2311, under the same leaf, was written again).
    for (const b of [4900, 2100]) {
      assert.ok(!where.get(b)?.key.endsWith('.0'), `block ${b} in ${where.get(b)?.key}`)
      const f = await SegmentFile.open(inner, { readOnly: true })
      const at = b * 4096
      assert.ok(Buffer.from(await f.read(at, 4096)).equals(want.subarray(at, at + 4096)), `bytes at ${at}`)
      await f.close()
    }
    // A block whose data part 0 holds is checked against that summary.
    const inPart0 = [...where.entries()].find(([, w]) => w.key === part0)?.[0] as number
    const g = await SegmentFile.open(inner, { readOnly: true })
    await assert.rejects(g.read(inPart0 * 4096, 4096), (err) => StreamSegmentError.is(err, 'ERR_CORRUPT'))
    await g.close()
  })

  it("PartedSegment: a damaged summary in part 0 fails the reads of part 0's data, not the others", async () => {
    const store = new MemoryStore()
    const settings: Partial<Settings> & WithHooks = {
      ...hooks({ maxNodeEntries: 4 }),
      segmentMaxObjectBytes: 64 * 1024,
    }
    const f = await SegmentFile.create(store, { ...settings, format: 'parted' })
    const want = Buffer.from(pattern(0, 64 * 1024, 1))
    await f.write(0, want)
    await f.flush()
    want.fill(0xee, 0, 4096)
    await f.write(0, want.subarray(0, 4096)) // block 0 again: its leaf (blocks 0..3) goes into checkpoint 2
    const { cno } = await f.flush()
    await f.close()
    const key = segmentKey(cno, 0)
    const bytes = Buffer.from(await store.get(key))
    const h = decodeHeader(bytes.subarray(0, HEADER_BYTES), bytes.byteLength, { cno, part: 0, format: 2 })
    const { summaryOffset } = objectLayout(h, h)
    bytes[summaryOffset + 8] = (bytes[summaryOffset + 8] as number) ^ 0xff
    await store.put(key, bytes)
    // Block 1 lies in checkpoint 1's objects, under the leaf part 0 holds: read as ever.
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.ok(Buffer.from(await r.read(4096, 4096)).equals(want.subarray(4096, 8192)), 'block 1')
    await r.close()
    // Block 0, whose data part 0 holds, is checked against that summary.
    const g = await SegmentFile.open(store, { readOnly: true })
    await assert.rejects(g.read(0, 4096), (err) => StreamSegmentError.is(err, 'ERR_CORRUPT'))
    await g.close()
  })

  it("an object's last block that came with its leaf span is checked like any other", async () => {
    const inner = new MemoryStore()
    const layout = ACROSS[2] as Layout
    const { want } = await build(inner, layout)
    const where = await blockObjects(inner)
    // The first boundary: block b − 1 is the last of its object's data.
    let b = 1
    while (where.get(b - 1)?.key === where.get(b)?.key) b++
    const last = where.get(b - 1) as { key: string; offset: number }
    const damaged = Buffer.from(await inner.get(last.key))
    damaged[last.offset + 100] = (damaged[last.offset + 100] as number) ^ 1
    await inner.put(last.key, damaged)
    const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const f = await SegmentFile.open(store, { readOnly: true })
    await assert.rejects(f.read(b * 4096 - 2048, 4096), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), String(err))
      assert.match((err as Error).message, new RegExp(`block ${b - 1} at offset ${last.offset} has CRC-32`))
      return true
    })
    // The bytes around it still read.
    const g = await SegmentFile.open(store, { readOnly: true })
    const got = await g.read(b * 4096, 4096)
    assert.ok(Buffer.from(got).equals(want.subarray(b * 4096, (b + 1) * 4096)))
    await f.close()
    await g.close()
  })

  it("a history of small checkpoints: a cold read gets an older, larger object's summary in one GET", async () => {
    // A 64 MiB file in default-sized objects, then one-block checkpoints: the first
    // summaries a fresh handle reads are small part 0s, and a read under a leaf a later
    // checkpoint wrote again meets an object of thousands of slots none of whose own
    // leaves it walked (no meta block of it known: a suffix read). Its summary comes with
    // that suffix read, not after it; the read costs at most 4 requests: the part 0s of
    // the index and of the leaf, the data, its summary.
    const inner = new MemoryStore()
    const f = await SegmentFile.create(inner, {})
    const want = pattern(0, 64 * MiB, 7)
    await f.write(0, want)
    await f.flush()
    for (let i = 0; i < 50; i++) {
      const at = ((i * 7919) % 16384) * 4096
      const b = pattern(at, 4096, 8 + i)
      b.copy(want, at)
      await f.write(at, b)
      await f.flush()
    }
    await f.close()
    const { store, log } = logging(inner)
    const counts: number[] = []
    let suffixes = 0
    for (let r = 0; r < 16; r++) {
      const at = ((r * 104729) % 16384) * 4096
      const g = await SegmentFile.open(store, { readOnly: true })
      const from = log.length
      const got = await g.read(at, 4096)
      assert.ok(Buffer.from(got).equals(want.subarray(at, at + 4096)), `bytes at ${at}`)
      const gets = log.slice(from)
      counts.push(gets.length)
      // The checkpoint-1 data object read: its data GET and one summary read.
      const old = gets.filter((x) => {
        const k = parseKey(x.key)
        return k?.kind === 'segment' && k.cno === 1 && k.part !== 0
      })
      if (old.some((x) => x.start === -1)) suffixes++
      assert.ok(old.length <= 2, `read at ${at}: ${old.length} GETs of the old object: ${JSON.stringify(old)}`)
      await g.close()
    }
    assert.ok(suffixes > 0, 'some reads met an object by a suffix read')
    assert.ok(Math.max(...counts) <= 4, `requests per cold read: ${counts.join(' ')}`)
  })

  it('a sequential read starts its first data GET before the map under the rest is walked', async () => {
    const inner = new MemoryStore()
    const size = 64 * MiB
    const { want, objects } = await build(inner, {
      name: 'many',
      size,
      settings: { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB },
      minObjects: 16,
    })
    assert.ok(objects >= 16, `${objects} objects`)
    // Where each object's data region ends: a GET starting below it is a data GET.
    const dataEnd = new Map<string, number>()
    for await (const e of inner.list('')) {
      const k = parseKey(e.key)
      if (k?.kind !== 'segment') continue
      const h = decodeHeader(await inner.get(e.key, { range: { suffix: HEADER_BYTES } }), e.size, k)
      dataEnd.set(e.key, objectLayout(h, h).metaOffset)
    }
    const { store, log } = logging(inner)
    const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: MiB })
    assert.ok((await drain(rs)).equals(want))
    const order = log
      .filter((g) => dataEnd.has(g.key) && g.start >= 0)
      .map((g) => (g.start < (dataEnd.get(g.key) as number) ? 'data' : 'meta'))
    const firstData = order.indexOf('data')
    const metaTotal = order.filter((k) => k === 'meta').length
    assert.ok(firstData >= 0, 'data GETs')
    assert.ok(firstData <= 2, `${firstData} node reads before the first data GET (${order.slice(0, 8).join(' ')})`)
    assert.ok(metaTotal >= objects / 2, `${metaTotal} node reads in all (a leaf span per object or two)`)
    // Node reads go on after the first data GET: the map is walked as the stream needs it.
    assert.ok(order.lastIndexOf('meta') > firstData + 4, `order: ${order.join(' ')}`)
  })
})

describe("a read stream's first data GET", () => {
  it('goes out with the first leaf read, on a guess of where the data lies', async () => {
    const inner = new MemoryStore()
    const { want } = await build(inner, {
      name: 'many',
      size: 24 * MiB,
      settings: LAYOUTS[1]?.settings ?? {},
      minObjects: 8,
    })
    const where = await blockObjects(inner)
    for (const start of [0, 5 * MiB + 12345]) {
      const { store, log } = logging(new ThrottledStore(inner, { latencyMs: 5, bandwidth: Number.POSITIVE_INFINITY }))
      const rs = createStreamSegmentReadStream({ store, start })
      assert.ok((await drain(rs)).equals(want.subarray(start)), `bytes from ${start}`)
      // The inode and part 0's index nodes had answered, not yet the leaf, when the data GET
      // of the first block went out.
      const first = where.get(Math.floor(start / 4096)) as { key: string; offset: number }
      const get = log.find((g) => g.key === first.key && g.start === first.offset)
      assert.ok(get !== undefined, `a GET of ${first.key} at ${first.offset}`)
      assert.equal(get.answeredBefore, 2, `from ${start}: ${JSON.stringify(log.slice(0, 5))}`)
      assert.ok((rs.timing?.requests.data ?? 0) <= 26, `${rs.timing?.requests.data} data GETs`)
    }
  })

  for (const format of ['stream', 'parted'] as const) {
    it(`${format}: one data GET per object and the short first one, the guess included or none made`, async () => {
      const inner = new MemoryStore()
      const settings = { ...(LAYOUTS[1]?.settings ?? {}), format }
      const { want } = await build(inner, { name: format, size: 8 * MiB, settings, minObjects: 3 })
      const keys = new Set([...(await blockObjects(inner)).values()].map((w) => w.key))
      const rs = createStreamSegmentReadStream({ store: inner })
      assert.ok((await drain(rs)).equals(want))
      assert.equal(rs.timing?.requests.data, keys.size + 1, `${keys.size} objects hold data`)
    })
  }

  it('guessed right, its bytes are checked as any are', async () => {
    const inner = new MemoryStore()
    await build(inner, { name: 'many', size: 8 * MiB, settings: LAYOUTS[1]?.settings ?? {}, minObjects: 3 })
    const where = await blockObjects(inner)
    const b0 = where.get(3) as { key: string; offset: number }
    const damaged = Buffer.from(await inner.get(b0.key))
    damaged[b0.offset + 7] = (damaged[b0.offset + 7] as number) ^ 1
    await inner.put(b0.key, damaged)
    const { store, log } = logging(inner)
    await assert.rejects(drain(createStreamSegmentReadStream({ store })), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), String(err))
      assert.match((err as Error).message, /block 3 at offset 12288 has CRC-32/)
      return true
    })
    assert.equal(log.find((g) => g.key === b0.key && g.start === 0)?.answeredBefore, 2, 'the guess was made')
  })

  it('guessed wrong costs that GET only: the run is read where the map says', async () => {
    // Blocks 768… written again go to a later object that holds the leaf of blocks 680…
    // (written again in part), and its data from its start: a stream from block 700 guesses
    // that object at 80 KiB, where block 788 lies.
    const inner = new MemoryStore()
    const layout: Layout = { ...WRITTEN_AGAIN, again: [[3 * MiB, 3 * MiB]] }
    const { want } = await build(inner, layout)
    const where = await blockObjects(inner)
    assert.notEqual(where.get(700)?.key, where.get(768)?.key, 'blocks 700 and 768 in two objects')
    const { store, log } = logging(inner)
    const start = 700 * 4096
    const rs = createStreamSegmentReadStream({ store, start, end: start + MiB - 1 })
    assert.ok((await drain(rs)).equals(want.subarray(start, start + MiB)))
    const guessed = log.find((g) => g.key === where.get(768)?.key && g.start === 80 * 1024)
    assert.ok(guessed !== undefined, `the guess: ${JSON.stringify(log)}`)
    // Blocks 700–767 and 768–955 in their two objects, and the guess.
    assert.equal(rs.timing?.requests.data, 3)
  })
})

describe("a read stream's guess with small windows", () => {
  // Objects of 2 MiB, and of 64 KiB: a first window of 64 KiB is a small read, whose leaf
  // read brings the data below the leaf along.
  const small = {
    ...hooks({ maxNodeEntries: 4 }),
    segmentMaxObjectBytes: 64 * KiB,
    dataCacheDirtyMaxBytesThreshold: 48 * KiB,
  }
  for (const [objects, base] of [
    ['2 MiB', LAYOUTS[1]?.settings ?? {}],
    ['64 KiB', small],
  ] as const) {
    for (const options of [{}, { readAheadBytes: 64 * KiB }, { readGetMaxBytes: 256 * KiB, readAheadBytes: MiB }]) {
      for (const format of ['stream', 'parted'] as const)
        it(`${format}, objects of ${objects}, ${JSON.stringify(options)}: every data byte fetched once, the guess's included`, async () => {
          const inner = new MemoryStore()
          const settings = { ...base, format }
          const { want } = await build(inner, { name: format, size: 8 * MiB, settings, minObjects: 3 })
          const rs = createStreamSegmentReadStream({ store: inner, ...options })
          assert.ok((await drain(rs)).equals(want))
          const t = rs.timing
          assert.equal(t?.bytes.data, want.length, `${t?.requests.data} data GETs`)
        })
    }
  }
})
