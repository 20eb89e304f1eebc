/**
 * A scan (SegmentFile.read and readInto, downloadFile) plans its range a window at a time
 * while its workers fetch and hand on the pieces, and plans no further than a window ahead
 * of them: a sink that is slow (a full disk, a consumer holding on) holds the planner too,
 * so the pieces planned and the bytes copied from memory are bounded by the window, not by
 * the range. Here the file is dirty blocks only, so planning needs no request and a plan
 * of the whole range would be made at once while the sink's first call waits.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { setImmediate } from 'node:timers/promises'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'

it('a scan whose sink waits plans at most a window ahead of the pieces taken, then reads every byte right', async () => {
  const f = await SegmentFile.create(new MemoryStore())
  try {
    const bs = f.settings.dataBlockSize
    const blocks = 1024
    const ref = Buffer.from(pattern(0, blocks * bs, 4))
    await f.write(0, ref)
    const windowBlocks = 4
    const reader = new Reader(fileState(f), { readGetMaxBytes: windowBlocks * bs, readMaxConcurrency: 1 })
    const out = Buffer.alloc(ref.length)
    let release: () => void = () => {}
    const released = new Promise<void>((r) => {
      release = r
    })
    let first: () => void = () => {}
    const firstCall = new Promise<void>((r) => {
      first = r
    })
    const scan = reader.scan(0, ref.length, {
      async bytes(at, views) {
        first()
        await released
        for (const v of views) {
          out.set(v, at)
          at += v.byteLength
        }
      },
      zeros() {
        throw new Error('no holes in this file')
      },
    })
    await firstCall
    // Planning the dirty blocks makes no request: one turn of the event loop would plan them all.
    await setImmediate()
    const planned = reader.timing.memoryBlocks
    release()
    await scan
    assert.ok(out.equals(ref), 'the bytes read are those written')
    assert.equal(reader.timing.memoryBlocks, blocks, 'every block read from memory')
    // The window being handed on, one planned ahead, and the one the planner went on with.
    assert.ok(planned <= 3 * windowBlocks, `${planned} of ${blocks} blocks planned while the sink held the first`)
  } finally {
    await f.close()
  }
})
