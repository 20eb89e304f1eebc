/**
 * A program that works only with memory stores gives back the memory it drops. The memory
 * addon's slabs (util/huge-memory.ts) are unmapped by a finalizer that Node runs from the
 * event loop; MemoryStore answers its writes in a later turn of the loop, as a real store
 * does, so the loop turns even when nothing else makes it.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { nativeMemory } from '../../lib/util/huge-memory.js'

const MiB = 1024 * 1024

it('files on memory stores dropped without close: their slabs are freed as the program goes on', async () => {
  if (process.platform === 'linux')
    assert.ok(nativeMemory !== undefined, 'the memory addon is built and loaded on Linux')
  const data = Buffer.alloc(8 * MiB, 7)
  const files = 150
  const before = process.memoryUsage.rss()
  let most = 0
  for (let i = 0; i < files; i++) {
    // Each file's dirty tier takes fresh 4 MiB slabs (~8 MiB here); the file is then
    // dropped, so its slabs go back to the system only once collected and finalized.
    const f = await SegmentFile.create(new MemoryStore())
    await f.write(0, data)
    await f.flush()
    most = Math.max(most, process.memoryUsage.rss() - before)
  }
  // Held all at once, the slabs would be well over a GiB.
  assert.ok(most < 400 * MiB, `peak RSS growth ${Math.round(most / MiB)} MiB over ${files} dropped files`)
})
