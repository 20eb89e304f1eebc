/**
 * What verify, inspect, export and roll-forward must not take for a sound checkpoint: a
 * published checkpoint whose part 0 is gone (or that names a number no object has), a
 * checkpoint whose own entry (the inode object, or its part 0 when named by number) is
 * damaged or of a newer layout, an object of block-map nodes gone, and an unpublished
 * checkpoint whose new nodes point at an older node of another level or key range.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { inspectCheckpoint, verifyCheckpoint } from '../../lib/admin/index.js'
import { checkUnpublished } from '../../lib/admin/verify.js'
import { MetaRegions, readNode } from '../../lib/container/nodes.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeHeader, encodeHeader, HEADER_BYTES } from '../../lib/format/header.js'
import { decodeInodeObject, FORMAT_STREAM, INODE_KEY, type Inode, segmentKey } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { assertPrintable } from '../helpers/assert.js'
import { buildContainer, copyStore, smallSettings } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

const BS = 4096

/** Every object's size, as a listing gives them. */
async function sizes(store: ObjectStore): Promise<Map<string, { size: number }>> {
  const out = new Map<string, { size: number }>()
  for await (const e of store.list('')) out.set(e.key, { size: e.size })
  return out
}

/** Checkpoint 2 only grew the file: its map reaches nothing in its own part 0, its reads go to checkpoint 1's. */
async function grown(): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store)
  await f.write(0, pattern(0, 100_000, 1))
  await f.flush()
  await f.truncate(200_000)
  assert.equal((await f.flush()).cno, 2)
  await f.close()
  return store
}

describe('verify and inspect: the published checkpoint’s part 0 missing', () => {
  it('verify: part 0 gone is ERR_NOT_FOUND naming it; inspect reports it missing', async () => {
    const store = await grown()
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
    await store.delete(segmentKey(2, 0))
    const r = await verifyCheckpoint(store)
    assert.equal(r.cno, 2)
    assert.deepEqual(
      r.problems.map((p) => [p.code, p.what, p.where]),
      [['ERR_NOT_FOUND', 'missing', segmentKey(2, 0)]],
    )
    assert.match(r.problems[0]?.message ?? '', /0000000002\.0: no such object, but it is part 0 of checkpoint 2/)
    const i = await inspectCheckpoint(store)
    assert.deepEqual(
      i.objects.map((o) => [o.key, o.error]),
      [
        [segmentKey(1, 0), undefined],
        [segmentKey(2, 0), 'missing'],
      ],
    )
    assert.deepEqual(
      i.problems.map((p) => [p.code, p.what, p.where]),
      [['ERR_NOT_FOUND', 'missing', segmentKey(2, 0)]],
    )
  })

  it('an inode naming a checkpoint no object has: verify and inspect report its part 0 missing', async () => {
    const store = await grown()
    // Checkpoint 2 gone whole, the inode still naming it.
    for await (const e of store.list('0000000002.')) await store.delete(e.key)
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 2)
    const r = await verifyCheckpoint(store)
    assert.ok(
      r.problems.some((p) => p.code === 'ERR_NOT_FOUND' && p.where === segmentKey(2, 0)),
      JSON.stringify(r.problems),
    )
    const i = await inspectCheckpoint(store)
    assert.equal(i.objects.find((o) => o.key === segmentKey(2, 0))?.error, 'missing')
    assert.ok(i.problems.some((p) => p.code === 'ERR_NOT_FOUND' && p.where === segmentKey(2, 0)))
  })
})

describe('verify and inspect: a store URL holding control characters', () => {
  it("the problems' messages quote it escaped, as errors do; where keeps the key", async () => {
    const name = 'runs\x1b[31m\u009b\n'
    const store = new MemoryStore(name)
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 100_000, 1))
    await f.flush()
    await f.write(50_000, pattern(50_000, 10_000, 2))
    assert.equal((await f.flush()).cno, 2)
    await f.close()
    // Part 0 of the published checkpoint gone (verify's and inspect's own checks), and a
    // data block of checkpoint 1 damaged (verify's block check).
    await store.delete(segmentKey(2, 0))
    const one = Buffer.from(await store.get(segmentKey(1, 1)))
    one[10] = (one[10] as number) ^ 0xff
    await store.put(segmentKey(1, 1), one)
    const reports = [
      ['verify', (await verifyCheckpoint(store)).problems],
      ['verify 1', (await verifyCheckpoint(store, { cno: 1 })).problems],
      ['inspect', (await inspectCheckpoint(store)).problems],
    ] as const
    for (const [what, problems] of reports) {
      assert.ok(problems.length > 0, `${what}: a problem`)
      for (const p of problems) {
        assertPrintable(p.message, `${what}: ${JSON.stringify(p.message)}`)
        assert.ok(p.message.startsWith('mem://runs\\x1b[31m\\x9b\\n/'), `${what}: ${JSON.stringify(p.message)}`)
      }
    }
    assert.ok(reports[0][1].some((p) => p.where === segmentKey(2, 0)))
    assert.ok(
      reports[1][1].some((p) => p.what === 'block'),
      JSON.stringify(reports[1][1]),
    )
  })
})

describe('verify and inspect: the checkpoint’s own entry unreadable', () => {
  const pristine = new MemoryStore()
  const built = buildContainer(pristine) // checkpoints 1, 2 and 3, the last published

  /** A copy of the container with `key`'s bytes changed by `edit`. */
  async function damaged(key: string, edit: (b: Buffer) => void): Promise<MemoryStore> {
    await built
    const store = new MemoryStore()
    await copyStore(pristine, store)
    const b = Buffer.from(await store.get(key))
    edit(b)
    await store.put(key, b)
    return store
  }
  /** A byte of the header (a tail: the format is StreamSegment) flipped. */
  const flipHeader = (b: Buffer) => {
    b[b.length - 100] = (b[b.length - 100] as number) ^ 0x10
  }
  /** The header's layout version made 2 (checked before its CRC). */
  const newerHeader = (b: Buffer) => b.writeUInt16LE(2, b.length - HEADER_BYTES + 8)
  const flipInode = (b: Buffer) => {
    b[40] = (b[40] as number) ^ 0x10
  }
  const newerInode = (b: Buffer) => b.writeUInt16LE(2, 8)
  const summary = (problems: { code: string; what: string; where: string }[]) =>
    problems.map((p) => [p.code, p.what, p.where])

  for (const [label, edit, code] of [
    ['damaged', flipHeader, 'ERR_CORRUPT'],
    ['of a newer layout', newerHeader, 'ERR_UNSUPPORTED'],
  ] as const) {
    it(`part 0 of the checkpoint named by number ${label}: inspect reports it as verify does (${code}), not thrown`, async () => {
      const store = await damaged(segmentKey(2, 0), edit)
      const v = await verifyCheckpoint(store, { cno: 2 })
      assert.deepEqual(summary(v.problems), [[code, 'header', segmentKey(2, 0)]])
      const i = await inspectCheckpoint(store, { cno: 2 })
      assert.equal(i.cno, 2)
      assert.deepEqual(summary(i.problems), summary(v.problems))
      assert.equal(i.problems[0]?.message, v.problems[0]?.message)
      assert.equal(i.error, i.problems[0]?.message, 'the report says why it has nothing more')
      assert.deepEqual(i.objects, [])
      assert.equal(i.published, undefined, 'not known: the checkpoint could not be read')
      assert.equal(i.size, -1)
      // A checkpoint that does not reach it is inspected as before.
      assert.deepEqual((await inspectCheckpoint(store, { cno: 1 })).problems, [])
    })
  }

  for (const [label, edit, code] of [
    ['damaged', flipInode, 'ERR_CORRUPT'],
    ['of a newer layout', newerInode, 'ERR_UNSUPPORTED'],
  ] as const) {
    it(`the inode object ${label}: inspect of the published checkpoint reports it as verify does (${code}); by number, the inode is a problem and publication unknown`, async () => {
      const store = await damaged(INODE_KEY, edit)
      const v = await verifyCheckpoint(store)
      assert.deepEqual(summary(v.problems), [[code, 'inode', INODE_KEY]])
      const i = await inspectCheckpoint(store)
      assert.deepEqual(summary(i.problems), summary(v.problems))
      assert.equal(i.error, i.problems[0]?.message)
      assert.deepEqual([i.cno, i.objects, i.published], [0, [], undefined])
      // By number: the checkpoint is read whole, the commit point reported as verify does.
      const byNumber = await inspectCheckpoint(store, { cno: 3 })
      const vByNumber = await verifyCheckpoint(store, { cno: 3 })
      assert.deepEqual(summary(byNumber.problems), [[code, 'inode', INODE_KEY]])
      assert.deepEqual(summary(byNumber.problems), summary(vByNumber.problems))
      assert.equal(byNumber.error, undefined)
      assert.equal(byNumber.published, undefined, 'whether the inode names 3 is unknown')
      assert.ok(byNumber.objects.length > 1 && byNumber.objects.every((o) => o.error === undefined))
    })
  }

  it('what cannot start still throws, as verify does: no checkpoint to inspect', async () => {
    const store = await damaged(INODE_KEY, () => {})
    await store.delete(INODE_KEY)
    const noCheckpoint = (e: unknown) => StreamSegmentError.is(e, 'ERR_NOT_FOUND') && /give a cno/.test(e.message)
    await assert.rejects(inspectCheckpoint(store), noCheckpoint)
    await assert.rejects(verifyCheckpoint(store), noCheckpoint)
    const noNine = (e: unknown) => StreamSegmentError.is(e, 'ERR_NOT_FOUND') && /no checkpoint 9/.test(e.message)
    await assert.rejects(inspectCheckpoint(store, { cno: 9 }), noNine)
    await assert.rejects(verifyCheckpoint(store, { cno: 9 }), noNine)
    // By number it is read, and the inode reported missing by both.
    const i = await inspectCheckpoint(store, { cno: 3 })
    assert.deepEqual(summary(i.problems), [['ERR_NOT_FOUND', 'missing', INODE_KEY]])
    assert.deepEqual(summary((await verifyCheckpoint(store, { cno: 3 })).problems), summary(i.problems))
    assert.equal(i.published, false, 'no inode object: nothing is published')
  })
})

describe('verify and inspect: an object of block-map nodes gone', () => {
  it('is one problem, not one from the walk and one more from the object checks', async () => {
    const pristine = new MemoryStore()
    await buildContainer(pristine)
    const { objects } = await inspectCheckpoint(pristine)
    const holders = objects.filter((o) => o.reachedNodes > 0).map((o) => o.key)
    assert.ok(holders.length >= 3, `objects holding nodes: ${holders.join()}`)
    for (const key of holders) {
      const store = new MemoryStore()
      await copyStore(pristine, store)
      await store.delete(key)
      const v = await verifyCheckpoint(store)
      assert.deepEqual(
        v.problems.map((p) => [p.code, p.what, p.where]),
        [['ERR_NOT_FOUND', 'missing', key]],
        `${key} deleted: ${JSON.stringify(v.problems)}`,
      )
      assert.match(v.problems[0]?.message ?? '', new RegExp(`${key.replace('.', '\\.')}`))
      const i = await inspectCheckpoint(store)
      assert.deepEqual(
        i.problems.map((p) => [p.code, p.what, p.where]),
        [['ERR_NOT_FOUND', 'missing', key]],
        `${key} deleted: ${JSON.stringify(i.problems)}`,
      )
    }
  })
})

describe('roll-forward: new nodes pointing at an older node', () => {
  /**
   * Checkpoint 1: 64 blocks under leaves of 4, level-1 nodes of 16 blocks, a root of keys
   * 0, 16, 32, 48. Checkpoint 2 rewrites block 0 (a new leaf and level-1 node; root entries
   * 1..3 still point into checkpoint 1) and is left unpublished, as by a writer that
   * stopped before its inode write; `forge` edits the root in its part 0's header.
   */
  async function unpublished(forge?: (inode: Inode, store: MemoryStore) => Promise<void>): Promise<MemoryStore> {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 64 * BS, 1))
    await f.flush()
    const published = await store.get(INODE_KEY)
    await f.write(0, pattern(0, BS, 2))
    assert.equal((await f.flush()).cno, 2)
    await f.close()
    await store.put(INODE_KEY, published)
    const key = segmentKey(2, 0)
    const bytes = Buffer.from(await store.get(key))
    const at = bytes.length - HEADER_BYTES
    const h = decodeHeader(bytes.subarray(at), bytes.length, { cno: 2, part: 0, format: FORMAT_STREAM })
    assert.equal(h.inode.rootLevel, 2)
    assert.deepEqual([...h.inode.rootKeys.subarray(0, h.inode.rootCount)], [0, 16, 32, 48])
    assert.deepEqual([...h.inode.rootPtrHi.subarray(1, 4)], [1, 1, 1])
    if (forge !== undefined) {
      await forge(h.inode, store)
      encodeHeader(h, bytes, at)
      await store.put(key, bytes)
    }
    return store
  }

  const forgeries: Array<[string, (inode: Inode, store: MemoryStore) => Promise<void>, RegExp]> = [
    [
      'another key range (the node of keys 32..47 placed at 16..31)',
      async (inode) => {
        inode.rootPtrLo[1] = inode.rootPtrLo[2] as number
      },
      /is outside \[16, 32\)/,
    ],
    [
      'another level (a leaf of keys 16..19 placed where a level-1 node goes)',
      async (inode, store) => {
        const regions = new MetaRegions(store, FORMAT_STREAM)
        const node = await readNode(store, regions, 1, inode.rootPtrLo[1] as number, 4096, { level: 1, maxCno: 1 })
        inode.rootPtrLo[1] = node.ptrLo[0] as number
      },
      /level 0, expected 1/,
    ],
  ]

  it('a sound one is rolled forward (the forgeries below are what stops them)', async () => {
    const store = await unpublished()
    const inode = decodeHeader(
      (await store.get(segmentKey(2, 0))).subarray(-HEADER_BYTES),
      (await store.get(segmentKey(2, 0))).length,
      { cno: 2, part: 0, format: FORMAT_STREAM },
    ).inode
    assert.deepEqual(await checkUnpublished(store, inode, 1, await sizes(store)), [])
    const w = await SegmentFile.open(store, { ...smallSettings, rollForwardAfterMs: 0 })
    assert.equal(w.cno, 2)
    await w.close()
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 2)
  })

  for (const [name, forge, message] of forgeries) {
    it(`${name}: checkUnpublished reports the node, and the checkpoint is not published`, async () => {
      const store = await unpublished(forge)
      const bytes = await store.get(segmentKey(2, 0))
      const inode = decodeHeader(bytes.subarray(-HEADER_BYTES), bytes.length, {
        cno: 2,
        part: 0,
        format: FORMAT_STREAM,
      }).inode
      const problems = await checkUnpublished(store, inode, 1, await sizes(store))
      assert.ok(
        problems.some((p) => p.code === 'ERR_CORRUPT' && p.what === 'node' && message.test(p.message)),
        JSON.stringify(problems),
      )
      const w = await SegmentFile.open(store, { ...smallSettings, rollForwardAfterMs: 0 })
      assert.equal(w.cno, 1, 'not rolled forward')
      assert.ok(Buffer.from(await w.read(16 * BS, 4 * BS)).equals(pattern(16 * BS, 4 * BS, 1)))
      await w.close()
      assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1)
      assert.deepEqual((await verifyCheckpoint(store)).problems, [])
    })
  }
})

describe("verify: a header's container creation time (ctime), as readers judge it", () => {
  /** Checkpoint 2 grew the file only: its reads go to checkpoint 1's part 0, whose header gets `ctimeMs`. */
  async function withCtime(ctimeMs: number): Promise<MemoryStore> {
    const store = await grown()
    const key = segmentKey(1, 0)
    const bytes = Buffer.from(await store.get(key))
    const at = bytes.length - HEADER_BYTES
    const h = decodeHeader(bytes.subarray(at), bytes.length, { cno: 1, part: 0, format: FORMAT_STREAM })
    h.inode.ctimeMs = ctimeMs
    encodeHeader(h, bytes, at) // its CRC sealed again
    await store.put(key, bytes)
    return store
  }

  /** How a reader of the published checkpoint fares: undefined, or its error code. */
  async function readFails(store: MemoryStore): Promise<string | undefined> {
    const f = await SegmentFile.open(store, { readOnly: true })
    try {
      await f.read(0, f.size)
      return undefined
    } catch (err) {
      return (err as StreamSegmentError).code
    } finally {
      await f.close()
    }
  }

  it('a ctime later than the checkpoint and the clock fails readers (ERR_NOT_FOUND): verify reports it, naming the object', async () => {
    // A day ahead; and the largest a header holds, past any Date (named as a number, not a RangeError).
    for (const [ctimeMs, made] of [
      [Date.now() + 24 * 3600_000, '\\d{4}-[^,]*'],
      [Number.MAX_SAFE_INTEGER, '9007199254740991 ms \\(not a date\\)'],
    ] as const) {
      const store = await withCtime(ctimeMs)
      assert.equal(await readFails(store), 'ERR_NOT_FOUND')
      const r = await verifyCheckpoint(store)
      assert.deepEqual(
        r.problems.map((p) => [p.code, p.what, p.where]),
        [['ERR_NOT_FOUND', 'header', segmentKey(1, 0)]],
      )
      assert.match(
        r.problems[0]?.message ?? '',
        new RegExp(
          `0000000001\\.0: its header names a container made at ${made}, not this one \\(made at .*; checkpoint 2 written at .*\\): readers .* fail with ERR_NOT_FOUND`,
        ),
      )
    }
  })

  it('an earlier ctime, not the container’s, is taken by readers (a writer that lost the race to make it): verify too', async () => {
    const store = await withCtime(1)
    assert.equal(await readFails(store), undefined)
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })
})
