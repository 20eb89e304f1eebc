/**
 * gc on a store with a long history in its grace period, by round trips: a store that
 * answers requests in waves (every request waits for the next wave; those issued
 * together go in one) counts how many waves a run took, which on a remote store is how
 * many latencies it waits. Part 0 headers of the checkpoints superseded lately, and the
 * maps of the kept checkpoints, are read a bounded number at a time, not one after
 * another; what gc keeps and deletes is that of checkpoints walked one by one.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { parseKey, segmentKey } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { prng } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024
const HOUR = 3_600_000

/**
 * Holds every request until the next wave, a timer turn after the first one waiting: the
 * requests issued before it goes are answered together. `waves` is how many went (the
 * longest chain of requests that waited for each other), `peak` the most in one.
 */
class WaveStore extends WrappedStore {
  waves = 0
  peak = 0
  requests = 0
  private waiting: Array<() => void> = []

  protected async around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    this.requests++
    await new Promise<void>((go) => {
      if (this.waiting.push(go) === 1) setTimeout(() => this.go(), 1)
    })
    return run()
  }

  private go(): void {
    const wave = this.waiting
    this.waiting = []
    this.waves++
    this.peak = Math.max(this.peak, wave.length)
    for (const go of wave) go()
  }
}

/** The memory store's objects, reached past `private`, for their write times. */
function objectsOf(store: MemoryStore): Map<string, { modifiedMs: number }> {
  return (store as unknown as { bucket: { objects: Map<string, { modifiedMs: number }> } }).bucket.objects
}

/**
 * A container of `old` checkpoints written two hours ago, then `recent` more each
 * superseded within the last hour (their part 0s half an hour old, their data objects
 * two hours): every checkpoint is a patch of a file with a deep map (`patchKiB`, 4 by
 * default: its part 0 alone), so each map shares most of its nodes with the one before,
 * and a patch of the same place 16 checkpoints later leaves the older one's objects to a
 * dropped checkpoint only.
 */
async function history(old: number, recent: number, patchKiB = 4): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, pattern(0, 256 * KiB, 1))
  await f.flush()
  for (let i = 1; i < old + recent; i++) {
    const at = Math.min(((i * 5) % 16) * 16, 256 - patchKiB) * KiB
    await f.write(at, pattern(at, patchKiB * KiB, i + 1))
    await f.flush()
  }
  await f.close()
  const now = Date.now()
  const first = old + 1 // checkpoint numbers start at 1
  for (const [key, o] of objectsOf(store)) {
    const k = parseKey(key)
    if (k?.kind !== 'segment') continue
    o.modifiedMs = k.part === 0 && k.cno >= first ? now - HOUR / 2 : now - 2 * HOUR
  }
  return store
}

/** gc (dry) on `store` through a WaveStore: its result and the waves it took. */
async function counted(
  store: ObjectStore,
): Promise<{ waves: number; peak: number; kept: number[]; deleted: string[] }> {
  const waved = new WaveStore(store)
  const r = await gc(waved, { dryRun: true, graceMs: HOUR })
  return { waves: waved.waves, peak: waved.peak, kept: r.kept, deleted: [...r.deletedKeys].sort() }
}

/**
 * What gc must delete, found the slow way: every listed segment key older than the
 * grace period that no kept checkpoint's map reaches, each map walked on its own.
 */
async function expectedGarbage(store: MemoryStore, kept: readonly number[]): Promise<string[]> {
  const live = new Set<string>()
  for (const cno of kept) {
    live.add(segmentKey(cno, 0))
    const { header } = await readObjectHeader(store, cno, 0)
    const problems: Problem[] = []
    const walk = await walkMap(store, header.inode, problems)
    assert.deepEqual(problems, [], `checkpoint ${cno}'s map`)
    for (const key of walk.reached.keys()) live.add(key)
  }
  const now = Date.now()
  return [...objectsOf(store)]
    .filter(([key, o]) => parseKey(key)?.kind === 'segment' && !live.has(key) && now - o.modifiedMs >= HOUR)
    .map(([key]) => key)
    .sort()
}

describe('gc round trips with a long history in the grace period', () => {
  it('reads part 0s and maps a bounded number at a time, not one checkpoint after another', async () => {
    const runs = []
    for (const recent of [50, 200]) {
      const store = await history(20, recent)
      const run = await counted(store)
      // The published checkpoint and every one it superseded lately: the last `recent` + 1.
      const total = 20 + recent
      assert.deepEqual(
        run.kept,
        Array.from({ length: recent + 1 }, (_, i) => total - recent + i),
      )
      assert.deepEqual(run.deleted, await expectedGarbage(store, run.kept))
      assert.ok(run.deleted.length > 0, 'the old checkpoints leave garbage')
      runs.push({ recent, ...run })
    }
    const [small, large] = runs as [(typeof runs)[0], (typeof runs)[0]]
    // One checkpoint after another costs a round trip per part 0 and one per level of its
    // map walked: 150 more checkpoints took 450 more waves (158 → 608). Eight requests at
    // a time, a few per checkpoint, about 55 more (30 → 84).
    const more = large.waves - small.waves
    assert.ok(
      more <= 150 / 2,
      `150 more checkpoints in the grace period took ${more} more waves (${small.waves} → ${large.waves})`,
    )
    assert.ok(large.peak > 1, `at most ${large.peak} requests in flight`)
  })
})

describe('gc with objects gone under checkpoints superseded lately', () => {
  it('drops exactly those whose maps, each walked alone, fail or reach an object gone; keeps what any map reaches', async () => {
    const rnd = prng(99)
    let dropped = 0
    for (let round = 0; round < 8; round++) {
      // 80 KiB patches: each checkpoint stores objects besides its part 0, which later
      // patches leave to the maps superseded lately.
      const store = await history(1, 12, 80)
      const published = 13
      const mapOf = async (cno: number) => (await readObjectHeader(store, cno, 0)).header.inode
      const alone = async (cno: number) => {
        const problems: Problem[] = []
        const walk = await walkMap(store, await mapOf(cno), problems)
        return { problems, reached: [...walk.reached.keys()] }
      }
      // Objects only maps superseded lately reach (gc would stop on the published one's),
      // never a part 0: one to three of them gone, as a shorter grace period leaves them.
      const ofPublished = new Set((await alone(published)).reached)
      const candidates = new Set<string>()
      for (let cno = 1; cno < published; cno++) {
        for (const key of (await alone(cno)).reached)
          if (!ofPublished.has(key) && !key.endsWith('.0')) candidates.add(key)
      }
      const pool = [...candidates].sort()
      const gone = new Set<string>()
      for (let n = 1 + Math.floor(rnd() * 3); n > 0 && pool.length > 0; n--) {
        gone.add(pool.splice(Math.floor(rnd() * pool.length), 1)[0] as string)
      }
      for (const key of gone) await store.delete(key)
      const listed = new Set<string>()
      for await (const e of store.list('')) listed.add(e.key)
      // The slow way: each map on its own.
      const broken: number[] = []
      const live = new Set<string>()
      for (let cno = 1; cno <= published; cno++) {
        live.add(segmentKey(cno, 0))
        const { problems, reached } = await alone(cno)
        for (const key of reached) live.add(key)
        if (problems.length > 0 || reached.some((key) => !listed.has(key))) broken.push(cno)
      }
      const r = await gc(store, { dryRun: true, graceMs: HOUR })
      const what = `round ${round}, gone: ${[...gone].join(' ')}`
      assert.equal(r.stopped, undefined, what)
      assert.deepEqual(r.dropped, broken, what)
      assert.deepEqual(
        r.kept,
        Array.from({ length: published }, (_, i) => i + 1).filter((c) => !broken.includes(c)),
        what,
      )
      const now = Date.now()
      const garbage = [...objectsOf(store)]
        .filter(([key, o]) => parseKey(key)?.kind === 'segment' && !live.has(key) && now - o.modifiedMs >= HOUR)
        .map(([key]) => key)
        .sort()
      assert.deepEqual([...r.deletedKeys].sort(), garbage, what)
      dropped += broken.length
    }
    assert.ok(dropped > 8, `only ${dropped} checkpoints broken in 8 rounds`)
  })
})
