import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { BlockSource } from '../../lib/state/dirty-tier.js'
import { DirtyTier } from '../../lib/state/dirty-tier.js'
import { crc32 } from '../../lib/util/crc32.js'
import { SentBlocks, takeBlocks } from '../../lib/write/object-plan.js'
import { fillBlocks } from '../helpers/pattern.js'

const BS = 4096

/** A source over `bytes` that records every read as [position, length], and every read given back. */
function recordingSource(
  bytes: Buffer,
): BlockSource & { reads: Array<[number, number]>; released: Array<[number, number]> } {
  const reads: Array<[number, number]> = []
  const released: Array<[number, number]> = []
  return {
    reads,
    released,
    async read(position, length) {
      reads.push([position, length])
      return bytes.subarray(position, position + length)
    },
    release(b) {
      released.push([b.byteOffset - bytes.byteOffset, b.byteLength])
    },
  }
}

describe('takeBlocks over blocks written by reference', () => {
  it('reads each run that lies side by side in one source once, and hashes every block', async () => {
    const a = Buffer.alloc(16 * BS)
    const b = Buffer.alloc(16 * BS)
    fillBlocks(a, 0)
    fillBlocks(b, 1 << 20)
    const sa = recordingSource(a)
    const sb = recordingSource(b)
    const tier = new DirtyTier(BS)
    // Blocks in object order: a[0..3), a[5..7) (a gap in a), b[7..9) (another source), a[7].
    const wanted: Array<[typeof sa, number]> = [
      [sa, 0],
      [sa, 1],
      [sa, 2],
      [sa, 5],
      [sa, 6],
      [sb, 7],
      [sb, 8],
      [sa, 7],
    ]
    const slots = wanted.map(([source, block]) => tier.allocRef(source, block * BS))
    const seen: Array<[number, number]> = []
    const { chunks, done } = await takeBlocks(tier, slots, 0, slots.length, (k, slot, crc) => {
      seen.push([k, crc])
      assert.equal(slot, slots[k])
    })
    assert.deepEqual([...sa.released, ...sb.released], [], 'nothing given back before done')
    done()
    done()
    // Every read given back to its source once, by done (the source may then reuse it).
    assert.deepEqual(sa.released, sa.reads)
    assert.deepEqual(sb.released, sb.reads)
    assert.deepEqual(sa.reads, [
      [0, 3 * BS],
      [5 * BS, 2 * BS],
      [7 * BS, BS],
    ])
    assert.deepEqual(sb.reads, [[7 * BS, 2 * BS]])
    const joined = Buffer.concat(chunks)
    assert.equal(joined.byteLength, wanted.length * BS)
    wanted.forEach(([source, block], k) => {
      const bytes = (source === sa ? a : b).subarray(block * BS, (block + 1) * BS)
      assert.ok(joined.subarray(k * BS, (k + 1) * BS).equals(bytes), `block ${k}`)
      assert.deepEqual(seen[k], [k, crc32(bytes)], `block ${k}'s CRC`)
    })
  })
})

describe('SentBlocks', () => {
  it('keeps every block appended, and what was set for it, as its arrays grow', () => {
    const sent = new SentBlocks(7)
    const n = 1000
    const keys = new Uint32Array(n)
    const slots = new Int32Array(n)
    for (let batch = 0; batch < 5; batch++) {
      for (let i = 0; i < n; i++) {
        keys[i] = batch * n + i + 2 ** 31 // keys past 2^31 stay exact
        slots[i] = batch * n + i
      }
      const first = sent.count
      sent.append(keys, slots, batch === 4 ? 10 : n)
      // Set as a piece is taken, before the next append may grow the arrays.
      for (let k = first; k < sent.count; k++) {
        sent.gen[k] = k + 1
        sent.crc[k] = (k * 2654435761) >>> 0
      }
    }
    assert.equal(sent.id, 7)
    assert.equal(sent.count, 4 * n + 10)
    assert.ok(sent.slot.length >= sent.count)
    for (let k = 0; k < sent.count; k++) {
      assert.equal(sent.blockIndex[k], k + 2 ** 31)
      assert.equal(sent.slot[k], k)
      assert.equal(sent.gen[k], k + 1)
      assert.equal(sent.crc[k], (k * 2654435761) >>> 0)
    }
  })
})
