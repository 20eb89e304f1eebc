/**
 * Ages by the store's clock (ObjectStore.now), not this machine's: the cleaner's grace
 * period, a writer's roll-forward and uploadFile's resume measure how old objects and
 * uploads are, and the store dates them by its own clock, which may be hours away from
 * this machine's. Here a memory store dates them `skewMs` from this machine's clock and
 * says so, and a directory store is read on a process clock moved 2 h ahead of the
 * kernel's; test/admin/gc-s3.test.ts runs the cleaner on a skewed clock against radosgw.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { readInode } from '../../lib/container/inode.js'
import { INODE_KEY } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ListEntry, ListOptions, MultipartUpload, ObjectStore, RequestOptions } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { pattern } from '../helpers/pattern.js'
import { interruptedUpload, writePatternFile } from '../helpers/resume.js'

const MiB = 1024 * 1024
const HOURS_2 = 2 * 3600 * 1000

/** A memory store whose clock runs `skewMs` from this machine's: it dates objects and uploads by it. */
class SkewedStore extends MemoryStore {
  constructor(readonly skewMs: number) {
    super()
  }
  now(): number {
    return Date.now() + this.skewMs
  }
  override async *list(prefix?: string, options?: ListOptions): AsyncIterable<ListEntry> {
    for await (const e of super.list(prefix, options)) yield { ...e, lastModifiedMs: e.lastModifiedMs + this.skewMs }
  }
  override async *listMultipart(prefix?: string, options?: RequestOptions): AsyncIterable<MultipartUpload> {
    for await (const u of super.listMultipart(prefix, options)) yield { ...u, initiatedMs: u.initiatedMs + this.skewMs }
  }
}

/** The keys of checkpoint `cno`'s objects in `store`. */
async function keysOf(store: ObjectStore, cno: number): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) if (e.key.startsWith(`${String(cno).padStart(10, '0')}.`)) out.push(e.key)
  return out.sort()
}

/** Objects of ~1 MiB sent ahead (a 1 MiB dirty limit): a writer's objects are in the store before its flush. */
const SEND_AHEAD = { dataCacheDirtyMaxBytesThreshold: MiB, streamSegmentBytes: MiB }

/**
 * Checkpoint 1 published, then a live writer's checkpoint 2 with objects sent ahead, not
 * flushed, while `runGc` runs gc: every object it had sent is still there (their age is
 * seconds by `clock`), and checkpoint 2, then published, reads back whole.
 */
async function liveWriterKept(store: ObjectStore, clock: string, runGc: () => Promise<void>): Promise<void> {
  const f = await SegmentFile.create(store, SEND_AHEAD)
  await f.write(0, pattern(0, 2 * MiB, 1))
  assert.equal((await f.flush()).cno, 1)
  const want = pattern(0, 6 * MiB, 2)
  await f.write(0, want)
  const live = await keysOf(store, 2)
  assert.ok(live.length >= 3, `objects sent ahead: ${live.join(' ')}`)
  await runGc()
  const now = await keysOf(store, 2)
  assert.deepEqual(
    live.filter((k) => !now.includes(k)),
    [],
    `the objects a live writer sent seconds ago (by ${clock}) are kept`,
  )
  assert.equal((await f.flush()).cno, 2)
  await f.close()
  const g = await SegmentFile.open(store, { readOnly: true })
  assert.ok(Buffer.from(await g.read(0, g.size)).equals(want), 'checkpoint 2 reads back whole')
  await g.close()
}

describe("ages by the store's clock", () => {
  it('gc, this machine 2 h ahead of the store: a live writer’s objects sent ahead are kept, its checkpoint then whole', async () => {
    const store = new SkewedStore(-HOURS_2)
    await liveWriterKept(store, 'the store', async () => {
      await gc(store, { graceMs: 60_000 })
    })
  })

  it('gc, the store 2 h ahead of this machine: what aged past the grace period by its clock is deleted', async () => {
    const store = new SkewedStore(HOURS_2)
    const f = await SegmentFile.create(store, SEND_AHEAD)
    await f.write(0, pattern(0, 2 * MiB, 1))
    await f.flush()
    await f.write(0, pattern(0, 2 * MiB, 2))
    await f.flush() // checkpoint 1 superseded: its objects are garbage
    await f.close()
    const garbage = await keysOf(store, 1)
    assert.ok(garbage.length >= 2, garbage.join(' '))
    await new Promise((r) => setTimeout(r, 50))
    const r = await gc(store, { graceMs: 20 })
    assert.deepEqual(r.dropped, [1])
    assert.deepEqual(await keysOf(store, 1), [], "checkpoint 1's objects, 50 ms old by the store, are deleted")
  })

  it('roll-forward, this machine 2 h ahead of the store: a part 0 written just now is left to its writer', async () => {
    const store = new SkewedStore(-HOURS_2)
    const f = await SegmentFile.create(store, {})
    await f.write(0, pattern(0, MiB, 1))
    await f.flush()
    const published = await store.get(INODE_KEY)
    await f.write(0, pattern(0, MiB, 2))
    assert.equal((await f.flush()).cno, 2)
    await f.close()
    await store.put(INODE_KEY, published) // as by a writer whose inode write is still to come
    const w = await SegmentFile.open(store, { rollForwardAfterMs: 60_000 })
    await w.close()
    assert.equal((await readInode(store)).inode.cno, 1, 'checkpoint 2 was not rolled forward')
    // A writer that does not wait rolls it forward: it is a candidate.
    const w2 = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
    await w2.close()
    assert.equal((await readInode(store)).inode.cno, 2, 'rolled forward with rollForwardAfterMs 0')
  })

  it('directory store, this machine 2 h ahead of the file system (the kernel dates files): gc keeps a live writer’s objects', async (t) => {
    const root = mkdtempSync(join(tmpdir(), 'ss-store-clock-dir-'))
    try {
      const store = new DirectoryStore(root)
      await liveWriterKept(store, 'the file system', async () => {
        // This process's clock reads 2 h ahead; the file system still dates files by the kernel's.
        const realNow = Date.now.bind(Date)
        t.mock.method(Date, 'now', () => realNow() + HOURS_2)
        try {
          const fsNow = await store.now()
          assert.ok(Math.abs(fsNow - realNow()) < 2000, `the store's clock ${fsNow}, the kernel's ${realNow()}`)
          assert.equal((await gc(store, { graceMs: 60_000 })).deletedObjects, 0)
        } finally {
          t.mock.restoreAll()
        }
      })
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })

  describe('resume', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-store-clock-'))
    after(() => rmSync(dir, { recursive: true, force: true }))

    it('uploadFile, this machine 2 h ahead of the store: an upload interrupted just now is resumed', async () => {
      const store = new SkewedStore(-HOURS_2)
      const path = join(dir, 'file.bin')
      const data = writePatternFile(path, 12 * MiB, 3)
      const settings = { segmentMpuChunkSize: MiB, segmentMpuMaxConcurrency: 2 }
      await interruptedUpload(path, store, settings, 6 * MiB)
      const t = await uploadFile(path, store, settings) // resumeMaxAgeMs: 30 min
      assert.ok(t.reusedBytes > 0, `reused ${t.reusedBytes} bytes of the interrupted upload`)
      const g = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await g.read(0, g.size)).equals(data))
      await g.close()
    })
  })
})
