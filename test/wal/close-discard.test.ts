/**
 * `close({ discardWal: true })`: a writer that gives its changes up, after an abort as well
 * (when rollback() is refused), leaves a log that a later open does not replay; a plain
 * close keeps the log for the next open to publish.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { walDirs } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-walclose-')

describe('SegmentFile.close and the WAL', () => {
  it('discardWal after an abort: the next open replays nothing; without it, the log is published', async () => {
    for (const discardWal of [true, false]) {
      const store = new MemoryStore(`close-${discardWal}`)
      const dir = await walDir()
      const f = await SegmentFile.create(store, { wal: { dir } })
      await f.write(0, pattern(0, 10_000, 1))
      await f.flush()
      await f.write(0, pattern(0, 20_000, 2))
      f.abort(new Error('given up'))
      await rejectsCode(f.rollback(), 'ERR_ABORTED')
      await f.close({ discardWal })
      const g = await SegmentFile.open(store, { wal: { dir } })
      assert.equal(g.walReplay?.records, discardWal ? 0 : 1, `discardWal ${discardWal}`)
      await g.close()
      assert.deepEqual((await readPublished(store)).bytes, discardWal ? pattern(0, 10_000, 1) : pattern(0, 20_000, 2))
    }
  })

  it('discardWal on a full disk (no new log file can be made) still leaves nothing to replay', async (t) => {
    const store = new MemoryStore('close-full')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 10_000, 1))
    await f.flush()
    await f.write(0, pattern(0, 20_000, 2))
    const open = fs.open
    t.mock.method(fs, 'open', (...args: Parameters<typeof fs.open>) =>
      args[1] === 'wx'
        ? Promise.reject(Object.assign(new Error('ENOSPC: injected, open'), { code: 'ENOSPC', syscall: 'open' }))
        : open(...args),
    )
    await f.close({ discardWal: true })
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0)
    await g.close()
    assert.deepEqual((await readPublished(store)).bytes, pattern(0, 10_000, 1))
  })

  it('bad options are refused and the handle stays open', async () => {
    const f = await SegmentFile.create(new MemoryStore('close-bad'))
    await rejectsCode(f.close({ discardWal: 'yes' } as never), 'ERR_INVALID_ARGUMENT', /discardWal/)
    await rejectsCode(f.close({ discard: true } as never), 'ERR_INVALID_ARGUMENT', /"discard"/)
    await rejectsCode(f.close(null as never), 'ERR_INVALID_ARGUMENT', /options must be an object/)
    await f.write(0, pattern(0, 100))
    await f.close()
  })
})

describe('close({ discardWal: true }) that can neither start the log afresh nor remove its files', () => {
  it('rejects saying so, keeps the folder for a second close, which voids the log once it can', async (t) => {
    const store = new MemoryStore('close-stuck')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 10_000, 1))
    await f.flush()
    await f.write(0, pattern(0, 20_000, 2))
    // No new log file can be made (a full disk), and no log file removed while `stuck`.
    let stuck = true
    const open = fs.open
    t.mock.method(fs, 'open', (...args: Parameters<typeof fs.open>) =>
      args[1] === 'wx'
        ? Promise.reject(Object.assign(new Error('ENOSPC: injected, open'), { code: 'ENOSPC', syscall: 'open' }))
        : open(...args),
    )
    const rm = fs.rm
    t.mock.method(fs, 'rm', (...args: Parameters<typeof fs.rm>) =>
      stuck && String(args[0]).endsWith('.log')
        ? Promise.reject(Object.assign(new Error('EIO: injected, unlink'), { code: 'EIO', syscall: 'unlink' }))
        : rm(...args),
    )
    await rejectsCode(f.close({ discardWal: true }), 'ERR_STORE', /close: .*log still holds/)
    assert.equal(f.dirtyBytes, 0, 'the memory goes all the same')
    await rejectsCode(f.write(0, pattern(0, 10)), 'ERR_STATE', /closed/)
    // Meanwhile no other writer takes the folder, and replays what was given up.
    await rejectsCode(SegmentFile.open(store, { wal: { dir } }), 'ERR_STATE')
    stuck = false
    await f.close({ discardWal: true })
    await f.close() // closed: nothing more to do
    t.mock.restoreAll()
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0, 'the changes given up were replayed')
    await g.close()
    assert.deepEqual((await readPublished(store)).bytes, pattern(0, 10_000, 1))
  })
})
