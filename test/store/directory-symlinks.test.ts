/**
 * Symbolic links and the directory store: a root reached through one is the folder it
 * points to; a symlink at a key's path is no object (as list passes it over), and one in
 * a key's folders is refused, so no call reads, writes or removes what it points to
 * outside the store.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore, sweepStoreLeftovers } from '../../lib/store/directory.js'

async function keys(store: DirectoryStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) out.push(e.key)
  return out
}

describe('directory store: symbolic links', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-symlinks-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('a root that is a symlink to a folder works as that folder: puts, compare-and-swap, list, delete', async () => {
    await mkdir(join(dir, 'real'))
    await symlink('real', join(dir, 'link'))
    const store = new DirectoryStore(join(dir, 'link'))
    await store.put('a', Buffer.from('one'))
    const { etag } = await store.put('b', Buffer.from('two'), { ifNoneMatch: '*' })
    await store.put('b', Buffer.from('three'), { ifMatch: etag })
    assert.equal(Buffer.from(await store.get('b')).toString(), 'three')
    // Keys in folders too: the root's own link is not one below it.
    await store.put('p/seg/c', Buffer.from('four'), { ifNoneMatch: '*' })
    assert.equal(Buffer.from(await store.get('p/seg/c')).toString(), 'four')
    assert.equal((await store.head('p/seg/c'))?.size, 4)
    assert.deepEqual(await keys(store), ['a', 'b', 'p/seg/c'])
    assert.deepEqual(await keys(new DirectoryStore(join(dir, 'real'))), ['a', 'b', 'p/seg/c'], 'the same objects')
    await store.delete(['a', 'b', 'p/seg/c'])
    assert.deepEqual(await keys(store), [])
  })

  it('a symlink in a key’s folders is refused, ERR_STORE naming the key and the folder: nothing outside is read, written or removed', async () => {
    const root = join(dir, 'folders')
    const store = new DirectoryStore(root)
    await store.put('p/seg/kept', Buffer.from('an object'))
    const outside = join(dir, 'elsewhere')
    await mkdir(outside)
    await writeFile(join(outside, 'secret'), 'not the store’s')
    // A key's first folder, and one further down, made links to a folder outside the root.
    await symlink(outside, join(root, 'q%2F'))
    await symlink(outside, join(root, 'p%2F', 'out%2F'))
    const refused = (key: string, folder: string) => (err: unknown) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
      assert.ok(err.message.includes(key), err.message)
      assert.ok(err.message.includes(join(root, folder)), err.message)
      return true
    }
    for (const [key, folder] of [
      ['q/secret', 'q%2F'],
      ['p/out/secret', 'p%2F/out%2F'],
    ] as const) {
      await assert.rejects(store.get(key), refused(`get ${key}`, folder))
      await assert.rejects(store.getChunks(key), refused(`get ${key}`, folder))
      await assert.rejects(store.head(key), refused(`head ${key}`, folder))
      await assert.rejects(store.delete(key), refused(`delete ${key}`, folder))
      await assert.rejects(store.put(key, Buffer.from('x')), refused(`put ${key}`, folder))
      await assert.rejects(store.put(`${key}2`, Buffer.from('x'), { ifNoneMatch: '*' }), refused(key, folder))
      const id = await store.createMultipart('target')
      await assert.rejects(
        store.uploadPartCopy('target', id, 1, { store, key, range: { start: 0, end: 1 } }),
        refused(`copy source ${key}`, folder),
      )
      await store.abortMultipart('target', id)
      const up = await store.createMultipart(key)
      const part = await store.uploadPart(key, up, 1, Buffer.from('x'))
      await assert.rejects(store.completeMultipart(key, up, [{ partNumber: 1, ...part }]), refused(key, folder))
    }
    assert.deepEqual(await readdir(outside), ['secret'], 'nothing written outside')
    assert.equal(await readFile(join(outside, 'secret'), 'utf8'), 'not the store’s')
    // list passes the links over (as a symlink at a key's path), a cycle among them included.
    await symlink('..', join(root, 'p%2F', 'loop%2F'))
    assert.deepEqual(await keys(store), ['p/seg/kept'])
    assert.equal(Buffer.from(await store.get('p/seg/kept')).toString(), 'an object')
  })

  it('a symlink in place of a sidecar is not followed: a put writes no file it points to, head reads none', async (t) => {
    const root = join(dir, 'sidecars')
    const store = new DirectoryStore(root)
    await store.put('first', Buffer.from('makes the store'))
    const outside = join(dir, 'victim.json')
    const theirs = JSON.stringify({ 'ss:etag': '0'.repeat(32), who: 'outside' })
    await writeFile(outside, theirs)
    // The link is put where the put's sidecar goes just before the put opens it (the
    // temporary file's inode number, known to nobody sooner).
    const open = fsp.open
    let planted = false
    t.mock.method(fsp, 'open', async (path: unknown, ...rest: unknown[]) => {
      if (!planted && typeof path === 'string' && path.startsWith(join(root, '.ss-meta/'))) {
        planted = true
        await symlink(outside, path)
      }
      return (open as (...a: unknown[]) => unknown)(path, ...rest)
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    let etag = ''
    try {
      ;({ etag } = await store.put('k', Buffer.from('mine'), { metadata: { who: 'me' } }))
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.ok(planted)
    assert.equal(await readFile(outside, 'utf8'), theirs, 'the file the link points to is untouched')
    assert.deepEqual(await store.head('k'), { size: 4, etag, metadata: { who: 'me' } })
    // A link made where an object's sidecar is: not read as its metadata and ETag.
    const sidecar = join(root, '.ss-meta', String((await stat(join(root, 'k'))).ino))
    await rm(sidecar)
    await symlink(outside, sidecar)
    const found = await store.head('k')
    assert.deepEqual(found?.metadata, {})
    assert.notEqual(found?.etag, '0'.repeat(32))
  })

  it('the store’s own folders made symlinks: nothing they point to is swept, and writes are ERR_STORE naming the folder', async () => {
    const root = join(dir, 'own')
    const store = new DirectoryStore(root)
    await store.put('k', Buffer.from('an object'))
    // Files and folders of someone else's, old enough for a sweep of leftovers to take.
    const outside = join(dir, 'someone')
    await mkdir(join(outside, 'a-folder'), { recursive: true })
    await writeFile(join(outside, 'a-file'), 'theirs')
    const old = new Date(Date.now() - 2 * 3600_000)
    for (const name of ['a-file', 'a-folder']) await utimes(join(outside, name), old, old)
    for (const own of ['.ss-tmp', '.ss-multipart', '.ss-lock', '.ss-meta']) {
      await rm(join(root, own), { recursive: true })
      await symlink(outside, join(root, own))
    }
    await sweepStoreLeftovers(store)
    assert.deepEqual((await readdir(outside)).sort(), ['a-file', 'a-folder'], 'nothing swept')
    await assert.rejects(new DirectoryStore(root).put('k2', Buffer.from('x')), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
      assert.ok(err.message.includes(`${join(root, '.ss-tmp')} is a symbolic link`), err.message)
      assert.ok(err.message.startsWith(`${root}: put k2 failed: `), err.message) // the call and its key
      return true
    })
    assert.deepEqual((await readdir(outside)).sort(), ['a-file', 'a-folder'], 'nothing written')
  })

  it('a symlink at a key is no object: get is ERR_NOT_FOUND, head and list pass it over, delete leaves its target', async () => {
    const root = join(dir, 'store')
    const store = new DirectoryStore(root)
    await store.put('kept', Buffer.from('an object'))
    const outside = join(dir, 'outside.txt')
    await writeFile(outside, 'not the store’s')
    await symlink(outside, join(root, 'evil'))
    await assert.rejects(store.get('evil'), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_NOT_FOUND'), String(err))
      return true
    })
    assert.equal(await store.head('evil'), undefined)
    assert.deepEqual(await keys(store), ['kept'])
    await store.delete('evil')
    assert.equal(await readFile(outside, 'utf8'), 'not the store’s', 'the target is untouched')
    // A create-only put finds the name taken (link() does not follow it), as any file there.
    await assert.rejects(store.put('evil', Buffer.from('x'), { ifNoneMatch: '*' }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CONFLICT'), String(err))
      return true
    })
    // A put replaces the link itself, never writing through it.
    await store.put('evil', Buffer.from('mine'))
    assert.equal(Buffer.from(await store.get('evil')).toString(), 'mine')
    assert.equal(await readFile(outside, 'utf8'), 'not the store’s')
  })
})
