/**
 * The admin walk of a block map (admin/map-walk.ts) reads node spans with the store's
 * `get`, and keeps or drops their bytes as any: no such answer may be a piece of the pool
 * of GET pieces (util/piece-pool.ts), which only a getChunks caller is lent and gives
 * back. With 64 KiB meta blocks, a span of one node is exactly a piece's size.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { walkMap } from '../../lib/admin/map-walk.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { dropPieces, PIECE_BYTES, pieceStats } from '../../lib/util/piece-pool.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024

/** A directory store counting the `get`s of exactly PIECE_BYTES. */
class CountingStore extends WrappedStore {
  pieceSized = 0
  constructor(readonly dir: DirectoryStore) {
    super(dir)
  }
  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }
  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const r = options?.range
    if (r !== undefined && 'start' in r && r.end - r.start === PIECE_BYTES) this.pieceSized++
    return this.dir.get(key, options)
  }
}

const dirs: string[] = []
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

it('a walk whose node spans are 64 KiB takes no piece of the pool', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'ss-walk-pieces-'))
  dirs.push(dir)
  const store = new CountingStore(new DirectoryStore(join(dir, 's')))
  const w = await SegmentFile.create(store, { metaBlockSize: 64 * 1024 })
  await w.write(0, pattern(0, 4 * MiB, 7))
  await w.flush()
  const cno = w.cno
  await w.close()

  const { inode } = (await readObjectHeader(store, cno, 0)).header
  dropPieces()
  const before = pieceStats()
  const problems: unknown[] = []
  const walk = await walkMap(store, inode, problems as never[])
  assert.deepEqual(problems, [])
  assert.ok(walk.reached.size > 0, 'the walk reached objects')
  assert.ok(store.pieceSized > 0, `${store.pieceSized} node spans of ${PIECE_BYTES} bytes read`)
  assert.equal(pieceStats().out, before.out, 'pieces taken and not given back')

  // verify walks the same map, and reads the data too.
  const v = await verifyCheckpoint(store)
  assert.deepEqual(v.problems, [])
  assert.equal(pieceStats().out, before.out, 'pieces taken and not given back by verify')
})
