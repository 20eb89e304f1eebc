/**
 * The bytes a walk keeps of its widened index reads (part 0 objects read below their index
 * nodes, so that the levels under them come without a read of their own) serve the walk's
 * next levels: they are kept by a few objects at a time, the oldest giving theirs up, not
 * by every object a read has walked. Here a map whose index nodes lie in the part 0 of each
 * of 64 checkpoints: a whole read keeps the bytes of at most 32 objects, and reads right.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { ObjectReads } from '../../lib/container/objects.js'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings, WithHooks } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'

const CHECKPOINTS = 64
const AREA = 16 // blocks between two checkpoints' writes
/** Nodes of 4 entries: a deep map, whose index nodes each checkpoint writes anew above its block. */
const deep: Partial<Settings> & WithHooks = hooks({ maxNodeEntries: 4 })

it('a read over index nodes in 64 objects keeps the bytes of at most 32 of them', async () => {
  const store = new MemoryStore('kept-node-bytes')
  const f = await SegmentFile.create(store, deep)
  const bs = f.settings.dataBlockSize
  const ref = Buffer.from(pattern(0, CHECKPOINTS * AREA * bs, 1))
  await f.write(0, ref)
  await f.flush()
  // Each checkpoint rewrites one block of another area: the index nodes above it go to its part 0.
  for (let i = 0; i < CHECKPOINTS; i++) {
    const at = ((i * 37) % CHECKPOINTS) * AREA * bs
    const b = pattern(at, bs, i + 2)
    await f.write(at, b)
    ref.set(b, at)
    await f.flush()
  }
  await f.close()

  const file = await SegmentFile.open(store, { readOnly: true })
  try {
    const reader = new Reader(fileState(file))
    assert.ok(Buffer.from(await reader.read(0, file.size)).equals(ref), 'the read is right')
    const objects = (reader as unknown as { objects: ObjectReads }).objects
    const states = (objects as unknown as { objects: Map<string, { metaBytes?: unknown }> }).objects
    const keeping = [...states.values()].filter((st) => st.metaBytes !== undefined).length
    assert.ok(states.size > 32, `${states.size} objects read`)
    assert.ok(keeping <= 32, `${keeping} objects keep bytes of their widened index reads`)
  } finally {
    await file.close()
  }
})
