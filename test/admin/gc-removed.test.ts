/**
 * gc and rm on a container being removed, half removed, or with keys that look like
 * segment keys and are not: a clear error or a clean pass, never a crash, and nothing
 * deleted that is not the container's garbage.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { removeContainer } from '../../lib/admin/remove.js'
import { INODE_KEY } from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { AfterList } from '../helpers/wrapped-store.js'

const KiB = 1024
const settings = { ...smallSettings, streamSegmentBytes: 32 * KiB, rollForwardAfterMs: 0 }

async function twoCheckpoints(): Promise<MemoryStore> {
  const store = new MemoryStore()
  for (let i = 1; i <= 2; i++) {
    const f = i === 1 ? await SegmentFile.create(store, settings) : await SegmentFile.open(store, settings)
    await f.truncate(0)
    await f.write(0, pattern(0, 120 * KiB, i))
    await f.flush()
    await f.close()
  }
  return store
}

async function keys(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) out.push(e.key)
  return out.sort()
}

describe('gc on a container being removed', () => {
  it('rm between gc listing the container and reading it: gc fails clearly, deletes nothing; the container is gone', async () => {
    const store = await twoCheckpoints()
    const racing = new AfterList(store)
    racing.afterList = async () => {
      await removeContainer(store)
    }
    await rejectsCode(gc(racing, { graceMs: 0 }), 'ERR_NOT_FOUND', /cannot be read .*nothing was deleted/)
    assert.deepEqual(await keys(store), [])
    await rejectsCode(gc(store), 'ERR_NOT_FOUND', /no container here/)
  })

  it('a half-removed container (rm stopped after the part 0s): gc refuses, deletes nothing; rm again finishes', async () => {
    const store = await twoCheckpoints()
    const failing = new FailingStore(store, [{ ops: ['delete'], nth: 2, mode: 'error' }])
    await rejectsCode(removeContainer(failing), 'ERR_STORE')
    const left = await keys(store)
    assert.ok(left.includes(INODE_KEY) && !left.some((k) => k.endsWith('.0')), left.join(' '))
    await rejectsCode(
      gc(store, { graceMs: 0 }),
      'ERR_CORRUPT',
      /names checkpoint 2, which has no part 0 \(0000000002\.0\); nothing was deleted: if an rm of the container was stopped, run rm again to finish removing it; otherwise restore that object$/,
    )
    assert.deepEqual(await keys(store), left)
    await removeContainer(store)
    assert.deepEqual(await keys(store), [])
  })

  it('keys that look like segment keys but are not (leading zeros, 11 digits, cno 0, part past 16383) are never deleted', async () => {
    const store = await twoCheckpoints()
    const odd = [
      '0000000001.00',
      '0000000001.01',
      '00000000001.0',
      '00000000002.1',
      '0000000000.0',
      '0000000000.1',
      '0000000001.16384',
      '0000000001.4294967296',
      '1073741824.0',
      '9999999999.1',
      '1.0',
      '0000000001.0.bak',
      '0000000001.-1',
    ]
    for (const k of odd) await store.put(k, new Uint8Array(8))
    const r = await gc(store, { graceMs: 0 })
    assert.ok(r.deletedObjects > 0)
    for (const k of r.deletedKeys) assert.ok(!odd.includes(k), k)
    await removeContainer(store)
    assert.deepEqual(await keys(store), [...odd].sort())
  })
})
