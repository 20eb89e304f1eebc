/**
 * What `put` and `uploadFile` read is what they opened and looked at, never what a look
 * at the path found before: a FIFO with no writer put in a file's place is opened at once
 * (a blocking open waits for a writer in libuv's thread pool, where no signal reaches it
 * and the process cannot exit) and judged as the FIFO it is; a file put in a FIFO's place
 * is read as the file it is.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fsSync, { constants, promises as fs, readFileSync, writeFileSync } from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { main } from '../lib/cli.js'
import { DirectoryStore } from '../lib/store/directory.js'
import { MemoryStore } from '../lib/store/memory.js'
import { uploadFile } from '../lib/streams/upload-file.js'
import { openLocalFile } from '../lib/util/local-fs.js'
import { rejectsCode } from './helpers/assert.js'
import { fakeOutput } from './helpers/cli.js'
import { readAll, within, withinFreeingFifo } from './helpers/containers.js'

/** The open flags of descriptor `fd` of this process, from /proc (octal there). */
function fdFlags(fd: number): number {
  const m = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))
  assert.ok(m, `no flags in /proc/self/fdinfo/${fd}`)
  return Number.parseInt(m[1] as string, 8)
}

describe('openLocalFile: what is judged is what was opened', () => {
  let dir = ''
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-open-source-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('a FIFO with no writer (as put opens what is not a regular file): a handle at once, which says it is a FIFO', async () => {
    const fifo = join(dir, 'no-writer')
    execFileSync('mkfifo', [fifo])
    const fh = await withinFreeingFifo(openLocalFile(fifo), fifo, 'openLocalFile of a FIFO')
    try {
      assert.ok((await fh.stat()).isFIFO(), 'the handle is the FIFO')
    } finally {
      await fh.close()
    }
  })

  it('a regular file replaced by a FIFO with no writer as it is opened: uploadFile refuses it at once, reading nothing', async (t) => {
    const path = join(dir, 'swapped')
    writeFileSync(path, 'a regular file when first looked at')
    // The swap is made the moment the file is opened, after any look at the path before.
    const open = fs.open
    t.mock.method(fs, 'open', async (p: unknown, ...rest: unknown[]) => {
      if (p === path && !(await fs.lstat(path)).isFIFO()) {
        await fs.rm(path)
        execFileSync('mkfifo', [path])
      }
      return (open as (...a: unknown[]) => unknown)(p, ...rest)
    })
    syncBuiltinESMExports() // the library takes open from node:fs/promises
    const store = new MemoryStore()
    try {
      await withinFreeingFifo(
        rejectsCode(uploadFile(path, store), 'ERR_INVALID_ARGUMENT', /swapped: not a regular file/),
        path,
        'uploadFile of a file swapped for a FIFO',
      )
      const keys: string[] = []
      for await (const o of store.list('')) keys.push(o.key)
      assert.deepEqual(keys, [], 'nothing written to the store')
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
  })

  it('a character device is read blocking (O_NONBLOCK cleared), a regular file as it is', async () => {
    const dev = await openLocalFile('/dev/zero')
    try {
      assert.ok((await dev.stat()).isCharacterDevice())
      assert.equal(fdFlags(dev.fd) & constants.O_NONBLOCK, 0, 'the device is read without O_NONBLOCK')
      const { bytesRead, buffer } = await dev.read(Buffer.alloc(4), 0, 4, null)
      assert.equal(bytesRead, 4)
      assert.deepEqual(buffer, Buffer.alloc(4))
    } finally {
      await dev.close()
    }
    const path = join(dir, 'plain')
    writeFileSync(path, 'plain bytes')
    const fh = await openLocalFile(path, true)
    try {
      assert.equal(await fh.readFile('utf8'), 'plain bytes')
    } finally {
      await fh.close()
    }
  })

  it('missing, and a folder with regularOnly: ERR_NOT_FOUND and ERR_INVALID_ARGUMENT naming the path', async () => {
    await rejectsCode(openLocalFile(join(dir, 'none')), 'ERR_NOT_FOUND', /none: no such file/)
    await rejectsCode(openLocalFile(dir, true), 'ERR_INVALID_ARGUMENT', /: not a regular file/)
  })
})

describe('put: a FIFO replaced by a regular file as it is opened', () => {
  let dir = ''
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-open-source-put-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('is put as the regular file it is, by reference', async (t) => {
    const path = join(dir, 'was-a-fifo')
    execFileSync('mkfifo', [path])
    // put looks at the path (a FIFO), then opens it without blocking: the file replaces the
    // FIFO just then. A socket on a regular file's descriptor is refused by Node.
    const openSync = fsSync.openSync
    t.mock.method(fsSync, 'openSync', (p: unknown, ...rest: unknown[]) => {
      if (p === path && fsSync.lstatSync(path).isFIFO()) {
        fsSync.rmSync(path)
        writeFileSync(path, 'the file that replaced the FIFO')
      }
      return (openSync as (...a: unknown[]) => number)(p as string, ...(rest as []))
    })
    syncBuiltinESMExports() // put takes openSync from node:fs
    const container = join(dir, 'c')
    const out = fakeOutput()
    const err = fakeOutput()
    let code: number
    try {
      code = await within(main(['put', path, container, '--json'], out, err), 10_000, 'put')
    } finally {
      t.mock.restoreAll()
      syncBuiltinESMExports()
    }
    assert.equal(code, 0, err.writes.join(''))
    assert.equal(JSON.parse(out.writes.join('')).by, 'reference')
    assert.equal((await readAll(new DirectoryStore(container))).toString(), 'the file that replaced the FIFO')
  })
})
