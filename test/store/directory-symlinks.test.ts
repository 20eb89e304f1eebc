/**
 * Symbolic links and the directory store: a root reached through one is the folder it
 * points to; a symlink at a key's path is no object (as list passes it over), so no call
 * reads, or removes, what it points to outside the store.
 */
import assert from 'node:assert/strict'
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore } from '../../lib/store/directory.js'

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
    assert.deepEqual(await keys(store), ['a', 'b'])
    assert.deepEqual(await keys(new DirectoryStore(join(dir, 'real'))), ['a', 'b'], 'the same objects')
    await store.delete(['a', 'b'])
    assert.deepEqual(await keys(store), [])
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
