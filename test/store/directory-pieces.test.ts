/**
 * The directory store's getChunks reads into pieces of the pool (util/piece-pool.ts): a
 * read that fails part-way (the disk fails, the file shrinks while it is read) gives every
 * piece it took back to the pool, none of them lent to anyone, as a read that succeeds
 * does once its caller is done with them. A `get`, whose answer nobody gives back, takes
 * none; a GET whose signal fires while it reads stops at its next read, ERR_ABORTED, and
 * gives its pieces back too.
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
import { rejectsCode } from '../helpers/assert.js'
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

describe('directory store: a GET that takes no piece, a GET aborted while it reads', () => {
  let dir = ''
  let store: DirectoryStore
  let proto: { readv: Readv }
  const bytes = pattern(0, MiB + 100, 2)
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-dir-pieces-'))
    store = new DirectoryStore(join(dir, 's'))
    await store.put('k', bytes)
    const fh = await open(join(dir, 's'), 'r')
    proto = Object.getPrototypeOf(fh) as { readv: Readv }
    await fh.close()
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

  /** A readv that reads `first` of the buffers, then fires `abort`; counting its calls. */
  const abortingReadv = (readv: Readv, abort: () => void, first: number, calls: { n: number }) =>
    function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[], position?: number) {
      calls.n++
      const p = readv.call(this, buffers.length > first ? buffers.slice(0, first) : buffers, position)
      return p.then((r) => {
        abort()
        return r
      })
    } as Readv

  it('getChunks whose signal fires while it reads: ERR_ABORTED at the next read, every piece back', async (t) => {
    dropPieces()
    const before = pieceStats()
    const ac = new AbortController()
    const calls = { n: 0 }
    t.mock.method(
      proto,
      'readv',
      abortingReadv(proto.readv, () => ac.abort(), 3, calls),
    )
    try {
      await rejectsCode(store.getChunks('k', { signal: ac.signal }), 'ERR_ABORTED', /get k aborted/)
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(calls.n, 1, 'readv calls: none after the abort')
    const aborted = pieceStats()
    assert.equal(aborted.out, before.out, 'pieces taken and not given back')
    assert.equal(aborted.keptBytes, PIECES * PIECE_BYTES)
  })

  it('get whose signal fires while it reads: ERR_ABORTED at the next read', async (t) => {
    const ac = new AbortController()
    const calls = { n: 0 }
    const readv = proto.readv
    // One buffer of the range: its first readv reads part of it, as a short read does.
    const partial = function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[], position?: number) {
      calls.n++
      const b = buffers[0] as Uint8Array
      return readv.call(this, calls.n === 1 ? [b.subarray(0, 4096)] : buffers, position).then((r) => {
        ac.abort()
        return r
      })
    } as Readv
    t.mock.method(proto, 'readv', partial)
    try {
      await rejectsCode(
        store.get('k', { range: { start: 0, end: MiB }, signal: ac.signal }),
        'ERR_ABORTED',
        /get k aborted/,
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(calls.n, 1, 'readv calls: none after the abort')
  })

  it('a signal that fires while the file is opened: ERR_ABORTED, no read', async (t) => {
    const ac = new AbortController()
    const calls = { n: 0 }
    const readv = proto.readv
    t.mock.method(proto, 'readv', function (this: FileHandle, ...args: Parameters<Readv>) {
      calls.n++
      return readv.apply(this, args)
    })
    // Fires before the store's first await settles: open and stat are under way.
    const got = store.getChunks('k', { signal: ac.signal })
    ac.abort()
    try {
      await rejectsCode(got, 'ERR_ABORTED', /get k aborted/)
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(calls.n, 0, 'readv calls')
  })
})
