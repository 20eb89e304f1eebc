/**
 * One store call of the objects sent ahead fails (before reaching the store, or landing
 * with its answer lost) while the writer goes on writing, over blocks in flight too: the
 * flush publishes exactly the bytes written, or fails with nothing new published and the
 * next flush publishes them; no slot stays pinned or held once the flush is done.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import type { StoreOp } from '../helpers/wrapped-store.js'

const KiB = 1024
const SIZE = 320 * KiB

async function published(store: ObjectStore): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/**
 * A write that waited for a partial segment (at the dirty limit) fails with the store's
 * error when that object failed, its bytes taken in all the same.
 */
async function write(f: SegmentFile, at: number, bytes: Buffer, ref: Buffer): Promise<void> {
  await f.write(at, bytes).catch((err: unknown) => {
    if (!StreamSegmentError.is(err, 'ERR_STORE')) throw err
  })
  bytes.copy(ref, at)
}

/** Appends in 8 KiB writes, each followed by a rewrite of 6 KiB a little behind the end (often still in flight). */
async function writeOver(f: SegmentFile, ref: Buffer): Promise<void> {
  for (let at = 0, n = 0; at < SIZE; at += 8 * KiB, n++) {
    await write(f, at, pattern(at, 8 * KiB, n), ref)
    const back = Math.max(0, at - ((n * 5) % 7) * 4 * KiB - 1000)
    await write(f, back, pattern(back, 6 * KiB, 1000 + n), ref)
  }
}

/** Nothing pinned by a request, nothing held: every byte written is stored. */
function tierEmpty(f: SegmentFile): void {
  assert.equal(fileState(f).tier.usedBytes, 0, 'slots still held after the flush')
}

const modes: Array<[string, Partial<Settings>, StoreOp[]]> = [
  ['objects sent whole', { streamSegmentBytes: 16 * KiB }, ['put']],
  [
    'objects filled in pieces',
    { streamSegmentBytes: 40 * KiB },
    ['createMultipart', 'uploadPart', 'completeMultipart'],
  ],
]

describe('a store call of an object sent ahead fails once', () => {
  for (const [mode, extra, ops] of modes) {
    for (const op of ops) {
      for (const how of ['error', 'lose-answer'] as const) {
        it(`${mode}, ${op} (${how}): the flush publishes every byte written, the tier is left empty`, async () => {
          for (const nth of [1, 2, 4]) {
            const inner = new MemoryStore()
            const store = new FailingStore(inner)
            const f = await SegmentFile.create(store, { ...smallSettings, ...extra })
            // Only data parts of the checkpoint being written, sent ahead while the writes go on.
            store.addRule({ ops: [op], key: /^0000000001\.[1-9]\d*$/, nth, mode: how })
            const ref = Buffer.alloc(SIZE)
            await writeOver(f, ref)
            assert.equal(store.calls.filter((c) => c.op === op && c.outcome !== 'ok').length, 1, `nth ${nth}`)
            await f.flush().catch(async (err: unknown) => {
              // The failure hit one of the flush's own objects: nothing published, the next flush does.
              if (!StreamSegmentError.is(err, 'ERR_STORE')) throw err
              assert.equal(await inner.head('inode'), undefined, `nth ${nth}: nothing published`)
              await f.flush()
            })
            assert.ok((await published(inner)).equals(ref), `nth ${nth}: the checkpoint holds the newest bytes`)
            tierEmpty(f)
            await f.close()
          }
        })
      }
    }
  }
})
