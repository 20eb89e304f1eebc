/**
 * Requests of cold reads, counted on a wrapped store (never timed):
 * - a cold 4 KiB read after open (a fresh handle per read) costs at most 3 requests, in
 *   every layout: one object, many objects (leaves written with the object after their
 *   data), a deep map (TestHooks maxNodeEntries: many index levels in part 0);
 * - a sequential read stream starts its first data GET after the few node reads on the
 *   way to the first leaf, long before the map under the rest of the range is walked.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { decodeHeader, HEADER_BYTES, objectLayout } from '../../lib/format/header.js'
import { parseKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings, TestHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const KiB = 1024
const MiB = 1024 * KiB

interface Layout {
  name: string
  size: number
  settings: Partial<Settings> & TestHooks
  /** Objects the layout must make at least. */
  minObjects: number
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
    settings: { maxNodeEntries: 4, dataCacheDirtyMaxBytesThreshold: MiB, segmentBufferSize: 2 * MiB },
    minObjects: 4,
  },
]

async function build(store: ObjectStore, layout: Layout): Promise<{ want: Buffer; objects: number }> {
  const f = await SegmentFile.create(store, layout.settings)
  const want = Buffer.alloc(layout.size)
  for (let at = 0; at < layout.size; at += MiB) {
    const b = pattern(at, MiB, 5)
    b.copy(want, at)
    await f.write(at, b)
  }
  const { objects } = await f.flush()
  await f.close()
  return { want, objects }
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
      const counts: number[] = []
      // Block-aligned reads, and unaligned ones inside a block's object (a 4 KiB read that
      // straddles two objects needs both objects' data).
      const offsets: number[] = []
      for (let b = 0; b < blocks; b += stride) offsets.push(b * 4096, b * 4096 + 100)
      for (const at of offsets) {
        const length = at % 4096 === 0 ? 4096 : 4096 - 200
        const f = await SegmentFile.open(store, { readOnly: true })
        const before = store.totalRequests
        const got = await f.read(at, length)
        counts.push(store.totalRequests - before)
        assert.ok(Buffer.from(got).equals(want.subarray(at, at + length)), `bytes at ${at}`)
        await f.close()
      }
      const max = Math.max(...counts)
      const mean = counts.reduce((a, b) => a + b, 0) / counts.length
      assert.ok(max <= 3, `max ${max} requests (mean ${mean.toFixed(2)}) over ${counts.length} cold reads`)
      assert.equal(store.requests.head ?? 0, 0, 'no HEAD')
    })
  }

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
    const order: Array<'data' | 'meta'> = []
    const logged = new Proxy(inner, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target)
        if (prop !== 'get') return typeof v === 'function' ? v.bind(target) : v
        return (key: string, options?: GetOptions) => {
          const end = dataEnd.get(key)
          const range = options?.range
          if (end !== undefined && range !== undefined && 'start' in range) {
            order.push(range.start < end ? 'data' : 'meta')
          }
          return target.get(key, options)
        }
      },
    })
    const rs = createStreamSegmentReadStream({ store: logged, readGetMaxBytes: MiB })
    assert.ok((await drain(rs)).equals(want))
    const firstData = order.indexOf('data')
    const metaTotal = order.filter((k) => k === 'meta').length
    assert.ok(firstData >= 0, 'data GETs')
    assert.ok(firstData <= 2, `${firstData} node reads before the first data GET (${order.slice(0, 8).join(' ')})`)
    assert.ok(metaTotal >= objects / 2, `${metaTotal} node reads in all (a leaf span per object or two)`)
    // Node reads go on after the first data GET: the map is walked as the stream needs it.
    assert.ok(order.lastIndexOf('meta') > firstData + 4, `order: ${order.join(' ')}`)
  })
})
