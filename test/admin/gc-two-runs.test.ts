/**
 * Two cleaners at once. A run's listing is taken before its mark, which may last long; by
 * the time it deletes, another run may have deleted an abandoned attempt it listed, and a
 * writer opening the container then takes that attempt's number again (nothing uses it
 * any more) and stores new objects under the same keys. Deleting by the first listing
 * would take the writer's new objects.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { parseKey } from '../../lib/format/names.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { AfterList } from '../helpers/wrapped-store.js'

const KiB = 1024
const HOUR = 3_600_000
const settings = { ...smallSettings, streamSegmentBytes: 32 * KiB }

/** Makes every segment object of `cno` look `ms` older (their LastModified, which gc goes by). */
function age(store: MemoryStore, cno: number, ms: number): void {
  const objects = (store as unknown as { bucket: { objects: Map<string, { modifiedMs: number }> } }).bucket.objects
  for (const [key, o] of objects) {
    const k = parseKey(key)
    if (k?.kind === 'segment' && k.cno === cno) o.modifiedMs -= ms
  }
}

describe('two gc runs at once', () => {
  it('a number freed by the other run and taken again by a writer: its new objects are not deleted', async () => {
    const inner = new MemoryStore('gc-two-runs')
    const one = pattern(0, 64 * KiB, 1)
    const f = await SegmentFile.create(inner, settings)
    await f.write(0, one)
    assert.equal((await f.flush()).cno, 1)
    await f.close()
    // An abandoned attempt under number 2, hours old.
    await inner.put('0000000002.1', pattern(0, 4 * KiB, 2))
    await inner.put('0000000002.2', pattern(0, 4 * KiB, 3))
    age(inner, 2, 2 * HOUR)

    const store = new AfterList(inner)
    let writer: SegmentFile | undefined
    const two = pattern(0, 200 * KiB, 4)
    // Between the first run's listing and its deletions: another run, then a writer.
    store.afterList = async () => {
      const other = await gc(inner)
      assert.deepEqual(other.deletedKeys, ['0000000002.1', '0000000002.2'])
      writer = await SegmentFile.open(inner, settings)
      await writer.write(0, two)
      await writer.settle()
      assert.ok((await inner.head('0000000002.1')) !== undefined, 'the writer stored 2.1 anew')
    }
    const r = await gc(store)
    assert.equal(store.afterList, undefined, 'the hook ran')
    assert.ok(!r.deletedKeys.some((k) => k.startsWith('0000000002.')), `deleted ${r.deletedKeys.join(' ')}`)
    const w = writer as SegmentFile
    assert.equal((await w.flush()).cno, 2)
    await w.close()
    assert.deepEqual(await readPublished(inner), { cno: 2, bytes: two })
  })
})

describe('the deletions above the published number', () => {
  it('go first among the part 0s and among the other parts, right after the listing that checked them', async () => {
    const inner = new MemoryStore('gc-order')
    const f = await SegmentFile.create(inner, settings)
    for (let i = 0; i < 3; i++) {
      await f.write(0, pattern(0, 96 * KiB, 10 + i))
      await f.flush()
    }
    await f.close()
    // Checkpoints 1 and 2 are dropped (keep 1), and 4 is an abandoned attempt (no grace period).
    await inner.put('0000000004.1', pattern(0, 4 * KiB, 2))
    await inner.put('0000000004.2', pattern(0, 4 * KiB, 3))
    const deletes: string[][] = []
    const store = new AfterList(inner)
    const remove = store.delete.bind(store)
    store.delete = (keys, options) => {
      deletes.push(typeof keys === 'string' ? [keys] : [...keys])
      return remove(keys, options)
    }
    const r = await gc(store, { keep: 1, graceMs: 0 })
    assert.deepEqual(r.kept, [3])
    const order = deletes.flat()
    assert.deepEqual(order, r.deletedKeys)
    const part0s = order.filter((k) => k.endsWith('.0'))
    assert.deepEqual(order.slice(0, part0s.length), part0s, 'part 0s first')
    assert.deepEqual(part0s, ['0000000001.0', '0000000002.0'])
    assert.deepEqual(order.slice(part0s.length, part0s.length + 2), ['0000000004.1', '0000000004.2'])
    assert.ok(order.length > part0s.length + 2, 'the dropped checkpoints have data parts too')
  })
})
