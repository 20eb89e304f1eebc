/**
 * Multipart uploads of the directory store that fail partway. A claimed upload that cannot
 * be created gives its key back (as S3Store does): a retry of the claim is not ERR_CONFLICT.
 *
 * An upload aborted while a part is written, or while its parts are joined: the call
 * fails with ERR_NOT_FOUND, as one made after the abort does (S3's NoSuchUpload), not
 * with ERR_STORE, which says trying again may help.
 *
 * The abort is sent once the part's temporary file has begun to fill (polled), and the run
 * counts only when the file held less than half the part then; a run where the write won
 * the race is tried again.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import * as fs from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore } from '../../lib/store/directory.js'

const PART = 128 * 1024 * 1024
const TRIES = 10

/** Once a temporary file in the store has begun to fill: whether it still held fewer than `bytes` then. */
async function whenFilling(root: string, bytes: number): Promise<boolean> {
  for (;;) {
    for (const name of await fs.readdir(join(root, '.ss-tmp'))) {
      const st = await fs.stat(join(root, '.ss-tmp', name)).catch(() => undefined)
      if (st?.isFile() && st.size > 0) return st.size < bytes
    }
    await sleep(0)
  }
}

describe('directory store: multipart uploads that fail partway', () => {
  let dir = ''
  const body = Buffer.alloc(PART, 7)
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-dir-multipart-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('a claimed upload that cannot be created un-claims its key: the claim made again succeeds', async () => {
    const root = join(dir, 'claim')
    const store = new DirectoryStore(root)
    await store.put('other', Buffer.from('x'))
    // A stray file where the store keeps its uploads: the upload's folder cannot be made.
    await fs.rm(join(root, '.ss-multipart'), { recursive: true })
    await fs.writeFile(join(root, '.ss-multipart'), '')
    await assert.rejects(store.createMultipart('k', { ifNoneMatch: '*' }), (err) =>
      StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'),
    )
    assert.equal(await store.head('k'), undefined, 'the claim was left in place')
    assert.deepEqual(await fs.readdir(join(root, '.ss-lock')), [])
    await fs.rm(join(root, '.ss-multipart'))
    await fs.mkdir(join(root, '.ss-multipart'))
    const id = await store.createMultipart('k', { ifNoneMatch: '*' })
    const p1 = await store.uploadPart('k', id, 1, Buffer.from('bytes'))
    await store.completeMultipart('k', id, [{ partNumber: 1, ...p1 }])
    assert.equal(Buffer.from(await store.get('k')).toString(), 'bytes')
  })

  /**
   * Makes an upload in a store of its own (`prepare` then uploads what it needs), runs
   * `call` on it and aborts the upload once a temporary file has begun to fill, up to TRIES
   * times: the first run where the abort came while the file held less than half a part,
   * with the call's error.
   */
  async function abortMidway<T>(
    name: string,
    prepare: (store: DirectoryStore, id: string) => Promise<T>,
    call: (store: DirectoryStore, id: string, prepared: T) => Promise<unknown>,
  ): Promise<{ root: string; store: DirectoryStore; err: unknown }> {
    for (let run = 0; run < TRIES; run++) {
      const root = join(dir, `${name}-${run}`)
      const store = new DirectoryStore(root)
      const id = await store.createMultipart('k')
      const prepared = await prepare(store, id)
      const settled = call(store, id, prepared).then(
        () => undefined,
        (err: unknown) => err,
      )
      const short = await whenFilling(root, PART / 2)
      await store.abortMultipart('k', id)
      const err = await settled
      if (short) return { root, store, err }
    }
    assert.fail(`${name}: the call was done before the abort in all ${TRIES} runs`)
  }

  it('a part being written when its upload is aborted: ERR_NOT_FOUND, and nothing left', async () => {
    const { root, err } = await abortMidway(
      'part',
      async () => undefined,
      (store, id) => store.uploadPart('k', id, 1, body),
    )
    assert.ok(StreamSegmentError.is(err, 'ERR_NOT_FOUND'), String(err))
    assert.deepEqual(await fs.readdir(join(root, '.ss-multipart')), [])
    assert.deepEqual(await fs.readdir(join(root, '.ss-tmp')), [])
  })

  it('a completion joining the parts when its upload is aborted: ERR_NOT_FOUND, and the key not written', async () => {
    const { root, store, err } = await abortMidway(
      'complete',
      async (s, id) => {
        const parts = []
        for (const partNumber of [1, 2]) parts.push({ partNumber, ...(await s.uploadPart('k', id, partNumber, body)) })
        return parts
      },
      // Still in the first part when aborted: the second is opened once the abort has taken it.
      (s, id, parts) => s.completeMultipart('k', id, parts),
    )
    assert.ok(StreamSegmentError.is(err, 'ERR_NOT_FOUND'), String(err))
    assert.equal(await store.head('k'), undefined)
    assert.deepEqual(await fs.readdir(join(root, '.ss-tmp')), [])
  })

  it('listMultipart with a signal already fired is ERR_ABORTED, with no upload open as with one', async () => {
    const store = new DirectoryStore(join(dir, 'list-stopped'))
    const stop = new AbortController()
    stop.abort(new Error('stop'))
    const list = async () => {
      for await (const _ of store.listMultipart('', { signal: stop.signal })) {
        // nothing: the listing must fail before it yields
      }
    }
    await assert.rejects(list(), (err) => StreamSegmentError.is(err, 'ERR_ABORTED'), 'a store never written')
    await store.put('other', Buffer.from('x'))
    await assert.rejects(list(), (err) => StreamSegmentError.is(err, 'ERR_ABORTED'), 'no upload open')
    await store.createMultipart('k')
    await assert.rejects(list(), (err) => StreamSegmentError.is(err, 'ERR_ABORTED'), 'one upload open')
  })

  it('a part sent twice at once: each answer names the bytes it uploaded, whichever rename lands last', async (t) => {
    const store = new DirectoryStore(join(dir, 'part-twice'))
    const id = await store.createMultipart('k')
    const partPath = join(dir, 'part-twice', '.ss-multipart', id, '1')
    // The first send is held once its file is renamed into place, until the second is answered.
    let second: Promise<{ etag: string }> | undefined
    const { rename } = fsp
    t.mock.method(fsp, 'rename', async (...args: Parameters<typeof fsp.rename>) => {
      await rename(...args)
      if (String(args[1]) === partPath && second === undefined) {
        second = store.uploadPart('k', id, 1, Buffer.from('second'))
        await second
      }
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    let first: { etag: string }
    try {
      first = await store.uploadPart('k', id, 1, Buffer.from('first'))
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    const last = await (second as Promise<{ etag: string }>)
    assert.notEqual(first.etag, last.etag, 'the first send was answered with the ETag of the bytes of the second')
    // The part holds the second's bytes: completing with the first's ETag is refused, not done with them.
    await assert.rejects(store.completeMultipart('k', id, [{ partNumber: 1, etag: first.etag }]), (err) =>
      StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'),
    )
    await store.completeMultipart('k', id, [{ partNumber: 1, etag: last.etag }])
    assert.equal(Buffer.from(await store.get('k')).toString(), 'second')
  })

  it('a part sent again while the completion checks the parts: refused, never joined with the bytes of the other send', async (t) => {
    const store = new DirectoryStore(join(dir, 'part-again'))
    const id = await store.createMultipart('k')
    const partPath = join(dir, 'part-again', '.ss-multipart', id, '1')
    const first = await store.uploadPart('k', id, 1, Buffer.from('first'))
    // Sent again once the completion has found the part it was given by its ETag.
    let again: Promise<{ etag: string }> | undefined
    const { stat } = fsp
    t.mock.method(fsp, 'stat', async (...args: Parameters<typeof fsp.stat>) => {
      const st = await stat(...args)
      if (String(args[0]) === partPath && again === undefined) {
        again = store.uploadPart('k', id, 1, Buffer.from('other'))
        await again
      }
      return st
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    try {
      await assert.rejects(store.completeMultipart('k', id, [{ partNumber: 1, etag: first.etag }]), (err) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
        assert.match(err.message, new RegExp(`/k: part 1 with etag ${first.etag} was not uploaded`))
        return true
      })
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.ok(again !== undefined, 'the part was sent again')
    assert.equal(await store.head('k'), undefined, 'the key was written')
    // The part's ETag now is the second send's: with it, the upload completes with its bytes.
    await store.completeMultipart('k', id, [{ partNumber: 1, etag: (await again).etag }])
    assert.equal(Buffer.from(await store.get('k')).toString(), 'other')
  })
})
