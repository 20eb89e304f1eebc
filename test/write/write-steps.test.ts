import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { dirtyLimitBytes, resolveSettings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024

describe('one write larger than the dirty limit', () => {
  it('is taken in steps under the limit, never held whole, and reads back', async () => {
    const store = new MemoryStore()
    const file = await SegmentFile.create(store) // the spec's defaults: an 8 MiB dirty limit
    const limit = dirtyLimitBytes(resolveSettings({}))
    const blocks = Buffer.allocUnsafe(64 * MiB + 4 * 4096)
    fillBlocks(blocks, 0)
    const big = blocks.subarray(100, 100 + 64 * MiB + 12345)
    await file.write(100, big)
    // The tier is measured after every step: it never held the write whole.
    assert.ok(file.peakDirtyBytes <= limit + limit / 4 + 4096, `peak ${file.peakDirtyBytes} bytes held, limit ${limit}`)
    assert.ok(file.partials >= 6, `${file.partials} partial segments`)
    assert.equal(file.size, 100 + big.byteLength)
    await file.flush()
    const again = await SegmentFile.open(store, { readOnly: true })
    assert.ok(Buffer.from(await again.read(100, big.byteLength)).equals(big), 'the bytes read back')
    await again.close()
    await file.close()
  })
})

describe('the leaf appends still go into', () => {
  it('is not kept past the dirty limit when a full leaf holds more than the limit', async () => {
    // 64 KiB blocks: a full leaf holds 340 × 64 KiB, more than the 8 MiB limit; kept until
    // it is full, it would hold up to 21 MiB in memory.
    const store = new MemoryStore()
    const file = await SegmentFile.create(store, { dataBlockSize: 64 * 1024 })
    const limit = dirtyLimitBytes(resolveSettings({ dataBlockSize: 64 * 1024 }))
    const bytes = Buffer.allocUnsafe(32 * MiB)
    fillBlocks(bytes, 0)
    for (let at = 0; at < bytes.byteLength; at += MiB) await file.write(at, bytes.subarray(at, at + MiB))
    assert.ok(file.peakDirtyBytes <= limit + MiB, `peak ${file.peakDirtyBytes} bytes held, limit ${limit}`)
    assert.ok(file.partials >= 3, `${file.partials} partial segments`)
    await file.flush()
    const again = await SegmentFile.open(store, { readOnly: true })
    assert.ok(Buffer.from(await again.read(0, bytes.byteLength)).equals(bytes), 'the bytes read back')
    await again.close()
    await file.close()
  })
})
