/**
 * One byte flipped on the way in one GET (a transient fault) is not reported as damage:
 * the inode object, an index node span and a data run are each read once more before a
 * read says ERR_CORRUPT, as is a node a writer's write loads over stored blocks. Flipped
 * in every GET of the key, it is damage, and said so. A byte flipped in a version field
 * (the inode object's, a header's) reads as a newer layout: read once more too.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/**
 * Flips bytes in the answer to the first `times` GETs of `key` (all of them: Infinity):
 * one byte in every 4 KiB of it (each node and block of a span, whatever it holds),
 * the last byte in a shorter answer.
 */
class FlipFirstGet extends WrappedStore {
  gets = 0
  constructor(
    inner: MemoryStore,
    readonly key: string,
    public times = 1,
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const result = await run()
    if (call.op !== 'get' || call.key !== this.key) return result
    this.gets++
    if (this.gets > this.times) return result
    const bytes = Buffer.from(result as Uint8Array) // a copy: the store's own bytes stay
    const flip = (at: number) => {
      bytes[at] = (bytes[at] as number) ^ 0x20
    }
    if (bytes.length < 4096) flip(bytes.length - 1)
    for (let at = 100; at < bytes.length; at += 4096) flip(at)
    return bytes as unknown as T
  }
}

/**
 * Makes the first GET of `key` whose answer holds a version field (after one of the
 * `magics`) claim version 257: the field's high byte flipped, as a fault on the way would.
 */
class FlipVersion extends WrappedStore {
  flipped = 0
  constructor(
    inner: MemoryStore,
    readonly key: string,
    readonly magics: string[],
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const result = await run()
    if (call.op !== 'get' || call.key !== this.key || this.flipped > 0) return result
    const bytes = Buffer.from(result as Uint8Array)
    for (const magic of this.magics) {
      const at = bytes.indexOf(magic)
      if (at < 0) continue
      bytes[at + 9] = (bytes[at + 9] as number) ^ 0x01 // the version's high byte: 1 → 257
      this.flipped++
      return bytes as unknown as T
    }
    return result
  }
}

const SIZE = 200 * 1024

async function container(format: 'stream' | 'parted'): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, { ...smallSettings, format }) // 4 entries a node: a deep map
  await f.write(0, pattern(0, SIZE, 5))
  await f.flush()
  await f.close()
  return store
}

async function readAll(store: FlipFirstGet): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await f.read(0, SIZE))
  } finally {
    await f.close()
  }
}

for (const format of ['stream', 'parted'] as const) {
  describe(`${format}: a byte flipped on the way`, () => {
    for (const key of ['inode', '0000000001.0']) {
      const what = key === 'inode' ? 'the inode object' : 'part 0 (index nodes)'
      it(`in the first GET of ${what}: read again, the read is right`, async () => {
        const clean = new FlipFirstGet(await container(format), key, 0)
        assert.ok((await readAll(clean)).equals(pattern(0, SIZE, 5)))
        const store = new FlipFirstGet(await container(format), key)
        assert.ok((await readAll(store)).equals(pattern(0, SIZE, 5)))
        // Read again: the span without its summary (tail first, the summary then comes with a data run).
        assert.ok(
          store.gets > clean.gets && store.gets <= clean.gets + 2,
          `${key}: ${store.gets} GETs, ${clean.gets} without the flip`,
        )
      })

      it(`in every GET of ${what}: ERR_CORRUPT`, async () => {
        const store = new FlipFirstGet(await container(format), key, Number.POSITIVE_INFINITY)
        await assert.rejects(readAll(store), (err) => StreamSegmentError.is(err, 'ERR_CORRUPT'))
      })
    }

    const versions = [
      { key: 'inode', magics: ['SSEGINOD'], what: "the inode object's version" },
      { key: '0000000001.0', magics: ['SSEGTAIL', 'SSEGHEAD'], what: "part 0's header version" },
    ]
    for (const { key, magics, what } of versions) {
      for (const by of ['published', 'cno'] as const) {
        it(`${what} flipped in one GET, opened by ${by === 'cno' ? 'checkpoint number' : 'the inode'}: read again, the read is right`, async () => {
          const store = new FlipVersion(await container(format), key, magics)
          const f = await SegmentFile.open(store, { readOnly: true, ...(by === 'cno' && { cno: 1 }) })
          try {
            assert.ok(Buffer.from(await f.read(0, SIZE)).equals(pattern(0, SIZE, 5)))
          } finally {
            await f.close()
          }
          assert.equal(store.flipped, 1, `${key}: a GET carried the version field`)
        })
      }
    }

    it("a writer's write over stored blocks reads the nodes it loads again too", async () => {
      const store = new FlipFirstGet(await container(format), '0000000001.0', 0)
      const w = await SegmentFile.open(store, { ...smallSettings })
      try {
        store.times = store.gets + 1 // the next GET of part 0: a node the write loads
        const want = Buffer.from(pattern(0, SIZE, 5))
        want.fill(1, 100 * 1024, 104 * 1024)
        await w.write(100 * 1024, Buffer.alloc(4096, 1))
        assert.ok(store.gets > store.times, 'the write loaded a node of part 0, its first GET flipped')
        await w.flush()
        assert.ok(Buffer.from(await w.read(0, SIZE)).equals(want))
      } finally {
        await w.close()
      }
    })

    it('a writer reading the inode with its ETag reads it again too', async () => {
      const store = new FlipFirstGet(await container(format), 'inode')
      const w = await SegmentFile.open(store, { ...smallSettings })
      try {
        assert.ok(Buffer.from(await w.read(0, SIZE)).equals(pattern(0, SIZE, 5)))
        assert.equal(store.gets, 2, 'inode read twice')
      } finally {
        await w.close()
      }
    })
  })
}
