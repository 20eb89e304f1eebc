/**
 * What the directory store makes durable before a call answers, seen as the calls it makes
 * on the file system. A folder entry (a file linked, renamed or unlinked in it, a folder
 * made in it) survives a machine crash only once that folder is fsynced: until then the
 * kernel may lose it (ext4 commits its journal every few seconds). So a delete fsyncs the
 * folder of every key it removed (once per folder) before it answers: else a crash brings
 * the key back, and a part 0 a rollback deleted is published by the next writer. And every
 * folder the store makes (its root, its own folders, a nested key's folders) is fsynced
 * into its parent before the write that needed it answers: else the crash takes the folder
 * back, and with it the object written in it.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { eventsAfter, unwatch, watchFolders } from '../helpers/fs-watch.js'

describe('directory store: what is durable when a call answers', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-durable-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('a delete fsyncs the folder of each key it removed, after the unlink, once per folder', async (t) => {
    const root = join(dir, 'delete')
    const store = new DirectoryStore(root)
    for (const key of ['a', 'b', 'd/c', 'd/e']) await store.put(key, Buffer.from(key))
    const events = watchFolders(t, root)
    try {
      await store.delete(['a', 'missing', 'd/c', 'b', 'd/e', 'd/missing'])
    } finally {
      unwatch(t)
    }
    for (const key of ['a', 'b', 'd/c', 'd/e']) assert.equal(await store.head(key), undefined, key)
    assert.ok(
      eventsAfter(events, 'unlink b').includes('fsync .'),
      `the root is not fsynced after the unlinks: ${events}`,
    )
    assert.ok(
      eventsAfter(events, 'unlink d%2F/e').includes('fsync d%2F'),
      `the folder d%2F is not fsynced after the unlinks: ${events}`,
    )
    const folderSyncs = events.filter((e) => e === 'fsync .' || e === 'fsync d%2F')
    assert.deepEqual(folderSyncs.sort(), ['fsync .', 'fsync d%2F'], 'one fsync per folder')
  })

  it('a delete that fails partway (its signal fired) still fsyncs the folder of the keys it removed', async (t) => {
    const root = join(dir, 'delete-stopped')
    const store = new DirectoryStore(root)
    for (const key of ['a', 'b']) await store.put(key, Buffer.from(key))
    const stop = new AbortController()
    // Fired once the first key is unlinked: the second is not deleted.
    const events = watchFolders(t, root, () => stop.abort())
    try {
      await assert.rejects(store.delete(['a', 'b'], { signal: stop.signal }), { code: 'ERR_ABORTED' })
    } finally {
      unwatch(t)
    }
    assert.equal(await store.head('a'), undefined)
    assert.notEqual(await store.head('b'), undefined)
    assert.ok(
      eventsAfter(events, 'unlink a').includes('fsync .'),
      `the root is not fsynced after the unlink: ${events}`,
    )
  })

  it('every folder a put makes (the root, the store’s own, a key’s) is fsynced into its parent before it answers', async (t) => {
    const top = join(dir, 'fresh')
    await mkdir(top)
    const store = new DirectoryStore(join(top, 'new', 'root'))
    const events = watchFolders(t, top)
    try {
      await store.put('x/y/z', Buffer.from('z'))
    } finally {
      unwatch(t)
    }
    assert.deepEqual((await store.get('x/y/z')).toString(), 'z')
    const made = events.filter((e) => e.startsWith('mkdir ')).map((e) => e.slice('mkdir '.length))
    for (const folder of ['new', 'new/root', 'new/root/.ss-meta', 'new/root/x%2F', 'new/root/x%2F/y%2F']) {
      assert.ok(made.includes(folder), `${folder} was not made: ${events}`)
    }
    for (const folder of made) {
      if (folder.startsWith('new/root/.ss-tmp/')) continue // a temporary folder: nothing durable is in it
      const parent = dirname(folder)
      assert.ok(
        eventsAfter(events, `mkdir ${folder}`).includes(`fsync ${parent}`),
        `${parent} is not fsynced after ${folder} was made in it: ${events}`,
      )
    }
  })

  it('a folder above the root it may not read is not fsynced, and the put goes on; the root itself must be', async (t) => {
    const top = join(dir, 'unreadable')
    await mkdir(top)
    const refuse = (path: string) => {
      const { open } = fsp
      t.mock.method(fsp, 'open', (...args: Parameters<typeof fsp.open>) =>
        String(args[0]) === path
          ? Promise.reject(Object.assign(new Error(`EACCES: open ${path}`), { code: 'EACCES', syscall: 'open', path }))
          : open(...args),
      )
      syncBuiltinESMExports()
    }
    refuse(top)
    try {
      await new DirectoryStore(join(top, 'root')).put('k', Buffer.from('k'))
    } finally {
      unwatch(t)
    }
    refuse(join(top, 'other'))
    try {
      await assert.rejects(new DirectoryStore(join(top, 'other')).put('k', Buffer.from('k')), {
        code: 'ERR_AUTH',
        message: /put k failed: permission denied \(EACCES\): open .*other$/,
      })
    } finally {
      unwatch(t)
    }
  })
})
