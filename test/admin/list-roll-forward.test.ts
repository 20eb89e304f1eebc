/**
 * What `ls` says a roll-forward would do when two unpublished checkpoints are built on the
 * same published one (two writers whose publications were both interrupted): a writer
 * opening the container publishes the first of them that is old enough and checks out,
 * and goes on from it, so either may be published, and so may what is built on either.
 * `ls` marks every one a roll-forward could publish (`rollsForward`), as gc keeps them,
 * and says that a writer publishes at most one of the rivals; once one is published, the
 * other, and what is built on it, never is.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { gc, listCheckpoints } from '../../lib/admin/index.js'
import { main } from '../../lib/cli.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { fakeOutput } from '../helpers/cli.js'
import { buildContainer, copyStore, readPublished } from '../helpers/containers.js'

/**
 * How old a part 0 must be to be rolled forward by the writers the tests open: long
 * enough that one written just before such a writer opens is young, on a loaded machine too.
 */
const AFTER_MS = 2000

/** Writes `fill` at 0 through a handle opened now (rolling nothing forward), and publishes it. */
async function publishOn(store: ObjectStore, fill: number, twice = false): Promise<number[]> {
  const f = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
  const cnos: number[] = []
  try {
    await f.write(0, Buffer.alloc(4096, fill))
    cnos.push((await f.flush()).cno)
    if (twice) {
      await f.write(4096, Buffer.alloc(4096, fill + 1))
      cnos.push((await f.flush()).cno)
    }
  } finally {
    await f.close()
  }
  return cnos
}

describe('ls: two unpublished checkpoints built on the same published one', () => {
  let dir: string
  let base: string
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'list-roll-forward-'))
    base = join(dir, 'base')
    const store = new DirectoryStore(base)
    await buildContainer(store) // 1, 2, 3 published
    const three = await store.get('inode')
    // Writer A: 4, on 3; its inode write interrupted (the inode put back).
    assert.deepEqual(await publishOn(store, 0xa), [4])
    await store.put('inode', three)
    // Writer B, opened while 4 was young, as it were (not rolled forward): 5 on 3, then 6
    // on 5; both inode writes interrupted.
    assert.deepEqual(await publishOn(store, 0xb, true), [5, 6])
    await store.put('inode', three)
    // A copy for each test that changes it (copied objects are new objects: copied first).
    for (const name of ['first-young', 'first-old', 'cli', 'alone'])
      await copyStore(store, new DirectoryStore(join(dir, name)))
    await sleep(AFTER_MS + 50) // every part 0 old enough to roll forward
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  function copy(name: string): { store: DirectoryStore; where: string } {
    const where = join(dir, name)
    return { store: new DirectoryStore(where), where }
  }

  it('marks both rivals and what is built on the second as ones a roll-forward could publish, as gc keeps them', async () => {
    const list = await listCheckpoints(new DirectoryStore(base))
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.state, c.baseCno, c.rollsForward]),
      [
        [1, 'complete', 0, undefined],
        [2, 'complete', 1, undefined],
        [3, 'published', 2, undefined],
        [4, 'unpublished', 3, true],
        [5, 'unpublished', 3, true],
        [6, 'unpublished', 5, true],
      ],
    )
    const g = await gc(new DirectoryStore(base), { dryRun: true, graceMs: 0 })
    const candidates = list.checkpoints.filter((c) => c.rollsForward).map((c) => c.cno)
    assert.deepEqual(
      candidates.filter((c) => !g.kept.includes(c)),
      [],
      `gc keeps every one ls says could be published (kept ${g.kept})`,
    )
  })

  it('the second rival is published when the first is too young: ls said it could be, and then says the first never will', async () => {
    const { store } = copy('first-young')
    // 4's writer still at work, as it were: its part 0 written just now.
    await store.put(segmentKey(4, 0), await store.get(segmentKey(4, 0)))
    const w = await SegmentFile.open(store, { rollForwardAfterMs: AFTER_MS })
    assert.equal(w.cno, 6, 'rolled forward past the young 4: to 5, then 6 built on it')
    await w.close()
    const published = await readPublished(store)
    assert.equal(published.cno, 6)
    assert.deepEqual(
      published.bytes.subarray(0, 8192),
      Buffer.concat([Buffer.alloc(4096, 0xb), Buffer.alloc(4096, 0xc)]),
    )
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.slice(3).map((c) => [c.cno, c.state, c.rollsForward]),
      [
        [4, 'unpublished', false],
        [5, 'complete', undefined],
        [6, 'published', undefined],
      ],
    )
  })

  it('the first rival is published when it is old enough: then the second, and what is built on it, never are', async () => {
    const { store } = copy('first-old')
    const w = await SegmentFile.open(store, { rollForwardAfterMs: AFTER_MS })
    assert.equal(w.cno, 4, 'rolled forward to 4; 5 is not built on it')
    await w.close()
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.slice(3).map((c) => [c.cno, c.state, c.rollsForward]),
      [
        [4, 'published', undefined],
        [5, 'unpublished', false],
        [6, 'unpublished', false],
      ],
    )
  })

  it('ls prints that a writer publishes at most one of the rivals, and never that the next writer publishes both', async () => {
    const { where } = copy('cli')
    const out = fakeOutput()
    assert.equal(await main(['ls', where], out, fakeOutput()), 0)
    const text = out.writes.join('')
    const rivals = 'may be rolled forward \\(a writer publishes at most one of 4, 5, each built on 3\\)'
    assert.match(text, new RegExp(`\\n *4 .* unpublished, built on 3: ${rivals}\\n`))
    assert.match(text, new RegExp(`\\n *5 .* unpublished, built on 3: ${rivals}\\n`))
    assert.match(text, new RegExp(`\\n *6 .* unpublished, built on 5: ${rivals}\\n`))
    assert.doesNotMatch(text, /never published|rolled forward by the next writer/)
  })

  it('one built on the published checkpoint alone (its rival gone) is rolled forward by the next writer, and ls says so', async () => {
    const { store, where } = copy('alone')
    for (const key of [segmentKey(5, 0), segmentKey(6, 0)]) await store.delete(key)
    const out = fakeOutput()
    assert.equal(await main(['ls', where], out, fakeOutput()), 0)
    assert.match(out.writes.join(''), /\n *4 .* unpublished, built on 3: rolled forward by the next writer\n/)
    const w = await SegmentFile.open(store, { rollForwardAfterMs: AFTER_MS })
    assert.equal(w.cno, 4)
    await w.close()
  })
})

describe('ls: an unpublished checkpoint above a number no object uses', () => {
  let dir: string
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'list-roll-forward-gap-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('says the next writer rolls it forward, past that number, as the writer does', async () => {
    const where = join(dir, 'gap')
    const store = new DirectoryStore(where)
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(4096, 1))
    await f.flush() // 1
    await f.close()
    const one = await store.get('inode')
    await store.put(segmentKey(2, 1), Buffer.alloc(100, 9)) // a dead writer's abandoned attempt
    // A writer opens (taking 3, past the attempt); before it sends anything, the cleaner
    // deletes the attempt (old, reached by nothing, and nothing above it to roll forward).
    const w3 = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
    const g = await gc(store, { graceMs: 0 })
    assert.deepEqual([g.kept, g.deletedKeys], [[1], [segmentKey(2, 1)]])
    await w3.write(0, Buffer.alloc(4096, 3))
    assert.equal((await w3.flush()).cno, 3)
    await w3.close()
    await store.put('inode', one) // 3's publication interrupted
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.state, c.rollsForward]),
      [
        [1, 'published', undefined],
        [3, 'unpublished', true],
      ],
    )
    const out = fakeOutput()
    assert.equal(await main(['ls', where], out, fakeOutput()), 0)
    assert.match(out.writes.join(''), /\n *3 .* unpublished, built on 1: rolled forward by the next writer\n/)
    const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
    assert.equal(w.cno, 3, 'rolled forward past 2 to 3')
    await w.close()
  })
})
