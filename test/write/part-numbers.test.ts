/**
 * A checkpoint takes part numbers 1 … MAX_PART (the pointer's 14 bits) for its data
 * parts, and every object sent, failed ones too, takes one. A writer that has used them
 * all goes on under a new checkpoint number (its objects stay where they are, pointed at
 * by the leaves that hold them), so that a long stream, or a store failing for a while,
 * never leaves a handle that can no longer flush.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { MAX_PART } from '../../lib/format/pointer.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { readPublished } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024

describe('a checkpoint that has used every part number', () => {
  it('goes on under a new number: the writes go in, and the flush publishes every byte', async () => {
    const inner = new MemoryStore('part-numbers')
    const store = new FailingStore(inner)
    const f = await SegmentFile.create(store, {
      ...smallSettings,
      streamSegmentBytes: 0,
      dataCacheDirtyMaxBytesThreshold: 8 * KiB,
    })
    // Partial segments store it under checkpoint 1.
    const want = Buffer.from(pattern(0, 200 * KiB, 1))
    await f.write(0, want)
    // Then every partial segment fails, and each takes a part number: the writes past the
    // dirty limit fail with the store's error, their bytes in. They make more than one
    // object's worth (64 KiB) dirty, so that the flush needs data parts.
    store.addRule({ ops: ['put', 'createMultipart'], key: /^\d+\.\d+$/, mode: 'error' })
    for (let i = 0; i <= MAX_PART; i++) {
      const at = (i % 25) * 4 * KiB
      try {
        await f.write(at, want.subarray(at, at + 1))
      } catch (err) {
        if (!StreamSegmentError.is(err, 'ERR_STORE')) throw err
      }
    }
    const pending = fileState(f).pendingCno
    assert.ok(pending !== undefined && pending > 1, `checkpoint ${pending}`)
    store.clearRules()
    await f.flush()
    assert.ok(Buffer.from(await f.read(0, f.size)).equals(want))
    await f.close()
    const published = await readPublished(inner)
    assert.ok(published.cno > 1, `published as checkpoint ${published.cno}`)
    assert.ok(published.bytes.equals(want), 'the published bytes')
    // It points into the objects stored under checkpoint 1.
    assert.deepEqual((await verifyCheckpoint(inner)).problems, [])
  })
})
