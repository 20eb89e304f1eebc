/**
 * Several processes on one container in a directory store (the embedded default), each a
 * real process (test/helpers/multiproc-child.ts): two writers publishing at once, through
 * the API and through `put`; a writer killed with SIGKILL at chosen and at random moments,
 * and the next writer and gc after it; a reader of the published checkpoint while a writer
 * publishes newer ones and gc runs. The file the children write is self-checking: a torn
 * or mixed checkpoint reads as one (`checkContent`).
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { gc, listCheckpoints } from '../../lib/admin/index.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { atMost, runNode } from '../helpers/child.js'
import {
  CHILD,
  child,
  type Line,
  nextWriterAfterKill,
  noErrors,
  readChecked,
  seed,
  twoPuts,
  twoWriters,
  verifyClean,
} from '../helpers/multiproc.js'

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

async function newRoot(): Promise<string> {
  const root = await fs.mkdtemp(join(tmpdir(), 'ss-multiproc-'))
  roots.push(root)
  return root
}

/** A container holding one checkpoint of the children's file. */
async function seeded(): Promise<{ root: string; store: DirectoryStore }> {
  const root = await newRoot()
  await seed(root)
  return { root, store: new DirectoryStore(root) }
}

describe('directory store: two writer processes on one container', () => {
  for (const policy of ['fail', 'retry'] as const) {
    it(`conflictPolicy ${policy}, 12 rounds each: each checkpoint number is one round's, whole; only ERR_CONFLICT fails`, async () => {
      const { store, root } = await seeded()
      console.log(`# ${await twoWriters(root, store, policy, 12)}`)
    })
  }

  it('two `put` processes at once, 4 times, with --conflict-policy fail and by default', async () => {
    const { store, root } = await seeded()
    await twoPuts(root, store, await newRoot(), 2)
  })
})

/** The names in one of the store's own folders (none when it is missing). */
async function namesIn(root: string, folder: string): Promise<string[]> {
  return fs.readdir(join(root, folder)).catch(() => [])
}

/** The inode numbers of the object files (every file outside the store's dot-folders). */
async function objectInodes(dir: string, out = new Set<string>()): Promise<Set<string>> {
  for (const e of await fs.readdir(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.')) continue
    const path = join(dir, e.name)
    if (e.isDirectory()) await objectInodes(path, out)
    else out.add(String((await fs.lstat(path)).ino))
  }
  return out
}

/**
 * What the store holds beside its objects once a sweep has run (a store's first write in
 * a process starts one, in the background): waits for it, at most 20 s, then says what is left.
 */
async function leftovers(root: string): Promise<Record<string, string[]>> {
  const look = async () => {
    const objects = await objectInodes(root)
    const left = {
      tmp: await namesIn(root, '.ss-tmp'),
      locks: await namesIn(root, '.ss-lock'),
      uploads: await namesIn(root, '.ss-multipart'),
      sidecars: (await namesIn(root, '.ss-meta')).filter((n) => !objects.has(n)),
    }
    return Object.fromEntries(Object.entries(left).filter(([, v]) => v.length > 0))
  }
  for (let i = 0; i < 100; i++) {
    const left = await look()
    if (Object.keys(left).length === 0) return left
    await new Promise((r) => setTimeout(r, 200))
  }
  return look()
}

/**
 * Sets the sidecars no object holds a few minutes back, as if gc ran a while after the
 * crash that left them (a sweep spares a sidecar written within the last minute, which a
 * file made meanwhile may have written); how many there were.
 */
async function ageOrphanSidecars(root: string): Promise<number> {
  const objects = await objectInodes(root)
  const orphans = (await namesIn(root, '.ss-meta')).filter((n) => !objects.has(n))
  const longAgo = new Date(Date.now() - 5 * 60_000)
  for (const n of orphans) await fs.utimes(join(root, '.ss-meta', n), longAgo, longAgo)
  return orphans.length
}

describe('directory store: a writer process killed with SIGKILL', () => {
  /**
   * After the kill: the published checkpoint is the one before or the new one, whole, and
   * verify is clean; the next writer publishes on top; gc (grace 0: no writer runs) leaves
   * only what the kept checkpoint needs, and nothing of the killed writer's is left over.
   */
  async function afterTheKill(root: string, store: DirectoryStore, killed: string[], newRound: string) {
    const next = await nextWriterAfterKill(root, store, killed, newRound)
    await ageOrphanSidecars(root)
    const swept = new DirectoryStore(root)
    const g = await gc(swept, { keep: 1, graceMs: 0 })
    assert.equal(g.stopped, undefined)
    // The killed writer's checkpoint, complete or not, is gone (one a kept checkpoint still
    // reaches the part 0 of stays listed: the seed's).
    const list = await listCheckpoints(store)
    assert.equal(list.published, next)
    assert.deepEqual(list.abandoned, [])
    assert.deepEqual(
      list.checkpoints.filter((c) => c.state === 'unpublished'),
      [],
    )
    await verifyClean(store)
    assert.deepEqual(await leftovers(root), {}, 'left over by the killed writer')
  }

  for (const stop of ['part0', 'cas']) {
    it(`killed at ${stop === 'cas' ? "the inode's rename, its lock held" : 'its part 0 stored, before the inode'}`, async () => {
      const { root, store } = await seeded()
      const { lines, killed } = await runNode(CHILD, ['crash', root, '5', stop], {
        onLine: (line, _, kill) => {
          if (line === 'stop') kill()
        },
      })
      assert.ok(killed)
      assert.equal((await listCheckpoints(store)).published, 1)
      await afterTheKill(root, store, lines, 'c5')
    })
  }

  it("killed after its inode replaced the old one, before the old one's sidecar went: gc takes that sidecar", async () => {
    const { root, store } = await seeded()
    const { killed } = await runNode(CHILD, ['crash', root, '5', 'replaced'], {
      onLine: (line, _, kill) => {
        if (line === 'stop') kill()
      },
    })
    assert.ok(killed)
    assert.deepEqual(await readChecked(store), { cno: 2, round: 'c5' })
    await verifyClean(store)
    assert.equal(await ageOrphanSidecars(root), 1, "the replaced inode's sidecar is left")
    const g = await gc(new DirectoryStore(root), { keep: 1, graceMs: 0 })
    assert.equal(g.stopped, undefined)
    await verifyClean(store)
    assert.deepEqual(await leftovers(root), {}, 'left over by the killed writer')
  })

  it('killed at random store calls (8 runs)', async () => {
    // A whole run, to count its lines.
    const { root: r0 } = await seeded()
    const { lines: all } = await runNode(CHILD, ['crash', r0, '5'])
    assert.equal(all.at(-1), '{"done":true}')
    // Four runs at a time, each on a container of its own: a run waits on its children
    // (start-up, fsyncs) far more than it computes.
    await atMost(4, Array.from({ length: 8 }), async () => {
      const { root, store } = await seeded()
      const at = 1 + Math.floor(Math.random() * (all.length - 2))
      const { lines } = await runNode(CHILD, ['crash', root, '5'], {
        onLine: (_, seen, kill) => {
          if (seen.length === at) kill(Math.floor(Math.random() * 3))
        },
      })
      await afterTheKill(root, store, lines, 'c5')
    })
  })
})

// Both at once, each on a container of its own: the reader reads for seconds by the clock.
describe('directory store: a reader process beside a writer process and gc in a third', { concurrency: true }, () => {
  /** Reader, writer and gc at once; what each said. */
  async function threeAtOnce(graceMs: number) {
    const { root, store } = await seeded()
    const [reader, writer, cleaner] = await Promise.all([
      child('reader', root, '80', '50'),
      child('writer', root, '3', '10', 'retry'),
      child('gc', root, String(graceMs), '80'),
    ])
    return { store, reader, writer, cleaner }
  }

  it('gc with its default grace: the reader reads the checkpoint it opened, byte for byte, to the end', async () => {
    const { store, reader, writer, cleaner } = await threeAtOnce(60 * 60_000)
    assert.deepEqual(reader.at(-1), { ok: reader[0]?.cno }, JSON.stringify(reader))
    noErrors({ writer, cleaner })
    await verifyClean(store)
  })

  it('gc with a grace of 2.5 s, far longer than a checkpoint takes: the reader gets its checkpoint byte for byte, or ERR_NOT_FOUND naming what went', async () => {
    // The reader reads for 4 s and more, so its checkpoint, superseded at once, may be
    // dropped under it; a grace of 0 would be unsafe beside the writer (api.md, gc).
    const { store, reader, writer, cleaner } = await threeAtOnce(2500)
    const end = reader.at(-1) as Line
    const told = end.error !== undefined ? String(end.error) : `read checkpoint ${end.ok} whole`
    if (end.error !== undefined) {
      assert.equal(end.error, 'ERR_NOT_FOUND', JSON.stringify(end))
      assert.match(String(end.message), /\d{10}\.\d+/, 'names the object')
    } else assert.deepEqual(end, { ok: reader[0]?.cno })
    noErrors({ writer, cleaner })
    await readChecked(store)
    await verifyClean(store)
    console.log(`# reader: ${told}`)
  })
})
