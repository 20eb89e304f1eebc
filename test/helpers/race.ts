/**
 * The race between a live writer and one that opens the container: writer A's part 0 is
 * stored and its inode write held at a gate when writer B opens. B may roll A's checkpoint
 * forward only when told that young part 0s are fair game (rollForwardAfterMs: 0); either
 * way A's flush reports its checkpoint published, once, with exactly its content.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { listCheckpoints } from '../../lib/admin/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { FailingStore } from './failing-store.js'
import { pattern } from './pattern.js'
import { smallSettings as small } from './small-settings.js'

/** Small objects, each one PutObject (S3 refuses multipart pieces under 5 MiB). */
const smallSettings = { ...small, segmentMpuChunkSize: 5 * 1024 * 1024 }

export function runLiveWriterRace(name: string, make: () => Promise<ObjectStore>): void {
  describe(`${name}: a live writer beside one that opens the container`, () => {
    /** Writer A's inode write held at a gate: its part 0 is stored, its publication in flight. */
    async function heldAtTheInode(store: ObjectStore) {
      const seed = await SegmentFile.create(store, smallSettings)
      await seed.write(0, pattern(0, 32 * 1024, 1))
      await seed.flush()
      await seed.close()
      const gate = new FailingStore(store)
      const a = await SegmentFile.open(gate, { ...smallSettings, conflictPolicy: 'fail' })
      gate.addRule({ ops: ['put'], key: /^inode$/, mode: 'hang' })
      await a.write(4096, pattern(4096, 8192, 2))
      const flushing = a.flush()
      while (gate.count('put', 'hung') === 0) await new Promise((r) => setTimeout(r, 2))
      const want = Buffer.from(pattern(0, 32 * 1024, 1))
      want.set(pattern(4096, 8192, 2), 4096)
      return { a, gate, flushing, want }
    }

    it(`B rolls A's checkpoint forward while A's inode write is held; A reports it published, once`, async () => {
      const store = await make()
      const { a, gate, flushing, want } = await heldAtTheInode(store)
      const b = await SegmentFile.open(store, { ...smallSettings, rollForwardAfterMs: 0 })
      assert.equal(b.cno, 2, 'B rolled checkpoint 2 forward')
      await b.close()
      gate.release()
      const t = await flushing // its If-Match fails: the inode now is its own checkpoint
      assert.equal(t.cno, 2)
      assert.equal(t.conflicts, 0)
      await a.close()
      const list = await listCheckpoints(store)
      assert.deepEqual(
        list.checkpoints.map((c) => [c.cno, c.state]),
        [
          [1, 'complete'],
          [2, 'published'],
        ],
        'published once, no second copy',
      )
      const r = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await r.read(0, want.length)).equals(want))
    })

    it(`by default B leaves A's young part 0 alone, and A publishes it itself`, async () => {
      const store = await make()
      const { a, gate, flushing, want } = await heldAtTheInode(store)
      const b = await SegmentFile.open(store, smallSettings)
      assert.equal(b.cno, 1, 'not rolled forward')
      await b.close()
      gate.release()
      assert.equal((await flushing).cno, 2)
      await a.close()
      const r = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await r.read(0, want.length)).equals(want))
    })
  })
}
