/**
 * The cleaner and `rm` against a real S3 server (radosgw, test/rgw/rgw.sh): a writer
 * publishing in a loop while `stream-segment gc` runs again and again in other processes,
 * the space gc leaves after full rewrites, and `rm` of a whole container through the CLI.
 * The live test runs gc with a grace period of 5 s: with --grace 0 a writer's checkpoint in
 * the making loses objects and is published unreadable (see the comment there). It writes
 * 20 rounds; GC_S3_ROUNDS=N writes N.
 * Fails, never skips, without the server.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { describe, it } from 'node:test'
import { type GcResult, gc } from '../../lib/admin/gc.js'
import { listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { INODE_KEY, segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { rejectsCode } from '../helpers/assert.js'
import { collected } from '../helpers/child.js'
import { prng } from '../helpers/containers.js'
import { blockStream, fillBlocks, pattern } from '../helpers/pattern.js'
import { clearS3Store, s3TestBucket, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024
const MiB = 1024 * KiB
const BIN = 'bin/stream-segment.cjs'
const SKEWED_CLOCK = new URL('../helpers/skewed-clock.js', import.meta.url).href

interface CliResult {
  status: number | null
  stdout: string
  stderr: string
  ms: number
}

/**
 * Runs the CLI in a child process, asynchronously (stdin is not a TTY: it is /dev/null);
 * with `skewMs`, on a clock that far from this machine's (test/helpers/skewed-clock.ts).
 */
function runCli(args: string[], skewMs?: number): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { ...process.env }
  delete env.DEBUG
  const node = skewMs === undefined ? [] : ['--import', SKEWED_CLOCK]
  if (skewMs !== undefined) env.SKEW_MS = String(skewMs)
  const t0 = performance.now()
  const child = spawn(process.execPath, [...node, BIN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  const output = collected(child)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (status) =>
      resolve({
        status,
        stdout: output.stdout(),
        stderr: output.stderr(),
        ms: performance.now() - t0,
      }),
    )
  })
}

/** Checkpoint `cno` opened read-only and read whole. */
async function readCheckpoint(store: ObjectStore, cno: number): Promise<Buffer> {
  const f = await SegmentFile.open(store, { cno, readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/** SHA-256 of checkpoint `cno` through a read stream, and its length. */
async function hashCheckpoint(store: ObjectStore, cno: number): Promise<{ sha: string; bytes: number }> {
  const h = createHash('sha256')
  let bytes = 0
  for await (const c of createStreamSegmentReadStream({ store, cno })) {
    h.update(c as Uint8Array)
    bytes += (c as Uint8Array).byteLength
  }
  return { sha: h.digest('hex'), bytes }
}

/** SHA-256 of `total` bytes of the blockStream pattern with `seed`. */
function hashBlocks(total: number, seed: number): string {
  const h = createHash('sha256')
  const b = Buffer.allocUnsafe(MiB)
  for (let at = 0; at < total; at += MiB) {
    const n = Math.min(MiB, total - at)
    fillBlocks(b.subarray(0, n), at, seed)
    h.update(b.subarray(0, n))
  }
  return h.digest('hex')
}

const mib = (n: number) => `${(n / MiB).toFixed(2)} MiB`

describe('gc and rm on radosgw', () => {
  it('a writer publishing in a loop while gc runs in another process: no kept checkpoint becomes unreadable, the writer never fails', {
    timeout: 300_000,
  }, async () => {
    const prefix = uniquePrefix('gc-live')
    const store = await s3TestStore(prefix)
    const url = `s3://${await s3TestBucket()}/${prefix}`
    const FILE = 8 * MiB
    // 20 rounds by default (15-30 s, some 17 gc runs beside the writer, a few of them
    // stopped by a publication); GC_S3_ROUNDS runs more.
    const ROUNDS = Number(process.env.GC_S3_ROUNDS ?? 20)
    const KEEP = 3
    // The grace period is 5 s, not 0. With --grace 0 the property does not hold: the
    // cleaner deletes whatever no kept checkpoint reaches, the objects of the checkpoint
    // the writer is building among them (objects sent ahead, data parts, even its part 0
    // between the part 0 PUT and the inode PUT, while the inode still names the previous
    // one), the writer's flush does not notice and succeeds, and the checkpoint it
    // publishes cannot be read (ERR_NOT_FOUND on the deleted object). That is what the
    // grace period is for (admin/gc.ts); each round here publishes within well under 5 s
    // (S3 gives whole seconds: the effective grace is 4 to 5 s). GC_S3_GRACE=0 shows it.
    const GRACE = process.env.GC_S3_GRACE ?? '5s'
    // Small settings: several objects per checkpoint (1 MiB objects sent ahead, partial
    // segments under a 1 MiB dirty limit), each in one PutObject (objects ≤ 4 MiB < 5 MiB pieces).
    const settings = {
      dataCacheDirtyMaxBytesThreshold: MiB,
      segmentMaxObjectBytes: 4 * MiB,
      segmentMpuChunkSize: 5 * MiB,
      streamSegmentBytes: MiB,
    }
    const rand = prng(0x6c5)
    const refs = new Map<number, Buffer>()
    const published: number[] = []

    // gc in other processes, one after the other, until the writer is done.
    let writerDone = false
    const gcRuns: Array<{ result?: GcResult; status: number | null; stderr: string; overlapped: boolean }> = []
    const runGcLoop = async () => {
      while (!writerDone) {
        const r = await runCli(['gc', url, '--keep', String(KEEP), '--grace', GRACE, '--json'])
        const entry: (typeof gcRuns)[number] = { status: r.status, stderr: r.stderr, overlapped: !writerDone }
        try {
          if (r.status === 0) entry.result = JSON.parse(r.stdout) as GcResult
        } catch {
          entry.status = -1
          entry.stderr = `not JSON: ${r.stdout}`
        }
        gcRuns.push(entry)
      }
    }
    let gcLoop: Promise<void> | undefined

    /** The newest KEEP published checkpoints read back equal to their references. */
    const checkKept = async (when: string) => {
      for (const cno of published.slice(-KEEP)) {
        let got: Buffer
        try {
          got = await readCheckpoint(store, cno)
        } catch (err) {
          assert.fail(`${when}: kept checkpoint ${cno} cannot be read: ${(err as Error).message}`)
        }
        const want = refs.get(cno) as Buffer
        assert.equal(got.length, want.length, `${when}: checkpoint ${cno} has ${got.length} bytes`)
        assert.ok(got.equals(want), `${when}: checkpoint ${cno} reads back different bytes`)
      }
    }

    const f = await SegmentFile.create(store, settings)
    let closed = false
    try {
      let ref = pattern(0, FILE, 1)
      await f.write(0, ref)
      published.push((await f.flush()).cno)
      refs.set(published[0] as number, ref)
      gcLoop = runGcLoop()

      // The check of a round's checkpoints runs while the next round writes (and sends
      // objects of the coming checkpoint ahead), so that the store holds objects of a
      // checkpoint in the making most of the time; the flush waits for the check, so no
      // checkpoint being read is dropped by a publication.
      let checking: Promise<void> = Promise.resolve()
      const t0 = performance.now()
      for (let round = 1; round <= ROUNDS; round++) {
        const offset = Math.floor(rand() * FILE)
        const length = 1 + Math.floor(rand() * 3 * MiB)
        const bytes = pattern(offset, length, round + 1)
        const next = Buffer.alloc(Math.max(ref.length, offset + length))
        ref.copy(next)
        bytes.copy(next, offset)
        for (let at = 0; at < length; at += 256 * KiB) {
          await f.write(offset + at, bytes.subarray(at, Math.min(length, at + 256 * KiB)))
        }
        await checking
        const t = await f.flush()
        assert.ok(t.cno > (published.at(-1) as number), `round ${round}: flush published ${t.cno}`)
        ref = next
        published.push(t.cno)
        refs.set(t.cno, ref)
        for (const c of published.slice(0, -KEEP)) refs.delete(c)
        checking = checkKept(`after round ${round} (checkpoint ${t.cno})`)
        checking.catch(() => {}) // awaited before the next flush
      }
      await checking
      const writerMs = performance.now() - t0
      writerDone = true
      await gcLoop
      closed = true
      await f.close()

      await checkKept('at the end')
      for (const cno of published.slice(-KEEP)) {
        const v = await verifyCheckpoint(store, { cno })
        assert.deepEqual(v.problems, [], `checkpoint ${cno}: ${v.problems.map((p) => p.message).join('; ')}`)
      }
      const failed = gcRuns.filter((r) => r.status !== 0)
      assert.equal(
        failed.length,
        0,
        `${failed.length} of ${gcRuns.length} gc runs failed, the first: exit ${failed[0]?.status}: ${failed[0]?.stderr.trim().slice(0, 500)}`,
      )
      const results = gcRuns.map((r) => r.result as GcResult)
      const deleted = results.reduce((n, r) => n + r.deletedObjects, 0)
      const deletedBytes = results.reduce((n, r) => n + r.deletedBytes, 0)
      const stopped = results.filter((r) => r.stopped !== undefined).length
      const overlapped = gcRuns.filter((r) => r.overlapped).length
      const list = await listCheckpoints(store)
      console.log(
        `gc-s3 live: ${ROUNDS} rounds (checkpoints ${published[0]}..${published.at(-1)}) in ${(writerMs / 1000).toFixed(1)} s; ` +
          `${gcRuns.length} gc runs (--grace ${GRACE}), ${overlapped} overlapping the writer, ${stopped} stopped ` +
          `(inode moved), ${deleted} objects (${mib(deletedBytes)}) deleted; ` +
          `afterwards ${list.checkpoints.length} checkpoints, ${mib(list.storedBytes)} stored`,
      )
      assert.ok(overlapped >= 5, `only ${overlapped} gc runs overlapped the writer`)
      assert.ok(deleted > 0, 'the gc runs deleted nothing')
      assert.equal(list.published, published.at(-1))
    } finally {
      writerDone = true
      await gcLoop
      if (!closed) await f.close().catch(() => {})
      await clearS3Store(store)
    }
  })

  it('space: after 10 full 64 MiB rewrites, gc --keep 1 --grace 0 leaves ≤ 1.05 × the live checkpoint’s bytes, --keep 3 ≤ 3.1 ×, and no multipart upload open', {
    timeout: 150_000,
  }, async () => {
    const store = await s3TestStore(uniquePrefix('gc-space'))
    const SIZE = 64 * MiB
    const REWRITES = 10
    const seeds = new Map<number, number>()
    try {
      const t0 = performance.now()
      for (let i = 1; i <= REWRITES; i++) {
        const ws = createStreamSegmentWriteStream({ store })
        await pipeline(Readable.from(blockStream(SIZE, MiB, 100 + i)), ws)
        seeds.set((ws.flushTiming as { cno: number }).cno, 100 + i)
      }
      const writeMs = performance.now() - t0
      const cnos = [...seeds.keys()]
      const before = await listCheckpoints(store)
      assert.deepEqual(
        before.checkpoints.map((c) => c.cno),
        cnos,
      )
      const newest = before.checkpoints.at(-1) as (typeof before.checkpoints)[number]

      const r3 = await gc(store, { keep: 3, graceMs: 0 })
      assert.deepEqual(r3.kept, cnos.slice(-3))
      assert.deepEqual(r3.dropped, cnos.slice(0, -3))
      assert.equal(r3.stopped, undefined)
      const after3 = await listCheckpoints(store)
      assert.deepEqual(
        after3.checkpoints.map((c) => c.cno),
        cnos.slice(-3),
      )
      assert.deepEqual(after3.abandoned, [])
      assert.equal(after3.storedBytes, r3.storedBytes)
      // Every kept checkpoint verifies and reads back: the newest whole, the others by hash.
      for (const cno of cnos.slice(-3)) {
        const v = await verifyCheckpoint(store, { cno })
        assert.deepEqual(v.problems, [], `checkpoint ${cno}: ${v.problems.map((p) => p.message).join('; ')}`)
      }
      const seed = seeds.get(newest.cno) as number
      {
        const f = await SegmentFile.open(store, { readOnly: true })
        assert.equal(f.cno, newest.cno)
        assert.equal(f.size, SIZE)
        const want = Buffer.allocUnsafe(8 * MiB)
        for (let at = 0; at < SIZE; at += want.length) {
          fillBlocks(want, at, seed)
          assert.ok(Buffer.from(await f.read(at, want.length)).equals(want), `checkpoint ${newest.cno} at ${at}`)
        }
        await f.close()
      }
      for (const cno of cnos.slice(-3, -1)) {
        const got = await hashCheckpoint(store, cno)
        assert.equal(got.bytes, SIZE)
        assert.equal(
          got.sha,
          hashBlocks(SIZE, seeds.get(cno) as number),
          `checkpoint ${cno} reads back different bytes`,
        )
      }

      const r1 = await gc(store, { keep: 1, graceMs: 0 })
      assert.deepEqual(r1.kept, [newest.cno])
      const after1 = await listCheckpoints(store)
      assert.deepEqual(
        after1.checkpoints.map((c) => c.cno),
        [newest.cno],
      )
      const live = after1.storedBytes
      // What is left is exactly what the published checkpoint reaches: its own objects
      // (a full rewrite reaches nothing older), all of them only its.
      assert.equal(after1.checkpoints[0]?.uniqueBytes, live)
      assert.ok(live <= newest.bytes, `live ${live} > the ${newest.bytes} bytes checkpoint ${newest.cno} wrote`)
      const v = await verifyCheckpoint(store)
      assert.deepEqual(v.problems, [])
      const uploads = []
      for await (const u of store.listMultipart('')) uploads.push(u)
      assert.deepEqual(uploads, [])

      const ratio1 = live / SIZE
      const ratio3 = after3.storedBytes / live
      console.log(
        `gc-s3 space: ${REWRITES} × ${mib(SIZE)} written in ${(writeMs / 1000).toFixed(1)} s; stored before gc ` +
          `${mib(before.storedBytes)}; after gc --keep 3: ${mib(after3.storedBytes)} (${ratio3.toFixed(4)} × live); ` +
          `after gc --keep 1: ${mib(live)} live (${ratio1.toFixed(4)} × ${mib(SIZE)} of data); ` +
          `newest checkpoint wrote ${mib(newest.bytes)}`,
      )
      assert.ok(ratio1 <= 1.05, `live ${live} bytes is ${ratio1} × the data`)
      assert.ok(ratio3 <= 3.1, `after --keep 3: ${after3.storedBytes} bytes stored, ${ratio3} × live`)
    } finally {
      await clearS3Store(store)
    }
  })

  it("gc on a machine whose clock is 2 h off the server's: ages by the server's clock, a live writer's objects kept", {
    timeout: 120_000,
  }, async () => {
    const prefix = uniquePrefix('gc-skew')
    const store = await s3TestStore(prefix)
    const url = `s3://${await s3TestBucket()}/${prefix}`
    const HOURS_2 = 2 * 3600 * 1000
    const keys = async (cno: number) => {
      const out: string[] = []
      for await (const e of store.list('')) if (e.key.startsWith(`${segmentKey(cno, 0).slice(0, -2)}.`)) out.push(e.key)
      return out.sort()
    }
    // 1 MiB objects sent ahead (one PutObject each) under a 1 MiB dirty limit.
    const f = await SegmentFile.create(store, {
      dataCacheDirtyMaxBytesThreshold: MiB,
      segmentMaxObjectBytes: 4 * MiB,
      segmentMpuChunkSize: 5 * MiB,
      streamSegmentBytes: MiB,
    })
    try {
      await f.write(0, pattern(0, 4 * MiB, 1))
      assert.equal((await f.flush()).cno, 1)
      await f.write(0, pattern(0, 4 * MiB, 2))
      assert.equal((await f.flush()).cno, 2) // checkpoint 1 superseded: its objects are garbage
      const garbage = await keys(1)
      assert.ok(garbage.length >= 4, `checkpoint 1's objects: ${garbage.join(' ')}`)
      await new Promise((r) => setTimeout(r, 6500)) // older than the grace period (5 s; S3 dates to the second)
      // Checkpoint 3 in the making: its objects sent ahead, the writer alive, not flushed.
      const want = pattern(0, 6 * MiB, 3)
      await f.write(0, want)
      const live = await keys(3)
      assert.ok(live.length >= 4, `checkpoint 3's objects sent ahead: ${live.join(' ')}`)
      /** Every object of checkpoint 3 listed above is still there (more may have landed since). */
      const kept = async (when: string) => {
        const now = await keys(3)
        assert.deepEqual(
          live.filter((k) => !now.includes(k)),
          [],
          `gc on a clock ${when}: checkpoint 3's objects deleted`,
        )
      }

      // A clock 2 h behind: by it checkpoint 1's objects were written 2 h from now; by the server's, 6 s ago.
      const behind = await runCli(['gc', url, '--keep', '1', '--grace', '5s', '--json'], -HOURS_2)
      assert.equal(behind.status, 0, behind.stderr)
      assert.deepEqual(await keys(1), [], "gc on a clock behind: checkpoint 1's objects deleted")
      await kept('behind')

      // A clock 2 h ahead: checkpoint 3's objects are 2 h old by it, seconds by the server's.
      // A grace of a minute, not 5 s: the gc run before may take seconds on a loaded machine,
      // and 2 h is past either.
      const ahead = await runCli(['gc', url, '--keep', '1', '--grace', '60s', '--json'], HOURS_2)
      assert.equal(ahead.status, 0, ahead.stderr)
      await kept('ahead')
      assert.equal(JSON.parse(ahead.stdout).deletedObjects, 0)

      // The writer publishes checkpoint 3, and it reads back whole.
      assert.equal((await f.flush()).cno, 3)
      assert.ok((await readCheckpoint(store, 3)).equals(want), 'checkpoint 3 reads back')
    } finally {
      await f.close().catch(() => {})
      await clearS3Store(store)
    }
  })

  it('rm deletes every object of the container, the inode last', { timeout: 60_000 }, async () => {
    const prefix = uniquePrefix('gc-rm')
    const store = await s3TestStore(prefix)
    const url = `s3://${await s3TestBucket()}/${prefix}`
    // Small objects (64 KiB), several per checkpoint, each in one PutObject (S3 wants 5 MiB pieces).
    const settings = { ...smallSettings, segmentMpuChunkSize: 5 * MiB }
    try {
      const f = await SegmentFile.create(store, settings)
      for (let i = 0; i < 3; i++) {
        await f.write(i * 200 * KiB, pattern(i * 200 * KiB, 256 * KiB, i + 1))
        await f.flush()
      }
      await f.close()
      // An abandoned attempt: a multipart upload left open (its claim an empty object).
      const abandonedKey = segmentKey(f.cno + 5, 1)
      await store.createMultipart(abandonedKey, { ifNoneMatch: '*' })
      const keys: string[] = []
      let segmentBytes = 0
      for await (const e of store.list('')) {
        keys.push(e.key)
        if (e.key !== INODE_KEY) segmentBytes += e.size
      }
      assert.ok(keys.includes(INODE_KEY) && keys.includes(abandonedKey) && keys.length >= 8, keys.join(' '))

      // While rm runs: once the inode is gone, no segment object may be left.
      let rmDone = false
      let polls = 0
      let inodeGoneSeen = 0
      const violations: string[] = []
      const watcher = (async () => {
        while (!rmDone) {
          polls++
          if ((await store.head(INODE_KEY)) !== undefined) continue
          inodeGoneSeen++
          const left: string[] = []
          for await (const e of store.list('')) left.push(e.key)
          if (left.length > 0) violations.push(`inode gone, but ${left.join(' ')} left`)
        }
      })()
      const r = await runCli(['rm', url, '--yes', '--json'])
      rmDone = true
      await watcher
      assert.equal(r.status, 0, r.stderr)
      const out = JSON.parse(r.stdout)
      assert.deepEqual(out, {
        url: store.url,
        deletedObjects: keys.length,
        deletedBytes: segmentBytes,
        abortedUploads: 1,
      })
      assert.deepEqual(violations, [])
      const left: string[] = []
      for await (const e of store.list('')) left.push(e.key)
      assert.deepEqual(left, [])
      const uploads = []
      for await (const u of store.listMultipart('')) uploads.push(u)
      assert.deepEqual(uploads, [])
      await rejectsCode(SegmentFile.open(store), 'ERR_NOT_FOUND')
      await rejectsCode(SegmentFile.open(store, { readOnly: true }), 'ERR_NOT_FOUND')
      console.log(
        `gc-s3 rm: ${keys.length} objects (${segmentBytes} segment bytes) and 1 upload removed in ${r.ms.toFixed(0)} ms ` +
          `(process included); the watcher polled ${polls} times, saw the inode gone ${inodeGoneSeen} times`,
      )
    } finally {
      await clearS3Store(store) // nothing is left when rm did its work
    }
  })
})
