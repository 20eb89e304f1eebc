/**
 * Removing a directory container leaves no folder of it: `removeContainer` removes the
 * store's own folders (`.ss-tmp`, `.ss-meta`, `.ss-lock`, `.ss-multipart`) once empty,
 * then the container's folder when that is empty too; a folder holding anything else (a
 * user's file, a key that is not the container's) stays with what it holds, and no
 * symlink is followed. A writer still running on the container makes the folders again at
 * its next write and finds the container removed as the docs say (its flush fails
 * ERR_CONFLICT, publishing nothing), not as a file system's ENOENT.
 */
import assert from 'node:assert/strict'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { removeContainer } from '../../lib/admin/remove.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { INODE_KEY } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore, removeEmptyStoreFolders } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const OWN = ['.ss-lock', '.ss-meta', '.ss-multipart', '.ss-tmp']

async function exists(path: string): Promise<boolean> {
  return fs.lstat(path).then(
    () => true,
    () => false,
  )
}

/** A container at `root`: two checkpoints of a few hundred KiB, written through multipart uploads. */
async function container(root: string): Promise<void> {
  const f = await SegmentFile.create(new DirectoryStore(root), smallSettings)
  await f.write(0, pattern(0, 200_000, 1))
  await f.flush()
  await f.write(100_000, pattern(100_000, 200_000, 2))
  await f.flush()
  await f.close()
}

describe('removeContainer on a directory store: no folder left', () => {
  let dir: string
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-rm-folders-'))
  })
  after(() => fs.rm(dir, { recursive: true, force: true }))

  it("removes the container's folder, the store's own folders in it first", async () => {
    const root = join(dir, 'alone')
    await container(root)
    assert.deepEqual((await fs.readdir(root)).filter((n) => n.startsWith('.')).sort(), OWN)
    const r = await removeContainer(root)
    assert.ok(r.deletedObjects >= 3, `${r.deletedObjects} objects deleted`)
    assert.equal(await exists(root), false, `${root} is left: ${await fs.readdir(root).catch(() => [])}`)
    assert.deepEqual(await fs.readdir(dir), [], 'something was made beside it')
    await rejectsCode(removeContainer(root), 'ERR_NOT_FOUND', /no container here/)
  })

  it("keeps a folder holding a user's file (and a key that is not the container's), with them; the store's empty folders go", async () => {
    const root = join(dir, 'shared')
    await container(root)
    await fs.writeFile(join(root, 'notes.txt'), 'mine')
    await fs.mkdir(join(root, 'user-folder'))
    await new DirectoryStore(root).put('not/the/container', Buffer.from('kept'))
    await removeContainer(root)
    // `.ss-meta` holds the kept key's sidecar.
    assert.deepEqual((await fs.readdir(root)).sort(), ['.ss-meta', 'not%2F', 'notes.txt', 'user-folder'])
    assert.equal(await fs.readFile(join(root, 'notes.txt'), 'utf8'), 'mine')
    const store = new DirectoryStore(root)
    assert.deepEqual(
      (await collect(store.list())).map((e) => e.key),
      ['not/the/container', 'notes.txt'], // a file whose name is a key's is listed as one
    )
    assert.equal(Buffer.from(await store.get('not/the/container')).toString(), 'kept')
  })

  it('keeps a folder holding only a hidden file of a user', async () => {
    const root = join(dir, 'hidden')
    await container(root)
    await fs.writeFile(join(root, '.keep'), '')
    await removeContainer(root)
    assert.deepEqual(await fs.readdir(root), ['.keep'])
  })

  it('follows no symlink: a root that is one stays, and so does what it points to', async () => {
    const target = join(dir, 'target')
    await container(target)
    const link = join(dir, 'link')
    await fs.symlink(target, link)
    await removeContainer(link)
    assert.equal((await fs.lstat(link)).isSymbolicLink(), true, 'the symlink went')
    assert.deepEqual(await fs.readdir(target), [], 'the folder it points to went, or keeps something')
    // A symlink in a store's folder's place (made after the store's own check) is left, not followed.
    const elsewhere = join(dir, 'elsewhere')
    await fs.mkdir(elsewhere)
    const root = join(dir, 'linked-folder')
    await container(root)
    await fs.rm(join(root, '.ss-lock'), { recursive: true })
    await fs.symlink(elsewhere, join(root, '.ss-lock'))
    await removeEmptyStoreFolders(new DirectoryStore(root))
    assert.deepEqual(
      (await fs.readdir(root)).filter((n) => n.startsWith('.')).sort(),
      ['.ss-lock', '.ss-meta'],
      'the symlink went, or an empty folder stayed (.ss-meta holds the sidecars)',
    )
    assert.equal((await fs.lstat(join(root, '.ss-lock'))).isSymbolicLink(), true)
    assert.equal(await exists(elsewhere), true, 'the folder a symlink points to went')
  })
})

describe('a writer still running when its container is removed', () => {
  let dir: string
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-rm-writer-'))
  })
  after(() => fs.rm(dir, { recursive: true, force: true }))

  it('its next write and flush: the flush fails ERR_CONFLICT (publishing nothing), no ENOENT; rm again leaves no folder', async () => {
    const root = join(dir, 'written')
    const f = await SegmentFile.create(new DirectoryStore(root), smallSettings)
    await f.write(0, pattern(0, 200_000, 1))
    await f.flush()
    await removeContainer(root)
    assert.equal(await exists(root), false, 'the folder is left')
    // Enough to send objects ahead before the flush: the folders are made again for them.
    await f.write(0, pattern(0, 300_000, 3))
    assert.ok((await fs.readdir(root)).includes('0000000002.1'), 'nothing was sent ahead')
    const err = await f.flush().then(
      () => assert.fail('the flush published'),
      (e: unknown) => e,
    )
    assert.ok(StreamSegmentError.is(err, 'ERR_CONFLICT'), `not ERR_CONFLICT: ${(err as Error).stack}`)
    assert.match((err as Error).message, /checkpoint 2 was not published: the container's inode is gone/)
    await f.close().catch(() => undefined)
    const store = new DirectoryStore(root)
    assert.equal(await store.head(INODE_KEY), undefined, 'an inode was published')
    // What the writer sent after the rm stays behind, for another rm (docs/cli.md, rm).
    assert.ok((await collect(store.list())).length > 1)
    await removeContainer(root)
    assert.equal(await exists(root), false, 'the second rm left the folder')
  })

  it('a store whose folders an rm removed makes them again at each kind of write', async () => {
    const root = join(dir, 'store')
    const store = new DirectoryStore(root)
    // What `rm` does once the container's objects are gone, from another store than the writer's.
    const rm = () => removeEmptyStoreFolders(new DirectoryStore(root))
    const madeAgain = async (what: string) => {
      for (const own of OWN) assert.equal((await fs.lstat(join(root, own))).isDirectory(), true, `${what}: no ${own}`)
    }
    await store.put('x', Buffer.from('x'))
    await store.delete('x')
    await rm()
    assert.equal(await exists(root), false, 'the folder is left')
    const { etag } = await store.put('a', Buffer.from('a'))
    await madeAgain('a put')
    await rm()
    assert.deepEqual((await fs.readdir(root)).sort(), ['.ss-meta', 'a'], 'the empty folders were not removed')
    await store.put('a', Buffer.from('a2'), { ifMatch: etag })
    await madeAgain('a put under the key lock')
    await rm()
    await store.put('b', Buffer.from('b'), { ifNoneMatch: '*' })
    await madeAgain('a create-only put')
    await rm()
    const uploadId = await store.createMultipart('c')
    await madeAgain('createMultipart')
    await store.abortMultipart('c', uploadId)
    await rm()
    await store.delete(['a', 'b'])
    await rm()
    assert.equal(await exists(root), false, 'the folder is left')
    await store.createMultipart('c')
    await madeAgain('createMultipart in a folder made again')
    assert.equal((await collect(store.listMultipart(''))).length, 1)
    assert.deepEqual(await collect(store.list()), [])
  })
})
