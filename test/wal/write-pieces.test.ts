/**
 * A write larger than 64 MiB with a WAL is logged in 64 MiB pieces, each logged whole
 * before its steps change the file. A write that fails part-way through a piece (its
 * buffer detached between two steps) leaves the handle with the steps before, and the log
 * with the whole piece: a flush publishes what the handle holds, while an open replaying
 * the log (after a close or a crash) applies the write up to the end of that piece, and
 * nothing past it. Its message counts the bytes of the whole write.
 */
import assert from 'node:assert/strict'
import { randomFillSync } from 'node:crypto'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { inspectWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { contents, walDirs } from '../helpers/wal-dirs.js'

const MiB = 1024 * 1024
const PIECE = 64 * MiB
const walDir = walDirs('ss-walpieces-')

/** A memory store that calls `takeAway` (once) as the first object is stored once `when()` holds. */
class Detaching extends MemoryStore {
  takeAway: (() => void) | undefined
  when = () => true
  private stored() {
    if (!this.when()) return
    this.takeAway?.()
    this.takeAway = undefined
  }
  override async uploadPart(...args: Parameters<MemoryStore['uploadPart']>) {
    this.stored()
    return super.uploadPart(...args)
  }
  override async put(...args: Parameters<MemoryStore['put']>) {
    this.stored()
    return super.put(...args)
  }
}

/**
 * 'base' (100 bytes) published, then a write of a piece and 16 MiB more at 1 MiB whose
 * buffer is detached as the first partial segment is stored (the default 8 MiB dirty
 * limit: after a few 2 MiB steps of the first piece). Returns the handle, the bytes the
 * write was given and how many of them it applied.
 */
async function failedWrite(store: Detaching, dir: string) {
  const f = await SegmentFile.create(store, { wal: { dir } })
  const base = pattern(0, 100)
  await f.write(0, base)
  await f.flush()
  const memory = new ArrayBuffer(PIECE + 16 * MiB)
  randomFillSync(new Uint8Array(memory))
  let given: Uint8Array | undefined
  store.takeAway = () => {
    given = new Uint8Array(structuredClone(memory, { transfer: [memory] }))
  }
  const err = await rejectsCode(
    f.write(MiB, new Uint8Array(memory)),
    'ERR_INVALID_ARGUMENT',
    /detached or shrunk once \d+ of the \d+ bytes at 1048576/,
  )
  const applied = Number(/once (\d+) of/.exec(err.message)?.[1])
  assert.ok(given !== undefined, 'the buffer was detached during the write')
  assert.ok(applied > 0 && applied < PIECE, `${applied} bytes applied: the write failed inside its first piece`)
  // The handle holds the steps before, and nothing after them.
  assert.equal(f.size, MiB + applied)
  assert.ok(Buffer.from(await f.read(MiB, applied)).equals(given.subarray(0, applied)), 'the steps applied')
  return { f, base, given, applied }
}

describe('a logged write that fails inside a 64 MiB piece', () => {
  it('the log holds the whole piece: an open after close replays it to the end of that piece, not past it', async () => {
    const store = new Detaching('pieces-replay')
    const dir = await walDir()
    const { f, base, given, applied } = await failedWrite(store, dir)
    await f.close() // keeps the log
    const seen = await inspectWal(dir)
    assert.deepEqual({ records: seen.records, payloadBytes: seen.payloadBytes }, { records: 1, payloadBytes: PIECE })

    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 1)
    // More than the handle applied: the whole first piece; none of the second.
    assert.equal(g.size, MiB + PIECE, `${applied} bytes applied by the handle, ${g.size - MiB} after the replay`)
    const got = await contents(g)
    assert.ok(got.subarray(0, 100).equals(base), 'the bytes before')
    assert.ok(got.subarray(100, MiB).equals(Buffer.alloc(MiB - 100)), 'the gap reads as zeros')
    assert.ok(got.subarray(MiB).equals(given.subarray(0, PIECE)), 'the first piece, whole')
    await g.close()
  })

  it('failing inside a later piece, its message counts the bytes of the whole write, not of the piece', async () => {
    const store = new Detaching('pieces-later')
    const dir = await walDir()
    const f = await SegmentFile.create(store, { wal: { dir } })
    store.when = () => f.size > MiB + PIECE // the second piece under way
    const memory = new ArrayBuffer(PIECE + 16 * MiB)
    store.takeAway = () => structuredClone(memory, { transfer: [memory] })
    const err = await rejectsCode(
      f.write(MiB, new Uint8Array(memory)),
      'ERR_INVALID_ARGUMENT',
      /detached or shrunk once \d+ of the 83886080 bytes at 1048576 were written$/,
    )
    const applied = Number(/once (\d+) of/.exec(err.message)?.[1])
    assert.ok(applied > PIECE && applied < PIECE + 16 * MiB, `${applied} bytes applied`)
    assert.equal(f.size, MiB + applied)
    await f.close({ discardWal: true })
  })

  it('a flush after the failure publishes what the handle holds and empties the log', async () => {
    const store = new Detaching('pieces-flush')
    const dir = await walDir()
    const { f, base, given, applied } = await failedWrite(store, dir)
    await f.flush()
    await f.close()
    assert.equal((await inspectWal(dir)).records, 0)
    const g = await SegmentFile.open(store, { wal: { dir } })
    assert.equal(g.walReplay?.records, 0)
    assert.equal(g.size, MiB + applied)
    const got = await contents(g)
    assert.ok(got.subarray(0, 100).equals(base), 'the bytes before')
    assert.ok(got.subarray(MiB).equals(given.subarray(0, applied)), 'the steps applied, and no more')
    await g.close()
  })
})
