/**
 * The write stream with a WAL: the stream is one atomic group in the log. A stream that
 * ended and whose publish failed (or whose process died) is published by the next writer
 * with the folder; one cut off mid-stream is dropped, whatever moment it was cut at.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { openStore } from '../../lib/store/open.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { runNode } from '../helpers/child.js'
import { prng } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { blockStream, pattern } from '../helpers/pattern.js'
import { countingCalls } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024
const CHILD = fileURLToPath(new URL('../helpers/stream-wal-child.js', import.meta.url))

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

async function tempDir(): Promise<string> {
  const d = await fs.mkdtemp(join(tmpdir(), 'ss-stream-wal-'))
  roots.push(d)
  return d
}

async function published(store: ObjectStore): Promise<Buffer> {
  const r = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await r.read(0, r.size))
  } finally {
    await r.close()
  }
}

async function concat(it: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const b of it) parts.push(Buffer.from(b))
  return Buffer.concat(parts)
}

/** A container holding `bytes` as its checkpoint 1. */
async function containerWith(store: ObjectStore, bytes: Buffer): Promise<void> {
  const f = await SegmentFile.create(store)
  await f.write(0, bytes)
  await f.flush()
  await f.close()
}

describe('createStreamSegmentWriteStream with a WAL', () => {
  it('logs the stream, publishes it at the end and leaves the log empty; nothing is sent ahead', async () => {
    const store = new FailingStore(new MemoryStore('sw-a'))
    const dir = join(await tempDir(), 'wal')
    const ws = createStreamSegmentWriteStream({ store, wal: { dir } })
    await pipeline(Readable.from(blockStream(6 * MiB, 256 * 1024)), ws)
    assert.equal(ws.flushTiming?.streamSentBytes, 0, 'nothing sent ahead')
    assert.deepEqual(await published(store), await concat(blockStream(6 * MiB, 256 * 1024)))
    const log = await inspectWal(dir)
    assert.deepEqual({ records: log.records, lockedBy: log.lockedBy }, { records: 0, lockedBy: undefined })
  })

  it('bad log options fail the call, before the folder is touched or any request made; a misspelt name is refused', async () => {
    const dir = join(await tempDir(), 'wal')
    const { store, calls: requests } = countingCalls(new MemoryStore())
    const bad: [object, RegExp][] = [
      [{ dir, sync: 'sometimes' }, /wal\.sync is string "sometimes"/],
      [{ dir, sync: 'interval', intervalMs: 0 }, /wal\.intervalMs is number 0/],
      [{ dir, synk: 'none' }, /wal: unknown option "synk" \(did you mean sync\?\)/],
    ]
    for (const [wal, message] of bad) {
      assert.throws(() => createStreamSegmentWriteStream({ store, wal: wal as never }), message)
      await rejectsCode(SegmentFile.create(store, { wal: wal as never }), 'ERR_INVALID_ARGUMENT', message)
      await rejectsCode(SegmentFile.open(store, { wal: wal as never }), 'ERR_INVALID_ARGUMENT', message)
    }
    assert.equal(requests(), 0)
    await assert.rejects(fs.stat(dir), { code: 'ENOENT' })
  })

  it('a stream whose publish failed after its end is published by the next writer with the folder', async () => {
    const inner = new MemoryStore('sw-b')
    await containerWith(inner, pattern(0, 100_000))
    const dir = join(await tempDir(), 'wal')
    const store = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }])
    const ws = createStreamSegmentWriteStream({ store, wal: { dir }, conflictRetries: 0 })
    await rejectsCode(pipeline(Readable.from(blockStream(3 * MiB, 25 * 4096)), ws), 'ERR_STORE')
    assert.deepEqual(await published(inner), pattern(0, 100_000), 'nothing published by the failed stream')

    const f = await SegmentFile.open(inner, { wal: { dir } })
    assert.ok((f.walReplay?.records ?? 0) > 0)
    await f.close()
    assert.deepEqual(await published(inner), await concat(blockStream(3 * MiB, 25 * 4096)))
  })

  it("the signal stops an open that publishes the log's earlier stream: its uploads are aborted, the log kept", {
    timeout: 60_000, // without the signal reaching those uploads, the stream waits on them for good
  }, async () => {
    const inner = new MemoryStore('sw-open')
    await containerWith(inner, pattern(0, 100_000))
    const dir = join(await tempDir(), 'wal')
    const failing = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }])
    const first = createStreamSegmentWriteStream({ store: failing, wal: { dir }, conflictRetries: 0 })
    await rejectsCode(pipeline(Readable.from(blockStream(1 * MiB, 64 * 1024)), first), 'ERR_STORE')

    // The next stream's open replays the first one and publishes it: every upload hangs.
    const store = new FailingStore(inner, [{ ops: ['put', 'createMultipart', 'uploadPart'], mode: 'hang' }])
    const ac = new AbortController()
    const ws = createStreamSegmentWriteStream({ store, wal: { dir }, signal: ac.signal })
    const errors: unknown[] = []
    ws.on('error', (err) => errors.push(err))
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()))
    await store.hangOf('put', 'createMultipart', 'uploadPart')
    ac.abort(new Error('stop'))
    await closed
    assert.ok(StreamSegmentError.is(errors[0], 'ERR_ABORTED'), String(errors[0]))
    assert.equal(ws.file, undefined, 'the open never completed')
    assert.deepEqual(await published(inner), pattern(0, 100_000), 'nothing published by the stopped open')

    // The log still holds the first stream, for the next writer with the folder.
    const f = await SegmentFile.open(inner, { wal: { dir } })
    assert.ok((f.walReplay?.records ?? 0) > 0)
    await f.close()
    assert.deepEqual(await published(inner), await concat(blockStream(1 * MiB, 64 * 1024)))
  })

  it('a stream destroyed mid-way leaves the container as it was, and its log empty', async () => {
    const store = new MemoryStore('sw-c')
    await containerWith(store, pattern(0, 50_000, 3))
    const dir = join(await tempDir(), 'wal')
    const ws = createStreamSegmentWriteStream({ store, wal: { dir } })
    const source = Readable.from(
      (async function* () {
        yield* blockStream(2 * MiB, 128 * 1024)
        throw new Error('the producer failed')
      })(),
    )
    const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()))
    await assert.rejects(pipeline(source, ws), /the producer failed/)
    await closed // the log's folder is released once the stream has closed
    assert.equal((await inspectWal(dir)).records, 0, 'the destroyed stream emptied its log')

    const f = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(f.walReplay?.records, 0, 'nothing of it is replayed')
    assert.equal(f.cno, 1)
    await f.close()
    assert.deepEqual(await published(store), pattern(0, 50_000, 3))
  })

  it('killed at random moments (SIGKILL): the container holds the old content or the whole stream, never a part', async () => {
    const runs = Number(process.env.WAL_STREAM_CRASH_RUNS ?? 20)
    const root = await tempDir()
    const rnd = prng(99)
    const old = pattern(0, 300_000, 1)
    const stream = await concat(blockStream(4 * MiB, 64 * 1024))
    let whole = 0
    let untouched = 0
    /**
     * Runs the child, killing it `killMs` after the line `after` (never when undefined);
     * resolves to its lines and its run time from `ready`.
     */
    const run = async (url: string, dir: string, killMs?: number, after = 'ready') => {
      let ready = 0
      const { lines } = await runNode(CHILD, [url, dir, String(4 * MiB), String(64 * 1024)], {
        onLine: (line, _, kill) => {
          if (line === 'ready') ready = performance.now()
          if (line === after && killMs !== undefined) kill(killMs)
        },
      })
      return { lines, ms: performance.now() - ready }
    }
    // How long a whole run takes here, from ready to exit. Half the kills fall anywhere in
    // that span, the others just after the source's end: at the commit, mid-flush, after it.
    const calibration = join(root, 'calibration')
    await containerWith(openStore(`file://${calibration}`), old)
    const { ms: span } = await run(`file://${calibration}`, `${calibration}-wal`)
    for (let i = 0; i < runs; i++) {
      const url = `file://${join(root, `c${i}`)}`
      const dir = join(root, `wal-${i}`)
      await containerWith(openStore(url), old)
      const { lines } =
        i % 2 === 0
          ? await run(url, dir, Math.floor(rnd() * span))
          : await run(url, dir, Math.floor(rnd() * 60), 'ended')
      const f = await SegmentFile.open(openStore(url), { wal: { dir } })
      const got = Buffer.from(await f.read(0, f.size))
      await f.close()
      const finished = lines.includes('finish')
      if (got.equals(stream)) whole++
      else {
        assert.ok(got.equals(old), `run ${i}: ${got.length} bytes, neither the old content nor the whole stream`)
        assert.ok(!finished, `run ${i}: the stream finished, yet its content is not published`)
        untouched++
      }
    }
    assert.ok(whole > 0 && untouched > 0, `the kills hit both sides of the end: ${whole} whole, ${untouched} untouched`)
  })
})
