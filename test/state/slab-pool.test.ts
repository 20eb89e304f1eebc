import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { DirtyTier } from '../../lib/state/dirty-tier.js'
import { dropSlabs, giveSlabs, keptSlabBytes, takeSlab } from '../../lib/state/slab-pool.js'
import { crc32 } from '../../lib/util/crc32.js'

const BS = 4096
const SLAB_BYTES = 4 * 1024 * 1024
const SLAB = SLAB_BYTES / BS

/** The slab buffers of `tier` (through the slot → slab mapping it exposes). */
function slabsOf(tier: DirtyTier, slots: number[]): Set<Buffer> {
  return new Set(slots.map((s) => tier.slab(s)))
}

describe('slab pool', () => {
  it('hands a slab given back to the next taker of its size, and a fresh zeroed one otherwise', () => {
    dropSlabs()
    const a = takeSlab(SLAB_BYTES)
    assert.equal(a.byteLength, SLAB_BYTES)
    assert.ok(a.every((x) => x === 0))
    a.fill(7)
    giveSlabs([a])
    assert.equal(keptSlabBytes(), SLAB_BYTES)
    assert.notEqual(takeSlab(SLAB_BYTES / 2), a, 'another size is fresh')
    assert.equal(takeSlab(SLAB_BYTES), a)
    assert.equal(keptSlabBytes(), 0)
    assert.notEqual(takeSlab(SLAB_BYTES), a, 'taken once only')
  })

  it('keeps at most 128 MiB', () => {
    dropSlabs()
    giveSlabs(Array.from({ length: 40 }, () => Buffer.allocUnsafeSlow(SLAB_BYTES)))
    assert.equal(keptSlabBytes(), 128 * 1024 * 1024)
    dropSlabs()
    assert.equal(keptSlabBytes(), 0)
  })

  it("a tier's clear gives back its byte slabs but those with a pinned slot; the next tier takes them", () => {
    dropSlabs()
    const tier = new DirtyTier(BS)
    const slots: number[] = []
    for (let n = 3 * SLAB; n > 0; n -= tier.lastRun) {
      const first = tier.allocRun(n)
      for (let i = 0; i < tier.lastRun; i++) slots.push(first + i)
    }
    // Blocks written by reference and adopted bytes are not the tier's to give.
    tier.allocRef({ read: async () => new Uint8Array(BS) }, 0)
    const adopted = new Uint8Array(SLAB_BYTES)
    const a = tier.adoptRun(adopted, 0, SLAB)
    assert.equal(tier.slab(a).buffer, adopted.buffer)
    const byteSlabs = slabsOf(tier, slots)
    assert.equal(byteSlabs.size, 3)
    const pinned = tier.slab(slots[SLAB + 5] as number)
    tier.pin(slots[SLAB + 5] as number) // a request still holds the second slab
    tier.clear()
    assert.equal(keptSlabBytes(), 2 * SLAB_BYTES)

    const next = new DirtyTier(BS)
    const again: number[] = []
    for (let n = 3 * SLAB; n > 0; n -= next.lastRun) {
      const first = next.allocRun(n)
      for (let i = 0; i < next.lastRun; i++) again.push(first + i)
    }
    const reused = slabsOf(next, again)
    const back = [...byteSlabs].filter((s) => reused.has(s))
    assert.equal(back.length, 2, 'the two unpinned slabs are reused')
    assert.ok(!reused.has(pinned), 'the pinned one is not')
    assert.equal(keptSlabBytes(), 0)
    dropSlabs()
  })

  it('a slab given back by a tier of one block size hashes the blocks of the next tier, of another', () => {
    dropSlabs()
    const patterned = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255)
    const check = (tier: DirtyTier, bs: number, seed: number) => {
      const first = tier.allocRun(SLAB_BYTES / bs)
      assert.equal(tier.lastRun, SLAB_BYTES / bs)
      const bytes = patterned(SLAB_BYTES, seed)
      tier.writeRun(first, tier.lastRun, bytes, 0)
      for (const i of [0, 1, tier.lastRun - 1]) {
        const want = crc32(bytes.subarray(i * bs, (i + 1) * bs))
        assert.equal(tier.crcOf(first + i), want, `${bs}-byte block ${i}, as written`)
        tier.write(first + i, 0, patterned(bs, seed + i + 1)) // changed: computed again
        assert.equal(tier.crcOf(first + i), crc32(patterned(bs, seed + i + 1)), `${bs}-byte block ${i}, rewritten`)
      }
      return tier.slab(first)
    }
    const a = new DirtyTier(BS)
    const slab = check(a, BS, 1)
    a.clear()
    const b = new DirtyTier(2 * BS)
    assert.equal(check(b, 2 * BS, 2), slab, 'the same slab, now of 8 KiB blocks')
    b.clear()
    const c = new DirtyTier(BS)
    assert.equal(check(c, BS, 3), slab, 'and of 4 KiB blocks again')
    c.clear()
    dropSlabs()
  })
})
