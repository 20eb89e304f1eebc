/**
 * A directory store's put or uploadPart whose signal fires while its body is being written
 * stops writing at its next step, ERR_ABORTED, and leaves nothing behind: no temporary
 * file, no part, no object. One whose signal fires once the body is written (while it is
 * fsynced) is not published either.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it, type TestContext } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'

type Writev = FileHandle['writev']
type Sync = FileHandle['sync']

const KiB = 1024
const MiB = 1024 * KiB
const BODY_BYTES = 16 * MiB

describe('directory store: a write whose signal fires', () => {
  let dir = ''
  let proto: { writev: Writev; sync: Sync }
  before(async () => {
    dir = await fsp.mkdtemp(join(tmpdir(), 'ss-dir-write-abort-'))
    const fh = await fsp.open(dir, 'r')
    proto = Object.getPrototypeOf(fh) as { writev: Writev; sync: Sync }
    await fh.close()
  })
  after(async () => {
    await fsp.rm(dir, { recursive: true, force: true })
  })

  /** A store with one object already (so that its folders exist), at a root of its own. */
  async function storeAt(name: string): Promise<DirectoryStore> {
    const store = new DirectoryStore(join(dir, name))
    await store.put('first', Buffer.from('makes the store'))
    return store
  }

  /** Counts what every writev writes, and aborts `ac` once the first has written. */
  function abortAfterFirstWritev(t: TestContext, ac: AbortController): { calls: number; bytes: number } {
    const seen = { calls: 0, bytes: 0 }
    const writev = proto.writev
    t.mock.method(proto, 'writev', function (this: FileHandle, ...args: Parameters<Writev>) {
      return writev.apply(this, args).then((r) => {
        seen.calls++
        seen.bytes += r.bytesWritten
        ac.abort()
        return r
      })
    } as Writev)
    return seen
  }

  async function keys(store: DirectoryStore): Promise<string[]> {
    const out: string[] = []
    for await (const e of store.list()) out.push(e.key)
    return out
  }

  const bodies: Array<[string, () => Uint8Array | Uint8Array[]]> = [
    [
      'a body of 256 chunks of 64 KiB',
      () => Array.from({ length: BODY_BYTES / (64 * KiB) }, () => Buffer.alloc(64 * KiB, 1)),
    ],
    ['a body of one 16 MiB chunk', () => Buffer.alloc(BODY_BYTES, 2)],
  ]

  for (const [what, body] of bodies) {
    it(`put of ${what}: stops after its first write, ERR_ABORTED, nothing left`, async (t) => {
      const store = await storeAt(`put-${what.replace(/\W+/g, '-')}`)
      const ac = new AbortController()
      const seen = abortAfterFirstWritev(t, ac)
      try {
        await rejectsCode(store.put('k', body(), { signal: ac.signal }), 'ERR_ABORTED', /^put k aborted/)
      } finally {
        t.mock.restoreAll()
      }
      assert.equal(seen.calls, 1, 'writev calls: none after the abort')
      assert.ok(seen.bytes < BODY_BYTES, `wrote ${seen.bytes} of the body's ${BODY_BYTES} bytes`)
      assert.deepEqual(await keys(store), ['first'], 'the store lists nothing new')
      assert.deepEqual(await fsp.readdir(join(store.root, '.ss-tmp')), [], 'no temporary file is left')
    })

    it(`uploadPart of ${what}: stops after its first write, ERR_ABORTED, no part left`, async (t) => {
      const store = await storeAt(`part-${what.replace(/\W+/g, '-')}`)
      const id = await store.createMultipart('m')
      const ac = new AbortController()
      const seen = abortAfterFirstWritev(t, ac)
      try {
        await rejectsCode(
          store.uploadPart('m', id, 1, body(), { signal: ac.signal }),
          'ERR_ABORTED',
          /^upload part 1 of m aborted/,
        )
      } finally {
        t.mock.restoreAll()
      }
      assert.equal(seen.calls, 1, 'writev calls: none after the abort')
      assert.ok(seen.bytes < BODY_BYTES, `wrote ${seen.bytes} of the body's ${BODY_BYTES} bytes`)
      assert.deepEqual(await store.listParts('m', id), [], 'no part is left')
      assert.deepEqual(await keys(store), ['first'], 'the store lists nothing new')
      assert.deepEqual(await fsp.readdir(join(store.root, '.ss-tmp')), [], 'no temporary file is left')
    })
  }

  it('put whose signal fires once its body is written, while it is fsynced: ERR_ABORTED, not published', async (t) => {
    const store = await storeAt('put-synced')
    const ac = new AbortController()
    const sync = proto.sync
    t.mock.method(proto, 'sync', function (this: FileHandle) {
      return sync.call(this).then(() => ac.abort())
    } as Sync)
    try {
      await rejectsCode(store.put('k', Buffer.alloc(MiB, 3), { signal: ac.signal }), 'ERR_ABORTED', /^put k aborted/)
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(await store.head('k'), undefined, 'the key stays empty')
    assert.deepEqual(await keys(store), ['first'], 'the store lists nothing new')
    assert.deepEqual(await fsp.readdir(join(store.root, '.ss-tmp')), [], 'no temporary file is left')
  })
})
