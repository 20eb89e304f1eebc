/**
 * A log's folder beside a container in a local folder: one inside the container's folder,
 * or holding it, is refused by the open before the log's folder is made; a sibling is fine.
 */
import assert from 'node:assert/strict'
import { existsSync, promises as fs } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { walDirs } from '../helpers/wal-dirs.js'

const folder = walDirs('ss-wal-placement-')

describe("a log's folder and a container's folder", () => {
  it('a log inside the container folder is refused by create, naming both, and not made', async () => {
    const root = await folder()
    const store = new DirectoryStore(join(root, 'c'))
    const dir = join(root, 'c', 'log')
    await rejectsCode(
      SegmentFile.create(store, { wal: { dir } }),
      'ERR_INVALID_ARGUMENT',
      new RegExp(`^wal\\.dir ${dir} is inside the container's folder ${join(root, 'c')}: `),
    )
    assert.ok(!existsSync(dir), 'the log folder was not made')
  })

  it("the container's own folder, and a folder holding it, are refused by open", async () => {
    const root = await folder()
    const store = new DirectoryStore(join(root, 'c'))
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.from('kept'))
    await f.flush()
    await f.close()
    const before = (await fs.readdir(join(root, 'c'))).sort()
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir: join(root, 'c') } }),
      'ERR_INVALID_ARGUMENT',
      /is the container's folder/,
    )
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir: root } }),
      'ERR_INVALID_ARGUMENT',
      /holds the container's folder/,
    )
    assert.deepEqual((await fs.readdir(join(root, 'c'))).sort(), before, 'no log file was made in the container folder')
  })

  it('a folder beside it, named like it, is a log like any', async () => {
    const root = await folder()
    const store = new DirectoryStore(join(root, 'c'))
    const f = await SegmentFile.create(store, { wal: { dir: join(root, 'c-log') } })
    await f.write(0, Buffer.from('logged'))
    await f.flush()
    await f.close()
    const g = await SegmentFile.open(store, { readOnly: true })
    assert.equal(Buffer.from(await g.read(0, 6)).toString(), 'logged')
    await g.close()
  })
})
