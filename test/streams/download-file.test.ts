/**
 * downloadFile: a checkpoint, or a range of it, written to a local file through a
 * temporary one renamed into place; holes read as zeros; progress; an older checkpoint by cno; bad
 * arguments refused before any request; an abort or a failure leaves `path` as it was and
 * no temporary file. (Damaged objects: test/read/corruption.test.ts; radosgw:
 * test/read/s3-read.test.ts.)
 */
import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import fsp, { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { assertModeKeptByNobody } from '../helpers/as-nobody.js'
import { publishContent, within } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'
import { countingCalls } from '../helpers/wrapped-store.js'

const KiB = 1024
const code = (c: string) => (err: unknown) => StreamSegmentError.is(err) && err.code === c

describe('downloadFile', () => {
  let dir = ''
  let store: DirectoryStore
  /** Checkpoint 1 and checkpoint 2 (the latest), as written. */
  let first: Buffer
  let second: Buffer

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-download-'))
    store = new DirectoryStore(join(dir, 'container'))
    // Small objects (many GETs), a hole in the middle, a second checkpoint on top.
    const f = await SegmentFile.create(store, {
      segmentBufferSize: 256 * KiB,
      dataCacheDirtyMaxBytesThreshold: 256 * KiB,
    })
    first = pattern(0, 1024 * KiB, 7)
    await f.write(0, first)
    await f.writeZeroes(256 * KiB, 128 * KiB)
    first.fill(0, 256 * KiB, 384 * KiB)
    await f.flush()
    const more = pattern(1024 * KiB, 300 * KiB + 123, 8)
    await f.write(1024 * KiB, more)
    await f.truncate(2048 * KiB) // the rest a hole
    second = Buffer.concat([first, more, Buffer.alloc(2048 * KiB - first.length - more.length)])
    await f.flush()
    await f.close()
  })
  after(() => rm(dir, { recursive: true, force: true }))

  /** Names in `dir` that are temporary files. */
  const leftovers = async () => (await readdir(dir)).filter((n) => n.endsWith('.tmp'))

  it('writes the latest checkpoint, a range of it, or an older one; replaces the file at path', async () => {
    const path = join(dir, 'out.bin')
    await writeFile(path, 'old content')
    const progress: Array<[number, number]> = []
    const got = await downloadFile(store, path, {
      readGetMaxBytes: 64 * KiB,
      readMaxConcurrency: 3,
      onProgress: (done, total) => progress.push([done, total]),
    })
    assert.ok((await readFile(path)).equals(second), 'the latest checkpoint, holes as zeros')
    assert.ok(progress.length > 10, `${progress.length} progress calls`)
    assert.ok(
      progress.every(([done, total], i) => total === second.length && done > (progress[i - 1]?.[0] ?? 0)),
      'progress grows, of the whole range',
    )
    assert.deepEqual(progress.at(-1), [second.length, second.length], 'progress ends at the range')
    assert.deepEqual([got.cno, got.size, got.bytes], [2, second.length, second.length])
    assert.ok(got.timing.requests.inode >= 1 && got.timing.requests.data > 4, JSON.stringify(got.timing.requests))
    assert.ok(got.seconds > 0)

    const range = await downloadFile(store.url, path, { start: 250 * KiB, end: 1100 * KiB - 1 })
    assert.equal(range.bytes, 850 * KiB)
    assert.ok((await readFile(path)).equals(second.subarray(250 * KiB, 1100 * KiB)), 'a range across the hole')

    const clipped = await downloadFile(store, path, { start: 2000 * KiB, end: 10_000 * KiB })
    assert.equal(clipped.bytes, 48 * KiB)
    assert.ok((await readFile(path)).equals(second.subarray(2000 * KiB)), 'a range past the end is clipped')
    const toEnd = await downloadFile(store, path, { start: 2000 * KiB, end: Number.POSITIVE_INFINITY })
    assert.equal(toEnd.bytes, 48 * KiB, 'an end of Infinity, as fs.createReadStream takes it')

    const old = await downloadFile(store, path, { cno: 1 })
    assert.deepEqual([old.cno, old.size], [1, first.length])
    assert.ok((await readFile(path)).equals(first), 'checkpoint 1')

    const empty = await downloadFile(store, path, { start: second.length })
    assert.equal(empty.bytes, 0)
    assert.equal((await readFile(path)).length, 0, 'a range starting at the end is empty')
    assert.deepEqual(await leftovers(), [])
  })

  it('refuses bad arguments before any request, and a missing folder', async () => {
    const { store: counting, calls: requests } = countingCalls(store)
    const path = join(dir, 'bad.bin')
    await assert.rejects(downloadFile(counting, path, { start: -1 }), code('ERR_INVALID_ARGUMENT'))
    await assert.rejects(downloadFile(counting, path, { end: 1.5 }), /end must be a byte offset .* got number 1.5/)
    await assert.rejects(downloadFile(counting, path, { start: 10, end: 5 }), /end 5 is before start 10/)
    await assert.rejects(
      downloadFile(counting, path, { cno: 0 }),
      /cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 0/,
    )
    await assert.rejects(downloadFile(counting, path, { readMaxConcurrency: 0 }), /readMaxConcurrency/)
    await assert.rejects(downloadFile(counting, ''), /path "" must name a file/)
    assert.equal(requests(), 0, 'no request for bad arguments')
    await assert.rejects(
      downloadFile(store, join(dir, 'no-such-folder', 'x.bin')),
      (err) => code('ERR_NOT_FOUND')(err) && /no-such-folder.*no such file or directory/.test(String(err)),
    )
    // A folder at path, the current one among them, or a file inside the container's
    // folder: refused before any request, nothing written.
    await mkdir(join(dir, 'a-folder'))
    for (const [target, re] of [
      [join(dir, 'a-folder'), /downloadFile to .*a-folder: is a directory: name a file/],
      [dir, /downloadFile to .*: is a directory: name a file/],
      [join(dir, 'container', 'copy.bin'), /inside the container's folder .*container: writing there would corrupt/],
      [join(dir, 'container'), /is a directory/],
    ] as const) {
      await assert.rejects(
        downloadFile(counting, target),
        (err) => code('ERR_INVALID_ARGUMENT')(err) && re.test(String(err)),
      )
    }
    assert.equal(requests(), 0, 'no request for a path that cannot be written')
    assert.deepEqual(
      (await readdir(join(dir, 'container'))).filter((n) => n.startsWith('copy')),
      [],
    )
    // What onStart throws ends it before anything is written.
    await assert.rejects(
      downloadFile(store, path, {
        onStart: (file, bytes) => {
          assert.deepEqual([file.cno, bytes], [2, second.length])
          throw StreamSegmentError.range('not this one')
        },
      }),
      /not this one/,
    )
    assert.deepEqual(await leftovers(), [])
    await assert.rejects(readFile(path), /ENOENT/)
  })

  it('an abort or a failed GET leaves the file at path as it was, and no temporary file', async () => {
    const path = join(dir, 'keep.bin')
    await writeFile(path, 'keep me')
    const ac = new AbortController()
    let gets = 0
    let failAt = -1
    // Data GETs answer late; the second one aborts the download, or fails.
    const slow = new Proxy(store, {
      get(target, name, receiver) {
        if (name !== 'get' && name !== 'getChunks') return Reflect.get(target, name, receiver)
        const real = Reflect.get(target, name, receiver) as ObjectStore['get']
        return async (key: string, options?: GetOptions) => {
          if (!key.startsWith('inode') && key.includes('.') && !key.endsWith('.0')) {
            gets++
            if (gets === failAt) throw StreamSegmentError.store('the link went down')
            if (gets === 2) ac.abort(new Error('enough'))
            await new Promise((r) => setTimeout(r, 20))
          }
          return real.call(target, key, options)
        }
      },
    }) as ObjectStore
    await assert.rejects(
      downloadFile(slow, path, { signal: ac.signal, readGetMaxBytes: 64 * KiB }),
      (err) => code('ERR_ABORTED')(err) && /download of .* to .*keep\.bin aborted/.test(String(err)),
    )
    assert.ok(gets >= 2, `${gets} GETs`)
    assert.equal(String(await readFile(path)), 'keep me')
    assert.deepEqual(await leftovers(), [])
    // Aborted before it starts: no request at all.
    gets = 0
    await assert.rejects(downloadFile(slow, path, { signal: ac.signal }), code('ERR_ABORTED'))
    assert.equal(gets, 0)

    gets = 0
    failAt = 3
    await assert.rejects(downloadFile(slow, path, { readGetMaxBytes: 64 * KiB }), /the link went down/)
    assert.equal(String(await readFile(path)), 'keep me')
    assert.deepEqual(await leftovers(), [])
  })

  it('onProgress is not called again once the signal fired or it threw, though writes under way complete', async () => {
    const path = join(dir, 'stopped.bin')
    await writeFile(path, 'keep me')
    // Many small GETs, several in flight: their writes are under way when the first reports.
    const options = { readGetMaxBytes: 16 * KiB, readMaxConcurrency: 8 }
    for (const how of ['throw', 'abort'] as const) {
      const ac = new AbortController()
      const stop = new Error(`stopped by ${how}`)
      const calls: number[] = []
      await assert.rejects(
        downloadFile(store, path, {
          ...options,
          signal: ac.signal,
          onProgress: (done) => {
            calls.push(done)
            if (how === 'throw') throw stop
            ac.abort(stop)
          },
        }),
        (err) => (how === 'throw' ? err === stop : code('ERR_ABORTED')(err) && (err as Error).cause === stop),
      )
      assert.equal(calls.length, 1, `${how}: onProgress called ${calls.length} times (done ${calls.join(', ')})`)
      assert.equal(String(await readFile(path)), 'keep me')
      assert.deepEqual(await leftovers(), [])
    }
  })

  it('a failure closing the file (a full disk reported at close, as NFS does) is ERR_STORE naming it; a failure before it wins', async () => {
    const mem = new MemoryStore() // reads that open no local file: the only one closed is the download's
    await publishContent(mem, pattern(0, 100 * KiB, 3))
    const path = join(dir, 'keep-close.bin')
    await writeFile(path, 'keep me')
    // A FileHandle's close is its own (an arrow function), so the handles are wrapped as made.
    const open = fsp.open
    let failClose = false
    fsp.open = (async (...args: Parameters<typeof open>) => {
      const fh = await open(...args)
      const close = fh.close
      fh.close = async () => {
        await close()
        if (!failClose) return
        failClose = false
        throw Object.assign(new Error('ENOSPC: no space left on device, close'), { code: 'ENOSPC', syscall: 'close' })
      }
      return fh
    }) as typeof open
    syncBuiltinESMExports()
    try {
      await assert.rejects(
        downloadFile(mem, path, { onStart: () => (failClose = true) }),
        (err) => code('ERR_STORE')(err) && /keep-close\.bin: ENOSPC/.test(String(err)),
      )
      assert.equal(String(await readFile(path)), 'keep me')
      assert.deepEqual(await leftovers(), [])
      // A read that failed is what the download reports, not the close after it.
      const failing = new FailingStore(mem, [{ ops: ['get'], key: /^\d{10}\.\d+$/, nth: 2 }])
      let started = 0
      await assert.rejects(
        downloadFile(failing, path, {
          onStart: () => {
            started++
            failClose = true
          },
        }),
        (err) => code('ERR_STORE')(err) && /injected/.test(String(err)),
      )
      assert.deepEqual([started, failClose], [1, false], 'the read failed, then the close')
      assert.equal(String(await readFile(path)), 'keep me')
      assert.deepEqual(await leftovers(), [])
    } finally {
      fsp.open = open
      syncBuiltinESMExports()
    }
  })

  it('an async onStart or onProgress: its promise is awaited, what it rejects with ends the download', async () => {
    const path = join(dir, 'async-hooks.bin')
    await writeFile(path, 'keep me')
    const options = { readGetMaxBytes: 64 * KiB }
    for (const at of ['onStart', 'onProgress'] as const) {
      const refused = new Error(`refused by ${at}`)
      let calls = 0
      const hook = async () => {
        calls++
        await new Promise((r) => setTimeout(r, 5))
        throw refused
      }
      await assert.rejects(downloadFile(store, path, { ...options, [at]: hook }), (err) => err === refused)
      if (at === 'onStart') assert.equal(calls, 1, 'onStart called once')
      // Writes that ended while the first call was pending called it too: one per GET in flight at most.
      else assert.ok(calls >= 1 && calls <= 10, `onProgress called ${calls} times before it rejected`)
      const before = calls
      await new Promise((r) => setTimeout(r, 20))
      assert.equal(calls, before, `${at} not called again once it rejected`)
      assert.equal(String(await readFile(path)), 'keep me', `${at}: the file at path as it was`)
      assert.deepEqual(await leftovers(), [])
    }
    // Awaited: a slow onProgress holds the download back, it does not run on beside it.
    let pending = 0
    let most = 0
    await downloadFile(store, path, {
      ...options,
      onProgress: async () => {
        most = Math.max(most, ++pending)
        await new Promise((r) => setTimeout(r, 1))
        pending--
      },
    })
    assert.ok((await readFile(path)).equals(second))
    assert.ok(most <= 10, `${most} onProgress calls under way at once, at most the GETs in flight`)
  })

  it('a temporary file that cannot be removed (the disk gone read-only): the failure before it is reported, the handle closed', async () => {
    const mem = new MemoryStore()
    await publishContent(mem, pattern(0, 100 * KiB, 4))
    const path = join(dir, 'keep-rm.bin')
    await writeFile(path, 'keep me')
    const rm = fsp.rm
    const tried: string[] = []
    fsp.rm = (async (target: string) => {
      tried.push(target)
      throw Object.assign(new Error(`EROFS: read-only file system, unlink '${target}'`), {
        code: 'EROFS',
        syscall: 'unlink',
      })
    }) as typeof rm
    syncBuiltinESMExports()
    const tmps: string[] = []
    try {
      const failing = new FailingStore(mem, [{ ops: ['get'], key: /^\d{10}\.\d+$/, nth: 1 }])
      let handle: SegmentFile | undefined
      await assert.rejects(
        downloadFile(failing, path, { onStart: (file) => (handle = file) }),
        (err) => code('ERR_STORE')(err) && /injected/.test(String(err)),
      )
      assert.equal(tried.length, 1, 'the removal was tried')
      tmps.push(...(await leftovers()))
      await assert.rejects((handle as SegmentFile).read(0, 1), /closed/, 'the handle is closed')
      assert.equal(String(await readFile(path)), 'keep me')
    } finally {
      fsp.rm = rm
      syncBuiltinESMExports()
      for (const t of tmps) await rm(join(dir, t), { force: true })
    }
  })

  it('to a file slower than the store: bytes fetched and not yet written stay within the GETs allowed in flight', async () => {
    const mem = new MemoryStore()
    const f = await SegmentFile.create(mem, { streamSegmentBytes: 0 })
    const data = pattern(0, 8 * 1024 * KiB, 5)
    await f.write(0, data)
    await f.flush()
    await f.close()
    const store = new ThrottledStore(mem, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const path = join(dir, 'slow-sink.bin')
    const open = fsp.open
    let written = 0
    let most = 0
    fsp.open = (async (...args: Parameters<typeof open>) => {
      const fh = await open(...args)
      const writev = fh.writev.bind(fh)
      fh.writev = (async (buffers: NodeJS.ArrayBufferView[], position?: number) => {
        most = Math.max(most, store.bytesDown - written)
        for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r)) // a disk slower than the GETs
        const r = await writev(buffers, position)
        written += r.bytesWritten
        return r
      }) as typeof fh.writev
      return fh
    }) as typeof open
    syncBuiltinESMExports()
    try {
      const options = { readGetMaxBytes: 256 * KiB, readMaxConcurrency: 3 }
      const { timing } = await downloadFile(store, path, options)
      assert.ok((await readFile(path)).equals(data), 'the file is the checkpoint')
      // The data GETs in flight, each held until its bytes are written, and the walk's reads
      // (its tail reads of header, summary and nodes, which hold no data).
      const walked = Object.values(timing.bytes).reduce((a, b) => a + b, 0) - timing.bytes.data
      const bound = options.readMaxConcurrency * options.readGetMaxBytes + walked
      assert.ok(most <= bound, `${most} bytes fetched ahead of the file, bound ${bound}`)
      assert.ok(written >= data.length && store.bytesDown >= data.length)
    } finally {
      fsp.open = open
      syncBuiltinESMExports()
    }
  })

  it('an empty range or an empty checkpoint reports its end once: onProgress(0, 0)', async () => {
    const path = join(dir, 'empty-progress.bin')
    const mem = new MemoryStore()
    await publishContent(mem, new Uint8Array(0))
    for (const [what, from, options] of [
      ['a range starting at the end', store, { start: second.length }],
      ['an empty checkpoint', mem, {}],
    ] as const) {
      const progress: Array<[number, number]> = []
      const got = await downloadFile(from, path, {
        ...options,
        onProgress: (done, total) => progress.push([done, total]),
      })
      assert.equal(got.bytes, 0, what)
      assert.deepEqual(progress, [[0, 0]], `${what}: onProgress called once, at its end`)
      assert.equal((await readFile(path)).length, 0, what)
    }
    assert.deepEqual(await leftovers(), [])
  })

  it('onProgress is not called once a GET or a write failed, not even by a write under way then', async () => {
    const mem = new MemoryStore()
    await publishContent(mem, pattern(0, 512 * KiB, 6), { streamSegmentBytes: 0 })
    const path = join(dir, 'keep-failed.bin')
    await writeFile(path, 'keep me')
    for (const how of ['GET', 'write'] as const) {
      let started = false
      let writing = false
      let failed = false
      let onFailed: () => void = () => {}
      const failure = new Promise<void>((r) => {
        onFailed = r
      })
      // While the download's first write is held, the next GET (or write) fails; that first
      // write ends after it.
      const failing = new Proxy(mem, {
        get(target, name, receiver) {
          const real = Reflect.get(target, name, receiver)
          if (typeof real !== 'function') return real
          if (name !== 'get' && name !== 'getChunks') return real.bind(target)
          return async (key: string, options?: GetOptions) => {
            if (how === 'GET' && started && writing && !failed) {
              failed = true
              onFailed()
              throw StreamSegmentError.store('the link went down')
            }
            return (real as ObjectStore['get']).call(target, key, options)
          }
        },
      }) as ObjectStore
      const open = fsp.open
      fsp.open = (async (...args: Parameters<typeof open>) => {
        const fh = await open(...args)
        if (!String(args[0]).includes('.ss-download-')) return fh
        const writev = fh.writev.bind(fh)
        fh.writev = (async (buffers: NodeJS.ArrayBufferView[], position?: number) => {
          if (!writing) {
            writing = true
            await failure
            for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r)) // the scan has heard of it
          } else if (how === 'write' && !failed) {
            failed = true
            onFailed()
            throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
          }
          return writev(buffers, position)
        }) as typeof fh.writev
        return fh
      }) as typeof open
      syncBuiltinESMExports()
      try {
        let late = 0
        await assert.rejects(
          downloadFile(failing, path, {
            readGetMaxBytes: 16 * KiB,
            readMaxConcurrency: 2,
            onStart: () => (started = true),
            onProgress: () => {
              if (failed) late++
            },
          }),
          (err) =>
            code('ERR_STORE')(err) &&
            (how === 'GET' ? /the link went down/ : /keep-failed\.bin: ENOSPC/).test(String(err)),
        )
        assert.ok(failed, `a ${how} failed while a write was under way`)
        assert.equal(late, 0, `onProgress called ${late} times after the ${how} failed`)
        assert.equal(String(await readFile(path)), 'keep me')
        assert.deepEqual(await leftovers(), [])
      } finally {
        fsp.open = open
        syncBuiltinESMExports()
      }
    }
  })

  it('keeps the setuid and setgid bits of the file it replaces, written by a user without CAP_FSETID', async () => {
    // The kernel clears setuid and setgid on a write by a process without CAP_FSETID: root
    // keeps them, so as root the download runs in a child as nobody (uid and gid 65534).
    await assertModeKeptByNobody('ss-download-mode-', {
      module: 'streams/download-file.js',
      name: 'downloadFile',
      call: 'downloadFile(mem, path, { readGetMaxBytes: 64 * 1024 })',
    })
  })

  it('the temporary file is never more open than the file it replaces (0600: no one else may read it meanwhile)', async () => {
    const path = join(dir, 'secret.bin')
    await writeFile(path, 'old secret')
    await chmod(path, 0o600)
    const modes: number[] = []
    await downloadFile(store, path, {
      readGetMaxBytes: 64 * KiB,
      onProgress: async () => {
        for (const t of await leftovers()) modes.push((await stat(join(dir, t))).mode & 0o7777)
      },
    })
    assert.ok(modes.length > 0, 'the temporary file seen while written')
    assert.deepEqual(
      modes.filter((m) => (m & 0o077) !== 0).map((m) => m.toString(8)),
      [],
      'group and others never had access',
    )
    assert.equal((await stat(path)).mode & 0o7777, 0o600)
    assert.ok((await readFile(path)).equals(second))
  })

  it('reads its options once, when called: changed while it runs, they do not move the range', async () => {
    const path = join(dir, 'options-once.bin')
    const options: { start?: number; end?: number } = { start: 1000, end: 1999 }
    const download = downloadFile(store, path, options)
    // Reused for the next call before this one is done, as a loop that does not await may.
    options.start = -4096
    options.end = 10
    const got = await download
    assert.equal(got.bytes, 1000)
    assert.ok((await readFile(path)).equals(second.subarray(1000, 2000)), 'bytes 1000-1999, as asked')
  })

  it('an abort while the checkpoint is opened ends the download at once', async () => {
    const path = join(dir, 'keep-open.bin')
    await writeFile(path, 'keep me')
    // The inode's GET hangs until its request is aborted, as a stalled link's would.
    const stalled = new FailingStore(store, [{ ops: ['get', 'head'], key: /^inode$/, mode: 'hang' }])
    const ac = new AbortController()
    const download = downloadFile(stalled, path, { signal: ac.signal })
    const settled = assert.rejects(
      download,
      (err) => code('ERR_ABORTED')(err) && /download of .* to .*keep-open\.bin aborted/.test(String(err)),
    )
    await within(stalled.hangOf('get', 'head'), 2000, 'the open')
    ac.abort(new Error('enough'))
    await within(settled, 2000, 'abort during the open')
    assert.equal(String(await readFile(path)), 'keep me')
    assert.deepEqual(await leftovers(), [])
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0)
  })
})
