/**
 * A WAL folder the open makes is fsynced into its parent before the open resolves, and so
 * is every folder made above it: a record fsynced into a folder whose own entry a machine
 * crash can take back is not durable, whatever `sync` says. Seen as the calls made on the
 * file system (fs.promises, watched).
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { WalLog } from '../../lib/wal/log.js'
import { eventsAfter, unwatch, watchFolders } from '../helpers/fs-watch.js'

/** That each folder in `made` was made, and its parent fsynced after it. */
function assertMadeDurable(events: readonly string[], made: readonly string[]): void {
  for (const folder of made) {
    const parent = dirname(folder)
    assert.ok(
      eventsAfter(events, `mkdir ${folder}`).includes(`fsync ${parent}`),
      `${parent} is not fsynced after ${folder} was made in it: ${JSON.stringify(events)}`,
    )
  }
}

describe('a WAL folder made by the open is durable in its parent', () => {
  let top = ''
  before(async () => {
    top = await mkdtemp(join(tmpdir(), 'ss-wal-durable-'))
  })
  after(async () => {
    await rm(top, { recursive: true, force: true })
  })

  it('SegmentFile with wal.dir two folders below one that exists', async (t) => {
    const events = watchFolders(t, top)
    t.after(() => unwatch(t))
    const f = await SegmentFile.create(new MemoryStore(), { wal: { dir: join(top, 'a/b') } })
    assertMadeDurable(events, ['a', 'a/b'])
    await f.close()
  })

  it('WalLog.open on a folder not there', async (t) => {
    const events = watchFolders(t, top)
    t.after(() => unwatch(t))
    const opened = await WalLog.open(join(top, 'c/d'), 0, () => {})
    assertMadeDurable(events, ['c', 'c/d'])
    await opened.log.close()
  })

  it('a folder there already: nothing made, nothing more fsynced for it', async (t) => {
    const events = watchFolders(t, top)
    t.after(() => unwatch(t))
    const f = await SegmentFile.create(new MemoryStore(), { wal: { dir: join(top, 'a/b') } })
    assert.deepEqual(
      events.filter((e) => e === 'mkdir a' || e === 'mkdir a/b'),
      [],
    )
    assert.equal(events.includes('fsync a'), false, JSON.stringify(events))
    await f.close()
  })
})
