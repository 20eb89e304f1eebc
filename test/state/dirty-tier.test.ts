import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { DirtyTier } from '../../lib/state/dirty-tier.js'

const BS = 4096
/** Slots per 4 MiB slab at 4 KiB blocks. */
const SLAB = 1024

/** Allocates `n` slots as runs; returns the runs as [first, count]. */
function allocAll(tier: DirtyTier, n: number): Array<[number, number]> {
  const runs: Array<[number, number]> = []
  while (n > 0) {
    const first = tier.allocRun(n)
    runs.push([first, tier.lastRun])
    n -= tier.lastRun
  }
  return runs
}

describe('DirtyTier', () => {
  it('hands out a stream of slots as slab-long runs, side by side', () => {
    const tier = new DirtyTier(BS)
    assert.deepEqual(allocAll(tier, 2.5 * SLAB), [
      [0, SLAB],
      [SLAB, SLAB],
      [2 * SLAB, SLAB / 2],
    ])
    assert.equal(tier.usedBytes, 2.5 * SLAB * BS)
  })

  it('places runs the same whatever order slots were released in', () => {
    const orders: Array<(xs: number[]) => number[]> = [
      (xs) => xs,
      (xs) => [...xs].reverse(),
      (xs) => [...xs].sort((a, b) => ((a * 7919) % 1021) - ((b * 7919) % 1021)),
    ]
    const placements = orders.map((order) => {
      const tier = new DirtyTier(BS)
      allocAll(tier, 2 * SLAB)
      // Every other 64-slot stretch of the first slab is released, in this order.
      const freed: number[] = []
      for (let s = 0; s < SLAB; s++) if (Math.floor(s / 64) % 2 === 0) freed.push(s)
      for (const s of order(freed)) tier.release(s)
      return allocAll(tier, SLAB / 2)
    })
    for (const p of placements) assert.deepEqual(p, placements[0])
    // From the cursor (the end of the tier, wrapping to the start): the freed stretches, whole.
    assert.deepEqual(
      placements[0],
      Array.from({ length: 8 }, (_, i) => [i * 128, 64]),
    )
  })

  it('after objects complete out of order, a stream still gets whole runs', () => {
    const tier = new DirtyTier(BS)
    const runs = allocAll(tier, 4 * SLAB)
    // Objects of 256 slots complete in a scrambled order; every slot is freed.
    const objects = Array.from({ length: 16 }, (_, i) => i).sort((a, b) => ((a * 5) % 16) - ((b * 5) % 16))
    for (const o of objects) for (let s = o * 256 + 255; s >= o * 256; s--) tier.release(s)
    assert.equal(tier.usedBytes, 0)
    assert.equal(runs.length, 4)
    const again = allocAll(tier, 4 * SLAB)
    assert.equal(again.length, 4, `runs ${JSON.stringify(again)}`)
    for (const [, n] of again) assert.equal(n, SLAB)
  })

  it('a pinned slot is skipped until its request ends, then found again', () => {
    const tier = new DirtyTier(BS)
    allocAll(tier, SLAB)
    tier.pin(10)
    for (let s = 0; s < SLAB; s++) tier.release(s)
    assert.deepEqual(allocAll(tier, 20), [
      [0, 10],
      [11, 10],
    ])
    tier.unpin(10)
    assert.deepEqual(allocAll(tier, 5), [[21, 5]])
    assert.equal(tier.allocRun(SLAB), 26)
    assert.equal(tier.lastRun, SLAB - 26)
    assert.equal(tier.allocRun(1), 10, 'the slot unpinned, found when the cursor wraps')
    assert.equal(tier.usedBytes, SLAB * BS)
    assert.equal(tier.allocRun(1), SLAB, 'a full tier grows by a slab')
  })

  it('counts the blocks written by reference until each is freed, a pinned one once its request ends', () => {
    const tier = new DirtyTier(BS)
    const source = { read: async () => new Uint8Array(0) }
    const first = tier.allocRefRun(source, 0, 3 * SLAB)
    const n = tier.lastRun
    const one = tier.allocRef(source, 5 * SLAB * BS)
    assert.equal(tier.refBlocks, n + 1)
    assert.equal(tier.usedBytes, 0, 'references hold no bytes')
    tier.pin(first)
    for (let id = first; id < first + n; id++) tier.release(id)
    assert.equal(tier.refBlocks, 2, 'the pinned one and the single one')
    tier.unpin(first)
    tier.release(one)
    assert.equal(tier.refBlocks, 0)
  })
})
