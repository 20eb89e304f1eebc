/**
 * `ls` (listCheckpoints, and the CLI's text and --json) reports the container's open
 * multipart uploads: how many, and the bytes their parts hold so far (an interrupted put
 * of a file leaves hundreds of MiB there, in no object); on an abandoned checkpoint's line
 * too when the upload's key is its part. Sized by listParts without MD5s: the directory
 * store then reads no part's bytes.
 */
import assert from 'node:assert/strict'
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { listCheckpoints } from '../../lib/admin/index.js'
import { MAX_UPLOADS_SIZED } from '../../lib/admin/list.js'
import { main } from '../../lib/cli.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { segmentKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore, RequestOptions, UploadedPart } from '../../lib/store/types.js'
import { fakeOutput } from '../helpers/cli.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const dirs: string[] = []
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'ss-list-uploads-'))
  dirs.push(d)
  return d
}

/** The parts each upload gets: 2 × 4096 + 1000 bytes under abandoned checkpoint 5; 3000 unclaimed under 6. */
const CLAIMED_BYTES = 2 * 4096 + 1000
const UNCLAIMED_BYTES = 3000

/**
 * A published checkpoint, then an interrupted put's upload (claimed: its empty placeholder
 * makes checkpoint 5 an abandoned attempt) and an upload without a claim under number 6.
 */
async function withOpenUploads(store: ObjectStore, partBytes?: number): Promise<void> {
  const f = await SegmentFile.create(store, smallSettings)
  await f.write(0, Buffer.alloc(10_000, 7))
  await f.flush()
  await f.close()
  const key = segmentKey(5, 1)
  const id = await store.createMultipart(key, { ifNoneMatch: '*', ...(partBytes ? { partBytes } : {}) })
  await store.uploadPart(key, id, 1, Buffer.alloc(4096, 1))
  await store.uploadPart(key, id, 2, Buffer.alloc(4096, 2))
  await store.uploadPart(key, id, 3, Buffer.alloc(1000, 3))
  const other = segmentKey(6, 2)
  const id2 = await store.createMultipart(other)
  await store.uploadPart(other, id2, 1, Buffer.alloc(UNCLAIMED_BYTES, 4))
}

/** `ls` of `url` through the CLI: its stdout, failing on a non-zero exit. */
async function ls(...args: string[]): Promise<string> {
  const out = fakeOutput()
  const err = fakeOutput()
  assert.equal(await main(['ls', ...args], out, err), 0, err.writes.join(''))
  return out.writes.join('')
}

/** A store without listParts: its uploads can be counted, not sized. */
class NoListParts extends WrappedStore {
  constructor(inner: ObjectStore) {
    super(inner)
    Object.defineProperty(this, 'listParts', { value: undefined })
  }
  protected override around<T>(_info: CallInfo, call: () => Promise<T>): Promise<T> {
    return call()
  }
}

/** Counts listParts calls, and fires `onListParts` before each. */
class CountingStore extends WrappedStore {
  listed = 0
  md5Asked: Array<boolean | undefined> = []
  onListParts?: () => void
  protected override around<T>(info: CallInfo, call: () => Promise<T>): Promise<T> {
    if (info.op === 'listParts') {
      this.listed++
      this.onListParts?.()
    }
    return call()
  }
  override listParts(key: string, uploadId: string, options?: RequestOptions & { md5?: boolean }) {
    this.md5Asked.push(options?.md5)
    return super.listParts(key, uploadId, options)
  }
}

describe('ls reports the open multipart uploads and what their parts hold', () => {
  for (const kind of ['memory', 'directory', 'directory (partBytes)'] as const) {
    it(`listCheckpoints, ls and ls --json, on the ${kind} store`, async () => {
      let store: ObjectStore
      let url: string
      if (kind === 'memory') {
        url = `mem://list-uploads-${process.pid}`
        store = new MemoryStore(url.slice('mem://'.length))
      } else {
        url = await tempDir()
        store = new DirectoryStore(url)
      }
      await withOpenUploads(store, kind === 'directory (partBytes)' ? 4096 : undefined)
      const list = await listCheckpoints(store)
      assert.equal(list.published, 1)
      assert.deepEqual(list.uploads, { count: 2, bytes: CLAIMED_BYTES + UNCLAIMED_BYTES, unsized: 0 })
      assert.deepEqual(list.abandoned, [{ cno: 5, parts: 1, bytes: 0, openUploads: 1, openUploadBytes: CLAIMED_BYTES }])
      const text = await ls(url)
      assert.match(
        text,
        new RegExp(
          `^abandoned: checkpoint 5 \\(1 part, 0 bytes, no part 0\\): not openable; its upload is still open, holding ${CLAIMED_BYTES} bytes so far$`,
          'm',
        ),
      )
      assert.match(
        text,
        new RegExp(
          `^open uploads: 2, holding ${CLAIMED_BYTES + UNCLAIMED_BYTES} bytes \\(11\\.9 KiB\\) so far, not in "stored": ` +
            'a put of the same file resumes one younger than 30 minutes; gc aborts those older than its grace period; rm aborts them$',
          'm',
        ),
      )
      const j = JSON.parse(await ls(url, '--json'))
      assert.deepEqual(j.uploads, list.uploads)
      assert.deepEqual(j.abandoned, list.abandoned)
    })
  }

  it('no upload open: count 0', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, Buffer.alloc(100, 1))
    await f.flush()
    await f.close()
    const list = await listCheckpoints(store)
    assert.deepEqual(list.uploads, { count: 0, bytes: 0, unsized: 0 })
  })

  it('a store without listParts: the uploads counted, their bytes unknown (−1, never 0)', async () => {
    const name = `list-uploads-nolp-${process.pid}`
    await withOpenUploads(new MemoryStore(name))
    const store = new NoListParts(new MemoryStore(name))
    assert.equal(store.listParts, undefined)
    const list = await listCheckpoints(store)
    assert.deepEqual(list.uploads, { count: 2, bytes: -1, unsized: 2 })
    assert.deepEqual(list.abandoned, [{ cno: 5, parts: 1, bytes: 0, openUploads: 1, openUploadBytes: -1 }])
  })

  it('a store that refuses to list uploads (ERR_AUTH) or their parts: the checkpoints listed, the uploads not known or not sized', async () => {
    const inner = new MemoryStore()
    await withOpenUploads(inner)
    const refusing = (op: string) =>
      new (class extends WrappedStore {
        protected override around<T>(info: CallInfo, call: () => Promise<T>): Promise<T> {
          if (info.op === op) return Promise.reject(StreamSegmentError.auth(`${op}: AccessDenied`))
          return call()
        }
      })(inner)
    const noUploads = await listCheckpoints(refusing('listMultipart'))
    assert.equal(noUploads.checkpoints.length, 1)
    assert.deepEqual(noUploads.uploads, { count: -1, bytes: -1, unsized: 0, refused: 'listMultipart: AccessDenied' })
    const noParts = await listCheckpoints(refusing('listParts'))
    assert.deepEqual(noParts.uploads, { count: 2, bytes: -1, unsized: 2 })
    assert.deepEqual(noParts.abandoned, [{ cno: 5, parts: 1, bytes: 0, openUploads: 1, openUploadBytes: -1 }])
    // Any other failure still fails the listing.
    const failing = new (class extends WrappedStore {
      protected override around<T>(info: CallInfo, call: () => Promise<T>): Promise<T> {
        if (info.op === 'listMultipart') return Promise.reject(StreamSegmentError.store('listMultipart: 500'))
        return call()
      }
    })(inner)
    await assert.rejects(listCheckpoints(failing), (e) => StreamSegmentError.is(e, 'ERR_STORE'))
  })

  it('asks for no MD5s, sizes at most MAX_UPLOADS_SIZED uploads (the newest), and honours its signal', async () => {
    const inner = new MemoryStore()
    await withOpenUploads(inner)
    for (let i = 0; i < MAX_UPLOADS_SIZED; i++) {
      const key = segmentKey(100 + i, 1)
      const id = await inner.createMultipart(key)
      await inner.uploadPart(key, id, 1, Buffer.alloc(10))
    }
    const store = new CountingStore(inner)
    const list = await listCheckpoints(store)
    assert.equal(store.listed, MAX_UPLOADS_SIZED)
    assert.ok(
      store.md5Asked.every((m) => m === false),
      String(store.md5Asked),
    )
    assert.equal(list.uploads.count, MAX_UPLOADS_SIZED + 2)
    assert.equal(list.uploads.unsized, 2)
    assert.ok(list.uploads.bytes >= (MAX_UPLOADS_SIZED - 2) * 10, String(list.uploads.bytes))
    // A signal fired while the parts are listed stops the listing.
    const ac = new AbortController()
    store.onListParts = () => ac.abort()
    await assert.rejects(listCheckpoints(store, { signal: ac.signal }), (e) => StreamSegmentError.is(e, 'ERR_ABORTED'))
  })
})

describe('DirectoryStore.listParts with md5: false', () => {
  for (const partBytes of [undefined, 4096]) {
    it(`gives sizes and ETags, no md5, and reads no part's bytes (${partBytes ? 'partBytes' : 'a file per part'})`, async () => {
      const dir = await tempDir()
      const store = new DirectoryStore(join(dir, 'c'))
      const key = segmentKey(3, 1)
      const id = await store.createMultipart(key, { ifNoneMatch: '*', ...(partBytes ? { partBytes } : {}) })
      const etags = [
        (await store.uploadPart(key, id, 1, Buffer.alloc(4096, 1))).etag,
        (await store.uploadPart(key, id, 2, Buffer.alloc(700, 2))).etag,
      ]
      // Every stream opened on a FileHandle, counted while listParts runs: how the store
      // reads a part's bytes for its MD5 (its records and upload.json are read otherwise).
      await writeFile(join(dir, 'probe'), 'x')
      const probe = await open(join(dir, 'probe'))
      const proto = Object.getPrototypeOf(probe) as Record<string, (...a: unknown[]) => unknown>
      await probe.close()
      const saved = new Map([['createReadStream', proto.createReadStream as (...a: unknown[]) => unknown]])
      let reads = 0
      const counted = async <T>(call: () => Promise<T>): Promise<T> => {
        for (const [m, f] of saved) {
          proto[m] = function (this: unknown, ...a: unknown[]) {
            reads++
            return f.apply(this, a)
          }
        }
        try {
          return await call()
        } finally {
          for (const [m, f] of saved) proto[m] = f
        }
      }
      const cheap: UploadedPart[] = await counted(() => store.listParts(key, id, { md5: false }))
      assert.equal(reads, 0, 'listParts with md5: false read bytes of the parts')
      assert.deepEqual(cheap, [
        { partNumber: 1, size: 4096, etag: etags[0] },
        { partNumber: 2, size: 700, etag: etags[1] },
      ])
      // The same parts as the full listing gives, less the MD5s; that one reads them.
      const full = await counted(() => store.listParts(key, id))
      assert.ok(reads > 0, 'the spy saw no read of a listing with MD5s')
      assert.deepEqual(
        full.map(({ md5: _, ...p }) => p),
        cheap,
      )
      assert.ok(full.every((p) => typeof p.md5 === 'string' && p.md5.length === 32))
    })
  }
})
