/**
 * What the directory store makes durable before a call answers, seen as the calls it makes
 * on the file system. A folder entry (a file linked, renamed or unlinked in it, a folder
 * made in it) survives a machine crash only once that folder is fsynced: until then the
 * kernel may lose it (ext4 commits its journal every few seconds). So a delete fsyncs the
 * folder of every key it removed (once per folder) before it answers: else a crash brings
 * the key back, and a part 0 a rollback deleted is published by the next writer.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { after, before, describe, it, type TestContext } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'

/**
 * Records, in order, what the store does to folders under `top` through fs.promises:
 * `mkdir P` (a folder made), `unlink P` (a file removed), `fsync P` (a handle opened on a
 * folder and fsynced), each path relative to `top` ('.' for it); `unlinked` runs after each
 * unlink. Undone by `unwatch`.
 */
function watchFolders(t: TestContext, top: string, unlinked?: () => void): string[] {
  const events: string[] = []
  const rel = (path: unknown) => relative(top, String(path)) || '.'
  const { mkdir, unlink, open } = fsp
  t.mock.method(fsp, 'mkdir', async (...args: Parameters<typeof fsp.mkdir>) => {
    const made = await mkdir(...args)
    events.push(`mkdir ${rel(args[0])}`)
    return made
  })
  t.mock.method(fsp, 'unlink', async (...args: Parameters<typeof fsp.unlink>) => {
    await unlink(...args)
    events.push(`unlink ${rel(args[0])}`)
    unlinked?.()
  })
  t.mock.method(fsp, 'open', async (...args: Parameters<typeof fsp.open>) => {
    const fh = await open(...args)
    if (!(await fh.stat()).isDirectory()) return fh
    const sync = fh.sync.bind(fh)
    Object.assign(fh, {
      sync: async () => {
        await sync()
        events.push(`fsync ${rel(args[0])}`)
      },
    })
    return fh
  })
  syncBuiltinESMExports() // the store takes fs from node:fs/promises
  return events
}

function unwatch(t: TestContext): void {
  t.mock.restoreAll()
  syncBuiltinESMExports()
}

/** The events after the last one equal to `event` (none when it never happened: then the check fails). */
function eventsAfter(events: readonly string[], event: string): string[] {
  const at = events.lastIndexOf(event)
  assert.ok(at >= 0, `no ${event} in ${JSON.stringify(events)}`)
  return events.slice(at + 1)
}

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
})
