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
