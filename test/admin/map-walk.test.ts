/**
 * The admin tools' walk of a block map (admin/map-walk.ts) on a hostile map: a node whose
 * entry points back up at its own parent, with every CRC valid. Every tool must report it
 * and stop; `ls` shares decoded nodes between walks and gc shares walked subtrees, so
 * both must check what they take from memory against the entry that reached it.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { type MapToWalk, type MapWalk, type WalkShare, walkMap, walkMaps } from '../../lib/admin/map-walk.js'
import { nodeLocation } from '../../lib/container/nodes.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { decodeObject, encodeObject } from '../../lib/format/object.js'
import { pointerLo, pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { buildContainer, copyStore, within } from '../helpers/containers.js'
import { hooks, smallSettings } from '../helpers/small-settings.js'

/**
 * Makes the first level-1 node of checkpoint `cno`'s part 0 that a level-2 node of the same
 * object points at point (entry 0) back at that parent; returns the parent's unit.
 */
async function closeCycle(store: MemoryStore, cno: number): Promise<number> {
  const key = `${String(cno).padStart(10, '0')}.0`
  const obj = decodeObject(await store.get(key), key)
  const unitOf = (j: number) => (obj.layout.metaOffset + j * obj.layout.metaBlockSize) / UNIT_BYTES
  for (const [j, parent] of obj.nodes.entries()) {
    if (parent.level !== 2) continue
    for (let i = 0; i < parent.count; i++) {
      const lo = parent.ptrLo[i] as number
      if (parent.ptrHi[i] !== cno || pointerPart(lo) !== 0) continue
      const k = obj.nodes.findIndex((_, k) => unitOf(k) === pointerUnit(lo))
      const child = obj.nodes[k]
      if (child?.level !== 1) continue
      child.ptrLo[0] = pointerLo(0, unitOf(j))
      const { dataCount: _d, metaCount: _m, summaryCrc: _s, ...fields } = obj.header
      await store.put(key, encodeObject(fields, obj.data, obj.nodes, obj.summary))
      return unitOf(j)
    }
  }
  throw new Error(`${key}: no level-2 node pointing at a level-1 node in the same object`)
}

describe('a block map with a cycle', () => {
  const store = new MemoryStore()
  before(async () => {
    const built = new MemoryStore()
    await buildContainer(built)
    await copyStore(built, store)
    await closeCycle(store, 3)
  })

  it('verify reports the node that points back up', async () => {
    const v = await verifyCheckpoint(store)
    assert.ok(
      v.problems.some((p) => /level 2, expected 0/.test(p.message)),
      JSON.stringify(v.problems),
    )
  })

  it('ls: a node from the shared cache is checked against the entry that reached it', async () => {
    const list = await within(listCheckpoints(store), 10_000, 'listCheckpoints')
    const three = list.checkpoints.find((c) => c.cno === 3)
    assert.equal(three?.uniqueBytes, -1, 'its map could not be walked whole')
    for (const c of list.checkpoints) if (c.cno !== 3) assert.ok(c.uniqueBytes >= 0, `checkpoint ${c.cno}`)
    // What checkpoint 3's map does reach is not unique to another: each map walked alone
    // (the broken one as far as it goes), and the bytes of the keys only one of them reaches.
    const reached = new Map<number, Set<string>>()
    for (const c of list.checkpoints) {
      const { inode } = (await readObjectHeader(store, c.cno, 0)).header
      const keys = new Set((await walkMap(store, inode, [])).reached.keys())
      keys.add(`${String(c.cno).padStart(10, '0')}.0`)
      reached.set(c.cno, keys)
    }
    const sizes = new Map<string, number>()
    for await (const e of store.list('')) sizes.set(e.key, e.size)
    let shared = 0
    for (const c of list.checkpoints) {
      if (c.cno === 3) continue
      const only = [...(reached.get(c.cno) as Set<string>)].filter((k) =>
        [...reached].every(([other, keys]) => other === c.cno || !keys.has(k)),
      )
      const expected = only.reduce((n, k) => n + (sizes.get(k) ?? 0), 0)
      assert.equal(c.uniqueBytes, expected, `checkpoint ${c.cno}: the bytes of ${only.length} objects only it reaches`)
      shared += [...(reached.get(c.cno) as Set<string>)].filter((k) => reached.get(3)?.has(k)).length
    }
    assert.ok(shared > 0, 'checkpoint 3 shares objects with the others (else this proves nothing)')
  })

  it('walkMap with a shared node cache reports the cycle as a node problem', async () => {
    const nodes = new Map()
    const { inode } = (await readObjectHeader(store, 3, 0)).header
    await walkMap(store, inode, [], undefined, { nodes })
    const problems: Parameters<typeof walkMap>[2] = []
    await within(walkMap(store, inode, problems, undefined, { nodes }), 10_000, 'walkMap')
    assert.ok(
      problems.some((p) => p.what === 'node' && /level 2, expected 0/.test(p.message)),
      JSON.stringify(problems),
    )
  })

  it('gc stops on it and deletes nothing', async () => {
    const keys = async () => {
      const out: string[] = []
      for await (const e of store.list('')) out.push(e.key)
      return out.sort()
    }
    const before = await keys()
    await rejectsCode(gc(store, { graceMs: 0, dryRun: true }), 'ERR_CORRUPT', /cannot be walked whole/)
    await rejectsCode(gc(store, { graceMs: 0, keep: 3 }), 'ERR_CORRUPT', /cannot be walked whole/)
    assert.deepEqual(await keys(), before)
  })
})

/**
 * Narrows, in the newest checkpoint's part 0, the key range of an index entry pointing at
 * an older node that an older checkpoint's map reaches too, so that the node fails its
 * checks for the newest map only. Returns the older checkpoint and the node's place.
 */
async function narrowSharedEntry(
  store: MemoryStore,
  newest: number,
): Promise<{ older: number; key: string; offset: number }> {
  const key = `${String(newest).padStart(10, '0')}.0`
  const obj = decodeObject(await store.get(key), key)
  for (const parent of obj.nodes) {
    if (parent.level < 1) continue
    for (let i = 0; i + 1 < parent.count; i++) {
      const hi = parent.ptrHi[i] as number
      if (hi === 0 || hi >= newest) continue
      const at = nodeLocation(hi, parent.ptrLo[i] as number)
      for (let older = newest - 1; older >= 1; older--) {
        const { inode } = (await readObjectHeader(store, older, 0)).header
        if (!(await walkMap(store, inode, [])).reached.get(at.key)?.nodes.includes(at.offset)) continue
        // Entry i now covers one key: the node's other keys fall outside it.
        parent.keys[i + 1] = (parent.keys[i] as number) + 1
        const { dataCount: _d, metaCount: _m, summaryCrc: _s, ...fields } = obj.header
        await store.put(key, encodeObject(fields, obj.data, obj.nodes, obj.summary))
        return { older, ...at }
      }
    }
  }
  throw new Error(`${key}: no index entry pointing at an older node another checkpoint reaches`)
}

describe('a node that fails its checks for one map, shared with another map', () => {
  it('a later walk sharing `seen` walks it for its own map, not passing over it as covered', async () => {
    const store = new MemoryStore()
    await buildContainer(store, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    const { older, key, offset } = await narrowSharedEntry(store, 3)
    const seen = new Map()
    const problems: Parameters<typeof walkMap>[2] = []
    await walkMap(store, (await readObjectHeader(store, 3, 0)).header.inode, problems, undefined, { seen })
    assert.ok(
      problems.some((p) => p.where.startsWith(`${key} byte ${offset}`)),
      `the node fails for the newest map: ${JSON.stringify(problems)}`,
    )
    // gc's mark walks the maps so: what only the older map reaches under that node must be
    // reached by the older map's walk, or nothing marks it live.
    const olderProblems: Parameters<typeof walkMap>[2] = []
    const inode = (await readObjectHeader(store, older, 0)).header.inode
    const shared = await walkMap(store, inode, olderProblems, undefined, { seen })
    assert.deepEqual(olderProblems, [], 'the node checks out where the older map reaches it')
    assert.ok(shared.reached.get(key)?.nodes.includes(offset), `the older map walked ${key} byte ${offset}`)
  })

  it('walked together (walkMaps), the older map walks it too, though it passed over it at the same level', async () => {
    const store = new MemoryStore()
    await buildContainer(store, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    const { older, key, offset } = await narrowSharedEntry(store, 3)
    const [newest, old] = await mapsOf(store, [3, older])
    const walks = await walkTogether(store, [newest, old] as MapToWalk[])
    assert.ok(
      newest?.problems.some((p) => p.where.startsWith(`${key} byte ${offset}`)),
      `the node fails for the newest map: ${JSON.stringify(newest?.problems)}`,
    )
    assert.deepEqual(old?.problems, [], 'the node checks out where the older map reaches it')
    assert.ok(
      walks[1]?.some((w) => w.reached.get(key)?.nodes.includes(offset)),
      `the older map walked ${key} byte ${offset}`,
    )
  })
})

/** The maps of checkpoints `cnos`, to walk with walkMaps. */
async function mapsOf(store: MemoryStore, cnos: number[]): Promise<MapToWalk[]> {
  return await Promise.all(
    cnos.map(async (cno) => ({ inode: (await readObjectHeader(store, cno, 0)).header.inode, problems: [] })),
  )
}

/** walkMaps of `maps` with a shared `seen`: each map's walks (the first, then any further). */
async function walkTogether(store: MemoryStore, maps: MapToWalk[], share: WalkShare = {}): Promise<MapWalk[][]> {
  const walks: MapWalk[][] = maps.map(() => [])
  await walkMaps(store, maps, undefined, { seen: new Map(), ...share }, (i, walk, again) => {
    assert.equal(again, walks[i]?.length !== 0, 'told a further walk as such')
    walks[i]?.push(walk)
  })
  return walks
}

/** Every node pointer and data pointer a map's walks reached, as "key node|data offset" strings. */
function reachedPointers(walks: readonly MapWalk[]): Set<string> {
  const out = new Set<string>()
  for (const w of walks) {
    for (const [key, r] of w.reached) {
      for (const at of r.nodes) out.add(`${key} node ${at}`)
      for (let i = 0; i < r.dataAt.length; i++) out.add(`${key} data ${r.dataAt.get(i)}`)
    }
  }
  return out
}

describe('walkMaps: a leaf pointing into an object gone gives back the claims above it', () => {
  let store: MemoryStore
  let alone: Set<string>
  let passedOver: Set<string>
  before(async () => {
    store = new MemoryStore()
    await buildContainer(store, { ...smallSettings, ...hooks({ maxNodeEntries: 4 }) })
    const [, older] = await mapsOf(store, [3, 2])
    alone = reachedPointers([await walkMap(store, (older as MapToWalk).inode, [])])
    const walks = await walkTogether(store, await mapsOf(store, [3, 2]))
    assert.equal(walks[1]?.length, 1, 'nothing given back, the older map walks once')
    const first = reachedPointers(walks[1] ?? [])
    passedOver = new Set([...alone].filter((p) => !first.has(p)))
  })

  it('with nothing gone, the older map passes over what the newest walked', () => {
    assert.ok(passedOver.size > 0, `${alone.size} pointers reached alone, all walked together too`)
  })

  it('an object gone under what it passed over: the older map walks again from there, and only there', async () => {
    // A data object the older map reaches only through nodes the newest claimed first.
    const key = [...passedOver].find((p) => p.includes(' data '))?.split(' ')[0]
    assert.ok(key !== undefined, `a data pointer among ${[...passedOver].join(', ')}`)
    const maps = await mapsOf(store, [3, 2])
    const walks = await walkTogether(store, maps, { gone: (k) => k === key })
    assert.equal(walks[1]?.length, 2, 'the older map walked again')
    assert.ok(walks[1]?.[1]?.reached.has(key), `its further walk reached ${key}`)
    const again = reachedPointers(walks[1]?.slice(1) ?? [])
    assert.ok(
      [...again].every((p) => passedOver.has(p)),
      'it walked again only what it had passed over',
    )
    assert.ok(again.size < passedOver.size, `${again.size} of ${passedOver.size}: not all it passed over`)
    assert.deepEqual(
      maps.map((m) => m.problems),
      [[], []],
      'an object gone is no problem of the walk',
    )
  })
})
