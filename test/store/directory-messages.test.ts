/**
 * The directory store's failures name what they concern: the key (and the part and upload
 * of a multipart call), however deep in the store they arise; and a failure between
 * opening a file and closing it closes it all the same. A root or a key that holds control
 * characters is named escaped: no message carries one raw to a terminal.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { promises as fsp } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { gc } from '../../lib/admin/gc.js'
import { inspectCheckpoint } from '../../lib/admin/inspect.js'
import { listCheckpoints } from '../../lib/admin/list.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { printable } from '../../lib/util/shell-words.js'
import { assertPrintable, debugLines, rejectsCode } from '../helpers/assert.js'
import { legacyEtag } from '../helpers/directory-store.js'
import { assertRefusalsNameTheObject, objectAt } from '../helpers/store-messages.js'

type Writev = FileHandle['writev']
type Read = FileHandle['read']

describe('directory store: what its failures name', () => {
  let dir = ''
  let proto: { writev: Writev; read: Read }
  before(async () => {
    dir = await fsp.mkdtemp(join(tmpdir(), 'ss-dir-messages-'))
    const fh = await fsp.open(dir, 'r')
    proto = Object.getPrototypeOf(fh) as { writev: Writev; read: Read }
    await fh.close()
  })
  after(async () => {
    await fsp.rm(dir, { recursive: true, force: true })
  })

  it('a sidecar whose fstat fails: the put is ERR_STORE naming the key, and the sidecar’s handle is closed', async (t) => {
    const root = join(dir, 'fstat')
    const store = new DirectoryStore(root)
    await store.put('first', Buffer.from('makes the store'))
    const { open } = fsp
    const opened: FileHandle[] = []
    t.mock.method(fsp, 'open', async (...args: Parameters<typeof fsp.open>) => {
      const fh = await open(...args)
      if (String(args[0]).startsWith(join(root, '.ss-meta/'))) {
        opened.push(fh)
        Object.assign(fh, {
          stat: () =>
            Promise.reject(Object.assign(new Error('EIO: i/o error, fstat'), { code: 'EIO', syscall: 'fstat' })),
        })
      }
      return fh
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    try {
      await rejectsCode(store.put('k', Buffer.from('bytes')), 'ERR_STORE', /put k failed: input\/output error.*\(EIO\)/)
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.equal(opened.length, 1, 'the sidecar was opened once')
    const fds = opened.map((fh) => fh.fd)
    await Promise.all(opened.map((fh) => fh.close().catch(() => {})))
    assert.deepEqual(fds, [-1], 'the sidecar’s handle is left open')
    assert.equal(await store.head('k'), undefined, 'the key stays empty')
    assert.deepEqual(await fsp.readdir(join(root, '.ss-tmp')), [], 'no temporary file is left')
  })

  it('a sidecar whose write fails and whose close fails too: the put reports the write’s failure', async (t) => {
    const root = join(dir, 'sidecar-write')
    const store = new DirectoryStore(root)
    await store.put('first', Buffer.from('makes the store'))
    const { open } = fsp
    let closes = 0
    t.mock.method(fsp, 'open', async (...args: Parameters<typeof fsp.open>) => {
      const fh = await open(...args)
      if (String(args[0]).startsWith(join(root, '.ss-meta/'))) {
        const close = fh.close.bind(fh)
        Object.assign(fh, {
          writeFile: () => Promise.reject(Object.assign(new Error('ENOSPC: write'), { code: 'ENOSPC' })),
          close: async () => {
            closes++
            await close()
            throw Object.assign(new Error('EIO: close'), { code: 'EIO' })
          },
        })
      }
      return fh
    })
    syncBuiltinESMExports()
    try {
      await rejectsCode(
        store.put('k', Buffer.from('bytes')),
        'ERR_STORE',
        /put k failed: no space left on the device \(ENOSPC\)/,
      )
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.equal(closes, 1, 'the sidecar’s handle is closed once')
    assert.equal(await store.head('k'), undefined)
  })

  it('writev that writes nothing: put and uploadPart are ERR_STORE naming the key (and the part and upload)', async (t) => {
    const store = new DirectoryStore(join(dir, 'writev'))
    await store.put('first', Buffer.from('makes the store'))
    const id = await store.createMultipart('m')
    t.mock.method(proto, 'writev', function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[]) {
      return Promise.resolve({ bytesWritten: 0, buffers })
    } as unknown as Writev)
    try {
      await rejectsCode(store.put('k', Buffer.from('bytes')), 'ERR_STORE', /put k failed: writev wrote nothing/)
      await rejectsCode(
        store.uploadPart('m', id, 2, Buffer.from('part')),
        'ERR_STORE',
        new RegExp(`upload part 2 of m \\(upload ${id}\\) failed: writev wrote nothing`),
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.equal(await store.head('k'), undefined)
  })

  it('a part that is not a regular file at completion: ERR_STORE naming the key, the part and the upload', async () => {
    const store = new DirectoryStore(join(dir, 'fifo-part'))
    const id = await store.createMultipart('m')
    await store.uploadPart('m', id, 1, Buffer.from('part one'))
    // A FIFO in the part's place, given as the part by its own identity (its ETag).
    const part = join(store.root, '.ss-multipart', id, '1')
    await fsp.rm(part)
    execFileSync('mkfifo', [part])
    const etag = legacyEtag(await fsp.stat(part))
    const err = await rejectsCode(store.completeMultipart('m', id, [{ partNumber: 1, etag }]), 'ERR_STORE')
    assert.match(err.message, /complete multipart m failed: /)
    assert.match(err.message, new RegExp(`part 1 of upload ${id} \\(${part}\\) is not a regular file`))
    assert.equal(await store.head('m'), undefined)
  })

  it('a copy source that ends early: ERR_STORE naming the source, the key and the part', async (t) => {
    const store = new DirectoryStore(join(dir, 'copy'))
    await store.put('src', Buffer.from('0123456789'))
    const id = await store.createMultipart('m')
    t.mock.method(proto, 'read', function (this: FileHandle, buffer: NodeJS.ArrayBufferView) {
      return Promise.resolve({ bytesRead: 0, buffer })
    } as unknown as Read)
    let err: Error
    try {
      err = await rejectsCode(
        store.uploadPartCopy('m', id, 3, { store, key: 'src', range: { start: 2, end: 8 } }),
        'ERR_STORE',
      )
    } finally {
      t.mock.restoreAll()
    }
    assert.match(err.message, new RegExp(`upload part copy 3 of m \\(upload ${id}\\) failed: `))
    assert.ok(err.message.includes(`${store.url}/src: file shrank while being copied, at byte 2`), err.message)
  })

  it('a completion refused and a create-only put that keeps losing its key name the store, as its other errors do', async (t) => {
    const store = new DirectoryStore(join(dir, 'refusals'))
    const at = (key: string) => objectAt(store, key)
    // A part never uploaded under that ETag.
    const id = await store.createMultipart('m')
    await store.uploadPart('m', id, 1, Buffer.from('part one'))
    const stale = await rejectsCode(
      store.completeMultipart('m', id, [{ partNumber: 1, etag: '"0-0-0"' }]),
      'ERR_INVALID_ARGUMENT',
      /part 1 with etag "0-0-0" was not uploaded/,
    )
    assert.match(stale.message, at('m'))
    // A claimed upload whose placeholder another writer replaced.
    const claimed = await store.createMultipart('c', { ifNoneMatch: '*' })
    const { etag } = await store.uploadPart('c', claimed, 1, Buffer.from('part one'))
    await store.put('c', Buffer.from('another writer'))
    const lost = await rejectsCode(
      store.completeMultipart('c', claimed, [{ partNumber: 1, etag }]),
      'ERR_CONFLICT',
      /claimed by another writer/,
    )
    assert.match(lost.message, at('c'))
    // Every link refused as taken, the key never found when looked at.
    const { link } = fsp
    t.mock.method(fsp, 'link', async (from: string, to: string) => {
      if (to === store.pathOf('k'))
        throw Object.assign(new Error('EEXIST: file already exists, link'), { code: 'EEXIST' })
      return link(from, to)
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    let changing: Error
    try {
      changing = await rejectsCode(
        store.put('k', Buffer.from('bytes'), { ifNoneMatch: '*' }),
        'ERR_CONFLICT',
        /changed during create-only put/,
      )
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.match(changing.message, at('k'))
  })

  it('a condition that fails and a completion whose parts are of unequal sizes name the store too', async () => {
    await assertRefusalsNameTheObject(new DirectoryStore(join(dir, 'conditions')))
  })

  it('a part whose stat fails (the disk’s EIO) at completion: ERR_STORE naming it, not a part never uploaded', async (t) => {
    const store = new DirectoryStore(join(dir, 'part-eio'))
    const id = await store.createMultipart('m')
    const { etag } = await store.uploadPart('m', id, 1, Buffer.from('part one'))
    const part = join(store.root, '.ss-multipart', id, '1')
    const { stat } = fsp
    t.mock.method(fsp, 'stat', async (...args: Parameters<typeof fsp.stat>) => {
      if (String(args[0]) === part) {
        throw Object.assign(new Error(`EIO: i/o error, stat '${part}'`), { code: 'EIO', syscall: 'stat', path: part })
      }
      return stat(...args)
    })
    syncBuiltinESMExports() // the store takes fs from node:fs/promises
    try {
      await rejectsCode(
        store.completeMultipart('m', id, [{ partNumber: 1, etag }]),
        'ERR_STORE',
        new RegExp(`complete multipart m failed: input/output error.*\\(EIO\\): stat ${part}`),
      )
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.equal(await store.head('m'), undefined)
  })

  it('a root and keys holding ESC, the one-byte CSI and a newline: every message names them escaped', async () => {
    const root = join(dir, 'esc\x1b[31m\u009b\nroot')
    const store = new DirectoryStore(root)
    assert.equal(store.url, root, 'the url is the root as given: it opens the same folder again')
    const named = (err: Error, ...raw: string[]) => {
      assertPrintable(err.message)
      for (const r of raw) assert.ok(err.message.includes(printable(r)), `${JSON.stringify(err.message)} names ${r}`)
      // What Node prints of an error it is given (uncaught, console.error) starts with the stack.
      assert.ok(err.stack?.split('\n    at ')[0]?.endsWith(err.message), JSON.stringify(err.stack))
    }
    // No container yet.
    named(await rejectsCode(listCheckpoints(store), 'ERR_NOT_FOUND', /no container here/), root)
    named(await rejectsCode(gc(store), 'ERR_NOT_FOUND', /no container here/), root)
    named(await rejectsCode(SegmentFile.open(store), 'ERR_NOT_FOUND', /no container here/), root)
    // Keys the store takes (a control character is no fault in a key), and their failures.
    const key = 'k\x1b]0;title\x07\u009b2J'
    named(await rejectsCode(store.get(key), 'ERR_NOT_FOUND', /no such key/), root, key)
    named(await rejectsCode(store.put(`${key}/\0`, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /NUL/))
    await store.put(key, Buffer.from('v1'))
    named(await rejectsCode(store.put(key, Buffer.from('v2'), { ifNoneMatch: '*' }), 'ERR_CONFLICT'), root, key)
    named(await rejectsCode(store.completeMultipart(key, 'no-such-upload', []), 'ERR_NOT_FOUND'), root, key)
    await store.delete(key)
    // A container, and a checkpoint that is not there.
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(4096, 7))
    await f.flush()
    await f.close()
    named(await rejectsCode(SegmentFile.open(store, { cno: 9 }), 'ERR_NOT_FOUND', /checkpoint 9/), root)
    named(await rejectsCode(gc(store, { keepCnos: [9] }), 'ERR_NOT_FOUND', /checkpoint 9/), root)
    named(await rejectsCode(inspectCheckpoint(store, { cno: 9 }), 'ERR_NOT_FOUND', /checkpoint 9/), root)
    const out = join(dir, 'out\x1b[2J')
    named(await rejectsCode(downloadFile(store, out, { cno: 9 }), 'ERR_NOT_FOUND', /checkpoint 9/), root)
    named(await rejectsCode(exportObject(store, out, { cno: 9 }), 'ERR_NOT_FOUND', /checkpoint 9/), root)
    // A read whose object is gone (as a gc of another process leaves it).
    const reader = await SegmentFile.open(store, { readOnly: true })
    try {
      for await (const { key } of store.list('')) if (key !== 'inode') await store.delete(key)
      named(await rejectsCode(reader.read(0, 4096), 'ERR_NOT_FOUND'), root)
    } finally {
      await reader.close()
    }
  })

  it('the debug lines of a store whose root holds control characters name it escaped', async () => {
    const root = join(dir, 'debug\x1b[31m\u009b\nroot')
    const lines = await debugLines('stream-segment:*', async () => {
      const store = new DirectoryStore(root)
      const f = await SegmentFile.create(store)
      await f.write(0, Buffer.alloc(4096, 7))
      await f.flush()
      await f.close()
      await (await SegmentFile.open(store, { readOnly: true })).close()
    })
    const naming = lines.filter((l) => l.includes(printable(root)))
    assert.ok(
      naming.some((l) => l.includes(`open ${printable(root)} at checkpoint 1`)),
      lines.join('\n'),
    )
    for (const l of lines) assertPrintable(l)
  })
})
