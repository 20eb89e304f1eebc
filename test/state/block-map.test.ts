import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { BlockMap, DIRTY_BASE, type MapNode } from '../../lib/state/block-map.js'

const noLoad = async (): Promise<never> => {
  throw new Error('nothing is stored in these tests')
}

function keysOf(n: MapNode): number[] {
  return Array.from(n.keys.subarray(0, n.count))
}

/** Checks the B+tree invariants; returns the leaves' keys in order. */
function check(map: BlockMap): number[] {
  const out: number[] = []
  const walk = (n: MapNode, lo: number, hi: number, level: number) => {
    assert.equal(n.level, level)
    const ks = keysOf(n)
    for (let i = 0; i < ks.length; i++) {
      assert.ok((ks[i] as number) >= lo && (ks[i] as number) < hi, `key ${ks[i]} outside [${lo}, ${hi})`)
      if (i > 0) assert.ok((ks[i] as number) > (ks[i - 1] as number), 'keys increase')
    }
    if (n.level === 0) {
      out.push(...ks)
      return
    }
    for (let i = 0; i < n.count; i++) {
      const c = n.children?.[i] as MapNode
      assert.equal(c.parent, n, 'parent link')
      assert.equal(c.keys[0], n.keys[i], 'index key is the first key under the child')
      if (c.dirty) assert.ok(n.dirty, 'a dirty node has dirty ancestors')
      walk(c, ks[i] as number, i + 1 < ks.length ? (ks[i + 1] as number) : hi, level - 1)
    }
  }
  walk(map.root, 0, 2 ** 32, map.root.level)
  return out
}

async function fill(map: BlockMap, keys: number[]) {
  for (const k of keys) await map.set(k, 7, k + 1)
}

describe('BlockMap', () => {
  it('sequential appends fill leaves to capacity', async () => {
    const map = new BlockMap(8, noLoad)
    const keys = Array.from({ length: 64 }, (_, i) => i)
    await fill(map, keys)
    assert.deepEqual(check(map), keys)
    const { leaves } = map.dirtyNodes()
    assert.equal(leaves.length, 8, 'appends leave every leaf full')
    for (const l of leaves) assert.equal(l.count, 8)
    for (const k of keys) assert.deepEqual(await map.get(k), [7, k + 1])
  })

  it('splits at the start, middle and end of full leaves', async () => {
    for (const extra of [0, 5, 11]) {
      const map = new BlockMap(4, noLoad)
      await fill(map, [2, 4, 6, 8, 10])
      await map.set(extra === 0 ? 1 : extra, 1, 1)
      const want = [...new Set([2, 4, 6, 8, 10, extra === 0 ? 1 : extra])].sort((a, b) => a - b)
      assert.deepEqual(check(map), want, `insert ${extra}`)
    }
  })

  it('a key below every other moves the first keys up the leftmost path', async () => {
    const map = new BlockMap(4, noLoad)
    await fill(
      map,
      Array.from({ length: 40 }, (_, i) => 100 + i),
    )
    await map.set(3, 1, 1)
    assert.equal(map.root.keys[0], 3)
    check(map)
  })

  it('sparse files: holes read as zero pointers, zeroRange clears present keys', async () => {
    const map = new BlockMap(4, noLoad)
    await fill(map, [0, 1000, 2_000_000, 4_000_000_000])
    assert.deepEqual(await map.get(500), [0, 0])
    assert.deepEqual(await map.get(4_000_000_000), [7, 4_000_000_001])
    const released: number[] = []
    await map.set(1001, 0, DIRTY_BASE + 9)
    await map.zeroRange(999, 2_000_001, (id) => released.push(id))
    assert.deepEqual(released, [9])
    assert.deepEqual(await map.get(1000), [0, 0])
    assert.deepEqual(await map.get(2_000_000), [0, 0])
    assert.deepEqual(await map.get(0), [7, 1])
    check(map)
  })

  it('truncate removes keys from the end, releasing dirty ones, and shrinks to an empty root', async () => {
    const map = new BlockMap(4, noLoad)
    const keys = Array.from({ length: 100 }, (_, i) => i * 3)
    for (const k of keys) await map.set(k, 0, DIRTY_BASE + k)
    const released: number[] = []
    await map.truncate(150, (id) => released.push(id))
    assert.deepEqual(
      check(map),
      keys.filter((k) => k < 150),
    )
    assert.deepEqual(
      released.sort((a, b) => a - b),
      keys.filter((k) => k >= 150),
    )
    await map.truncate(0, () => {})
    assert.equal(map.root.count, 0)
    assert.equal(map.root.level, 0)
    await map.set(5, 1, 1)
    assert.deepEqual(check(map), [5])
  })

  it('holds 1M blocks in typed arrays, four levels at 340 entries a node', async () => {
    const map = new BlockMap(340, noLoad)
    const n = 1 << 20
    for (let k = 0; k < n; k++) assert.ok(map.update(k, 1, k))
    assert.equal(map.height, 3)
    const { leaves, index } = map.dirtyNodes()
    assert.equal(leaves.length, Math.ceil(n / 340))
    assert.ok(index.length >= 10)
    for (const k of [0, 339, 340, 777_777, n - 1]) assert.deepEqual(await map.get(k), [1, k])
  })
})

describe('BlockMap runs', () => {
  /** A small xorshift, so a failure replays. */
  function rng(seed: number) {
    let x = seed
    return (n: number) => {
      x ^= x << 13
      x ^= x >>> 17
      x ^= x << 5
      return (x >>> 0) % n
    }
  }

  it('setRun gives what setting each key alone gives, with splits, gaps and overwrites', async () => {
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const r = rng(seed)
      const cap = 4 + r(12)
      const runs = new BlockMap(cap, noLoad)
      const single = new BlockMap(cap, noLoad)
      const want = new Map<number, number>()
      for (let op = 0; op < 60; op++) {
        // Mostly appends past the end, some rewrites and some runs into holes.
        const last = want.size === 0 ? 0 : Math.max(...want.keys()) + 1
        const key = r(4) === 0 ? r(last + 1) : last + r(3) * r(20)
        const count = 1 + r(50)
        const lo = DIRTY_BASE + op * 1000
        runs.setRun(key, count, 0, lo)
        for (let i = 0; i < count; i++) {
          await single.set(key + i, 0, lo + i)
          want.set(key + i, lo + i)
        }
        assert.deepEqual(check(runs), check(single), `seed ${seed}, op ${op}: same keys`)
      }
      for (const [k, lo] of want) assert.deepEqual(await runs.get(k), [0, lo], `seed ${seed}, key ${k}`)
      const dirty = (m: BlockMap) =>
        m.dirtyNodes().leaves.reduce((n, l) => n + l.dirtyCount, m.root.level === 0 ? m.root.dirtyCount : 0)
      assert.equal(dirty(runs), want.size, `seed ${seed}: every entry counted dirty once`)
    }
  })

  it('freshRun: present clean keys, or absent keys up to the next leaf; none over a dirty key', async () => {
    const map = new BlockMap(8, noLoad)
    for (let k = 0; k < 16; k++) await map.set(k, 5, k + 1) // stored: two full leaves
    await map.set(20, 5, 99)
    assert.equal(map.freshRun(0, 100), 8, 'the clean keys of the first leaf')
    assert.equal(map.freshRun(3, 2), 2, 'at most max')
    await map.set(4, 0, DIRTY_BASE + 1)
    assert.equal(map.freshRun(0, 100), 4, 'stops before a dirty key')
    assert.equal(map.freshRun(4, 100), 0, 'a dirty key first: none')
    assert.equal(map.freshRun(17, 100), 3, 'past a leaf: up to the next leaf’s first key')
    await map.set(22, 5, 98)
    assert.equal(map.freshRun(21, 100), 0, 'a gap inside a leaf: none')
    assert.equal(map.freshRun(23, 100), 100, 'past the last key: as many as asked')
  })
})
