/**
 * What the directory store's file system failures become: a refused permission is
 * ERR_AUTH and a store path through a regular file ERR_INVALID_ARGUMENT (neither passes
 * when tried again); a full or read-only disk stays ERR_STORE (directory-enospc.test.ts).
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
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
})
