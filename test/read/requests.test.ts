/**
 * What reads cost in requests (ThrottledStore counts them; ReadTiming splits them by
 * kind): a cold random 4 KiB read after open, reads into objects seen before, a
 * sequential read coalescing into readGetMaxBytes GETs, holes for free, at most
 * readMaxConcurrency data GETs in flight (node and summary reads have as many slots
 * again, so a walk never waits behind data), and no HEAD at all: a reader opens with one GET.
 * A reader opening a checkpoint by number: a HEAD of its part 0 beside a GET of `inode`
 * (the container's format), then one GET of the header: 3 requests in 2 round trips. That
 * GET brings as much of part 0 as the first read takes of it: the read GETs none of it again.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import type { Reader } from '../../lib/read/reader.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain } from '../helpers/assert.js'
import { olderCheckpointOfMany } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const KiB = 1024
const MiB = 1024 * KiB
const FILE = 64 * MiB

describe('read requests', () => {
  const inner = new MemoryStore()
  const holes = new MemoryStore()
  const want = Buffer.alloc(FILE)
  let objects = 0
  before(async () => {
    // ~4 MiB partial objects: 16 of them, leaves beside their data, one index node in part 0.
    const f = await SegmentFile.create(inner, { dataCacheDirtyMaxBytesThreshold: 4 * MiB })
    for (let at = 0; at < FILE; at += MiB) {
      const b = pattern(at, MiB, 3)
      b.copy(want, at)
      await f.write(at, b)
    }
    objects = (await f.flush()).objects
    const h = await SegmentFile.create(holes)
    await h.write(0, pattern(0, MiB, 1))
    await h.write(FILE - MiB, pattern(FILE - MiB, MiB, 1))
    await h.flush()
  })

  async function opened(store: ObjectStore = inner, latencyMs = 0) {
    const counted = new ThrottledStore(store, { latencyMs, bandwidth: Number.POSITIVE_INFINITY })
    const file = await SegmentFile.open(counted, { readOnly: true })
    counted.resetCounters()
    return { store: counted, file }
  }

  it('a cold random 4 KiB read after open costs at most 3 requests; into a new object 2, into one read before 1', async () => {
    const { store, file } = await opened()
    const offsets = [37 * MiB + 12345, 5 * MiB + 7, 61 * MiB, 5 * MiB + 64 * KiB, 20 * MiB + 4095, 63 * MiB + 5]
    const counts: number[] = []
    for (const at of offsets) {
      const before = store.totalRequests
      const got = await file.read(at, 4 * KiB)
      assert.deepEqual(Buffer.from(got), want.subarray(at, at + 4 * KiB))
      counts.push(store.totalRequests - before)
    }
    assert.equal(store.requests.head ?? 0, 0, 'no HEAD')
    assert.ok((counts[0] as number) <= 3, `first cold read: ${counts[0]} requests`)
    for (const i of [1, 2, 4]) assert.ok((counts[i] as number) <= 2, `read ${i} into a new object: ${counts[i]}`)
    assert.equal(counts[3], 1, 'a read into an object read before costs its data GET only')
  })

  it('a sequential read coalesces: one data GET per object (≤ readGetMaxBytes) and a short first one, summaries come with the leaves', async () => {
    const counted = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const rs = createStreamSegmentReadStream({ store: counted })
    assert.ok((await drain(rs)).equals(want))
    const t = rs.timing
    assert.ok(t !== undefined)
    // One data GET per object, and one more: the stream's first GET is short (1 MiB), for
    // an early first byte.
    assert.ok(t.requests.data <= objects + 1, `${t.requests.data} data GETs for ${objects} objects`)
    assert.equal(t.requests.header, 0, 'no header-only reads')
    assert.equal(t.requests.summary, 0, 'no separate summary reads')
    assert.ok(t.requests.meta <= objects + 1, `${t.requests.meta} node GETs`)
    assert.equal(t.bytes.data, FILE)
    assert.equal(counted.requests.head ?? 0, 0, 'no HEAD')
    assert.equal(t.requests.inode, 1, 'open: one GET of the inode')
    assert.equal(t.nodeFallbacks, 0)

    const small = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const rs1 = createStreamSegmentReadStream({ store: small, readGetMaxBytes: MiB })
    assert.ok((await drain(rs1)).equals(want))
    // 1 MiB GETs of each object's data: one more where an object's data does not end on a MiB.
    const data = rs1.timing?.requests.data ?? 0
    assert.ok(data >= 64 && data <= 64 + objects, `${data} data GETs of 1 MiB for ${objects} objects`)
  })

  it('holes cost no data or summary request', async () => {
    const counted = new ThrottledStore(holes, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const rs = createStreamSegmentReadStream({ store: counted, start: 2 * MiB, end: FILE - 2 * MiB - 1 })
    const got = await drain(rs)
    assert.equal(got.length, FILE - 4 * MiB)
    assert.ok(got.equals(Buffer.alloc(got.length)))
    assert.equal(rs.timing?.requests.data, 0)
    assert.equal(rs.timing?.requests.summary, 0)
    assert.equal(rs.timing?.holeBlocks, (FILE - 4 * MiB) / 4096)
  })

  it('at most readMaxConcurrency data GETs in flight, several at once, and as many node reads beside them', async () => {
    const counted = new ThrottledStore(inner, { latencyMs: 5, bandwidth: 2000 * MiB })
    const rs = createStreamSegmentReadStream({ store: counted, readGetMaxBytes: MiB, readMaxConcurrency: 3 })
    assert.ok((await drain(rs)).equals(want))
    const reader = (rs as unknown as { reader?: Reader }).reader
    assert.ok(reader !== undefined)
    const data = reader.dataLimiter.peak
    const walk = reader.walkLimiter.peak
    assert.ok(data <= 3, `data peak ${data}`)
    assert.ok(data >= 2, `data peak ${data}: no read-ahead`)
    assert.ok(walk >= 1 && walk <= 3, `walk peak ${walk}`)
    // Every GET after the open goes through one of the two limiters.
    assert.ok(counted.peakInFlight <= 6, `peak ${counted.peakInFlight}`)
  })

  it('a warm re-read costs data GETs only; the node cache serves the walk', async () => {
    const { store, file } = await opened()
    await file.read(0, FILE)
    const before = { ...store.requests }
    await file.read(0, FILE)
    const gets = (store.requests.get ?? 0) - (before.get ?? 0)
    assert.ok(gets <= objects, `${gets} GETs for a warm whole-file read of ${objects} objects`)
  })
})

describe('opening a checkpoint by number, read-only', () => {
  for (const format of ['stream', 'parted'] as const) {
    it(`${format}: a HEAD of its part 0 beside a GET of inode, then one GET of its header`, async () => {
      const inner = new MemoryStore()
      const f = await SegmentFile.create(inner, { format })
      await f.write(0, pattern(0, 64 * KiB, 2))
      await f.flush()
      await f.write(0, pattern(0, 4 * KiB, 3))
      await f.flush()
      await f.close()
      const store = new ThrottledStore(inner, { latencyMs: 20, bandwidth: Number.POSITIVE_INFINITY })
      const r = await SegmentFile.open(store, { readOnly: true, cno: 1 })
      assert.deepEqual({ ...store.requests }, { head: 1, get: 2 })
      assert.equal(store.peakInFlight, 2, 'the HEAD and the GET of inode side by side')
      assert.ok(Buffer.from(await r.read(0, 64 * KiB)).equals(pattern(0, 64 * KiB, 2)))
      await r.close()
    })
  }

  // The open reads as much of part 0 as the reader's first read of it takes (its end, its
  // index nodes, the leaves below them and its summary; head first its start), and the
  // reader takes those bytes instead of GETting them again: the index read costs nothing.
  for (const [format, gets] of [
    ['stream', 4],
    ['parted', 3],
  ] as const) {
    it(`${format}: open and a cold 4 KiB read of an older checkpoint: 1 HEAD and ${gets} GETs`, async () => {
      const inner = await olderCheckpointOfMany(format)
      const at = 12 * MiB
      const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
      const r = await SegmentFile.open(store, { readOnly: true, cno: 1 })
      // The open (HEAD and inode beside each other, then part 0), the data object's leaf
      // and summary (head first, its data along), its data.
      assert.ok(Buffer.from(await r.read(at, 4 * KiB)).equals(pattern(at, 4 * KiB, 2)))
      assert.deepEqual({ ...store.requests }, { head: 1, get: gets })
      await r.close()
    })
  }
})
