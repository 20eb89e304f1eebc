/**
 * A background publish (SegmentFile.publish) that loses its inode write to another writer,
 * while this handle goes on writing: the checkpoint it builds next has already taken a
 * number, and objects are sent ahead under it. The other writer's checkpoint may hold that
 * very number (its part 0 needed only a key this handle had not used). The handle moves
 * onto it, and its next checkpoint must go above it: a header's base inode is below its
 * own number, so every object built on the new base under the old number was refused
 * (ERR_INVALID_ARGUMENT from each write and flush after), and nothing could be published.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { readPublished } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024

it('a publish lost to a checkpoint under the number the next one took: the handle writes and publishes on top', async () => {
  const store = new MemoryStore('publish-lost')
  const seed = await SegmentFile.create(store, smallSettings)
  await seed.write(0, pattern(0, 32 * KiB, 1))
  await seed.flush()
  await seed.close()
  const gate = new FailingStore(store)
  const a = await SegmentFile.open(gate, smallSettings)
  const b = await SegmentFile.open(store, smallSettings)
  const want = Buffer.alloc(400 * KiB)
  const write = async (at: number, length: number, seed: number) => {
    const bytes = pattern(at, length, seed)
    await a.write(at, bytes)
    bytes.copy(want, at)
  }
  pattern(0, 32 * KiB, 1).copy(want)
  try {
    // A publishes checkpoint 2; its inode write is held.
    gate.addRule({ ops: ['put'], key: /^inode$/, mode: 'hang' })
    await write(0, 8 * KiB, 2)
    const lost = a.publish()
    lost.catch(() => undefined)
    while (gate.count('put', 'hung') === 0) await new Promise((r) => setTimeout(r, 2))
    // A goes on: checkpoint 3's objects are sent ahead (one of them still open).
    await write(32 * KiB, 200 * KiB, 3)
    assert.ok(gate.calls.some((c) => c.op === 'createMultipart' && c.key.startsWith('0000000003.')))
    // B publishes first: 2.0 is A's, so B's checkpoint is 3, a part 0 alone.
    await b.write(4 * KiB, pattern(4 * KiB, 4 * KiB, 4))
    assert.equal((await b.flush()).cno, 3)
    gate.clearRules()
    gate.release()
    await rejectsCode(lost, 'ERR_CONFLICT', /another writer got there first/)
    // A is on checkpoint 3 now: what it writes and flushes goes on top, under a higher number.
    await write(300 * KiB, 100 * KiB, 5)
    const t = await a.flush()
    assert.ok(t.cno > 3, `cno ${t.cno}`)
    assert.deepEqual(await readPublished(store), { cno: t.cno, bytes: want })
  } finally {
    gate.release()
    await a.close()
    await b.close()
  }
})
