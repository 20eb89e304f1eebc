/**
 * uploadFile: its signal and the errors of the file it reads. (Resume: resume.test.ts; a
 * file rewritten in place: test/write/write-ref.test.ts; bad arguments: bad-arguments.test.ts.)
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { appendFileSync, truncateSync } from 'node:fs'
import fsp, { type FileHandle, mkdtemp, open, rm, writeFile } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { countingStore } from '../../lib/streams/options.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { rejectsCode } from '../helpers/assert.js'
import { publishContent, readAll, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { testS3Store } from '../helpers/fake-s3.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024
const MiB = 1024 * KiB

describe('uploadFile', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-upload-file-'))
  })
  after(() => rm(dir, { recursive: true, force: true }))

  it('an abort while the open rolls a checkpoint forward ends the upload: the stalled inode write is aborted', async () => {
    const path = join(dir, 'roll.bin')
    await writeFile(path, pattern(0, 256 * KiB, 4))
    const inner = new MemoryStore()
    const old = await SegmentFile.create(inner)
    await old.write(0, pattern(0, 5000, 1))
    await old.flush()
    await old.close()
    // Checkpoint 2 complete but unpublished: its writer's inode write failed.
    const w = await SegmentFile.open(new FailingStore(inner, [{ ops: ['put'], key: /^inode$/ }]), {
      conflictRetries: 0,
    })
    await w.write(0, pattern(0, 7000, 2))
    await rejectsCode(w.flush(), 'ERR_STORE')
    await w.close()
    const stalled = new FailingStore(inner, [{ ops: ['put'], key: /^inode$/, mode: 'hang' }])
    const ac = new AbortController()
    const settled = rejectsCode(
      uploadFile(path, stalled, { rollForwardAfterMs: 0 }, { signal: ac.signal }),
      'ERR_ABORTED',
    )
    await stalled.hangOf('put')
    ac.abort(new Error('stop'))
    await settled // without the signal on that write, never
    assert.equal(stalled.calls.find((c) => c.op === 'put')?.signal?.aborted, true)
  })

  it('an abort while the container is opened ends the upload at once', async () => {
    const path = join(dir, 'open.bin')
    await writeFile(path, pattern(0, 256 * KiB, 3))
    const inner = new MemoryStore()
    // The inode's GET hangs until its request is aborted, as a stalled link's would.
    const stalled = new FailingStore(inner, [{ ops: ['get', 'head'], key: /^inode$/, mode: 'hang' }])
    const ac = new AbortController()
    const upload = uploadFile(path, stalled, {}, { signal: ac.signal })
    const settled = rejectsCode(upload, 'ERR_ABORTED', /upload of .*open\.bin to .* aborted/)
    await within(stalled.hangOf('get', 'head'), 2000, 'the open')
    ac.abort(new Error('enough'))
    await within(settled, 2000, 'abort during the open')
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'the listener is removed')
    assert.equal(await inner.head('inode'), undefined, 'nothing was published')
  })

  it('an abort while the file is looked at (before the open) ends the upload at once: the open makes no request', async () => {
    const path = join(dir, 'stat.bin')
    await writeFile(path, pattern(0, 256 * KiB, 6))
    const inner = new MemoryStore()
    // The inode's GET hangs until its request is aborted: an abort missed would hang here.
    const stalled = new FailingStore(inner, [{ ops: ['get', 'head'], key: /^inode$/, mode: 'hang' }])
    const ac = new AbortController()
    const fh = await open(path, 'r')
    try {
      // The signal fires while the file's stat is under way (a slow mount, say).
      const stat = fh.stat.bind(fh)
      fh.stat = (async () => {
        const st = await stat()
        ac.abort(new Error('enough'))
        return st
      }) as typeof fh.stat
      await within(
        rejectsCode(uploadFile(fh, stalled, {}, { signal: ac.signal }), 'ERR_ABORTED', /upload to .* aborted/),
        2000,
        'abort during the stat',
      )
      assert.equal(stalled.calls.length, 0, `no request: ${stalled.calls.map((c) => `${c.op} ${c.key}`).join(', ')}`)
      assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'the listener is removed')
    } finally {
      await fh.close()
    }
  })

  it("an abort while it looks for an interrupted upload to resume: ERR_ABORTED naming the upload, the signal's reason its cause", async () => {
    const path = join(dir, 'look.bin')
    await writeFile(path, pattern(0, 256 * KiB, 7))
    const inner = new MemoryStore()
    await publishContent(inner, pattern(0, 5000, 1))
    // The listing of the open uploads, then that of the objects taken above the published
    // checkpoint (the open lists once before it), hang until their requests are aborted.
    for (const rule of [
      { ops: ['listMultipart' as const], mode: 'hang' as const },
      { ops: ['list' as const], nth: 2, mode: 'hang' as const },
    ]) {
      const stalled = new FailingStore(inner, [rule])
      const ac = new AbortController()
      const reason = new Error('enough')
      const upload = uploadFile(path, stalled, {}, { signal: ac.signal })
      const settled = rejectsCode(upload, 'ERR_ABORTED', /^upload of .*look\.bin to .* aborted$/)
      await within(stalled.hangOf(...rule.ops), 2000, `the ${rule.ops[0]}`)
      ac.abort(reason)
      const err = await within(settled, 2000, `abort during the ${rule.ops[0]}`)
      assert.equal(err.cause, reason, `${rule.ops[0]}: the cause is the signal's reason`)
    }
    const f = await SegmentFile.open(inner, { readOnly: true })
    assert.equal(f.size, 5000, 'nothing was published')
    await f.close()
  })

  it('a container another writer creates between the open finding none and the create: the upload goes on top of it', async () => {
    const path = join(dir, 'race.bin')
    const data = pattern(0, 300 * KiB, 4)
    await writeFile(path, data)
    const inner = new MemoryStore()
    // The open's HEAD of `inode` finds none; before the create's HEAD, another put publishes.
    let heads = 0
    const racing = new (class extends WrappedStore {
      protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
        if (call.op === 'head' && call.key === 'inode' && ++heads === 2) {
          const other = await SegmentFile.create(inner)
          await other.write(0, pattern(0, 100 * KiB, 5))
          await other.flush()
          await other.close()
        }
        return run()
      }
    })(inner)
    const t = await uploadFile(path, racing)
    assert.equal(t.cno, 2)
    const f = await SegmentFile.open(inner, { readOnly: true })
    assert.deepEqual(Buffer.from(await f.read(0, f.size)), data)
    await f.close()
  })

  it('in that race, a custom store whose look at the inode rejects with no Error: ERR_STORE naming the request', async () => {
    const path = join(dir, 'race-odd.bin')
    await writeFile(path, pattern(0, 64 * KiB, 4))
    const inner = new MemoryStore()
    // As above; then the look that tells the create's conflict from another failure rejects.
    let heads = 0
    const racing = new (class extends WrappedStore {
      protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
        if (call.op === 'head' && call.key === 'inode') {
          heads++
          if (heads === 2) {
            const other = await SegmentFile.create(inner)
            await other.flush()
            await other.close()
          }
          if (heads === 3) throw undefined
        }
        return run()
      }
    })(inner)
    await assert.rejects(uploadFile(path, racing), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
      assert.equal(err.message, `head of ${inner.url}/inode failed with undefined, which is not an Error`)
      return true
    })
    assert.equal(heads, 3)
  })

  it('a file that fails under it: cut short (ERR_STATE) or unreadable (ERR_STORE), named; nothing published', async () => {
    const path = join(dir, 'fails.bin')
    await writeFile(path, pattern(0, 3 * MiB, 5))
    const store = new MemoryStore()
    await rejectsCode(
      uploadFile(path, store, {}, { onStart: () => truncateSync(path, MiB) }),
      'ERR_STATE',
      new RegExp(`^${path}: ended at byte ${MiB}, ${2 * MiB} bytes short: it changed while being uploaded`),
    )
    // A read that fails (a failing disk, a handle closed too early): the library's error, not the system's.
    const fh = await open(path, 'r')
    await rejectsCode(
      uploadFile(fh, store, {}, { onStart: () => void fh.close() }),
      'ERR_STORE',
      /^the file: cannot be read at byte 0 \(.*\)/,
    )
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  })

  it('a file holding more than its size says (/proc’s say 0): ERR_STATE naming it, before the store is touched', async () => {
    const store = new FailingStore(new MemoryStore())
    await rejectsCode(
      uploadFile('/proc/self/status', store),
      'ERR_STATE',
      /^\/proc\/self\/status: holds more than the 0 bytes its size says /,
    )
    assert.deepEqual(
      store.calls.map((c) => c.op),
      [],
      'no request made',
    )
  })

  it('a handle that cannot be read (no read method): ERR_INVALID_ARGUMENT before anything is made', async () => {
    const store = new MemoryStore()
    const mtimeMs = Date.now()
    const statOnly = { stat: async () => ({ size: 5, mtimeMs, ctimeMs: mtimeMs, isFile: () => true }) }
    await rejectsCode(
      uploadFile(statOnly as unknown as FileHandle, store),
      'ERR_INVALID_ARGUMENT',
      /^uploadFile: path must be a path or an open FileHandle, got /,
    )
    assert.equal(await store.head('inode'), undefined, 'a container was made')
  })

  it('a file that grows while being uploaded, its size unchanged or 0: ERR_STATE, the content published before kept', async () => {
    const store = new MemoryStore()
    const before = pattern(0, 5000, 1)
    await publishContent(store, before)
    // Empty when looked at, written to before the flush: no block refers to it.
    const path = join(dir, 'grows.bin')
    await writeFile(path, '')
    await rejectsCode(
      uploadFile(path, store, {}, { onStart: () => appendFileSync(path, pattern(0, 64 * KiB, 2)) }),
      'ERR_STATE',
      new RegExp(`^${path}: `),
    )
    // A handle whose size stays what it was (as a file system's may lag): the bytes past it are read.
    let length = 64 * KiB
    const file = pattern(0, 128 * KiB, 3)
    const mtimeMs = Date.now()
    const fh = {
      stat: async () => ({ size: 64 * KiB, mtimeMs, ctimeMs: mtimeMs, isFile: () => true }),
      read: async (buffer: Uint8Array, offset: number, n: number, position: number) => {
        const bytes = file.subarray(Math.min(position, length), Math.min(position + n, length))
        buffer.set(bytes, offset)
        return { bytesRead: bytes.length }
      },
    }
    await rejectsCode(
      uploadFile(fh as unknown as FileHandle, store, {}, { onStart: () => void (length = 128 * KiB) }),
      'ERR_STATE',
      /^the file: holds more than the 65536 bytes its size says /,
    )
    assert.deepEqual(await readAll(store), Buffer.from(before), 'nothing was published')
  })

  it('an async onStart: its promise is awaited, what it rejects with ends the upload before anything is written', async () => {
    const path = join(dir, 'async-start.bin')
    await writeFile(path, pattern(0, 256 * KiB, 9))
    const store = new FailingStore(new MemoryStore())
    const refused = new Error('refused by onStart')
    let started = 0
    await assert.rejects(
      uploadFile(
        path,
        store,
        {},
        {
          onStart: async () => {
            started = store.calls.length
            await new Promise((r) => setTimeout(r, 5))
            throw refused
          },
        },
      ),
      (err) => err === refused,
    )
    const after = store.calls.slice(started).map((c) => `${c.op} ${c.key}`)
    assert.deepEqual(
      after.filter((c) => /^(put|uploadPart|createMultipart)/.test(c)),
      [],
      'nothing written after onStart',
    )
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  })

  it("a file whose first stat fails (a failing disk): ERR_STORE naming it, the system's error its cause", async () => {
    const path = join(dir, 'stat-fails.bin')
    await writeFile(path, pattern(0, 64 * KiB, 8))
    const eio = Object.assign(new Error('EIO: i/o error, fstat'), { code: 'EIO', syscall: 'fstat' })
    // A FileHandle's stat is its own, so the handle is wrapped as opened.
    const real = fsp.open
    let closed = 0
    fsp.open = (async (...args: Parameters<typeof real>) => {
      const fh = await real(...args)
      fh.stat = (async () => Promise.reject(eio)) as typeof fh.stat
      const close = fh.close.bind(fh)
      fh.close = async () => {
        closed++
        return close()
      }
      return fh
    }) as typeof real
    syncBuiltinESMExports()
    try {
      const store = new MemoryStore()
      const err = await rejectsCode(
        uploadFile(path, store),
        'ERR_STORE',
        /stat-fails\.bin: its size and times cannot be read \(EIO/,
      )
      assert.equal(err.cause, eio)
      assert.equal(closed, 1, 'the file opened is closed')
      assert.equal(await store.head('inode'), undefined, 'no container was made')
    } finally {
      fsp.open = real
      syncBuiltinESMExports()
    }
  })

  it("the store it opens through copies a resume's parts from the S3Store itself, not from a proxy of it", async () => {
    // A resume copies parts of the store's own objects (UploadPartCopy, the store as the
    // source): S3Store reads its source's private fields, which a proxy has not.
    const s3 = testS3Store('http://127.0.0.1:9')
    const { store } = countingStore(s3, { requests: 0, bytes: 0 }, new AbortController().signal)
    const copy = store.uploadPartCopy?.(
      '0000000002.1',
      'upload-id',
      1,
      { store, key: '0000000001.1', range: { start: 0, end: 4096 } },
      { signal: AbortSignal.abort(new Error('no request needed')) },
    )
    await rejectsCode(copy as Promise<unknown>, 'ERR_ABORTED')
  })
})
