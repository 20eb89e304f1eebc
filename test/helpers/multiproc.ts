/**
 * The parent's side of the multi-process tests (test/container/multiproc-dir.test.ts and
 * multiproc-s3.test.ts), on any store: runs the children of multiproc-child.ts and `put`,
 * reads what they published and checks it whole. `place` is what the children are given:
 * a directory store's root, or an s3:// URL; `store` the parent's store at that place.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { promises as fs } from 'node:fs'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { collected, runNode } from './child.js'
import { bin, quietEnv } from './cli.js'
import { BLOCK, BLOCKS, checkContent, roundOf } from './multiproc-file.js'

export const CHILD = fileURLToPath(new URL('./multiproc-child.js', import.meta.url))

export type Line = Record<string, unknown>

/** Runs a child to its end; its JSON lines. */
export async function child(...args: string[]): Promise<Line[]> {
  const { lines } = await runNode(CHILD, args)
  return lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line)
}

/** Asserts that no child's lines tell an error (each child named by its key). */
export function noErrors(children: Record<string, Line[]>): void {
  for (const [who, lines] of Object.entries(children)) {
    assert.deepEqual(
      lines.filter((l) => l.error !== undefined),
      [],
      `the ${who}'s errors`,
    )
  }
}

/** The published checkpoint's bytes and the round that wrote it; asserts they are whole. */
export async function readChecked(store: ObjectStore, cno?: number): Promise<{ cno: number; round: string }> {
  const f = await SegmentFile.open(store, { readOnly: true, ...(cno === undefined ? {} : { cno }) })
  try {
    const bytes = await f.read(0, BLOCK * BLOCKS)
    assert.equal(checkContent(bytes), undefined, `checkpoint ${f.cno}`)
    return { cno: f.cno, round: roundOf(bytes.subarray(0, BLOCK)) }
  } finally {
    await f.close()
  }
}

/** The published checkpoints, newest first: the inode's, then each part 0's base. */
export async function publishedChain(store: ObjectStore): Promise<number[]> {
  const chain: number[] = []
  for (let cno = (await listCheckpoints(store)).published; cno > 0; ) {
    chain.push(cno)
    cno = (await readObjectHeader(store, cno, 0)).header.baseInode.cno
  }
  return chain
}

export async function verifyClean(store: ObjectStore, cno?: number): Promise<void> {
  const report = await verifyCheckpoint(store, cno === undefined ? {} : { cno })
  assert.deepEqual(report.problems, [], `verify of checkpoint ${report.cno}`)
}

/**
 * After a writer at `place` was killed (`killed`: its lines): the published checkpoint is
 * the seed's or the killed round's (`newRound`), whole, and verify is clean; the next
 * writer publishes on top. Returns that writer's checkpoint.
 */
export async function nextWriterAfterKill(
  place: string,
  store: ObjectStore,
  killed: string[],
  newRound: string,
): Promise<number> {
  const before = await readChecked(store)
  assert.ok(['w9r0', newRound].includes(before.round), `published ${before.round} (${killed.slice(-3)})`)
  await verifyClean(store)
  const [next] = await child('writer', place, '7', '1', 'fail')
  assert.ok(typeof next?.cno === 'number', `the next writer: ${JSON.stringify(next)}`)
  assert.equal((await readChecked(store)).round, 'w7r0')
  return next.cno
}

/** Seeds the container at `place` with one checkpoint of the children's file. */
export async function seed(place: string): Promise<void> {
  const [first] = await child('writer', place, '9', '1', 'fail')
  assert.equal(first?.cno, 1, JSON.stringify(first))
}

/**
 * Two writer processes, `rounds` rounds each, on the seeded container at `place`: each
 * checkpoint number is one round's, whole; only ERR_CONFLICT fails a round (none with
 * `retry`), and a round told so published nothing. Says how it went.
 */
export async function twoWriters(place: string, store: ObjectStore, policy: 'fail' | 'retry', rounds: number) {
  const results = (
    await Promise.all([0, 1].map((id) => child('writer', place, String(id), String(rounds), policy)))
  ).flat()
  assert.equal(results.length, 2 * rounds)
  assert.deepEqual(
    results.filter((r) => r.error !== undefined && r.error !== 'ERR_CONFLICT'),
    [],
    'only conflicts fail a round',
  )
  if (policy === 'retry')
    assert.deepEqual(
      results.filter((r) => r.error !== undefined),
      [],
      'retry publishes every round',
    )
  const won = results.filter((r) => r.cno !== undefined)
  const cnos = won.map((r) => r.cno as number)
  assert.equal(new Set(cnos).size, cnos.length, `a checkpoint number reported twice: ${cnos}`)
  // Every round reported published is in the published history, under its number, whole.
  const chain = await publishedChain(store)
  for (const r of won) {
    assert.ok(chain.includes(r.cno as number), `round ${r.id}/${r.round}: checkpoint ${r.cno} not in ${chain}`)
    assert.equal((await readChecked(store, r.cno as number)).round, `w${r.id}r${r.round}`)
  }
  // And a round told ERR_CONFLICT published nothing.
  const published = new Set<string>()
  for (const cno of chain) published.add((await readChecked(store, cno)).round)
  for (const r of results.filter((x) => x.error !== undefined)) {
    assert.ok(!published.has(`w${r.id}r${r.round}`), `round ${r.id}/${r.round} failed yet was published`)
  }
  await verifyClean(store)
  return `${won.length} rounds published, ${results.length - won.length} conflicts, ${chain.length} in the history`
}

/**
 * Two `put` processes at once on the seeded container at `place`, `passes` times with
 * --conflict-policy fail and as many by default: with `fail` one wins and the other exits 6
 * ERR_CONFLICT, by default both publish; no checkpoint is told to both, each is its put's
 * input byte for byte, and verify is clean after each pass. `dir` holds the inputs.
 */
export async function twoPuts(place: string, store: ObjectStore, dir: string, passes: number): Promise<void> {
  const inputs: Buffer[] = []
  for (const n of [0, 1]) {
    const b = Buffer.alloc(BLOCK * BLOCKS + 100 * n, `put ${n};`)
    await fs.writeFile(join(dir, `in${n}`), b)
    inputs.push(b)
  }
  for (const extra of [['--conflict-policy', 'fail'], []]) {
    for (let pass = 0; pass < passes; pass++) {
      const runs = await Promise.all([0, 1].map((n) => put(join(dir, `in${n}`), place, extra)))
      const codes = runs.map((r) => r.code)
      if (extra.length === 0) assert.deepEqual(codes, [0, 0], runs.map((r) => r.stderr).join('\n'))
      else {
        assert.ok(codes.includes(0), `no put won: ${runs.map((r) => r.stderr)}`)
        for (const r of runs) {
          assert.ok(r.code === 0 || r.code === 6, `put exited ${r.code}: ${r.stderr}`)
          if (r.code === 6) assert.match(r.stderr, /ERR_CONFLICT/)
        }
      }
      const won = runs.filter((r) => r.code === 0).map((r) => r.cno)
      assert.equal(new Set(won).size, won.length, `both puts told checkpoint ${won[0]}`)
      for (const [n, r] of runs.entries()) {
        if (r.code !== 0) continue
        const f = await SegmentFile.open(store, { readOnly: true, cno: r.cno })
        const got = Buffer.from(await f.read(0, f.size + 1))
        await f.close()
        assert.ok(got.equals(inputs[n] as Buffer), `checkpoint ${r.cno} is not put ${n}'s input`)
      }
      await verifyClean(store)
    }
  }
}

/**
 * `stream-segment put <file> <place> --json …`: its exit code (-1 when killed), stderr and
 * the checkpoint it reports. With `stdin` (the file `-`), that is piped to it; `kill`
 * aborted: SIGKILLed.
 */
export function put(
  file: string,
  place: string,
  extra: string[],
  options: { stdin?: Readable; kill?: AbortSignal } = {},
): Promise<{ code: number; stderr: string; cno: number }> {
  const { stdin, kill } = options
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [bin, 'put', file, place, '--json', ...extra], {
      env: quietEnv(),
      stdio: ['pipe', 'pipe', 'pipe'],
      signal: kill,
      killSignal: 'SIGKILL',
    })
    // A write to a killed process fails (EPIPE): not what the caller asked about.
    p.stdin.on('error', () => {})
    if (stdin === undefined) p.stdin.end()
    else stdin.pipe(p.stdin)
    const output = collected(p)
    p.on('error', (e) => {
      if (!kill?.aborted) reject(e)
    })
    p.on('close', (code) => {
      const cno = code === 0 ? (JSON.parse(output.stdout()) as { flushTiming: { cno: number } }).flushTiming.cno : 0
      resolve({ code: code ?? -1, stderr: output.stderr(), cno })
    })
  })
}
