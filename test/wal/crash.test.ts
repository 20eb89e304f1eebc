/**
 * A writer with a WAL (sync 'always') killed with SIGKILL at random moments: between
 * writes, mid-write, mid-flush, while a background publish uploads. After the next open with the same log folder, every write
 * whose call resolved before the kill is there, byte for byte, and nothing else changed
 * (the one call in flight at the kill may or may not be there, whole). WAL_CRASH_RUNS and
 * WAL_CRASH_S3_RUNS run more: at 100 runs on the directory store, 76 killed the writer with
 * records to replay and 59 during a background publish.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { SegmentFile } from '../../lib/segment-file.js'
import { openStore } from '../../lib/store/open.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { atMost, runNode } from '../helpers/child.js'
import { prng } from '../helpers/containers.js'
import { s3TestBucket, uniquePrefix } from '../helpers/s3-env.js'
import { applyOps, walOps } from '../helpers/wal-ops.js'

const CHILD = fileURLToPath(new URL('../helpers/wal-child.js', import.meta.url))
const OPS = 24
const FLUSH_EVERY = 7
/** Between flushes, a background publish every this many operations, the writes going on meanwhile. */
const PUBLISH_EVERY = 3

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

/** Runs the child until it has printed `killAfter` lines (plus a random moment), then kills it. */
async function runAndKill(
  url: string,
  dir: string,
  seed: number,
  killAfter: number,
  extraMs: number,
): Promise<string[]> {
  const args = [url, dir, String(seed), String(OPS), String(FLUSH_EVERY), String(PUBLISH_EVERY)]
  const { lines } = await runNode(
    CHILD,
    args,
    killAfter === 0
      ? { killAfterMs: extraMs }
      : {
          onLine: (_, all, kill) => {
            if (all.length >= killAfter) kill(extraMs)
          },
        },
  )
  return lines
}

/** Opens the container with the log (creating it when the writer died before its first publish). */
async function reopen(store: ObjectStore, dir: string): Promise<{ file: SegmentFile; created: boolean }> {
  try {
    return { file: await SegmentFile.open(store, { wal: { dir } }), created: false }
  } catch (err) {
    if ((err as { code?: string }).code !== 'ERR_NOT_FOUND') throw err
    return { file: await SegmentFile.create(store, { wal: { dir } }), created: true }
  }
}

/**
 * The runs go a few at a time: each waits mostly on its child (start-up, a sync per write)
 * and on the store. Each has its own container and log folder; the random moments are drawn
 * in run order first, so a seed gives the same runs whatever order they end in.
 */
const AT_ONCE = 4

async function crashRuns(runs: number, seed0: number, urlFor: (i: number) => Promise<string>): Promise<void> {
  const rnd = prng(seed0)
  const root = await fs.mkdtemp(join(tmpdir(), 'ss-wal-crash-'))
  roots.push(root)
  const plans = Array.from({ length: runs }, () => ({
    killAfter: Math.floor(rnd() * (OPS + OPS / FLUSH_EVERY + OPS / PUBLISH_EVERY + 2)),
    extraMs: Math.floor(rnd() * 30),
  }))
  const outcomes = await atMost(AT_ONCE, plans, async ({ killAfter, extraMs }, i) => {
    const seed = seed0 + i
    const url = await urlFor(i)
    const dir = join(root, `wal-${i}`)
    const lines = await runAndKill(url, dir, seed, killAfter, extraMs)
    const acked = lines.filter((l) => l.startsWith('w ')).length
    // A publish starts right after its operation's `w` line and prints `p` once it landed.
    const started = Array.from({ length: acked }, (_, j) => j).filter(
      (j) => (j + 1) % PUBLISH_EVERY === 0 && (j + 1) % FLUSH_EVERY !== 0,
    )
    const midPublish = started.some((j) => !lines.includes(`p ${j}`))
    let replayed = false
    const ops = walOps(seed, OPS)
    const { file, created } = await reopen(openStore(url), dir)
    try {
      replayed = (file.walReplay?.records ?? 0) > 0
      const got = Buffer.from(await file.read(0, file.size))
      const want = applyOps(Buffer.alloc(0), ops.slice(0, acked))
      const orNext = applyOps(Buffer.alloc(0), ops.slice(0, acked + 1))
      const ok = got.equals(want) || (acked < OPS && got.equals(orNext))
      assert.ok(
        ok,
        `run ${i} (seed ${seed}, killed after ${lines.length} lines, ${acked} writes acknowledged): the file is ${got.length} bytes, want ${want.length} (or ${orNext.length} with the write in flight)`,
      )
      // Replay published what it found (a container made now, with nothing to replay, is
      // published by its first flush).
      const { records, skipped, baseCno } = file.walReplay ?? {}
      if (!(created && records === 0)) {
        const flushed = await file.flush()
        const what = JSON.stringify({ records, skipped, baseCno, cno: file.cno, acked, lines: lines.length })
        assert.equal(flushed.objects, 0, `run ${i}: the replay was published at open (${what})`)
      }
    } finally {
      await file.close()
    }
    const again = (await reopen(openStore(url), dir)).file
    assert.equal(again.walReplay?.records, 0, `run ${i}: the log was rotated after the replay published`)
    await again.close()
    return { replayed, midPublish }
  })
  const replayedRuns = outcomes.filter((o) => o.replayed).length
  const midPublish = outcomes.filter((o) => o.midPublish).length
  assert.ok(replayedRuns > 0, `no run killed the writer with records left to replay (${runs} runs)`)
  assert.ok(midPublish > 0, `no run killed the writer while a background publish was under way (${runs} runs)`)
  console.log(`# ${runs} runs: ${replayedRuns} with records to replay, ${midPublish} during a background publish`)
}

describe('WAL crash recovery (SIGKILL at random moments)', () => {
  it('directory store', async () => {
    const runs = Number(process.env.WAL_CRASH_RUNS ?? 40)
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-wal-dir-'))
    roots.push(root)
    await crashRuns(runs, Number(process.env.MODEL_SEED ?? 4242), async (i) => `file://${join(root, `c${i}`)}`)
  })

  it('radosgw', async () => {
    const runs = Number(process.env.WAL_CRASH_S3_RUNS ?? 12)
    const bucket = await s3TestBucket()
    await crashRuns(
      runs,
      Number(process.env.MODEL_SEED ?? 777),
      async (i) => `s3://${bucket}/${uniquePrefix(`wal${i}`)}`,
    )
  })
})
