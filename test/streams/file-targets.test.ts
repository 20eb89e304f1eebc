/**
 * What a checkpoint written to a local file replaces, and what uploadFile opens: the
 * downloadFile and exportObject targets keep a symbolic link (its target is replaced) and
 * the permission bits of the file replaced, refuse a FIFO (it would be replaced by a
 * file), and take a name as long as the file system allows; uploadFile refuses a FIFO
 * without opening it (an open of a FIFO waits for a writer, and nothing can stop it).
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { constants, promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { printable } from '../../lib/util/shell-words.js'
import { assertPrintable, rejectsCode } from '../helpers/assert.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { countingCalls } from '../helpers/wrapped-store.js'

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

async function tempDir(): Promise<string> {
  const d = await fs.mkdtemp(join(tmpdir(), 'ss-targets-'))
  roots.push(d)
  return d
}

const BYTES = pattern(0, 70_000, 5)

/** `err`'s message holds no control character, and names `path` with them escaped. */
function assertNamesEscaped(err: Error, path: string): void {
  assertPrintable(err.message)
  assert.ok(err.message.includes(printable(path)), `${JSON.stringify(err.message)} names ${printable(path)}`)
}

async function container(): Promise<MemoryStore> {
  const store = new MemoryStore()
  const f = await SegmentFile.create(store)
  await f.write(0, BYTES)
  await f.flush()
  await f.close()
  return store
}

const writers = {
  downloadFile: (store: ObjectStore, path: string) => downloadFile(store, path),
  exportObject: (store: ObjectStore, path: string) => exportObject(store, path),
}

describe('local file targets', () => {
  for (const [name, write] of Object.entries(writers)) {
    it(`${name}: a symbolic link stays, its target is replaced; the permission bits are kept`, async () => {
      const dir = await tempDir()
      const store = await container()
      await fs.writeFile(join(dir, 'target'), 'old')
      await fs.symlink('target', join(dir, 'link'))
      await write(store, join(dir, 'link'))
      assert.ok((await fs.lstat(join(dir, 'link'))).isSymbolicLink(), 'the link is still a link')
      assert.deepEqual(await fs.readFile(join(dir, 'target')), BYTES)

      await fs.writeFile(join(dir, 'private'), 'secret', { mode: 0o600 })
      await fs.chmod(join(dir, 'private'), 0o600)
      await write(store, join(dir, 'private'))
      assert.equal((await fs.stat(join(dir, 'private'))).mode & 0o777, 0o600)
      assert.deepEqual(await fs.readFile(join(dir, 'private')), BYTES)
      assert.deepEqual((await fs.readdir(dir)).sort(), ['link', 'private', 'target'], 'no temporary file left')
    })

    it(`${name}: a chain of symbolic links to nothing yet: every link stays, the file goes where the last names`, async () => {
      const dir = await tempDir()
      const store = await container()
      await fs.mkdir(join(dir, 'sub'))
      await fs.symlink('link2', join(dir, 'link1'))
      await fs.symlink('sub/new', join(dir, 'link2'))
      await write(store, join(dir, 'link1'))
      for (const link of ['link1', 'link2']) {
        assert.ok((await fs.lstat(join(dir, link))).isSymbolicLink(), `${link} is still a link`)
      }
      assert.deepEqual(await fs.readFile(join(dir, 'sub', 'new')), BYTES)
      assert.deepEqual(await fs.readdir(join(dir, 'sub')), ['new'], 'no temporary file left')
    })

    it(`${name}: a FIFO at the path is refused and left as it is; a 240-byte name is written`, async () => {
      const dir = await tempDir()
      const store = await container()
      const fifo = join(dir, 'fifo')
      execFileSync('mkfifo', [fifo])
      await rejectsCode(write(store, fifo), 'ERR_INVALID_ARGUMENT', /not a regular file/)
      assert.ok((await fs.lstat(fifo)).isFIFO(), 'still a FIFO')
      const long = join(dir, 'a'.repeat(240))
      await write(store, long)
      assert.deepEqual(await fs.readFile(long), BYTES)
    })

    it(`${name}: a path ending in a slash or holding a NUL is ERR_INVALID_ARGUMENT before any request`, async () => {
      // A slash after a name not there yet: the whole checkpoint was read into a temporary
      // file beside it, and only its rename failed. A NUL: Node's own argument error, taken
      // for a failing disk (ERR_STORE, retryable).
      const dir = await tempDir()
      const { store, calls } = countingCalls(await container())
      await rejectsCode(write(store, `${join(dir, 'new-folder')}/`), 'ERR_INVALID_ARGUMENT', /names a directory/)
      await rejectsCode(write(store, join(dir, 'a\0b')), 'ERR_INVALID_ARGUMENT', /null bytes/)
      assert.equal(calls(), 0, 'no request')
      assert.deepEqual(await fs.readdir(dir), [], 'nothing written')
    })

    it(`${name}: a path's control characters are escaped in the message, as the CLI prints them`, async () => {
      const dir = await tempDir()
      const store = await container()
      // A NUL (Node refuses the path), and an ESC and a CSI in a folder not there (ENOENT).
      for (const path of [join(dir, 'a\0b'), join(dir, 'no\x1b[31m\u009bdir', 'f')]) {
        const err = await write(store, path).then(
          () => assert.fail(`${JSON.stringify(path)}: no error`),
          (e: Error) => e,
        )
        assertNamesEscaped(err, path)
      }
    })
  }

  it("uploadFile: a path's control characters are escaped in the message", async () => {
    const dir = await tempDir()
    for (const path of [join(dir, 'a\0b'), join(dir, 'no\x1b[31m\u009bfile')]) {
      const err = await uploadFile(path, new MemoryStore()).then(
        () => assert.fail(`${JSON.stringify(path)}: no error`),
        (e: Error) => e,
      )
      assertNamesEscaped(err, path)
    }
  })

  it('uploadFile of a FIFO is refused without waiting for a writer', async () => {
    const dir = await tempDir()
    const fifo = join(dir, 'fifo')
    execFileSync('mkfifo', [fifo])
    try {
      await within(
        rejectsCode(uploadFile(fifo, new MemoryStore()), 'ERR_INVALID_ARGUMENT', /not a regular file/),
        2_000,
        'uploadFile of a FIFO',
      )
    } finally {
      // A reader stuck in its open (the bug) is let go by a writer, or the process could not exit.
      const w = await fs.open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined)
      await w?.close()
    }
  })
})
