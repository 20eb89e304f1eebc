/**
 * The background publish (SegmentFile.publish): one object, part 0, built at the call and
 * uploaded while the handle takes further writes and reads; with a WAL, the log is cut to
 * the records after it once it lands, and kept whole when it does not.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FlushTiming } from '../../lib/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-publish-')

/** The content of checkpoint `cno` (the latest when undefined), as a new reader sees it. */
async function checkpoint(store: ObjectStore, cno?: number): Promise<Buffer> {
  const r = await SegmentFile.open(store, { readOnly: true, ...(cno === undefined ? {} : { cno }) })
  try {
    return await contents(r)
  } finally {
    await r.close()
  }
}

/** Settles `p` now or reports it still pending. */
async function state<T>(p: Promise<T>): Promise<'pending' | 'resolved' | 'rejected'> {
  const pending = Symbol('pending')
  const r = await Promise.race([
    p.then(
      () => 'resolved' as const,
      () => 'rejected' as const,
    ),
    new Promise<symbol>((ok) => setImmediate(() => ok(pending))),
  ])
  return r === pending ? 'pending' : (r as 'resolved' | 'rejected')
}

const MiB = 1024 * 1024

describe('SegmentFile.publish', () => {
  it('writes and reads go on while part 0 uploads; the checkpoint holds the bytes of the call; the log is then cut', async () => {
    const inner = new MemoryStore('pub-a')
    const store = new FailingStore(inner)
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 3 * MiB))
    const atCall = await contents(f)
    // Part 0 of the next checkpoint hangs until released: the publish cannot land.
    store.addRule({ ops: ['put', 'createMultipart'], key: /\.0$/, mode: 'hang' })
    const landed = f.publish()
    landed.catch(() => undefined)
    const before = store.calls.length

    // The handle goes on: a write over bytes part 0 holds, one past its end, reads of both.
    await f.write(MiB, pattern(MiB, 8_192, 5))
    await f.write(3 * MiB, pattern(3 * MiB, 100_000, 6))
    const now = await contents(f)
    assert.deepEqual(await f.read(MiB, 8_192), pattern(MiB, 8_192, 5), 'a read sees the write made after publish()')
    assert.deepEqual(await f.read(0, 4_096), atCall.subarray(0, 4_096), 'a read of bytes part 0 holds')
    assert.equal(await state(landed), 'pending', 'the publish waits for its part 0')
    const uploads = store.calls.slice(before).filter((c) => ['put', 'createMultipart', 'uploadPart'].includes(c.op))
    assert.ok(
      uploads.every((c) => c.key.endsWith('.0')),
      `the writes sent nothing: ${uploads.map((c) => `${c.op} ${c.key}`)}`,
    )
    const log = await inspectWal(dir)
    assert.equal(log.generations.length, 2, 'the writes after publish() went to a new log file')

    store.clearRules()
    store.release()
    const t: FlushTiming = await landed
    assert.equal(t.objects, 1, 'one object: part 0')
    assert.equal(t.cno, 1)
    assert.deepEqual(await checkpoint(inner, 1), atCall, 'checkpoint 1 is the file as it was at the call')
    const cut = await inspectWal(dir)
    assert.deepEqual(
      { files: cut.generations.length, records: cut.records },
      { files: 1, records: 2 },
      'the log holds the two writes made after the publish, no more',
    )

    // What came after is the next checkpoint's; a flush publishes it.
    assert.deepEqual(await contents(f), now)
    const next = await f.flush()
    assert.equal(next.cno, 2)
    assert.deepEqual(await checkpoint(inner), now)
    await f.close()
  })

  it('a failing store leaves every change and the log whole; the next publish, or the next open, publishes them', async () => {
    const inner = new MemoryStore('pub-b')
    const store = new FailingStore(inner)
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 200_000))
    await f.flush()
    await f.write(50_000, pattern(50_000, 30_000, 2))
    store.addRule({ ops: ['put'], key: /\.0$/, mode: 'error' })
    await rejectsCode(f.publish(), 'ERR_STORE', /injected failure/)
    assert.equal((await inspectWal(dir)).records, 1, 'the record is still in the log')
    await f.write(190_000, pattern(190_000, 20_000, 3))
    const want = await contents(f)

    // The inode fails now: part 0 lands, the checkpoint is not published.
    store.clearRules()
    store.addRule({ ops: ['put'], key: /^inode$/, mode: 'error' })
    await rejectsCode(f.publish(), 'ERR_STORE')
    assert.deepEqual(await checkpoint(inner), pattern(0, 200_000), 'nothing was published')
    assert.equal((await inspectWal(dir)).records, 2)
    await f.close()

    // A new writer with the log: the replay publishes every change.
    const g = await SegmentFile.open(inner, { wal: { dir } })
    assert.equal(g.walReplay?.records, 2)
    assert.deepEqual(await checkpoint(inner), want)
    await g.write(0, pattern(0, 4_096, 9))
    const t = await g.publish()
    assert.equal(t.objects, 1)
    want.set(pattern(0, 4_096, 9), 0)
    assert.deepEqual(await checkpoint(inner), want)
    assert.equal((await inspectWal(dir)).records, 0, 'the log is empty once the publish landed')
    await g.close()
  })

  it('publishes in order, one after the other, and a publish with nothing new is a no-op', async () => {
    const store = new MemoryStore('pub-c')
    const f = await SegmentFile.create(store, { wal: { dir: await walDir() } })
    const states: Buffer[] = []
    const landed: Array<Promise<FlushTiming>> = []
    for (let i = 0; i < 5; i++) {
      await f.write(i * 10_000, pattern(i * 10_000, 15_000, i))
      states.push(await contents(f))
      landed.push(f.publish())
    }
    const timings = await Promise.all(landed)
    assert.deepEqual(
      timings.map((t) => t.cno),
      [1, 2, 3, 4, 5],
    )
    for (const [i, t] of timings.entries()) assert.deepEqual(await checkpoint(store, t.cno), states[i])
    const again = await f.publish()
    assert.deepEqual({ cno: again.cno, objects: again.objects }, { cno: 5, objects: 0 })
    await f.close()
  })

  it('refuses a checkpoint larger than one object, and writes by reference; flush() writes those', async () => {
    const store = new MemoryStore('pub-d')
    const f = await SegmentFile.create(store, { wal: { dir: await walDir() }, segmentMaxObjectBytes: 3 * MiB })
    await f.write(0, pattern(0, 6 * MiB))
    await rejectsCode(f.publish(), 'ERR_STATE', /over segmentMaxObjectBytes \(3145728\); use flush\(\)/)
    const t = await f.flush()
    assert.ok(t.objects >= 2, `flush wrote ${t.objects} objects`)
    assert.deepEqual(await checkpoint(store), pattern(0, 6 * MiB))
    await f.close()

    const g = await SegmentFile.open(store)
    await g.writeRef(0, 8_192, { read: async (at: number, n: number) => pattern(at, n, 4) })
    await rejectsCode(g.publish(), 'ERR_STATE', /writes by reference; use flush\(\)/)
    await g.flush()
    assert.deepEqual((await checkpoint(store)).subarray(0, 8_192), pattern(0, 8_192, 4))
    await g.close()
  })

  it('a checkpoint over one object publishes when what is left after the objects sent ahead fits in one', async () => {
    const store = new MemoryStore('pub-g')
    const f = await SegmentFile.create(store, { segmentMaxObjectBytes: 3 * MiB, streamSegmentBytes: MiB })
    await f.write(0, pattern(0, 6 * MiB))
    const t = await f.publish()
    assert.ok(
      t.objects >= 2 && t.streamSentBytes > 0,
      `publish wrote ${t.objects} objects, ${t.streamSentBytes} sent ahead`,
    )
    assert.deepEqual(await checkpoint(store), pattern(0, 6 * MiB))
    await f.close()
  })

  it('without a WAL: objects sent ahead are awaited, then part 0 goes in the background', async () => {
    const store = new MemoryStore('pub-e')
    const f = await SegmentFile.create(store, { streamSegmentBytes: 256 * 1024 })
    for (let at = 0; at < 2 * MiB; at += 64 * 1024) await f.write(at, pattern(at, 64 * 1024, 1))
    const atCall = await contents(f)
    const landed = f.publish()
    await f.write(0, pattern(0, MiB, 2))
    const t = await landed
    assert.ok(t.streamSentBytes > 0, 'objects were sent ahead before the publish')
    assert.deepEqual(await checkpoint(store, t.cno), atCall)
    await f.flush()
    const want = Buffer.from(atCall)
    want.set(pattern(0, MiB, 2), 0)
    assert.deepEqual(await checkpoint(store), want)
    await f.close()
  })
})
