import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../lib/errors.js'
import { SegmentFile } from '../lib/segment-file.js'
import { resolveSettings } from '../lib/settings.js'
import { MemoryStore } from '../lib/store/memory.js'
import { pattern } from './helpers/pattern.js'

const code = (c: string) => (err: unknown) => StreamSegmentError.is(err) && err.code === c

describe('SegmentFile', () => {
  it('settings are validated once, naming the setting and the value', () => {
    assert.throws(
      () => resolveSettings({ dataBlockSize: 5000 }),
      /setting dataBlockSize = 5000: must be a power of two/,
    )
    assert.throws(() => resolveSettings({ conflictPolicy: 'maybe' as never }), /conflictPolicy = "maybe"/)
    assert.throws(() => resolveSettings({ segmentMpuChunkSize: 6000 }), /segmentMpuChunkSize = 6000/)
    assert.throws(() => resolveSettings({ segmentMaxObjectBytes: 2 ** 31 }), /segmentMaxObjectBytes = 2147483648/)
    assert.throws(() => resolveSettings({ streamSegmentBytes: -1 }), code('ERR_INVALID_ARGUMENT'))
  })

  it('create refuses an existing container; open refuses an empty prefix', async () => {
    const store = new MemoryStore()
    await assert.rejects(SegmentFile.open(store), code('ERR_NOT_FOUND'))
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 10))
    await f.flush()
    await assert.rejects(SegmentFile.create(store), code('ERR_CONFLICT'))
    await assert.rejects(SegmentFile.open(store, { cno: 7 }), code('ERR_NOT_FOUND'))
    await assert.rejects(SegmentFile.open(store, { dataBlockSize: 8192 }), /dataBlockSize 8192: the container/)
  })

  it('a flush with nothing changed writes nothing', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 5000))
    assert.equal((await f.flush()).objects, 1)
    const t = await f.flush()
    assert.equal(t.objects, 0)
    assert.equal(t.cno, 1)
  })

  it('bad offsets, read-only and closed handles give clear errors', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await assert.rejects(f.write(-1, pattern(0, 1)), code('ERR_INVALID_ARGUMENT'))
    await assert.rejects(f.write(2 ** 32 * 4096, pattern(0, 1)), /past the largest file/)
    await assert.rejects(f.truncate(1.5), code('ERR_INVALID_ARGUMENT'))
    await f.write(0, pattern(0, 100))
    await f.flush()
    const r = await SegmentFile.open(store, { readOnly: true })
    await assert.rejects(r.write(0, pattern(0, 1)), code('ERR_STATE'))
    await f.close()
    await assert.rejects(f.read(0, 1), code('ERR_STATE'))
  })

  it('an older checkpoint opens as it was, and writing to it publishes a new checkpoint on top', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 20000, 1))
    await f.flush()
    await f.write(0, pattern(0, 30000, 2))
    await f.flush()
    const old = await SegmentFile.open(store, { cno: 1 })
    assert.equal(old.size, 20000)
    assert.deepEqual(Buffer.from(await old.read(0, 20000)), pattern(0, 20000, 1))
    await old.write(20000, pattern(20000, 5, 3))
    assert.equal((await old.flush()).cno, 3)
    const latest = await SegmentFile.open(store)
    assert.deepEqual(
      Buffer.from(await latest.read(0, 20005)),
      Buffer.concat([pattern(0, 20000, 1), pattern(20000, 5, 3)]),
    )
  })
})
