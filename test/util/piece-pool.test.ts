/**
 * The pool of 64 KiB GET pieces: what is given back is read into again, and nothing is
 * read into while a holder can still see it; a read stream's consumer keeps chunks that
 * stay as they were while later reads reuse the pieces under them (directory store here;
 * test/read/s3-read.test.ts does the same on radosgw).
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { createStreamSegmentReadStream, handOverNext } from '../../lib/streams/read-stream.js'
import {
  dropPieces,
  givePieces,
  isLentPiece,
  lendPieces,
  PIECE_BYTES,
  pieceStats,
  returnPieces,
  takePiece,
} from '../../lib/util/piece-pool.js'
import { pattern } from '../helpers/pattern.js'

const MiB = 1024 * 1024

describe('piece pool', () => {
  it('a piece lent and given back is read into again; once only', () => {
    dropPieces()
    const a = takePiece()
    assert.equal(a.byteLength, PIECE_BYTES)
    assert.equal(isLentPiece(a), false)
    lendPieces([a])
    assert.equal(isLentPiece(a), true)
    assert.equal(isLentPiece(a.subarray(1)), false, 'a part of it')
    givePieces([a.subarray(0)]) // any view of the whole piece
    assert.equal(isLentPiece(a), false)
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    givePieces([a]) // given twice: the loan ended with the first
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    assert.equal(takePiece().buffer, a.buffer)
    assert.notEqual(takePiece().buffer, a.buffer, 'kept once')
  })

  it('a piece returned twice (a store failing, a caller giving back) is kept once: never taken by two reads', () => {
    dropPieces()
    const a = takePiece()
    returnPieces([a])
    returnPieces([a, a.subarray(0)])
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    const first = takePiece()
    assert.equal(first.buffer, a.buffer)
    assert.notEqual(takePiece().buffer, a.buffer, 'a second read gets memory of its own')
    // Taken again, it may be returned again.
    returnPieces([first])
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    // Lent, then given back, then returned by a store's failure path: kept once.
    const b = takePiece()
    assert.equal(pieceStats().keptBytes, 0)
    lendPieces([b])
    givePieces([b])
    returnPieces([b])
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    dropPieces()
  })

  it('ignores pieces not lent, views of part of a piece, and memory not made here', () => {
    dropPieces()
    const notLent = takePiece() // a `get` answered by one piece: its caller keeps it
    givePieces([notLent])
    const part = takePiece()
    lendPieces([part])
    givePieces([part.subarray(0, PIECE_BYTES - 1), part.subarray(1)])
    const foreign = Buffer.allocUnsafeSlow(PIECE_BYTES)
    lendPieces([foreign])
    givePieces([foreign])
    assert.equal(pieceStats().keptBytes, 0)
    // The piece seen only in part is still lent: given back whole later, it is kept.
    givePieces([part])
    assert.equal(pieceStats().keptBytes, PIECE_BYTES)
    dropPieces()
  })

  it('keeps at most 128 MiB', () => {
    dropPieces()
    const many = Array.from({ length: 2100 }, () => takePiece())
    lendPieces(many)
    givePieces(many)
    assert.equal(pieceStats().keptBytes, 128 * MiB)
    dropPieces()
    assert.equal(pieceStats().keptBytes, 0)
  })
})

/** Every chunk handOverNext gives for `views`, in order: what a read stream pushes for a GET. */
function handOver(views: readonly Uint8Array[]): Uint8Array[] {
  const out: Uint8Array[] = []
  for (let i = 0; i < views.length; ) {
    const { chunk, end } = handOverNext(views, i)
    assert.ok(end > i, 'each chunk holds at least one view')
    out.push(chunk)
    i = end
  }
  return out
}

describe('handOverNext: what a read stream pushes for a GET', () => {
  it('copies runs of lent pieces four to a buffer, and passes anything else as it is', () => {
    dropPieces()
    const lent = Array.from({ length: 7 }, (_, i) => takePiece().fill(i + 1))
    lendPieces(lent)
    const part = (lent[6] as Buffer).subarray(0, 100) // a body's last piece, filled in part
    const foreign = Buffer.from('not a piece')
    const views = [...lent.slice(0, 5), foreign, lent[5] as Buffer, part]
    const out = handOver(views)
    assert.deepEqual(
      out.map((b) => b.byteLength),
      [4 * PIECE_BYTES, PIECE_BYTES, foreign.byteLength, PIECE_BYTES, 100],
    )
    assert.equal(out[2], foreign, 'not a lent piece: pushed as it is')
    assert.equal(out[4], part, 'part of a piece: never given back, so pushed as it is')
    assert.ok(Buffer.concat(out).equals(Buffer.concat(views)))
    for (const i of [0, 1, 3]) {
      const b = out[i] as Uint8Array
      assert.equal(b.buffer.byteLength, b.byteLength, `copy ${i} is over memory of its own`)
      assert.ok(lent.every((p) => p.buffer !== b.buffer))
    }
    const before = Buffer.concat(out)
    givePieces(views)
    for (const p of lent.slice(0, 6)) p.fill(0) // read into again
    assert.ok(Buffer.concat(out).equals(before), 'the copies stay as they were')
    assert.equal((out[0] as Uint8Array)[3 * PIECE_BYTES], 4)
    dropPieces()
  })
})

describe('a read stream over pooled pieces', () => {
  const dirs: string[] = []
  after(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true })
  })

  async function container(seed: number, bytes: number): Promise<DirectoryStore> {
    const dir = await mkdtemp(join(tmpdir(), 'ss-pieces-'))
    dirs.push(dir)
    const store = new DirectoryStore(dir)
    const f = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 2 * MiB })
    const data = pattern(0, bytes, seed)
    for (let at = 0; at < bytes; at += MiB) await f.write(at, data.subarray(at, at + MiB))
    assert.ok((await f.flush()).objects >= 3)
    await f.close()
    return store
  }

  it("hands out chunks of the consumer's own: kept ones stay as they were while later reads reuse the pieces", async () => {
    dropPieces()
    const size = 6 * MiB + 12_345
    const a = await container(1, size)
    const b = await container(2, size)
    const kept: Uint8Array[] = []
    for await (const c of createStreamSegmentReadStream({ store: a, readGetMaxBytes: MiB })) kept.push(c as Uint8Array)
    assert.ok(pieceStats().keptBytes >= 4 * MiB, `${pieceStats().keptBytes} bytes given back`)
    // A GET's whole pieces came as copies of at most four of them, each over memory of its
    // own; the part of a piece that ends a body, as it was (it is never read into again).
    for (const c of kept) {
      if (c.buffer.byteLength !== c.byteLength) assert.ok(c.byteLength < PIECE_BYTES, `a view of ${c.byteLength} bytes`)
      else assert.ok(c.byteLength <= 4 * PIECE_BYTES, `a chunk of ${c.byteLength} bytes`)
    }
    assert.ok(kept.filter((c) => c.byteLength === 4 * PIECE_BYTES).length >= 20, 'most chunks are four pieces')
    const before = pieceStats().reused
    const other: Uint8Array[] = []
    for await (const c of createStreamSegmentReadStream({ store: b, readGetMaxBytes: MiB })) other.push(c as Uint8Array)
    assert.ok(pieceStats().reused - before >= 64, `${pieceStats().reused - before} pieces read into again`)
    assert.ok(Buffer.concat(kept).equals(pattern(0, size, 1)), 'the first read, kept while the second ran')
    assert.ok(Buffer.concat(other).equals(pattern(0, size, 2)))
    // SegmentFile.read copies out and gives the pieces back too.
    const r = await SegmentFile.open(a, { readOnly: true })
    const at = 2 * MiB + 100
    const got = await r.read(at, 3 * MiB)
    assert.ok(Buffer.from(got).equals(pattern(at, 3 * MiB, 1)))
    await r.close()
    assert.ok(Buffer.concat(kept).equals(pattern(0, size, 1)), 'still, after a SegmentFile.read')
    dropPieces()
  })

  it("copies a GET's pieces as the consumer asks: what it has not taken stays within highWaterMark", async () => {
    dropPieces()
    const size = 12 * MiB
    const store = await container(3, size)
    const highWaterMark = 512 * 1024
    // GETs of 4 MiB (after the first, short one), so a GET holds eight times highWaterMark.
    const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: 4 * MiB, highWaterMark })
    const it = rs[Symbol.asyncIterator]()
    const got: Uint8Array[] = []
    let taken = 0
    let most = 0
    while (taken < size) {
      const { value, done } = await it.next()
      if (done) break
      got.push(value as Uint8Array)
      taken += (value as Uint8Array).byteLength
      // Stall now and then, long enough for the stream to fill its buffer and stop.
      if (got.length % 8 === 0) await new Promise((resolve) => setTimeout(resolve, 20))
      most = Math.max(most, rs.bytesRead - taken)
    }
    assert.equal(taken, size)
    assert.ok(Buffer.concat(got).equals(pattern(0, size, 3)))
    // Pushed and not taken: the stream's buffer and one chunk (4 pieces), never a GET.
    assert.ok(most <= highWaterMark + 4 * PIECE_BYTES, `${most} bytes pushed ahead of the consumer`)
    assert.ok(most >= highWaterMark / 2, `${most}: the stream did fill its buffer while the consumer stalled`)
    dropPieces()
  })
})
