/**
 * A directory store's uploadPartCopy or completeMultipart whose signal fires while it copies
 * stops at its next step, ERR_ABORTED, and leaves nothing behind: no temporary file, no
 * part, no object. An aborted completion leaves the upload as it was, its parts intact, to
 * be completed (or aborted) later, as S3 leaves it. One whose signal fires once the bytes
 * are copied (at the last write, or while the object is fsynced) is not put in place
 * either. A claimed upload's placeholder is put with the caller's signal.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it, type TestContext } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'

type Write = FileHandle['write']
type Sync = FileHandle['sync']
type Read = FileHandle['read']

const MiB = 1024 * 1024
const SOURCE_BYTES = 16 * MiB
const PART_BYTES = 8 * MiB

describe('directory store: a copy or completion whose signal fires', () => {
  let dir = ''
  let proto: { write: Write; sync: Sync; read: Read }
  before(async () => {
    dir = await fsp.mkdtemp(join(tmpdir(), 'ss-dir-copy-abort-'))
    const fh = await fsp.open(dir, 'r')
    proto = Object.getPrototypeOf(fh) as { write: Write; sync: Sync; read: Read }
    await fh.close()
  })
  after(async () => {
    await fsp.rm(dir, { recursive: true, force: true })
  })

  /** A store at a root of its own holding `src`, SOURCE_BYTES of patterned bytes. */
  async function storeAt(name: string): Promise<{ store: DirectoryStore; src: Buffer }> {
    const store = new DirectoryStore(join(dir, name))
    const src = pattern(0, SOURCE_BYTES)
    await store.put('src', src)
    return { store, src }
  }

  /** Counts the bytes of each write to a file handle (the copy loops' writes), and aborts `ac` at the `nth`. */
  function abortAtWrite(t: TestContext, ac: AbortController, nth = 1): { calls: number; bytes: number } {
    const seen = { calls: 0, bytes: 0 }
    const write = proto.write
    t.mock.method(proto, 'write', function (this: FileHandle, ...args: unknown[]) {
      return (write as (...a: unknown[]) => Promise<{ bytesWritten: number }>).apply(this, args).then((r) => {
        seen.calls++
        seen.bytes += r.bytesWritten
        if (seen.calls === nth) ac.abort()
        return r
      })
    } as unknown as Write)
    return seen
  }

  async function keys(store: DirectoryStore): Promise<string[]> {
    const out: string[] = []
    for await (const e of store.list()) out.push(e.key)
    return out
  }

  async function tmpLeft(store: DirectoryStore): Promise<string[]> {
    return fsp.readdir(join(store.root, '.ss-tmp'))
  }

  it('uploadPartCopy of 16 MiB: stops after its first write, ERR_ABORTED, no part left', async (t) => {
    const { store } = await storeAt('copy')
    const id = await store.createMultipart('m')
    const ac = new AbortController()
    const seen = abortAtWrite(t, ac)
    try {
      await rejectsCode(
        store.uploadPartCopy(
          'm',
          id,
          1,
          { store, key: 'src', range: { start: 0, end: SOURCE_BYTES } },
          { signal: ac.signal },
        ),
        'ERR_ABORTED',
        /^upload part copy 1 of m aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(seen.calls, 1, 'writes: none after the abort')
    assert.ok(seen.bytes < SOURCE_BYTES, `copied ${seen.bytes} of the range's ${SOURCE_BYTES} bytes`)
    assert.deepEqual(await store.listParts('m', id), [], 'no part is left')
    assert.deepEqual(await keys(store), ['src'], 'the store lists nothing new')
    assert.deepEqual(await tmpLeft(store), [], 'no temporary file is left')
  })

  it('uploadPartCopy whose signal fires at its last write: ERR_ABORTED, the part not put in place', async (t) => {
    const { store } = await storeAt('copy-last')
    const id = await store.createMultipart('m')
    const ac = new AbortController()
    // One step's worth: the copy loop has no step left to look at the signal before.
    const seen = abortAtWrite(t, ac)
    try {
      await rejectsCode(
        store.uploadPartCopy('m', id, 1, { store, key: 'src', range: { start: 0, end: MiB } }, { signal: ac.signal }),
        'ERR_ABORTED',
        /^upload part copy 1 of m aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(seen.bytes, MiB, 'the range was copied whole')
    assert.deepEqual(await store.listParts('m', id), [], 'no part is left')
    assert.deepEqual(await tmpLeft(store), [], 'no temporary file is left')
  })

  /** An upload of `m` with two parts of PART_BYTES (the source's halves), listed as completeMultipart takes them. */
  async function twoParts(store: DirectoryStore, src: Buffer, claimed = false) {
    const id = await store.createMultipart('m', claimed ? { ifNoneMatch: '*' } : undefined)
    const parts = []
    for (const n of [1, 2]) {
      const { etag } = await store.uploadPart('m', id, n, src.subarray((n - 1) * PART_BYTES, n * PART_BYTES))
      parts.push({ partNumber: n, etag })
    }
    return { id, parts, listed: await store.listParts('m', id) }
  }

  /** The upload is as it was: its parts listed alike, and a completion without a signal makes the object. */
  async function stillCompletes(
    store: DirectoryStore,
    src: Buffer,
    up: Awaited<ReturnType<typeof twoParts>>,
  ): Promise<void> {
    assert.deepEqual(await store.listParts('m', up.id), up.listed, 'the parts are as they were')
    const open = (await collect(store.listMultipart())).map((u) => `${u.key} ${u.uploadId}`)
    assert.deepEqual(open, [`m ${up.id}`], 'the upload is still open')
    await store.completeMultipart('m', up.id, up.parts)
    assert.ok(Buffer.from(await store.get('m')).equals(src), 'the completion made later holds the parts, in order')
    assert.deepEqual(await tmpLeft(store), [], 'no temporary file is left')
  }

  for (const claimed of [false, true]) {
    const what = claimed ? 'a claimed upload' : 'an upload'
    it(`completeMultipart of ${what} of 2 parts of 8 MiB: stops after its first write, ERR_ABORTED, the upload kept`, async (t) => {
      const { store, src } = await storeAt(`complete-${claimed}`)
      const up = await twoParts(store, src, claimed)
      const ac = new AbortController()
      const seen = abortAtWrite(t, ac)
      try {
        await rejectsCode(
          store.completeMultipart('m', up.id, up.parts, { signal: ac.signal }),
          'ERR_ABORTED',
          /^complete multipart m aborted/,
        )
      } finally {
        t.mock.restoreAll()
      }
      assert.equal(seen.calls, 1, 'writes: none after the abort')
      assert.ok(seen.bytes < SOURCE_BYTES, `joined ${seen.bytes} of the parts' ${SOURCE_BYTES} bytes`)
      assert.deepEqual(await tmpLeft(store), [], 'no temporary file is left')
      if (claimed) assert.equal((await store.head('m'))?.size, 0, 'the key still holds the claim')
      else assert.equal(await store.head('m'), undefined, 'the key stays empty')
      await stillCompletes(store, src, up)
    })
  }

  it('completeMultipart whose signal fires at its last write: ERR_ABORTED, the object not put in place', async (t) => {
    const { store, src } = await storeAt('complete-last')
    const up = await twoParts(store, src)
    const ac = new AbortController()
    const seen = abortAtWrite(t, ac, SOURCE_BYTES / MiB)
    try {
      await rejectsCode(
        store.completeMultipart('m', up.id, up.parts, { signal: ac.signal }),
        'ERR_ABORTED',
        /^complete multipart m aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(seen.bytes, SOURCE_BYTES, 'the parts were joined whole')
    assert.equal(await store.head('m'), undefined, 'the key stays empty')
    await stillCompletes(store, src, up)
  })

  it('completeMultipart whose signal fires while the object is fsynced: ERR_ABORTED, not put in place', async (t) => {
    const { store, src } = await storeAt('complete-synced')
    const up = await twoParts(store, src)
    const ac = new AbortController()
    const sync = proto.sync
    t.mock.method(proto, 'sync', function (this: FileHandle) {
      return sync.call(this).then(() => ac.abort())
    } as Sync)
    try {
      await rejectsCode(
        store.completeMultipart('m', up.id, up.parts, { signal: ac.signal }),
        'ERR_ABORTED',
        /^complete multipart m aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(await store.head('m'), undefined, 'the key stays empty')
    await stillCompletes(store, src, up)
  })

  it('createMultipart with ifNoneMatch whose signal fires while its placeholder is fsynced: ERR_ABORTED, no claim, no upload', async (t) => {
    const { store } = await storeAt('claim')
    const ac = new AbortController()
    const sync = proto.sync
    t.mock.method(proto, 'sync', function (this: FileHandle) {
      return sync.call(this).then(() => ac.abort())
    } as Sync)
    try {
      await rejectsCode(
        store.createMultipart('m', { ifNoneMatch: '*', signal: ac.signal }),
        'ERR_ABORTED',
        /^put m aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(await store.head('m'), undefined, 'no placeholder claims the key')
    assert.deepEqual(await collect(store.listMultipart()), [], 'no upload is open')
    assert.deepEqual(await tmpLeft(store), [], 'no temporary file is left')
    await store.createMultipart('m', { ifNoneMatch: '*' }) // the claim made again is no conflict
  })

  it('listParts whose signal fires while it reads a 16 MiB part for its MD5: ERR_ABORTED, the part not read to its end', async (t) => {
    const { store, src } = await storeAt('list-parts')
    const id = await store.createMultipart('m')
    await store.uploadPart('m', id, 1, src)
    const ac = new AbortController()
    const seen = { reads: 0 }
    const read = proto.read
    t.mock.method(proto, 'read', function (this: FileHandle, ...args: unknown[]) {
      return (read as (...a: unknown[]) => Promise<{ bytesRead: number }>).apply(this, args).then((r) => {
        if (++seen.reads === 1) ac.abort()
        return r
      })
    } as unknown as Read)
    try {
      await rejectsCode(store.listParts('m', id, { signal: ac.signal }), 'ERR_ABORTED', /^list parts of m aborted/)
    } finally {
      t.mock.restoreAll()
    }
    assert.ok(seen.reads <= 2, `${seen.reads} reads of 1 MiB after the abort, of the part's 16`)
    assert.deepEqual(
      (await store.listParts('m', id)).map((p) => [p.partNumber, p.size]),
      [[1, SOURCE_BYTES]],
      'the part is there, listed whole once asked again',
    )
  })
})

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}
