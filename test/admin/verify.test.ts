/**
 * Block verification on the read path: crc32Blocks gives the CRC-32 of every block of a
 * GET (views of any offset, a short last block), and a block damaged anywhere in a data
 * GET — first, middle or last of its run — fails the read with ERR_CORRUPT naming the
 * block and both CRCs, with none of that run's bytes returned.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { inspectCheckpoint, verifyCheckpoint } from '../../lib/admin/index.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { pointerPart, pointerUnit, segmentKey, UNIT_BYTES } from '../../lib/format/index.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { crc32, crc32Blocks } from '../../lib/util/crc32.js'
import { pattern } from '../helpers/pattern.js'

const KiB = 1024
const BLOCK = 4 * KiB

describe('crc32Blocks', () => {
  it('gives the CRC-32 of each block, a short last one included, of a view at any offset', () => {
    const whole = pattern(0, 64 * KiB + 100, 7)
    for (const [from, to, bs] of [
      [0, 64 * KiB, BLOCK],
      [0, 64 * KiB + 100, BLOCK],
      [13, 13 + 40 * KiB, BLOCK],
      [100, 64 * KiB + 100, 16 * KiB],
      [5, 5, BLOCK],
    ] as const) {
      const bytes = whole.subarray(from, to)
      const n = Math.ceil(bytes.length / bs)
      const into = new Uint32Array(n + 2).fill(0xdeadbeef)
      crc32Blocks(bytes, bs, into)
      for (let i = 0; i < n; i++) {
        assert.equal(into[i], crc32(bytes.subarray(i * bs, Math.min(bytes.length, (i + 1) * bs))), `block ${i}`)
      }
      assert.deepEqual([...into.subarray(n)], [0xdeadbeef, 0xdeadbeef], 'nothing written past the blocks')
    }
    // A plain Uint8Array over part of a larger buffer.
    const ab = new ArrayBuffer(3 * BLOCK)
    const u = new Uint8Array(ab, BLOCK, 2 * BLOCK)
    u.set(pattern(0, 2 * BLOCK, 3))
    const into = new Uint32Array(2)
    crc32Blocks(u, BLOCK, into)
    assert.deepEqual([...into], [crc32(u.subarray(0, BLOCK)), crc32(u.subarray(BLOCK))])
  })

  it('refuses an output too small for the blocks', () => {
    assert.throws(() => crc32Blocks(new Uint8Array(3 * BLOCK), BLOCK, new Uint32Array(2)), RangeError)
  })
})

describe('a damaged block inside a data GET', () => {
  const SIZE = 2 * 1024 * KiB // 512 blocks
  const ref = pattern(0, SIZE, 11)

  /** A container of one file, with one byte of block `b` flipped where the map points. */
  async function damaged(b: number): Promise<MemoryStore> {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, ref)
    await f.flush()
    await f.close()
    const r = await SegmentFile.open(store, { readOnly: true })
    const [hi, lo] = await fileState(r).map.get(b)
    await r.close()
    const key = segmentKey(hi, pointerPart(lo))
    const bytes = Buffer.from(await store.get(key))
    const at = pointerUnit(lo) * UNIT_BYTES + 100
    bytes[at] = (bytes[at] as number) ^ 0x20
    await store.put(key, bytes)
    return store
  }

  // With 256 KiB GETs (64 blocks), block 256 starts a run, 300 is inside it, 319 ends it.
  for (const b of [256, 300, 319]) {
    it(`block ${b}: ERR_CORRUPT naming it and both CRCs, from the stream and from read()`, async () => {
      const store = await damaged(b)
      const chunks: Buffer[] = []
      const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: 256 * KiB })
      const err = await (async () => {
        for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
      })().then(
        () => undefined,
        (e: unknown) => e,
      )
      assert.ok(err instanceof StreamSegmentError, `the stream ended without an error (${String(err)})`)
      assert.equal(err.code, 'ERR_CORRUPT')
      assert.match(
        err.message,
        new RegExp(`block ${b} at offset \\d+ has CRC-32 0x[0-9a-f]{8}, the summary says 0x[0-9a-f]{8}`),
      )
      const got = Buffer.concat(chunks)
      assert.ok(got.length <= b * BLOCK, `${got.length} bytes returned, the damaged block starts at ${b * BLOCK}`)
      assert.ok(got.equals(ref.subarray(0, got.length)), 'what was returned is the file')

      const f = await SegmentFile.open(store, { readOnly: true })
      await assert.rejects(f.read(0, SIZE), (e: unknown) => StreamSegmentError.is(e, 'ERR_CORRUPT'))
      // The blocks before the damaged GET still read.
      assert.ok(Buffer.from(await f.read(0, 256 * BLOCK)).equals(ref.subarray(0, 256 * BLOCK)))
      await f.close()
    })
  }
})

describe('verifyCheckpoint, inspectCheckpoint and abandoned claims', () => {
  /** A checkpoint, then the empty claim an upload given up leaves under its number (part 7). */
  async function withAbandonedClaim(): Promise<{ store: MemoryStore; cno: number }> {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 64 * 1024, 1))
    const { cno } = await f.flush()
    await f.close()
    await store.put(segmentKey(cno, 7), new Uint8Array(0))
    return { store, cno }
  }

  it('verify: an empty claim left by a multipart upload that never completed is not a corrupt part; a non-empty stray is', async () => {
    const { store, cno } = await withAbandonedClaim()
    const clean = await verifyCheckpoint(store)
    assert.deepEqual(clean.problems, [])
    assert.equal(clean.placeholders, 1)
    await store.put(segmentKey(cno, 8), new Uint8Array(300))
    const dirty = await verifyCheckpoint(store)
    assert.deepEqual(
      dirty.problems.map((p) => [p.code, p.what, p.where.split(' ')[0]]),
      [['ERR_CORRUPT', 'header', segmentKey(cno, 8)]],
    )
  })

  it('inspect: an empty claim left by a multipart upload that never completed is listed as one, not a problem; a non-empty stray is', async () => {
    const { store, cno } = await withAbandonedClaim()
    const clean = await inspectCheckpoint(store)
    assert.deepEqual(clean.problems, [])
    const claim = clean.objects.find((o) => o.key === segmentKey(cno, 7))
    assert.deepEqual([claim?.placeholder, claim?.size, claim?.error], [true, 0, undefined])
    await store.put(segmentKey(cno, 8), new Uint8Array(300))
    const dirty = await inspectCheckpoint(store)
    assert.deepEqual(
      dirty.problems.map((p) => [p.code, p.what, p.where.split(' ')[0]]),
      [['ERR_CORRUPT', 'header', segmentKey(cno, 8)]],
    )
  })
})

describe('verifyCheckpoint on the directory store', () => {
  it('checks the data slots of 64 KiB GET pieces: a flipped byte deep in an object names its slot, and only it', async () => {
    const store = new DirectoryStore(mkdtempSync(join(tmpdir(), 'ss-verify-')))
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 2 * 1024 * KiB, 5)) // 512 blocks, 32 GET pieces
    const { cno } = await f.flush()
    await f.close()
    const clean = await verifyCheckpoint(store)
    assert.deepEqual(clean.problems, [])
    assert.equal(clean.slots, 512)
    const key = segmentKey(cno, 0)
    const path = join(store.root, key)
    const bytes = readFileSync(path)
    // Block 301 of the file is data slot 301 (one object, written front to back).
    bytes[301 * BLOCK + 4000] = (bytes[301 * BLOCK + 4000] as number) ^ 0x01
    writeFileSync(path, bytes)
    const dirty = await verifyCheckpoint(store)
    assert.deepEqual(
      dirty.problems.map((p) => [p.code, p.what, p.where]),
      [['ERR_CORRUPT', 'block', `${key} byte ${301 * BLOCK}`]],
    )
    assert.match(dirty.problems[0]?.message ?? '', /data slot 301 \(block 301, live\)/)
  })
})
