/**
 * A delete racing a compare-and-swap of the same key on the directory store. An `ifMatch`
 * put checks the key, then renames its file onto it; a delete between the two would be
 * undone by the rename, leaving the key present although the delete returned after it
 * was found. Deletes take the key's lock, so every outcome is one of a linearizable store:
 * the CAS lands and the delete then removes it, or the delete lands first and the CAS
 * conflicts; the key is missing at the end either way.
 */
import assert from 'node:assert/strict'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore, hookedDirectoryStore } from '../../lib/store/directory.js'

describe('directory store: delete against a compare-and-swap of the same key', () => {
  let root = ''
  before(async () => {
    root = await fs.mkdtemp(join(tmpdir(), 'ss-cas-delete-'))
  })
  after(async () => {
    await fs.rm(root, { recursive: true, force: true })
  })

  it('a delete sent while the CAS has checked the key waits for its rename, then removes the key', async () => {
    const other = new DirectoryStore(root)
    let deleting: Promise<void> | undefined
    let doneDuringCas = false
    const store = hookedDirectoryStore(root, {
      casChecked: async (key) => {
        // The CAS has found its ETag and not yet renamed: the delete must wait for it.
        deleting = other.delete(key)
        doneDuringCas = await Promise.race([deleting.then(() => true), sleep(200).then(() => false)])
      },
    })
    const { etag } = await store.put('inode', Buffer.from('v0'))
    const cas = await store.put('inode', Buffer.from('v1'), { ifMatch: etag })
    assert.match(cas.etag, /^[0-9a-f]{32}$/)
    await deleting
    assert.equal(doneDuringCas, false, 'the delete went through between the CAS check and its rename')
    assert.equal(await store.head('inode'), undefined, 'the CAS rename undid the delete')
    await assert.rejects(store.get('inode'), (err) => StreamSegmentError.is(err, 'ERR_NOT_FOUND'))
  })

  it('a create-only put that finds the key taken, then gone (a delete beside it), creates it: no conflict', async () => {
    const other = new DirectoryStore(root)
    let deleted = 0
    const store = hookedDirectoryStore(root, {
      createOnlyRefused: async (key) => {
        // Taken when the put linked, deleted before it looked at what held the key.
        if (deleted++ === 0) await other.delete(key)
      },
    })
    await store.put('part', Buffer.from('v0'))
    const put = await store.put('part', Buffer.from('v1'), { ifNoneMatch: '*' })
    assert.equal(deleted, 1)
    assert.equal((await store.head('part'))?.etag, put.etag)
    assert.deepEqual(Buffer.from(await store.get('part')), Buffer.from('v1'))
    // Taken when it looks: a conflict, as always.
    await assert.rejects(store.put('part', Buffer.from('v2'), { ifNoneMatch: '*' }), (err) =>
      StreamSegmentError.is(err, 'ERR_CONFLICT'),
    )
    assert.deepEqual(Buffer.from(await store.get('part')), Buffer.from('v1'))
    await store.delete('part')
  })

  it('100 races of a CAS and a delete: the key is missing after every one', async () => {
    const a = new DirectoryStore(root)
    const b = new DirectoryStore(root)
    let casWon = 0
    for (let i = 0; i < 100; i++) {
      const { etag } = await a.put('k', Buffer.from('v0'))
      const [cas] = await Promise.allSettled([
        a.put('k', Buffer.from('v1'), { ifMatch: etag }),
        (async () => {
          // Spread the delete's start over the CAS's steps, the last ones after it has
          // finished (how many steps a CAS takes depends on the machine and its load).
          for (let j = i; j > 0; j--) await fs.stat(root)
          await b.delete('k')
        })(),
      ])
      if (cas.status === 'fulfilled') casWon++
      else assert.ok(StreamSegmentError.is(cas.reason, 'ERR_CONFLICT'), String(cas.reason))
      const left = await a.head('k')
      assert.equal(left, undefined, `race ${i}: CAS ${cas.status}, yet the key is there after the delete`)
    }
    assert.ok(casWon > 0 && casWon < 100, `the CAS won ${casWon} of 100: the race was not run both ways`)
  })

  it('deleting many keys, missing ones among them, removes every one and leaves no lock', async () => {
    const store = new DirectoryStore(join(root, 'many'))
    const keys = Array.from({ length: 100 }, (_, i) => `0000000001.${i}`)
    for (const k of keys) await store.put(k, Buffer.from(k))
    await store.delete([...keys, 'never-put', 'nested/never-put'])
    const left: string[] = []
    for await (const e of store.list()) left.push(e.key)
    assert.deepEqual(left, [])
    assert.deepEqual(await fs.readdir(join(root, 'many', '.ss-lock')), [])
    assert.deepEqual(await fs.readdir(join(root, 'many', '.ss-meta')), [], 'a sidecar was left behind')
  })
})
