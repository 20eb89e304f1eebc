/**
 * `keep` counts the published checkpoint and those it was built on. A writer that loses a
 * conflict under `conflictPolicy: 'retry'` leaves the part 0 it stored before the loss: a
 * complete checkpoint below the published one that was never published (its content is
 * published again under the next number). Counted among the newest, it took the place of
 * the previous published checkpoint — the only one holding the other writer's changes.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { listCheckpoints } from '../../lib/admin/list.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { conflictLoser, readAll } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

describe('gc keep: the published history', () => {
  it('a part 0 left by a writer that lost a conflict does not count: the previous published checkpoint is kept', async () => {
    const store = new MemoryStore('gc-keep-history')
    await conflictLoser(store) // b lost with 3, then published its view as 4
    const listed = await listCheckpoints(store)
    assert.deepEqual(
      listed.checkpoints.map((c) => [c.cno, c.state, c.baseCno]),
      [
        [1, 'complete', 0],
        [2, 'complete', 1],
        [3, 'unpublished', 1],
        [4, 'published', 2],
      ],
    )
    const a2 = await readAll(store, 2)

    const r = await gc(store, { keep: 2, graceMs: 0 })
    assert.deepEqual(r.kept, [2, 4], 'the published checkpoint and the one it was built on')
    assert.deepEqual(r.dropped, [1, 3])
    assert.ok((await readAll(store, 2)).equals(a2), "a's checkpoint reads back")
    assert.ok((await readAll(store, 4)).equals(pattern(0, 20_000, 3)))
  })
})
