/**
 * The smallest node cache (`nodeCacheNodes: 16`) over a block map with many more index
 * nodes than that (TestHooks maxNodeEntries: 4, so a few MiB make a deep map): every byte
 * reads back right, by SegmentFile.read, readInto and the read stream (holes as zeros,
 * stored blocks as stored: never zeros or a false ERR_CORRUPT); a writer with that cache
 * rewrites blocks across the file, and the next checkpoint holds exactly what it wrote.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { drain } from '../helpers/assert.js'
import { copyStore } from '../helpers/containers.js'
import { fillBlocks, pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB
const BS = 4096
/** Blocks [0, HOLEY): every other one written (the others holes); [HOLEY, DENSE): all; then a hole to SIZE. */
const HOLEY = 768
const DENSE = 1536
const SIZE = (DENSE + 64) * BS
const SMALL = 16

const deep: Partial<Settings> & WithHooks = {
  ...hooks({ maxNodeEntries: 4 }),
  dataCacheDirtyMaxBytesThreshold: MiB,
  dataCacheDirtyMaxBlocksThreshold: 0,
}

/** Where the bytes differ first, for a short message (a full compare's diff would be megabytes). */
function firstDiff(got: Uint8Array, want: Uint8Array): string {
  if (got.byteLength !== want.byteLength) return `${got.byteLength} bytes, expected ${want.byteLength}`
  for (let i = 0; i < want.byteLength; i++) {
    if (got[i] !== want[i]) return `first wrong byte at ${i} (block ${Math.floor(i / BS)})`
  }
  return 'same'
}

function assertBytes(got: Uint8Array, want: Uint8Array, what: string): void {
  assert.ok(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(want), `${what}: ${firstDiff(got, want)}`)
}

describe('a node cache of 16 over a deep block map', () => {
  const store = new MemoryStore()
  const ref = Buffer.alloc(SIZE)

  before(async () => {
    const w = await SegmentFile.create(store, deep)
    const dense = ref.subarray(0, DENSE * BS)
    fillBlocks(dense, 0, 3)
    for (let b = 1; b < HOLEY; b += 2) ref.fill(0, b * BS, (b + 1) * BS)
    for (let b = 0; b < HOLEY; b += 2) await w.write(b * BS, ref.subarray(b * BS, (b + 1) * BS))
    for (let at = HOLEY * BS; at < DENSE * BS; at += 256 * KiB) {
      await w.write(at, ref.subarray(at, Math.min(DENSE * BS, at + 256 * KiB)))
    }
    await w.truncate(SIZE)
    await w.flush()
    await w.close()
  })

  it('SegmentFile.read and readInto read every byte right', async () => {
    const r = await SegmentFile.open(store, { readOnly: true, nodeCacheNodes: SMALL })
    try {
      assertBytes(await r.read(0, SIZE), ref, 'one read of the whole file')
      for (let at = 0; at < SIZE; at += 256 * KiB) {
        const n = Math.min(256 * KiB, SIZE - at)
        assertBytes(await r.read(at, n), ref.subarray(at, at + n), `read at ${at}`)
      }
      const into = Buffer.alloc(SIZE, 0xee)
      assert.equal(await r.readInto(0, into), SIZE)
      assertBytes(into, ref, 'readInto of the whole file')
      const part = Buffer.alloc(3 * MiB + 5, 0xee)
      assert.equal(await r.readInto(123, part), part.length)
      assertBytes(part, ref.subarray(123, 123 + part.length), 'readInto at 123')
    } finally {
      await r.close()
    }
  })

  it('a reader whose walk cannot keep its leaves loads them again, and reads right', async () => {
    const r = await SegmentFile.open(store, { readOnly: true, nodeCacheNodes: SMALL })
    try {
      const reader = new Reader(fileState(r), { readGetMaxBytes: MiB, readMaxConcurrency: 2 })
      assertBytes(await reader.read(0, SIZE), ref, 'Reader.read of the whole file')
      assert.ok(reader.timing.nodeFallbacks > 0, 'the plan had to load leaves the walk had loaded')
    } finally {
      await r.close()
    }
  })

  it('the read stream reads every byte right', async () => {
    // The stream opens its own file, with the default cache: open it with the small one.
    const open = SegmentFile.open
    SegmentFile.open = (s, options) => open.call(SegmentFile, s, { ...options, nodeCacheNodes: SMALL })
    try {
      for (const readGetMaxBytes of [64 * KiB, 16 * MiB]) {
        const rs = createStreamSegmentReadStream({ store, readGetMaxBytes, readAheadBytes: 4 * readGetMaxBytes })
        assertBytes(await drain(rs), ref, `read stream, readGetMaxBytes ${readGetMaxBytes}`)
        const part = createStreamSegmentReadStream({ store, start: 1000, end: SIZE - 2000, readGetMaxBytes })
        assertBytes(await drain(part), ref.subarray(1000, SIZE - 1999), `read stream of a range, ${readGetMaxBytes}`)
      }
    } finally {
      SegmentFile.open = open
    }
  })

  it('a writer with the small cache rewrites blocks across the file', async () => {
    const mine = new MemoryStore()
    await copyStore(store, mine) // the other tests read the container as built
    const want = Buffer.from(ref)
    const w = await SegmentFile.open(mine, { ...deep, nodeCacheNodes: SMALL })
    try {
      // Whole blocks (stored ones and holes), parts of blocks (the rest read from storage), zeros.
      for (let b = 1; b < DENSE + 60; b += 37) {
        const bytes = pattern(b * BS, BS, 9)
        bytes.copy(want, b * BS)
        await w.write(b * BS, bytes)
      }
      for (let b = 2; b < DENSE + 60; b += 53) {
        const at = b * BS + 100
        const bytes = pattern(at, 1000, 11)
        bytes.copy(want, at)
        await w.write(at, bytes)
      }
      for (let b = 5; b < DENSE; b += 211) {
        want.fill(0, b * BS + 7, b * BS + 3 * BS)
        await w.writeZeroes(b * BS + 7, 3 * BS - 7)
      }
      assertBytes(await w.read(0, SIZE), want, 'the writer reads what it wrote')
      await w.flush()
    } finally {
      await w.close()
    }
    for (const nodeCacheNodes of [SMALL, 65536]) {
      const r = await SegmentFile.open(mine, { readOnly: true, nodeCacheNodes })
      try {
        assertBytes(await r.read(0, SIZE), want, `reopened with nodeCacheNodes ${nodeCacheNodes}`)
      } finally {
        await r.close()
      }
    }
  })
})
