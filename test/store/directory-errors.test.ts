/**
 * What the directory store's file system failures become: a refused permission is
 * ERR_AUTH and a store path through a regular file ERR_INVALID_ARGUMENT (neither passes
 * when tried again); a full or read-only disk stays ERR_STORE (directory-enospc.test.ts).
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore, fsError } from '../../lib/store/directory.js'

const errno = (code: string) => Object.assign(new Error(`${code}: something`), { code })

describe('directory store: file system failures', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-errors-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('each errno maps to the code that says whether trying again can help', () => {
    const cases: Array<[string, boolean, string]> = [
      ['EACCES', false, 'ERR_AUTH'],
      ['EPERM', false, 'ERR_AUTH'],
      ['ENOTDIR', false, 'ERR_INVALID_ARGUMENT'],
      ['ENAMETOOLONG', false, 'ERR_INVALID_ARGUMENT'],
      ['ENOTDIR', true, 'ERR_NOT_FOUND'],
      ['ENOENT', true, 'ERR_NOT_FOUND'],
      ['ENOSPC', false, 'ERR_STORE'],
      ['EROFS', false, 'ERR_STORE'],
      ['EIO', false, 'ERR_STORE'],
    ]
    for (const [code, missingIsNotFound, want] of cases) {
      const e = fsError('/s', errno(code), 'put k', missingIsNotFound)
      assert.equal(e.code, want, `${code} (missingIsNotFound ${missingIsNotFound})`)
      if (!missingIsNotFound) assert.match(e.message, new RegExp(`^/s: put k failed: .*\\(${code}\\)$`))
    }
    // Node refuses a path holding a NUL before any system call.
    const nul = Object.assign(new TypeError('path must be a string without null bytes'), {
      code: 'ERR_INVALID_ARG_VALUE',
    })
    assert.equal(fsError('/s', nul, 'put k').code, 'ERR_INVALID_ARGUMENT')
  })

  it('names the file the failed call was on: the key alone does not say which of the store files is at fault', async () => {
    const root = join(dir, 'stray')
    await mkdir(root)
    // A file where the store keeps its temporary files (a person's, or another program's).
    await writeFile(join(root, '.ss-tmp'), 'x')
    const store = new DirectoryStore(root)
    await assert.rejects(store.put('inode', Buffer.from('x')), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
      assert.ok(err.message.includes(`(ENOTDIR): open ${join(root, '.ss-tmp')}/`), err.message)
      return true
    })
    const renamed = Object.assign(new Error('EACCES: permission denied'), {
      code: 'EACCES',
      syscall: 'rename',
      path: '/s/.ss-tmp/t',
      dest: '/s/k',
    })
    assert.equal(
      fsError('/s', renamed, 'put k').message,
      '/s: put k failed: permission denied (EACCES): rename /s/.ss-tmp/t -> /s/k',
    )
  })

  it('a key whose file name is too long is ERR_INVALID_ARGUMENT, not ERR_STORE (trying again cannot help)', async () => {
    const store = new DirectoryStore(join(dir, 'long'))
    await assert.rejects(store.put('k'.repeat(256), Buffer.from('x')), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
      assert.match(err.message, /file name too long \(ENAMETOOLONG\)/)
      return true
    })
    const inRoot = new DirectoryStore(join(dir, 'nul\0root'))
    await assert.rejects(inRoot.put('k', Buffer.from('x')), (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'))
  })

  it('a nested key longer than a file name, each segment short: compare-and-swap and a claimed multipart work', async () => {
    const root = join(dir, 'nested')
    const store = new DirectoryStore(root)
    const key = `${'models/'.repeat(40)}inode`
    const { etag } = await store.put(key, Buffer.from('v1'), { ifNoneMatch: '*' })
    const v2 = await store.put(key, Buffer.from('v2'), { ifMatch: etag })
    assert.equal(Buffer.from(await store.get(key)).toString(), 'v2')
    await assert.rejects(store.put(key, Buffer.from('v3'), { ifMatch: etag }), (err) =>
      StreamSegmentError.is(err, 'ERR_CONFLICT'),
    )
    assert.equal((await store.head(key))?.etag, v2.etag)
    const part = `${'models/'.repeat(40)}0000000001.1`
    const id = await store.createMultipart(part, { ifNoneMatch: '*' })
    const p1 = await store.uploadPart(part, id, 1, Buffer.from('part bytes'))
    await store.completeMultipart(part, id, [{ partNumber: 1, etag: p1.etag }])
    assert.equal(Buffer.from(await store.get(part)).toString(), 'part bytes', 'the claimed placeholder stayed')
    await store.delete([key, part])
    assert.equal(await store.head(key), undefined)
    assert.deepEqual(await readdir(join(root, '.ss-lock')), [], 'a lock was left behind')
  })

  it('a store whose folder is under a regular file: ERR_INVALID_ARGUMENT naming ENOTDIR', async () => {
    const file = join(dir, 'plain-file')
    await writeFile(file, 'x')
    const store = new DirectoryStore(join(file, 'container'))
    await assert.rejects(store.put('inode', Buffer.from('x')), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
      assert.match(err.message, /a path in the store is not a folder \(ENOTDIR\)/)
      return true
    })
  })

  it('a file system without hard links: a create-only put is ERR_STORE saying so, never ERR_AUTH or ERR_CONFLICT', async (t) => {
    const root = join(dir, 'no-links')
    const store = new DirectoryStore(root)
    await store.put('plain', Buffer.from('a put without a condition renames: it works'))
    // As FAT, some FUSE and SMB mounts answer link(); EXDEV when .ss-tmp is another mount.
    for (const code of ['EPERM', 'ENOTSUP', 'EXDEV']) {
      t.mock.method(fsp, 'link', () =>
        Promise.reject(Object.assign(new Error(`${code}: link`), { code, syscall: 'link' })),
      )
      syncBuiltinESMExports() // the store takes fs from node:fs/promises
      try {
        await assert.rejects(store.put('inode', Buffer.from('x'), { ifNoneMatch: '*' }), (err) => {
          assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `${code}: ${err}`)
          assert.match(err.message, new RegExp(`put inode failed: .*hard links? .*\\(${code}\\).*create-only`))
          return true
        })
      } finally {
        t.mock.restoreAll()
        syncBuiltinESMExports()
      }
      assert.equal(await store.head('inode'), undefined, `${code}: the key stays empty`)
      assert.deepEqual(await readdir(join(root, '.ss-tmp')), [], `${code}: no temporary file is left`)
    }
    assert.equal((await store.put('inode', Buffer.from('x'), { ifNoneMatch: '*' })).etag.length, 32)
  })
})
