/**
 * Listing, inspecting and verifying checkpoints: states (published, complete,
 * unpublished, unknown when the inode cannot be read), abandoned attempts (parts without a part 0: listed apart, never
 * openable), every object of a checkpoint with its header fields and dead slots, and a
 * clean verify that checked every slot.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { countUniqueBytes } from '../../lib/admin/list.js'
import { walkMap } from '../../lib/admin/map-walk.js'
import { listContainer } from '../../lib/container/listing.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { StreamSegmentError } from '../../lib/errors.js'
import type { Inode } from '../../lib/format/inode.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { buildContainer, conflictLoser, copyStore } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const isCode = (code: string, re?: RegExp) => (e: unknown) =>
  StreamSegmentError.is(e) && e.code === code && (re === undefined || re.test(e.message))

describe('checkpoints', () => {
  const store = new MemoryStore()
  let refs: Map<number, Buffer>
  before(async () => {
    refs = await buildContainer(store)
  })

  it('lists every checkpoint with its size, objects and time; the published one marked', async () => {
    const list = await listCheckpoints(store)
    assert.equal(list.published, 3)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.size, c.state]),
      [...refs].map(([cno, ref]) => [cno, ref.length, cno === 3 ? 'published' : 'complete']),
    )
    for (const c of list.checkpoints) {
      assert.ok(c.objects >= 1 && c.bytes > 0 && c.timeMs > 0)
      assert.equal(c.error, undefined)
    }
    assert.deepEqual(list.abandoned, [])
  })

  it('parts without a part 0 are abandoned: listed apart, and opening them is ERR_NOT_FOUND naming the cno', async () => {
    const s = new MemoryStore()
    await copyStore(store, s)
    const part1 = await s.get('0000000003.1')
    await s.put('0000000009.1', part1)
    await s.put('0000000009.2', part1)
    await s.delete('0000000002.0')
    const list = await listCheckpoints(s)
    const parts2 = ((await listCheckpoints(store)).checkpoints[1]?.objects as number) - 1
    assert.deepEqual(
      list.abandoned.map((a) => [a.cno, a.parts]),
      [
        [2, parts2],
        [9, 2],
      ],
    )
    assert.deepEqual(
      list.checkpoints.map((c) => c.cno),
      [1, 3],
    )
    await assert.rejects(SegmentFile.open(s, { cno: 2, readOnly: true }), isCode('ERR_NOT_FOUND', /checkpoint 2/))
    await assert.rejects(SegmentFile.open(s, { cno: 9, readOnly: true }), isCode('ERR_NOT_FOUND', /checkpoint 9/))
    await assert.rejects(inspectCheckpoint(s, { cno: 2 }), isCode('ERR_NOT_FOUND', /checkpoint 2 was abandoned/))
    await assert.rejects(verifyCheckpoint(s, { cno: 9 }), isCode('ERR_NOT_FOUND', /checkpoint 9 was abandoned/))
  })

  it('the published checkpoint with no part 0 (an rm stopped part-way) is listed as published and unreadable, not left out nor abandoned', async () => {
    for (const dataParts of [true, false]) {
      const s = new MemoryStore()
      await copyStore(store, s)
      // rm deletes the part 0s first, the inode last.
      await s.delete(segmentKey(3, 0))
      if (!dataParts) for await (const e of s.list('0000000003.')) await s.delete(e.key)
      const list = await listCheckpoints(s)
      assert.equal(list.published, 3)
      assert.deepEqual(list.abandoned, [], 'the published checkpoint is no abandoned attempt')
      const three = list.checkpoints.find((c) => c.cno === 3)
      assert.deepEqual(
        three && [three.state, three.size, three.uniqueBytes],
        ['published', -1, -1],
        JSON.stringify(list.checkpoints),
      )
      assert.match(three?.error ?? '', /0000000003\.0: no such object, but the inode object names checkpoint 3/)
      assert.deepEqual(
        list.checkpoints.map((c) => c.cno),
        [1, 2, 3],
      )
    }
  })

  it('a part 0 newer than the inode is listed as unpublished', async () => {
    const s = new MemoryStore()
    await copyStore(store, s)
    const old = await SegmentFile.open(s, { cno: 2 })
    await old.write(0, Buffer.alloc(4096, 1))
    await old.flush() // publishes 4 on top of 3
    await s.put('inode', await store.get('inode')) // as if 4's publication had not happened
    const list = await listCheckpoints(s)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.state, c.baseCno, c.rollsForward]),
      [
        [1, 'complete', 0, undefined],
        [2, 'complete', 1, undefined],
        [3, 'published', 2, undefined],
        [4, 'unpublished', 3, true],
      ],
    )
  })

  it('an unpublished checkpoint built on another than the published one is never rolled forward, and says so', async () => {
    const s = new MemoryStore()
    await copyStore(store, s)
    const loser = await SegmentFile.open(s, { conflictPolicy: 'fail' })
    await loser.write(0, Buffer.alloc(4096, 1))
    const winner = await SegmentFile.open(s)
    await winner.write(0, Buffer.alloc(4096, 2))
    await winner.flush() // 4, on 3
    await assert.rejects(loser.flush(), isCode('ERR_CONFLICT')) // its part 0 (5, on 3) stays
    await loser.close()
    const list = await listCheckpoints(s)
    assert.deepEqual(
      list.checkpoints.slice(2).map((c) => [c.cno, c.state, c.baseCno, c.rollsForward]),
      [
        [3, 'complete', 2, undefined],
        [4, 'published', 3, undefined],
        [5, 'unpublished', 3, false],
      ],
    )
    // A writer opening the container leaves it as it is.
    const open = await SegmentFile.open(s, { rollForwardAfterMs: 0 })
    assert.equal(open.cno, 4)
    await open.close()
  })

  it("a conflict loser's part 0 below the published checkpoint is unpublished, never published: not complete", async () => {
    const s = new MemoryStore()
    await conflictLoser(s) // b lost with 3 (its part 0 stays), then published its view as 4
    const list = await listCheckpoints(s)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.state, c.baseCno, c.rollsForward]),
      [
        [1, 'complete', 0, undefined],
        [2, 'complete', 1, undefined],
        [3, 'unpublished', 1, false],
        [4, 'published', 2, undefined],
      ],
    )
    // A part 0 on the history gone (gc dropped 2): 4 was still built on 2, so 3 is not in the
    // history; what 2 was built on is not known, so 1 is not judged.
    await s.delete(segmentKey(2, 0))
    assert.deepEqual(
      (await listCheckpoints(s)).checkpoints.map((c) => [c.cno, c.state]),
      [
        [1, 'complete'],
        [3, 'unpublished'],
        [4, 'published'],
      ],
    )
  })

  for (const [label, edit, code] of [
    ['damaged', (b: Buffer) => b.writeUInt8((b[40] as number) ^ 0x10, 40), 'ERR_CORRUPT'],
    ['of a newer layout', (b: Buffer) => b.writeUInt16LE(2, 8), 'ERR_UNSUPPORTED'],
  ] as const) {
    it(`an inode object ${label}: which checkpoint is published is unknown, and no state claims it (${code})`, async () => {
      const s = new MemoryStore()
      await copyStore(store, s)
      const b = Buffer.from(await s.get('inode'))
      edit(b)
      await s.put('inode', b)
      const list = await listCheckpoints(s)
      assert.equal(list.published, 0)
      assert.match(list.inodeError ?? '', code === 'ERR_CORRUPT' ? /inode object: CRC/ : /layout version 2/)
      // Not 'unpublished' (never published, as a published 0 would make them): unknown.
      assert.deepEqual(
        list.checkpoints.map((c) => [c.cno, c.size, c.state, c.rollsForward, c.error]),
        [...refs].map(([cno, ref]) => [cno, ref.length, 'unknown', undefined, undefined]),
      )
    })
  }

  it('inspect: every object the map reaches plus the own parts, with header fields and slot counts', async () => {
    for (const cno of refs.keys()) {
      const r = await inspectCheckpoint(store, { cno })
      assert.equal(r.cno, cno)
      assert.equal(r.size, refs.get(cno)?.length)
      assert.equal(r.published, cno === 3)
      assert.deepEqual(r.problems, [])
      assert.ok(r.tree.height >= 2, `height ${r.tree.height}`)
      const keys = r.objects.map((o) => o.key)
      assert.ok(keys.includes(`000000000${cno}.0`))
      for (const o of r.objects) {
        assert.ok(o.header !== undefined, o.key)
        assert.equal(o.header.dataCount, o.header.summaryCount)
        assert.equal((o.liveSlots ?? 0) + (o.deadSlots ?? 0), o.header.dataCount)
        assert.equal(o.header.flags.includes('CHECKPOINT'), o.part === 0)
        assert.ok(o.own || o.reachedBlocks + o.reachedNodes > 0, `${o.key} listed but neither own nor reached`)
      }
      assert.equal(
        r.objects.reduce((n, o) => n + o.reachedBlocks, 0),
        r.tree.dataPointers,
      )
      if (cno > 1)
        assert.ok(
          r.objects.some((o) => !o.own && o.reachedBlocks > 0),
          'points into older checkpoints',
        )
    }
    const latest = await inspectCheckpoint(store)
    assert.equal(latest.cno, 3)
  })

  it('verify: a clean container has no problems, and every slot of every object was checked', async () => {
    for (const cno of [undefined, 1, 2, 3]) {
      const v = await verifyCheckpoint(store, { cno })
      assert.deepEqual(v.problems, [])
      const r = await inspectCheckpoint(store, { cno })
      assert.equal(v.objects, r.objects.length)
      assert.equal(
        v.slots,
        r.objects.reduce((n, o) => n + (o.header?.dataCount ?? 0), 0),
      )
      assert.equal(v.dataPointers, r.tree.dataPointers)
    }
  })

  it('no container: ERR_NOT_FOUND', async () => {
    const empty = new MemoryStore()
    await assert.rejects(listCheckpoints(empty), isCode('ERR_NOT_FOUND', /no container/))
    await assert.rejects(inspectCheckpoint(empty), isCode('ERR_NOT_FOUND'))
    await assert.rejects(verifyCheckpoint(empty), isCode('ERR_NOT_FOUND'))
  })
})

describe('listCheckpoints and shared nodes', () => {
  it('fetches each block-map node once for all the checkpoints that share it', async () => {
    const inner = new MemoryStore()
    const f = await SegmentFile.create(inner, smallSettings)
    await f.write(0, pattern(0, 200 * 4096, 1))
    await f.flush()
    for (let i = 1; i <= 5; i++) {
      await f.write(i * 4096 * 17, pattern(i * 4096 * 17, 4096, i + 1))
      await f.flush()
    }
    await f.close()
    const counted = new FailingStore(inner)
    const list = await listCheckpoints(counted)
    assert.equal(list.checkpoints.length, 6)
    const shared = counted.count('get')
    // The same walks, each on its own: every checkpoint fetches the nodes it shares again.
    const alone = new FailingStore(inner)
    for (const c of list.checkpoints) {
      const header = await readObjectHeader(alone, c.cno, 0)
      await walkMap(alone, header.header.inode, [])
    }
    assert.ok(shared < alone.count('get'), `${shared} GETs listing, ${alone.count('get')} walking one by one`)
    // The newest checkpoint's part 0 (its new root and path) is its alone.
    assert.ok((list.checkpoints.at(-1)?.uniqueBytes ?? 0) > 0)
  })

  it('walks each node once, not once per checkpoint that shares it, and counts what each map reaches alone', async () => {
    // A deep map (4 entries a node) and a history of one-block changes: each checkpoint
    // adds a leaf and its path, and shares every other node with the one before.
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 200 * 4096, 1))
    await f.flush()
    for (let i = 1; i <= 24; i++) {
      const at = ((i * 37) % 200) * 4096
      await f.write(at, pattern(at, 4096, i + 1))
      await f.flush()
    }
    await f.close()
    const list = await listCheckpoints(store)
    assert.equal(list.checkpoints.length, 25)
    const listing = await listContainer(store)
    const inodes = new Map<number, Inode>()
    for (const c of list.checkpoints) inodes.set(c.cno, (await readObjectHeader(store, c.cno, 0)).header.inode)
    // Every node stored is a meta block of some object: walking each once walks no more.
    let stored = 0
    for (const key of listing.sizes.keys()) {
      const [cno, part] = key.split('.').map(Number) as [number, number]
      stored += (await readObjectHeader(store, cno, part)).header.metaCount
    }
    const entries = list.checkpoints.map((c) => ({ ...c, uniqueBytes: -1 }))
    const walked = await countUniqueBytes(store, listing, entries, inodes, undefined)
    assert.ok(walked <= stored, `${walked} nodes walked for ${entries.length} checkpoints, ${stored} stored`)
    // The bytes each reaches alone, as when every map is walked whole on its own.
    const reached = new Map<number, Set<string>>()
    const by = new Map<string, number>()
    for (const c of list.checkpoints) {
      const keys = new Set((await walkMap(store, inodes.get(c.cno) as Inode, [])).reached.keys())
      keys.add(segmentKey(c.cno, 0))
      reached.set(c.cno, keys)
      for (const k of keys) by.set(k, (by.get(k) ?? 0) + 1)
    }
    for (const c of entries) {
      let alone = 0
      for (const k of reached.get(c.cno) ?? []) if (by.get(k) === 1) alone += listing.sizes.get(k) ?? 0
      assert.equal(c.uniqueBytes, alone, `checkpoint ${c.cno}`)
    }
    assert.deepEqual(
      list.checkpoints.map((c) => c.uniqueBytes),
      entries.map((c) => c.uniqueBytes),
    )
  })
})
