/**
 * The block map's node cache (`maxCachedNodes`, the `nodeCacheNodes` setting) over a map
 * with more index nodes than the bound: a load ends with the path to its key in memory,
 * every key reads back what was stored, and the clean leaves kept stay within the bound.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { BlockMapNode } from '../../lib/format/node.js'
import { BlockMap, type MapNode } from '../../lib/state/block-map.js'

const KEYS = 4096
const CAPACITY = 4

/**
 * A map of KEYS keys (key k → (7, k + 1)) in nodes of CAPACITY entries, "stored" in
 * memory: a fresh map over its root, whose nodes load from there (each answer a turn of
 * the event loop later, as a network's come; or, `atOnce`, in a microtask, as the memory
 * store's do).
 */
async function build(maxCachedNodes: number, atOnce = false): Promise<{ map: BlockMap; indexNodes: number }> {
  const built = new BlockMap(CAPACITY, async () => {
    throw new Error('nothing is stored yet')
  })
  for (let k = 0; k < KEYS; k++) await built.set(k, 7, k + 1)
  // Store every node at (1, n), children before parents (so each parent's entry points at it).
  const stored = new Map<number, BlockMapNode>()
  const { leaves, index } = built.dirtyNodes()
  for (const n of [...leaves, ...index]) {
    const at = stored.size + 1
    stored.set(at, {
      level: n.level,
      count: n.count,
      cno: 1,
      keys: n.keys.slice(0, n.count),
      ptrHi: n.hi.slice(0, n.count),
      ptrLo: n.lo.slice(0, n.count),
    })
    built.setStored(n, 1, at)
  }
  const map = new BlockMap(
    CAPACITY,
    async (hi, lo, expect) => {
      if (!atOnce) await new Promise((r) => setImmediate(r))
      const n = stored.get(lo)
      assert.ok(hi === 1 && n !== undefined, `no node stored at (${hi}, ${lo})`)
      assert.equal(n.level, expect.level, `node (${hi}, ${lo}): level`)
      assert.equal(n.keys[0], expect.minKey, `node (${hi}, ${lo}): first key`)
      return n
    },
    maxCachedNodes,
  )
  const r = built.root
  map.setRoot(r.level, r.count, r.keys, r.hi, r.lo)
  return { map, indexNodes: index.length }
}

/** The loaded nodes under the root: leaves and index nodes. */
function loaded(map: BlockMap): { leaves: number; index: number } {
  let leaves = 0
  let index = 0
  const walk = (n: MapNode) => {
    for (const c of n.children ?? []) {
      if (c === undefined) continue
      if (c.level === 0) leaves++
      else {
        index++
        walk(c)
      }
    }
  }
  walk(map.root)
  return { leaves, index }
}

describe('BlockMap node cache', () => {
  it('a map with more index nodes than the bound: every load keeps its path, every key reads right', async () => {
    const { map, indexNodes } = await build(16)
    assert.ok(indexNodes > 2 * 16, `the map has ${indexNodes} index nodes, more than twice the bound`)
    // In a scattered order, so that paths come and go.
    for (let j = 0; j < KEYS; j++) {
      const k = (j * 1237) % KEYS
      const out: [number, number] = [0, 0]
      if (!map.lookup(k, out)) {
        await map.load(k)
        assert.ok(map.lookup(k, out), `block ${k}: its path is in memory once load resolves`)
      }
      assert.deepEqual(out, [7, k + 1], `block ${k}`)
      assert.ok(loaded(map).leaves <= 2 * 16, `after block ${k}: at most twice the bound in leaves`)
    }
    for (let j = 0; j < KEYS; j += 7) assert.deepEqual(await map.get(j), [7, j + 1], `get(${j})`)
    for (let j = 3; j < KEYS; j += 11) {
      const out: [number, number] = [0, 0]
      const leaf = await map.loadLookup(j, out)
      assert.deepEqual(out, [7, j + 1], `loadLookup(${j})`)
      assert.ok(leaf !== undefined && leaf.keys[leaf.search(j)] === j, `loadLookup(${j}): the leaf holding it`)
    }
    map.trimCache()
    assert.ok(loaded(map).leaves <= 16, 'a trim leaves at most the bound in leaves')
  })

  it('with the smallest bound the key just loaded stays, and set changes the right key', async () => {
    const { map } = await build(0)
    for (let k = 0; k < KEYS; k += 5) {
      await map.load(k)
      const out: [number, number] = [0, 0]
      assert.ok(map.lookup(k, out), `block ${k}: its path is in memory once load resolves`)
      assert.deepEqual(out, [7, k + 1])
    }
    for (let k = 1; k < KEYS; k += 97) await map.set(k, 9, k)
    for (let k = 0; k < KEYS; k++) assert.deepEqual(await map.get(k), k % 97 === 1 ? [9, k] : [7, k + 1], `block ${k}`)
  })

  it('loads running together (the reads of a stream and of its next window) read right', async () => {
    // Answers in microtasks: one load's attaches evict leaves the others have just loaded
    // before those resume, so a lookup after `load` may miss; `loadLookup` reads its leaf.
    const { map } = await build(16, true)
    const outs = await Promise.all(
      Array.from({ length: 256 }, async (_, j) => {
        const k = (j * 389) % KEYS
        const out: [number, number] = [0, 0]
        await map.loadLookup(k, out)
        return [k, out] as const
      }),
    )
    for (const [k, out] of outs) assert.deepEqual(out, [7, k + 1], `block ${k}`)
  })
})
