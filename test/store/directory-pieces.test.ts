/**
 * The directory store's getChunks reads into pieces of the pool (util/piece-pool.ts): a
 * read that fails part-way (the disk fails, the file shrinks while it is read) gives every
 * piece it took back to the pool, none of them lent to anyone, as a read that succeeds
 * does once its caller is done with them. A `get`, whose answer nobody gives back, takes
 * none.
 */
import assert from 'node:assert/strict'
import type { FileHandle } from 'node:fs/promises'
import { mkdtemp, open, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { dropPieces, givePieces, PIECE_BYTES, pieceStats } from '../../lib/util/piece-pool.js'
import { pattern } from '../helpers/pattern.js'

const MiB = 1024 * 1024
/** Full pieces of a 1 MiB + 100 bytes GET (the last, of 100 bytes, is no piece of the pool). */
const PIECES = 16

type Readv = FileHandle['readv']

describe('directory store: pieces of a GET that fails part-way', () => {
  let dir = ''
  let store: DirectoryStore
  let proto: { readv: Readv }
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-pieces-'))
    store = new DirectoryStore(join(dir, 's'))
    await store.put('k', pattern(0, MiB + 100, 1))
    const fh = await open(join(dir, 's'), 'r')
    proto = Object.getPrototypeOf(fh) as { readv: Readv }
    await fh.close()
  })
  after(() => rm(dir, { recursive: true, force: true }))

  const faults = {
    'the disk fails': (readv: Readv) => {
      let calls = 0
      // The first call reads three pieces, the next one fails.
      return function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[], position?: number) {
        if (calls++ === 0) return readv.call(this, buffers.slice(0, 3), position)
        return Promise.reject(Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' }))
      } as Readv
    },
    'the file shrinks': (readv: Readv) => {
      let calls = 0
      // Three pieces read, then the end of the file.
      return function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[], position?: number) {
        if (calls++ === 0) return readv.call(this, buffers.slice(0, 3), position)
        return Promise.resolve({ bytesRead: 0, buffers })
      } as Readv
    },
  }

  for (const [name, fault] of Object.entries(faults)) {
    it(`${name}: ERR_STORE, and every piece taken is back in the pool`, async (t) => {
      dropPieces()
      const before = pieceStats()
      t.mock.method(proto, 'readv', fault(proto.readv))
      try {
        await assert.rejects(store.getChunks('k'), (err) => StreamSegmentError.is(err, 'ERR_STORE'))
      } finally {
        t.mock.restoreAll()
      }
      const failed = pieceStats()
      assert.equal(failed.out, before.out, 'pieces taken and not given back')
      assert.equal(failed.keptBytes, PIECES * PIECE_BYTES)
      // Read into again: the next GET takes them.
      const chunks = await store.getChunks('k')
      assert.equal(pieceStats().reused, before.reused + PIECES)
      assert.deepEqual(Buffer.concat(chunks), pattern(0, MiB + 100, 1))
      givePieces(chunks)
      assert.equal(pieceStats().out, before.out)
    })
  }
})

describe('directory store: a GET that takes no piece', () => {
  let dir = ''
  let store: DirectoryStore
  const bytes = pattern(0, MiB + 100, 2)
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-pieces-'))
    store = new DirectoryStore(join(dir, 's'))
    await store.put('k', bytes)
  })
  after(() => rm(dir, { recursive: true, force: true }))

  it('a get of exactly one piece’s size takes no piece of the pool (nobody would give it back)', async () => {
    dropPieces()
    const before = pieceStats()
    for (const start of [0, 100, MiB + 100 - PIECE_BYTES]) {
      const got = await store.get('k', { range: { start, end: start + PIECE_BYTES } })
      assert.deepEqual(Buffer.from(got), bytes.subarray(start, start + PIECE_BYTES))
    }
    assert.equal(pieceStats().out, before.out, 'pieces taken and not given back')
  })
})
