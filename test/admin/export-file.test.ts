/**
 * exportObject to a local file: the replaced file's permission bits kept (setuid and
 * setgid too, written by a user who loses them on a write), the temporary file never more
 * open than the file it replaces, a temporary file that cannot be made said so, and the
 * caller's own onProgress error given back as thrown, onProgress not called after it.
 */
import assert from 'node:assert/strict'
import fsp, { chmod, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { assertModeKeptByNobody } from '../helpers/as-nobody.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect, publishContent } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024

describe('exportObject to a file', () => {
  let dir = ''
  const store = new MemoryStore()
  const content = pattern(0, 300 * KiB, 7)
  const leftovers = async () => (await readdir(dir)).filter((n) => n.endsWith('.tmp'))

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-export-file-'))
    await publishContent(store, content)
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('keeps the setuid and setgid bits of the file it replaces, written by a user without CAP_FSETID', async () => {
    // The kernel clears setuid and setgid on a write by a process without CAP_FSETID: root
    // keeps them, so as root the export runs in a child as nobody (uid and gid 65534).
    await assertModeKeptByNobody('ss-export-mode-', {
      module: 'admin/export.js',
      name: 'exportObject',
      call: 'exportObject(mem, path)',
    })
  })

  it('the temporary file is never more open than the file it replaces (0600: no one else may read it meanwhile)', async () => {
    const path = join(dir, 'secret.bin')
    await writeFile(path, 'old secret')
    await chmod(path, 0o600)
    // The temporary file's mode as it is made, before anything else is done to it.
    const modes: number[] = []
    const open = fsp.open
    fsp.open = (async (...args: Parameters<typeof open>) => {
      const fh = await open(...args)
      if (String(args[0]).endsWith('.tmp')) modes.push((await fh.stat()).mode & 0o7777)
      return fh
    }) as typeof open
    syncBuiltinESMExports()
    try {
      await exportObject(store, path)
    } finally {
      fsp.open = open
      syncBuiltinESMExports()
    }
    assert.equal(modes.length, 1, 'the temporary file seen as it was made')
    assert.deepEqual(
      modes.filter((m) => (m & 0o077) !== 0).map((m) => m.toString(8)),
      [],
      'group and others never had access',
    )
    assert.equal((await stat(path)).mode & 0o7777, 0o600)
    assert.ok((await readFile(path)).equals(content))
    assert.deepEqual(await leftovers(), [])
  })

  it('a temporary file that cannot be made beside the file (in /proc) is said so, naming it', async () => {
    // /proc/version is there, /proc is a folder, but no file can be created in it (ENOENT).
    await rejectsCode(
      exportObject(store, '/proc/version'),
      'ERR_INVALID_ARGUMENT',
      /export to \/proc\/version: the temporary file \/proc\/\.ss-export-\d+-[0-9a-f]+\.tmp cannot be created beside it/,
    )
  })

  it("the caller's own onProgress error comes back as it was thrown, and the file is left as it was", async () => {
    const path = join(dir, 'keep.bin')
    await writeFile(path, 'keep me')
    for (const thrown of [new RangeError('stop here'), 'a string, no Error']) {
      await assert.rejects(
        exportObject(store, path, {
          onProgress: () => {
            throw thrown
          },
        }),
        (err: unknown) => {
          assert.equal(err, thrown)
          return true
        },
      )
      assert.equal(String(await readFile(path)), 'keep me')
      assert.deepEqual(await leftovers(), [])
    }
  })

  it('onProgress is not called again once it threw or a chunk failed, though chunks under way complete', async () => {
    // Four 16 MiB chunks read at once: the first done throws, the three under way finish.
    const big = new MemoryStore()
    await publishContent(big, pattern(0, 64 * 1024 * KiB, 3))
    const path = join(dir, 'big.bin')
    let calls = 0
    const stop = new Error('stop')
    await assert.rejects(
      exportObject(big, path, {
        onProgress: () => {
          calls++
          throw stop
        },
      }),
      (err: unknown) => err === stop,
    )
    assert.equal(calls, 1, `onProgress called ${calls} times`)
    assert.deepEqual(await leftovers(), [])
  })

  it('an async onProgress that rejects ends the export with what it rejected with (no unhandled rejection)', async () => {
    const path = join(dir, 'async.bin')
    await writeFile(path, 'keep me')
    const big = new MemoryStore()
    await publishContent(big, pattern(0, 64 * 1024 * KiB, 5))
    const stop = new RangeError('stop, later')
    let calls = 0
    await assert.rejects(
      exportObject(big, path, {
        onProgress: async () => {
          calls++
          throw stop
        },
      }),
      (err: unknown) => err === stop,
    )
    assert.equal(calls, 1, `onProgress called ${calls} times`)
    assert.equal(String(await readFile(path)), 'keep me')
    assert.deepEqual(await leftovers(), [])
  })
})

describe('exportObject to another store', () => {
  it("the caller's own onProgress error, thrown or rejected with, comes back as it was, the upload aborted", async () => {
    const store = new MemoryStore()
    // Objects of 64 KiB, parts of 16 to 64 KiB: several requests, so that onProgress is called before the end.
    await publishContent(store, pattern(0, 512 * KiB, 11), smallSettings)
    const small = { minPartBytes: 16 * KiB, sendPartBytes: 32 * KiB, copyPartBytes: 64 * KiB, concurrency: 1 }
    for (const [how, onProgress] of [
      [
        'thrown',
        () => {
          throw thrownValue
        },
      ],
      [
        'rejected with',
        async () => {
          throw thrownValue
        },
      ],
    ] as const) {
      const dest = new MemoryStore()
      await dest.put('x', Buffer.from('old'))
      let calls = 0
      await assert.rejects(
        exportObject(
          store,
          { store: dest, key: 'x' },
          {
            ...small,
            onProgress: () => {
              calls++
              return onProgress()
            },
          },
        ),
        (err: unknown) => {
          assert.equal(err, thrownValue, `${how}: ${String(err)}`)
          return true
        },
      )
      assert.equal(calls, 1, `${how}: onProgress called ${calls} times`)
      assert.equal(Buffer.from(await dest.get('x')).toString(), 'old', `${how}: the object at the key is unchanged`)
      assert.deepEqual(await collect(dest.listMultipart()), [], `${how}: the upload was aborted`)
    }
  })
})

const thrownValue = new TypeError('the caller stops here')
