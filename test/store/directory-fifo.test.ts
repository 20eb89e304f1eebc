/**
 * A FIFO someone put where the directory store keeps a key, a sidecar, an uploaded part, an
 * upload's record or a lock's owner file: every call answers at once, as for one that is
 * not there. A blocking open(2) of a FIFO waits for a writer in libuv's thread pool, where
 * no signal reaches it and the process cannot exit (four of them fill the pool and stop
 * every file call).
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { constants, promises as fs } from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { DirectoryStore, sweepStoreLeftovers } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { within, withinFreeingFifo } from '../helpers/containers.js'

describe('directory store: a FIFO in the store', () => {
  let dir = ''
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-dir-fifo-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('a FIFO at a key: get, getChunks and uploadPartCopy are ERR_NOT_FOUND at once; head and list pass it over', async () => {
    const store = new DirectoryStore(join(dir, 'key'))
    await store.put('other', Buffer.from('x'))
    const fifo = store.pathOf('pipe')
    execFileSync('mkfifo', [fifo])
    await withinFreeingFifo(rejectsCode(store.get('pipe'), 'ERR_NOT_FOUND', /pipe/), fifo, 'get')
    await withinFreeingFifo(
      rejectsCode(store.getChunks('pipe', { range: { start: 0, end: 10 } }), 'ERR_NOT_FOUND'),
      fifo,
      'getChunks',
    )
    const id = await store.createMultipart('copy')
    await withinFreeingFifo(
      rejectsCode(
        store.uploadPartCopy('copy', id, 1, { store, key: 'pipe', range: { start: 0, end: 1 } }),
        'ERR_NOT_FOUND',
        /pipe/,
      ),
      fifo,
      'uploadPartCopy',
    )
    assert.equal(await store.head('pipe'), undefined)
    const keys: string[] = []
    for await (const e of store.list('')) keys.push(e.key)
    assert.deepEqual(keys, ['other'])
    assert.ok((await fs.lstat(fifo)).isFIFO(), 'left as it is')
  })

  it('a FIFO in place of a sidecar: head and list answer at once, the object read as it is', async () => {
    const store = new DirectoryStore(join(dir, 'sidecar'))
    await store.put('k', Buffer.from('bytes'), { metadata: { a: 'b' } })
    const { ino } = await fs.stat(store.pathOf('k'))
    const sidecar = join(store.root, '.ss-meta', String(ino))
    await fs.rm(sidecar)
    execFileSync('mkfifo', [sidecar])
    // As an object written before sidecars: no metadata, an ETag from the file's identity.
    const info = await withinFreeingFifo(store.head('k'), sidecar, 'head')
    assert.equal(info?.size, 5)
    assert.deepEqual(info?.metadata, {})
    assert.match(info?.etag ?? '', /^[0-9a-f]+-5-[0-9a-f]+$/)
    const listed = await withinFreeingFifo(
      (async () => {
        const out: string[] = []
        for await (const e of store.list('')) out.push(`${e.key}:${e.size}`)
        return out
      })(),
      sidecar,
      'list',
    )
    assert.deepEqual(listed, ['k:5'])
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.from('bytes'))
  })

  it('a FIFO where a put’s sidecar goes: the put answers at once, its sidecar written in the FIFO’s place', async (t) => {
    const store = new DirectoryStore(join(dir, 'new-sidecar'))
    await store.put('first', Buffer.from('makes the store'))
    const meta = join(store.root, '.ss-meta')
    // The FIFO is made where the put's sidecar goes just before the put opens it (the
    // temporary file's inode number, known to nobody sooner).
    const open = fs.open
    let fifo = ''
    t.mock.method(fs, 'open', async (path: unknown, ...rest: unknown[]) => {
      if (fifo === '' && typeof path === 'string' && path.startsWith(`${meta}/`)) {
        fifo = path
        execFileSync('mkfifo', [path])
      }
      return (open as (...a: unknown[]) => unknown)(path, ...rest)
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    const put = store.put('k', Buffer.from('bytes'), { metadata: { a: 'b' } })
    try {
      const { etag } = await within(put, 2_000, 'put')
      assert.deepEqual(await store.head('k'), { size: 5, etag, metadata: { a: 'b' } })
      assert.ok((await fs.lstat(fifo)).isFile(), 'the FIFO replaced by the sidecar')
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
      // A writer stuck in its open (the bug) is let go by a reader, or the process could not exit.
      const r = await fs.open(fifo, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => undefined)
      await put.catch(() => {})
      await r?.close()
    }
  })

  it('a FIFO among an upload’s parts: listParts passes it over at once', async () => {
    const store = new DirectoryStore(join(dir, 'parts'))
    const id = await store.createMultipart('m')
    await store.uploadPart('m', id, 1, Buffer.from('part one'))
    const fifo = join(store.root, '.ss-multipart', id, '2')
    execFileSync('mkfifo', [fifo])
    const parts = await withinFreeingFifo(store.listParts('m', id), fifo, 'listParts')
    assert.deepEqual(
      parts.map((p) => [p.partNumber, p.size]),
      [[1, 8]],
    )
  })
})

describe('directory store: a FIFO in place of its own records', () => {
  let dir = ''
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-dir-fifo-records-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('in place of an upload’s upload.json: the upload is not found at once, and listMultipart passes it over', async () => {
    const store = new DirectoryStore(join(dir, 'upload'))
    const id = await store.createMultipart('m')
    const part = await store.uploadPart('m', id, 1, Buffer.from('part one'))
    const fifo = join(store.root, '.ss-multipart', id, 'upload.json')
    await fs.rm(fifo)
    execFileSync('mkfifo', [fifo])
    await withinFreeingFifo(
      rejectsCode(store.uploadPart('m', id, 2, Buffer.from('two')), 'ERR_NOT_FOUND', /m: no multipart upload/),
      fifo,
      'uploadPart',
    )
    await withinFreeingFifo(
      rejectsCode(store.listParts('m', id), 'ERR_NOT_FOUND', /no multipart upload/),
      fifo,
      'listParts',
    )
    await withinFreeingFifo(
      rejectsCode(store.completeMultipart('m', id, [{ partNumber: 1, etag: part.etag }]), 'ERR_NOT_FOUND'),
      fifo,
      'completeMultipart',
    )
    const open = await withinFreeingFifo(
      (async () => {
        const out: string[] = []
        for await (const u of store.listMultipart('')) out.push(u.uploadId)
        return out
      })(),
      fifo,
      'listMultipart',
    )
    assert.deepEqual(open, [])
  })

  it('as the owner file of a lock staging folder: the sweep of leftovers passes it over at once', async () => {
    const store = new DirectoryStore(join(dir, 'staging'))
    await store.put('k', Buffer.from('one'))
    const staging = join(store.root, '.ss-tmp', 'lock-0123456789abcdef')
    await fs.mkdir(staging)
    const fifo = join(staging, 'owner-0123456789abcdef')
    execFileSync('mkfifo', [fifo])
    await withinFreeingFifo(sweepStoreLeftovers(store), fifo, 'the sweep')
    assert.ok((await fs.lstat(fifo)).isFIFO(), 'a young staging folder with no owner to check is left')
  })

  it('as the owner file of a key’s lock: no owner, broken once stale, and a conditional put goes on', async () => {
    const store = new DirectoryStore(join(dir, 'lock'))
    await store.put('k', Buffer.from('one'))
    const lockDir = join(store.root, '.ss-lock', createHash('sha256').update('k').digest('hex'))
    await fs.mkdir(lockDir, { recursive: true })
    const fifo = join(lockDir, 'owner-0123456789abcdef')
    execFileSync('mkfifo', [fifo])
    const old = new Date(Date.now() - 60_000)
    await fs.utimes(fifo, old, old)
    const etag = (await store.head('k'))?.etag
    await withinFreeingFifo(store.put('k', Buffer.from('two'), { ifMatch: etag }), fifo, 'a conditional put')
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.from('two'))
  })
})
