/**
 * The cleaner (admin/gc.ts), retention, removeContainer, and a writer that finds the next
 * checkpoint number taken by an abandoned attempt. The model test runs random histories —
 * full rewrites, patches, truncations, writers that stop before their flush, flushes
 * interrupted before the inode (some with a gc at grace 0 run after the writer opened and
 * before it sent anything) — then gc with random retention, and checks that every kept
 * checkpoint reads back and verifies, that every object left is reachable from a kept
 * checkpoint or younger than the grace period, and that the next writer publishes what
 * the history last wrote. GC_RUNS=n runs longer.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, readdirSync, rmSync, statSync, utimesSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import fc from 'fast-check'
import { type GcProgress, gc } from '../../lib/admin/gc.js'
import { listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { removeContainer } from '../../lib/admin/remove.js'
import { main } from '../../lib/cli.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { StreamSegmentError } from '../../lib/errors.js'
import {
  decodeInodeObject,
  encodeInodeObject,
  INODE_KEY,
  type Inode,
  parseKey,
  segmentKey,
} from '../../lib/format/index.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { debugLines, rejectsCode } from '../helpers/assert.js'
import { copyStore, readPublished } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024
const MAX_FILE = 160 * KiB
const RUNS = Number(process.env.GC_RUNS ?? 60)

type Step =
  | { op: 'rewrite'; size: number; seed: number }
  | { op: 'patch'; offset: number; length: number; seed: number }
  | { op: 'truncate'; size: number }
  | { op: 'abandon'; length: number; seed: number }
  | { op: 'interrupt'; offset: number; length: number; seed: number; gcFirst: boolean }

const steps: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ op: fc.constant('rewrite' as const), size: fc.integer({ min: 1, max: MAX_FILE }), seed: fc.nat(999) }),
  fc.record({
    op: fc.constant('patch' as const),
    offset: fc.nat(MAX_FILE),
    length: fc.integer({ min: 1, max: 40 * KiB }),
    seed: fc.nat(999),
  }),
  fc.record({ op: fc.constant('truncate' as const), size: fc.nat(MAX_FILE) }),
  fc.record({ op: fc.constant('abandon' as const), length: fc.integer({ min: 1, max: 120 * KiB }), seed: fc.nat(999) }),
  fc.record({
    op: fc.constant('interrupt' as const),
    offset: fc.nat(MAX_FILE),
    length: fc.integer({ min: 1, max: 40 * KiB }),
    seed: fc.nat(999),
    gcFirst: fc.boolean(),
  }),
)

/** Sends objects ahead in small pieces, so an abandoned writer leaves parts behind. */
const settings = { ...smallSettings, streamSegmentBytes: 32 * KiB, rollForwardAfterMs: 0 }

function applyWrite(ref: Buffer, offset: number, bytes: Uint8Array): Buffer {
  const out = Buffer.alloc(Math.max(ref.length, offset + bytes.length))
  ref.copy(out)
  out.set(bytes, offset)
  return out
}

async function readAll(store: ObjectStore, cno: number): Promise<Buffer> {
  const f = await SegmentFile.open(store, { cno, readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/**
 * Plays `history` on a fresh store; returns the store, each complete checkpoint's content,
 * and the content last written (what the next writer publishes, rolling forward any
 * flush interrupted).
 */
async function play(history: Step[]): Promise<{ store: MemoryStore; content: Map<number, Buffer>; latest: Buffer }> {
  const store = new MemoryStore()
  const content = new Map<number, Buffer>()
  let ref: Buffer = Buffer.alloc(0)
  const first = await SegmentFile.create(store, settings)
  await first.write(0, pattern(0, 4 * KiB, 7))
  ref = Buffer.from(pattern(0, 4 * KiB, 7))
  content.set((await first.flush()).cno, ref)
  await first.close()
  for (const s of history) {
    if (s.op === 'abandon') {
      // A writer that sends objects ahead and stops before its flush.
      const w = await SegmentFile.open(store, settings)
      await w.write(0, pattern(0, s.length, s.seed))
      await w.settle()
      await w.close()
      continue
    }
    if (s.op === 'interrupt') {
      // A flush that stores part 0 and never replaces the inode: complete, unpublished,
      // until the next writer that opens the container rolls it forward.
      const failing = new FailingStore(store)
      const w = await SegmentFile.open(failing, settings) // rolls forward an earlier one, if any
      // A cleaner between the open, which took the number, and the first object sent: it
      // may empty a number below that one (an abandoned attempt), none above it to keep it
      // for. It keeps every checkpoint, so that the pins below may name any listed one.
      if (s.gcFirst) await gc(store, { graceMs: 0, keep: 1000 })
      failing.addRule({ ops: ['put'], key: /^inode$/, mode: 'error' })
      const bytes = pattern(s.offset, s.length, s.seed)
      await w.write(s.offset, bytes)
      await assert.rejects(w.flush())
      await w.close()
      const part0 = [...failing.calls].reverse().find((c) => /^\d{10}\.0$/.test(c.key))
      const k = part0 === undefined ? undefined : parseKey(part0.key)
      assert.ok(k?.kind === 'segment', 'part 0 was written')
      ref = applyWrite(ref, s.offset, bytes)
      content.set(k.cno, ref)
      continue
    }
    const w = await SegmentFile.open(store, settings)
    if (s.op === 'rewrite') {
      await w.truncate(0)
      ref = Buffer.from(pattern(0, s.size, s.seed))
      await w.write(0, ref)
    } else if (s.op === 'patch') {
      const bytes = pattern(s.offset, s.length, s.seed)
      await w.write(s.offset, bytes)
      ref = applyWrite(ref, s.offset, bytes)
    } else {
      await w.truncate(s.size)
      const next = Buffer.alloc(s.size)
      ref.copy(next, 0, 0, Math.min(ref.length, s.size))
      ref = next
    }
    const t = await w.flush()
    await w.close()
    content.set(t.cno, ref)
  }
  return { store, content, latest: ref }
}

describe('gc', () => {
  it(`model: random histories, then gc with random retention (${RUNS} runs)`, async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(steps, { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.nat(10), { maxLength: 2 }),
        fc.boolean(),
        async (history, keep, pins, graceZero) => {
          const { store, content, latest } = await play(history)
          const untouched = new MemoryStore()
          await copyStore(store, untouched)
          const complete = (await listCheckpoints(store)).checkpoints.map((c) => c.cno)
          const keepCnos = pins.map((i) => complete[i % complete.length] as number)
          const graceMs = graceZero ? 0 : 3_600_000
          const before = await listCheckpoints(store)
          const r = await gc(store, { keep, keepCnos, graceMs })
          assert.equal(r.stopped, undefined)
          const published = decodeInodeObject(await store.get(INODE_KEY)).cno
          assert.ok(r.kept.includes(published), 'the published checkpoint is kept')
          for (const c of keepCnos) assert.ok(r.kept.includes(c), `pinned ${c} is kept`)
          const newest = before.checkpoints.map((c) => c.cno).filter((c) => c <= published)
          for (const c of newest.slice(-keep)) assert.ok(r.kept.includes(c), `${c} is among the ${keep} newest`)
          // Every kept checkpoint reads back and verifies.
          for (const cno of r.kept) {
            const want = content.get(cno)
            assert.ok(want !== undefined, `checkpoint ${cno} has a reference`)
            assert.ok((await readAll(store, cno)).equals(want), `checkpoint ${cno} reads back`)
            assert.deepEqual((await verifyCheckpoint(store, { cno })).problems, [], `checkpoint ${cno} verifies`)
          }
          // Every object left is reachable from a kept checkpoint, or young (grace 1 hour).
          const reachable = new Set<string>()
          for (const cno of r.kept) {
            reachable.add(segmentKey(cno, 0))
            const inode = fileState(await SegmentFile.open(store, { cno, readOnly: true })).base
            for (const k of (await walkMap(store, inode, [])).reached.keys()) reachable.add(k)
          }
          // Or it is of a number below a kept checkpoint a writer rolls forward to (above
          // the published one): emptied, that number would stop the roll-forward.
          const rollsTo = Math.max(0, ...r.kept.filter((c) => c > published))
          for (const c of r.heldCnos) assert.ok(c > published && c < rollsTo, `number ${c} is held`)
          let unreachedLeft = 0
          let unreachedBytes = 0
          let heldLeft = 0
          let heldBytes = 0
          for await (const e of store.list('')) {
            if (e.key === INODE_KEY || reachable.has(e.key)) continue
            const k = parseKey(e.key)
            if (k?.kind === 'segment' && r.heldCnos.includes(k.cno)) {
              heldLeft++
              heldBytes += e.size
              continue
            }
            assert.ok(!graceZero, `${e.key} is left, unreachable, with grace 0`)
            unreachedLeft++
            unreachedBytes += e.size
          }
          // What the grace period kept is what is left unreached; the result says so.
          assert.deepEqual(
            [r.youngObjects, r.youngBytes, r.youngUploads, r.graceMs],
            [unreachedLeft, unreachedBytes, 0, graceMs],
          )
          assert.deepEqual([r.heldObjects, r.heldBytes], [heldLeft, heldBytes])
          if (graceZero) {
            const after = await listCheckpoints(store)
            // A dropped checkpoint stays listed only when a kept one reaches its part 0.
            for (const c of after.checkpoints) {
              assert.ok(
                r.kept.includes(c.cno) || reachable.has(segmentKey(c.cno, 0)) || r.heldCnos.includes(c.cno),
                `checkpoint ${c.cno} is left`,
              )
            }
            assert.equal(after.storedBytes, r.storedBytes)
          } else {
            assert.equal(r.deletedObjects, 0, 'nothing is older than an hour')
          }
          for await (const _ of store.listMultipart('')) assert.fail('a multipart upload is left open')
          // The next writer publishes what it would have published had gc not run.
          const w = await SegmentFile.open(store, settings)
          await w.close()
          const w2 = await SegmentFile.open(untouched, settings)
          await w2.close()
          const [now, without] = [await readPublished(store), await readPublished(untouched)]
          assert.equal(now.cno, without.cno, 'the next writer publishes the same checkpoint as without gc')
          assert.ok(now.bytes.equals(without.bytes), `checkpoint ${now.cno} reads back`)
          assert.ok(now.bytes.equals(latest), `checkpoint ${now.cno} holds what the history last wrote`)
        },
      ),
      {
        numRuns: RUNS,
        // Always among the runs: an abandoned attempt that a cleaner deletes after a writer
        // took the number above it, that writer's flush then interrupted before its inode.
        examples: [
          [
            [
              { op: 'rewrite', size: 8 * KiB, seed: 1 },
              { op: 'abandon', length: 120 * KiB, seed: 2 },
              { op: 'interrupt', offset: 0, length: 4 * KiB, seed: 3, gcFirst: true },
            ],
            1,
            [],
            false,
          ],
        ],
      },
    )
  })

  it('a dry run says what would go and deletes nothing', async () => {
    const { store } = await play([
      { op: 'rewrite', size: 100 * KiB, seed: 1 },
      { op: 'rewrite', size: 100 * KiB, seed: 2 },
    ])
    const keys = async () => {
      const out: string[] = []
      for await (const e of store.list('')) out.push(e.key)
      return out
    }
    const before = await keys()
    const dry = await gc(store, { graceMs: 0, dryRun: true })
    assert.ok(dry.deletedObjects > 0 && dry.deletedKeys.length === dry.deletedObjects)
    assert.deepEqual(await keys(), before)
    const wet = await gc(store, { graceMs: 0 })
    assert.deepEqual(wet.deletedKeys, dry.deletedKeys)
    assert.deepEqual((await keys()).sort(), before.filter((k) => !dry.deletedKeys.includes(k)).sort())
    // Part 0s go first: no dropped checkpoint is left openable without its data.
    const firstData = dry.deletedKeys.findIndex((k) => !k.endsWith('.0'))
    assert.ok(dry.deletedKeys.slice(firstData).every((k) => !k.endsWith('.0')))
  })

  it('reports its progress: each level of the kept maps and each map walked, then the deletions; a dry run only the walks', async () => {
    const { store } = await play([
      { op: 'rewrite', size: 100 * KiB, seed: 1 },
      { op: 'rewrite', size: 100 * KiB, seed: 2 },
      { op: 'rewrite', size: 100 * KiB, seed: 3 },
    ])
    // The nodes of the two kept maps, each shared node once.
    const shared = { seen: new Map() }
    let nodes = 0
    for (const cno of [3, 2])
      nodes += (await walkMap(store, (await readObjectHeader(store, cno, 0)).header.inode, [], undefined, shared)).nodes
    const seen: GcProgress[] = []
    await gc(store, { graceMs: 0, keep: 2, dryRun: true, onProgress: (p) => seen.push(p) })
    // Walked together, the maps end together: the levels walked before tell how far.
    const levels = seen.filter((p) => p.walkedCheckpoints === 0)
    assert.ok(levels.length >= 2, `told ${levels.length} levels before a map ended`)
    assert.ok(
      seen.every(
        (p, i) =>
          i === 0 ||
          p.walkedNodes > (seen[i - 1] as GcProgress).walkedNodes ||
          p.walkedCheckpoints > (seen[i - 1] as GcProgress).walkedCheckpoints,
      ),
      `each report says more: ${JSON.stringify(seen)}`,
    )
    assert.equal(seen.at(-1)?.walkedNodes, nodes)
    const marks = [
      ['mark', 1, 2],
      ['mark', 2, 2],
    ]
    assert.deepEqual(
      seen.filter((p) => p.walkedCheckpoints > 0).map((p) => [p.phase, p.walkedCheckpoints, p.keptCheckpoints]),
      marks,
    )
    seen.length = 0
    const r = await gc(store, { graceMs: 0, keep: 2, onProgress: (p) => seen.push(p) })
    // Part 0s go in a batch of their own, before the data parts.
    const part0s = r.deletedKeys.filter((k) => k.endsWith('.0')).length
    assert.ok(part0s > 0 && r.deletedObjects > part0s, JSON.stringify(r))
    assert.deepEqual(
      seen.filter((p) => p.walkedCheckpoints > 0).map((p) => [p.phase, p.walkedCheckpoints, p.keptCheckpoints]),
      [...marks, ['delete', 2, 2], ['delete', 2, 2], ['delete', 2, 2]],
    )
    assert.deepEqual(
      seen.filter((p) => p.phase === 'delete').map((p) => [p.deletedObjects, p.objectsToDelete]),
      [
        [0, r.deletedObjects],
        [part0s, r.deletedObjects],
        [r.deletedObjects, r.deletedObjects],
      ],
    )
    await rejectsCode(gc(store, { onProgress: 1 as never }), 'ERR_INVALID_ARGUMENT', /onProgress = "number"/)
  })

  it("a dropped checkpoint's unreadable part 0 is garbage like the rest of it; a kept one's stops gc", async () => {
    const { store, content } = await play([
      { op: 'rewrite', size: 100 * KiB, seed: 1 },
      { op: 'rewrite', size: 100 * KiB, seed: 2 },
    ])
    const last = Math.max(...content.keys())
    const damage = async (cno: number) => {
      const key = segmentKey(cno, 0)
      const bytes = Buffer.from(await store.get(key))
      bytes[bytes.length - 10] = (bytes[bytes.length - 10] as number) ^ 0xff // in its header
      await store.put(key, bytes)
    }
    await damage(1)
    const dry = await gc(store, { graceMs: 0, keep: 2, dryRun: true })
    assert.ok(dry.dropped.includes(1) && dry.deletedKeys.includes(segmentKey(1, 0)), JSON.stringify(dry))
    const r = await gc(store, { graceMs: 0 })
    assert.deepEqual(r.kept, [last])
    assert.ok(Buffer.from(await readAll(store, last)).equals(content.get(last) as Buffer))
    // A kept checkpoint that cannot be read: nothing deleted, the reason named.
    await damage(last)
    await assert.rejects(
      gc(store, { graceMs: 0 }),
      (err) =>
        StreamSegmentError.is(err, 'ERR_CORRUPT') &&
        err.message.includes(`gc: checkpoint ${last}, which is kept, cannot be read`) &&
        err.message.includes('nothing was deleted'),
    )
  })

  it('stops with nothing deleted when the inode moves to a checkpoint the mark did not see', async () => {
    const { store } = await play([
      { op: 'rewrite', size: 64 * KiB, seed: 1 },
      { op: 'rewrite', size: 64 * KiB, seed: 2 },
    ])
    // A writer publishes between the mark (its first walk reads) and the sweep.
    let published = false
    const racing = new FailingStore(store)
    const before = (await listCheckpoints(store)).storedBytes
    const origList = racing.listMultipart.bind(racing)
    racing.listMultipart = (prefix?: string, options?: { signal?: AbortSignal }) => {
      if (!published) {
        published = true
        return (async function* () {
          const w = await SegmentFile.open(store, settings)
          await w.write(0, pattern(0, 8 * KiB, 9))
          await w.flush()
          await w.close()
          yield* origList(prefix, options)
        })()
      }
      return origList(prefix, options)
    }
    const r = await gc(racing, { graceMs: 0 })
    assert.match(r.stopped ?? '', /moved to checkpoint 4/)
    assert.equal(r.deletedObjects, 0)
    assert.ok((await listCheckpoints(store)).storedBytes > before, 'nothing was deleted, the new checkpoint added')
  })

  it('refuses bad options and a place with no container, naming the value; nothing deleted', async () => {
    const { store } = await play([{ op: 'rewrite', size: 64 * KiB, seed: 1 }])
    const stored = (await listCheckpoints(store)).storedBytes
    await rejectsCode(gc(store, { keep: 0 }), 'ERR_INVALID_ARGUMENT', /keep = 0: must be an integer ≥ 1/)
    await rejectsCode(gc(store, { graceMs: -1 }), 'ERR_INVALID_ARGUMENT', /graceMs = -1/)
    await rejectsCode(gc(store, { keep: 1.5 }), 'ERR_INVALID_ARGUMENT', /keep = 1.5/)
    await rejectsCode(gc(store, { keepCnos: [0] }), 'ERR_INVALID_ARGUMENT', /keepCnos = 0/)
    // Past the last number a key can carry: no checkpoint can have it, so it is a mistake.
    for (const c of [2 ** 30, 2 ** 32, 99999999999]) {
      await rejectsCode(
        gc(store, { keepCnos: [1, c] }),
        'ERR_INVALID_ARGUMENT',
        new RegExp(`keepCnos = ${c}: must be a checkpoint number \\(1\\.\\.1073741823\\)`),
      )
    }
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, -1, '1h']) {
      for (const name of ['keep', 'keepNewerThanMs', 'graceMs']) {
        await rejectsCode(gc(store, { [name]: v }), 'ERR_INVALID_ARGUMENT', new RegExp(`gc: ${name} = `))
      }
      await rejectsCode(gc(store, { keepCnos: [v as number] }), 'ERR_INVALID_ARGUMENT', /gc: keepCnos = /)
    }
    // A bigint is shown as one (JSON cannot show it), NaN as itself.
    await rejectsCode(gc(store, { keep: 1n as unknown as number }), 'ERR_INVALID_ARGUMENT', /gc: keep = 1n: must be/)
    await rejectsCode(gc(store, { graceMs: Number.NaN }), 'ERR_INVALID_ARGUMENT', /gc: graceMs = NaN: must be/)
    await rejectsCode(gc(store, { keepCnos: [99], graceMs: 0 }), 'ERR_NOT_FOUND', /checkpoint 99, which has no part 0/)
    await rejectsCode(gc(new MemoryStore(), { graceMs: 0 }), 'ERR_NOT_FOUND', /no container here/)
    assert.equal((await listCheckpoints(store)).storedBytes, stored)
  })

  it('an inode object it cannot trust stops it before anything is deleted', async () => {
    const history: Step[] = [
      { op: 'rewrite', size: 64 * KiB, seed: 1 },
      { op: 'rewrite', size: 64 * KiB, seed: 2 },
    ]
    const keys = async (s: ObjectStore) => {
      const out: string[] = []
      for await (const e of s.list('')) out.push(e.key)
      return out.sort()
    }
    const setInode = async (s: MemoryStore, edit: (x: Inode) => void) => {
      const x = decodeInodeObject(await s.get(INODE_KEY))
      edit(x)
      await s.put(INODE_KEY, encodeInodeObject(x))
    }
    const emptyRoot = (x: Inode) => {
      x.rootLevel = 0
      x.rootCount = 0
      x.rootKeys.fill(0)
      x.rootPtrHi.fill(0)
      x.rootPtrLo.fill(0)
    }
    const cases: [string, (s: MemoryStore) => Promise<void>, RegExp][] = [
      ['cno 0', (s) => setInode(s, (x) => emptyRoot(Object.assign(x, { cno: 0 }))), /inode object: cno 0/],
      ['root emptied', (s) => setInode(s, emptyRoot), /names checkpoint \d+, but differs from the inode in its part 0/],
      [
        'a checkpoint with no part 0',
        (s) => setInode(s, (x) => Object.assign(x, { cno: 7 })),
        /names checkpoint 7, which has no part 0/,
      ],
      [
        'no inode object',
        (s) => s.delete(INODE_KEY),
        /no inode object, so no checkpoint is published and none would be kept, yet \d+ are complete \(1, 2/,
      ],
    ]
    for (const [what, damage, message] of cases) {
      const { store } = await play(history)
      await damage(store)
      const before = await keys(store)
      await rejectsCode(gc(store, { graceMs: 0, dryRun: true }), 'ERR_CORRUPT', message)
      await rejectsCode(gc(store, { graceMs: 0 }), 'ERR_CORRUPT', message)
      assert.deepEqual(await keys(store), before, what)
    }
    // Without an inode object, a checkpoint pinned by number is kept, the rest may go.
    const { store } = await play(history)
    await store.delete(INODE_KEY)
    const r = await gc(store, { graceMs: 0, keepCnos: [2] })
    assert.deepEqual(r.kept, [2])
    assert.ok((await readAll(store, 2)).length > 0)
  })

  it('never touches keys that are not segment keys, nor the inode', async () => {
    const { store } = await play([
      { op: 'rewrite', size: 64 * KiB, seed: 1 },
      { op: 'rewrite', size: 64 * KiB, seed: 2 },
    ])
    await store.put('notes.txt', new Uint8Array(10))
    await store.put('0000000001.x', new Uint8Array(10))
    await gc(store, { graceMs: 0 })
    assert.ok(await store.head('notes.txt'))
    assert.ok(await store.head('0000000001.x'))
    assert.ok(await store.head(INODE_KEY))
    let part0s = 0
    for await (const e of store.list('')) if (/^\d{10}\.0$/.test(e.key)) part0s++
    const seen: Array<[number, number]> = []
    const removed = await removeContainer(store, {
      onProgress: (p) => seen.push([p.deletedObjects, p.objectsToDelete]),
    })
    const left: string[] = []
    for await (const e of store.list('')) left.push(e.key)
    assert.deepEqual(left.sort(), ['0000000001.x', 'notes.txt'])
    // Progress: as the deletions start, after the part 0s' batch, the other segment
    // objects' batch, and the inode.
    const n = removed.deletedObjects
    assert.ok(n > part0s + 1)
    assert.deepEqual(seen, [
      [0, n],
      [part0s, n],
      [n - 1, n],
      [n, n],
    ])
  })
})

describe('retention and abandoned numbers', () => {
  it('retainCheckpoints: after each flush the cleaner keeps the newest N, in the background', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, { ...smallSettings, retainCheckpoints: 2, retainGraceMs: 0 })
    for (let i = 1; i <= 5; i++) {
      await f.write(0, pattern(0, 64 * KiB, i))
      await f.flush()
    }
    await f.close() // waits for the cleaner
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => c.cno),
      [4, 5],
    )
    assert.ok((await readAll(store, 5)).equals(pattern(0, 64 * KiB, 5)))
    assert.ok((await readAll(store, 4)).equals(pattern(0, 64 * KiB, 4)))
  })

  it("each retention run's debug line says what it deleted, left young and held for a roll-forward", async () => {
    const lines = await debugLines('stream-segment:file', async () => {
      const store = new MemoryStore()
      const f = await SegmentFile.create(store, { ...smallSettings, retainCheckpoints: 1, retainGraceMs: 0 })
      for (let i = 1; i <= 3; i++) {
        await f.write(0, pattern(0, 64 * KiB, i))
        await f.flush()
      }
      await f.close() // waits for the cleaner
    })
    const runs = lines.filter((l) => l.includes('retention on'))
    assert.ok(runs.length >= 1, lines.join('\n'))
    for (const l of runs) {
      assert.match(
        l,
        /retention on mem:\/\/\S*: kept \[ \d+ \], deleted \d+ objects \(\d+ bytes\), left \d+ younger than the grace period \(\d+ bytes\), held 0 of numbers \[\] below a checkpoint a writer rolls forward to \(0 bytes\)/,
      )
    }
    assert.ok(
      runs.some((l) => !/deleted 0 objects/.test(l)),
      `a run deleted the checkpoints before the newest: ${runs.join('\n')}`,
    )
  })

  it('retention never fails a flush: a cleaner that fails is logged, the checkpoint stands', async () => {
    const inner = new MemoryStore()
    const f = await SegmentFile.create(inner, smallSettings)
    await f.write(0, pattern(0, 8 * KiB, 1))
    await f.flush()
    await f.close()
    const store = new FailingStore(inner)
    const w = await SegmentFile.open(store, { ...smallSettings, retainCheckpoints: 1, retainGraceMs: 0 })
    store.addRule({ ops: ['list'], mode: 'error' }) // the cleaner starts with a listing
    await w.write(0, pattern(0, 8 * KiB, 2))
    const t = await w.flush()
    await w.close()
    assert.equal(t.cno, 2)
    assert.ok(store.count('list', 'failed') >= 1, 'the cleaner ran and failed')
    assert.ok((await readAll(inner, 2)).equals(pattern(0, 8 * KiB, 2)))
  })

  it('a writer skips checkpoint numbers an abandoned attempt took before it sends anything', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, settings)
    await f.write(0, pattern(0, 64 * KiB, 1))
    await f.flush()
    await f.close()
    // An interrupted writer left parts of checkpoints 2 and 3.
    const stopped = await SegmentFile.open(store, settings)
    await stopped.write(0, pattern(0, 120 * KiB, 2))
    await stopped.settle()
    await stopped.close()
    await store.put(segmentKey(3, 1), new Uint8Array(100))
    assert.ok((await listCheckpoints(store)).abandoned.some((a) => a.cno === 2))
    const w = await SegmentFile.open(store, settings)
    await w.write(0, pattern(0, 120 * KiB, 3))
    await w.settle()
    const sent: string[] = []
    for await (const e of store.list('0000000004.')) sent.push(e.key)
    assert.ok(sent.length > 0, 'objects were sent ahead under checkpoint 4')
    const t = await w.flush()
    await w.close()
    assert.equal(t.cno, 4)
    assert.equal(t.streamDeadBytes, 0, 'nothing sent ahead was lost')
    assert.ok(t.streamSentBytes > 0)
    assert.ok((await readAll(store, 4)).equals(pattern(0, 120 * KiB, 3)))
  })
})

describe('gc beside a writer opened on a checkpoint since superseded', () => {
  const HOUR = 3_600_000
  const dirs: string[] = []
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  /** A container to test in, and how to make a checkpoint's objects look older (their LastModified, which gc goes by). */
  interface Place {
    store: ObjectStore
    /** Another handle on the same container (a second writer, as another process would have). */
    other: () => ObjectStore
    age: (cno: number, ms: number) => void
    /** Runs the cleaner with its defaults (keep 1, grace 1 hour), as the API or the CLI. */
    gc: () => Promise<{ kept: number[]; dropped: number[] }>
  }
  const inMemory = (): Place => {
    const store = new MemoryStore()
    // The memory store's objects, reached past `private`, for their write times.
    const objects = (store as unknown as { bucket: { objects: Map<string, { modifiedMs: number }> } }).bucket.objects
    return {
      store,
      other: () => store,
      age: (cno, ms) => {
        for (const [key, o] of objects) {
          const k = parseKey(key)
          if (k?.kind === 'segment' && k.cno === cno) o.modifiedMs -= ms
        }
      },
      gc: () => gc(store),
    }
  }
  const inDirectory = (): Place => {
    const root = mkdtempSync(join(tmpdir(), 'ss-gc-superseded-'))
    dirs.push(root)
    const dir = join(root, 'container')
    return {
      store: new DirectoryStore(dir),
      other: () => new DirectoryStore(dir),
      age: (cno, ms) => {
        for (const name of readdirSync(dir)) {
          const k = parseKey(name)
          if (k?.kind !== 'segment' || k.cno !== cno) continue
          const at = new Date(statSync(join(dir, name)).mtimeMs - ms)
          utimesSync(join(dir, name), at, at)
        }
      },
      // The CLI's `gc <dir>`, all defaults.
      gc: async () => {
        const out: string[] = []
        const sink = (isTTY: boolean, to: string[]) =>
          ({ isTTY, write: (c: string | Uint8Array) => to.push(String(c)) > 0 }) as unknown as NodeJS.WritableStream
        const errs: string[] = []
        assert.equal(await main(['gc', dir, '--json'], sink(false, out), sink(false, errs)), 0, errs.join(''))
        return JSON.parse(out.join('')) as { kept: number[]; dropped: number[] }
      },
    }
  }

  /**
   * Checkpoint 1, written two hours ago; writer W1 opens on it (published then) and patches
   * 4 KiB without flushing; writer W2 rewrites the file and publishes checkpoint 2; the
   * cleaner runs (`clean`); W1 flushes: a conflict, retried on top of checkpoint 2 with W1's
   * whole view, which points into checkpoint 1's objects. Every checkpoint kept, and the one
   * published, must read back.
   */
  async function writerOnSuperseded(
    place: Place,
    clean: () => Promise<{ kept: number[]; dropped: number[] } | undefined>,
    w2Settings = settings,
  ): Promise<void> {
    const { store } = place
    const A = pattern(0, 100 * KiB, 1)
    const f = await SegmentFile.create(store, settings)
    await f.write(0, A)
    assert.equal((await f.flush()).cno, 1)
    await f.close()
    place.age(1, 2 * HOUR)

    const w1 = await SegmentFile.open(store, settings)
    const patch = pattern(0, 4 * KiB, 9)
    await w1.write(0, patch)
    const mine = Buffer.from(A)
    patch.copy(mine, 0)

    const w2 = await SegmentFile.open(place.other(), w2Settings)
    const B = pattern(0, 100 * KiB, 2)
    await w2.truncate(0)
    await w2.write(0, B)
    assert.equal((await w2.flush()).cno, 2)
    await w2.close() // with retainCheckpoints, waits for its cleaner

    // Checkpoint 1 was superseded just now: a writer opened on it may still publish on it.
    const r = await clean()
    if (r !== undefined) assert.deepEqual([r.kept, r.dropped], [[1, 2], []])

    const t = await w1.flush()
    await w1.close()
    assert.equal(t.conflicts, 1, 'W1 met W2 and published its whole view on top of it')
    const content = new Map([
      [1, A],
      [2, B],
      [t.cno, mine],
    ])
    const published = decodeInodeObject(await store.get(INODE_KEY)).cno
    assert.equal(published, t.cno)
    assert.ok((await readAll(store, t.cno)).equals(mine), 'the checkpoint W1 published reads back')
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
    // The next run keeps 1 and 2 too: each was superseded within the hour.
    const again = await place.gc()
    for (const cno of [1, 2, t.cno]) assert.ok(again.kept.includes(cno), `${cno} kept: ${JSON.stringify(again)}`)
    for (const cno of again.kept) {
      const want = content.get(cno)
      assert.ok(want !== undefined, `checkpoint ${cno} has a reference`)
      assert.ok((await readAll(store, cno)).equals(want), `kept checkpoint ${cno} reads back`)
    }
  }

  it('gc keeps the checkpoint superseded within the grace period: the writer on it publishes a readable checkpoint (memory store)', async () => {
    const place = inMemory()
    await writerOnSuperseded(place, place.gc)
  })

  it('the same with the CLI, `gc <dir>` with its defaults (directory store)', async () => {
    const place = inDirectory()
    await writerOnSuperseded(place, place.gc)
  })

  it("the same with the other writer's own cleaner (retainCheckpoints: 1, retainGraceMs by default)", async () => {
    const place = inMemory()
    await writerOnSuperseded(place, async () => undefined, { ...settings, retainCheckpoints: 1 })
  })

  it('a checkpoint superseded longer ago than the grace period is dropped, and its objects deleted', async () => {
    for (const place of [inMemory(), inDirectory()]) {
      const { store } = place
      const refs = new Map<number, Buffer>()
      for (let i = 1; i <= 3; i++) {
        const w = await (i === 1 ? SegmentFile.create(store, settings) : SegmentFile.open(place.other(), settings))
        const bytes = pattern(0, 64 * KiB, i)
        await w.truncate(0)
        await w.write(0, bytes)
        refs.set((await w.flush()).cno, bytes)
        await w.close()
      }
      // 1 written 3 h ago, superseded 2 h ago (2's part 0); 2 superseded just now.
      place.age(1, 3 * HOUR)
      place.age(2, 2 * HOUR)
      const r = await place.gc()
      assert.deepEqual([r.kept, r.dropped], [[2, 3], [1]])
      const left = (await listCheckpoints(store)).checkpoints.map((c) => c.cno)
      assert.deepEqual(left, [2, 3])
      for await (const e of store.list('')) {
        const k = parseKey(e.key)
        assert.ok(!(k?.kind === 'segment' && k.cno === 1), `${e.key} is left`)
      }
      for (const cno of [2, 3]) assert.ok((await readAll(store, cno)).equals(refs.get(cno) as Buffer))
    }
  })

  it('a checkpoint rolled forward just now counts as superseding its base now, however old its part 0', async () => {
    const place = inMemory()
    const { store } = place
    const A = pattern(0, 64 * KiB, 1)
    const f = await SegmentFile.create(store, settings)
    await f.write(0, A)
    await f.flush()
    await f.close()
    place.age(1, 3 * HOUR)
    // Checkpoint 2: its part 0 stored, its inode write failed (a writer that died there).
    const failing = new FailingStore(store)
    const died = await SegmentFile.open(failing, settings)
    failing.addRule({ ops: ['put'], key: /^inode$/, mode: 'error' })
    const B = pattern(0, 64 * KiB, 2)
    await died.truncate(0)
    await died.write(0, B)
    await assert.rejects(died.flush())
    await died.close()
    // W1 opens while 2's part 0 is young (no roll-forward): on checkpoint 1, published then.
    const waiting = { ...settings, rollForwardAfterMs: 60_000 }
    const w1 = await SegmentFile.open(store, waiting)
    assert.equal(w1.cno, 1)
    const patch = pattern(0, 4 * KiB, 9)
    await w1.write(0, patch)
    const mine = Buffer.from(A)
    patch.copy(mine, 0)
    // Two hours on, a writer opens and rolls 2 forward: 1 is superseded now.
    place.age(2, 2 * HOUR)
    const r = await SegmentFile.open(store, waiting)
    assert.equal(r.cno, 2, 'rolled forward')
    await r.close()
    const cleaned = await place.gc()
    assert.deepEqual([cleaned.kept, cleaned.dropped], [[1, 2], []])
    const t = await w1.flush()
    await w1.close()
    assert.equal(t.conflicts, 1)
    assert.ok((await readAll(store, t.cno)).equals(mine), 'the checkpoint W1 published reads back')
    assert.ok((await readAll(store, 2)).equals(B))
  })

  it('the chain of published checkpoints decides, not the next number: a part 0 never published in between is passed over', async () => {
    const { store, age, gc: clean } = inMemory()
    const quiet = { ...settings, rollForwardAfterMs: 24 * HOUR } // no roll-forward in this test
    const f = await SegmentFile.create(store, quiet)
    const A = pattern(0, 64 * KiB, 1)
    await f.write(0, A)
    await f.flush()
    await f.close()
    // Checkpoint 2: its part 0 stored, its inode write failed: complete, never published.
    const failing = new FailingStore(store)
    const stopped = await SegmentFile.open(failing, quiet)
    failing.addRule({ ops: ['put'], key: /^inode$/, mode: 'error' })
    await stopped.truncate(0)
    await stopped.write(0, pattern(0, 64 * KiB, 2))
    await assert.rejects(stopped.flush())
    await stopped.close()
    age(1, 3 * HOUR)
    age(2, 2 * HOUR)
    // Checkpoint 3 replaces 1 just now.
    const w = await SegmentFile.open(store, quiet)
    const C = pattern(0, 64 * KiB, 3)
    await w.truncate(0)
    await w.write(0, C)
    assert.equal((await w.flush()).cno, 3)
    await w.close()
    const r = await clean()
    assert.deepEqual([r.kept, r.dropped], [[1, 3], [2]])
    assert.ok((await readAll(store, 1)).equals(A))
    assert.ok((await readAll(store, 3)).equals(C))
    assert.equal(await store.head(segmentKey(2, 0)), undefined, "2's objects, old and never published, are deleted")
  })

  it('after a run with a shorter grace period, a checkpoint superseded lately but left incomplete is dropped, not fatal', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 160 * KiB, 1))
    await f.flush()
    await f.close()
    const w = await SegmentFile.open(store, smallSettings)
    await w.write(0, pattern(0, 64 * KiB, 2))
    await w.flush()
    await w.close()
    // Grace 0: checkpoint 1 dropped, the objects 2 does not reach deleted; its part 0 stays
    // (2 reaches it).
    const first = await gc(store, { graceMs: 0 })
    assert.deepEqual([first.kept, first.dropped], [[2], [1]])
    assert.ok(first.deletedObjects > 0)
    assert.ok(await store.head(segmentKey(1, 0)), "1's part 0 is left")
    // The default grace: 1 was superseded within it, but cannot be walked whole any more.
    const r = await gc(store)
    assert.deepEqual([r.kept, r.dropped, r.stopped], [[2], [1], undefined])
    const want = Buffer.from(pattern(0, 160 * KiB, 1))
    pattern(0, 64 * KiB, 2).copy(want, 0)
    assert.ok((await readAll(store, 2)).equals(want))
  })

  it('a checkpoint superseded lately whose nodes are all there but a data object is gone is dropped, not kept', async () => {
    // 2 rewrites a block under each of the first two leaves: its new leaves point into the
    // object of 1 that held those leaves, for data only.
    const { store, inode2 } = await supersededTwice([0, 16 * KiB])
    // That object gone (as a run with a shorter grace period, or a loss, would leave it):
    // 2's map still walks whole.
    const of2 = (await walkMap(store, inode2, [])).reached
    const of1 = (key: string) => {
      const k = parseKey(key)
      return k?.kind === 'segment' && k.cno === 1
    }
    const dataOnly = [...of2].find(([key, r]) => r.nodes.length === 0 && of1(key))?.[0]
    assert.ok(dataOnly !== undefined, `2 reaches an object of 1 for data only: ${[...of2.keys()].join(' ')}`)
    await store.delete(dataOnly)
    const problems: Problem[] = []
    await walkMap(store, inode2, problems)
    assert.deepEqual(problems, [], "2's block map still walks whole")
    const r = await gc(store, { dryRun: true })
    assert.deepEqual([r.kept, r.dropped, r.stopped], [[3], [1, 2], undefined])
  })

  it('two checkpoints superseded lately reach an object gone through nodes they share: both are dropped', async () => {
    // 2 rewrites block 0 only: its map shares 1's nodes over the rest of the file.
    const { store, inode2 } = await supersededTwice([0])
    // An object of 1 (not its part 0) holding data far from block 0, gone: gc walks 2's map
    // first, which reaches it through nodes it shares with 1's map, and 1's map passes over
    // them: 2's walk gives its claims back, so 1's map walks them and finds it gone too.
    const of2 = (await walkMap(store, inode2, [])).reached
    const of1 = (key: string) => {
      const k = parseKey(key)
      return k?.kind === 'segment' && k.cno === 1 && k.part > 0
    }
    const far = [...of2]
      .filter(([key, r]) => r.dataAt.length > 0 && of1(key))
      .sort(([, a], [, b]) => b.dataBlock.get(0) - a.dataBlock.get(0))[0]?.[0]
    assert.ok(far !== undefined, `2 reaches data in an object of 1: ${[...of2.keys()].join(' ')}`)
    await store.delete(far)
    const r = await gc(store, { dryRun: true })
    assert.deepEqual([r.kept, r.dropped, r.stopped], [[3], [1, 2], undefined], `${far} gone`)
  })
})

/**
 * Checkpoint 1 a 160 KiB file; 2 the blocks at `rewritten` (byte offsets) written again;
 * 3 the file cut and written anew, 64 KiB: 1 and 2 superseded just now. The store, and 2's
 * inode.
 */
async function supersededTwice(rewritten: number[]): Promise<{ store: MemoryStore; inode2: Inode }> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 160 * KiB, 1))
  await f.flush()
  await f.close()
  const w = await SegmentFile.open(store, smallSettings)
  for (const at of rewritten) await w.write(at, pattern(at, 4 * KiB, 2))
  await w.flush()
  await w.close()
  const inode2 = decodeInodeObject(await store.get(INODE_KEY))
  const w3 = await SegmentFile.open(store, smallSettings)
  await w3.truncate(0)
  await w3.write(0, pattern(0, 64 * KiB, 3))
  await w3.flush()
  await w3.close()
  return { store, inode2 }
}
