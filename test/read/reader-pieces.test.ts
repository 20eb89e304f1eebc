/**
 * The reader owns the pieces of the data GETs it makes (util/piece-pool.ts): a run whose
 * bytes fail their checks (damaged on the way: a CRC that does not match, fetched once
 * more, then ERR_CORRUPT) gives the pieces of each answer back, as a read that succeeds
 * does once its consumer has them. The store here is the directory store, which reads
 * into pieces, with every data answer damaged on the way (one bit of its first piece).
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { dropPieces, PIECE_BYTES, pieceStats } from '../../lib/util/piece-pool.js'
import { rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024

/** A directory store whose data answers (getChunks) come with a bit flipped once `armed`. */
class DamagingStore extends WrappedStore {
  armed = false
  damaged = 0
  constructor(readonly dir: DirectoryStore) {
    super(dir)
  }
  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }
  async getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
    const chunks = await this.dir.getChunks(key, options)
    const first = chunks[0]
    if (this.armed && first !== undefined && first.byteLength === PIECE_BYTES) {
      first[100] = (first[100] as number) ^ 4
      this.damaged++
    }
    return chunks
  }
}

const dirs: string[] = []
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

/** A directory store's folder in a temporary directory, removed after the tests. */
async function storeDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'ss-reader-pieces-'))
  dirs.push(dir)
  return join(dir, 's')
}

/** A container of 4 MiB of pattern `seed` in `store`, published: the bytes written. */
async function written(store: DirectoryStore | DamagingStore, seed: number): Promise<Buffer> {
  const ref = pattern(0, 4 * MiB, seed)
  const w = await SegmentFile.create(store)
  await w.write(0, ref)
  await w.flush()
  await w.close()
  return ref
}

it('a run damaged on the way, fetched twice and failing both times: ERR_CORRUPT, every piece back', async () => {
  const store = new DamagingStore(new DirectoryStore(await storeDir()))
  const ref = await written(store, 3)

  const r = await SegmentFile.open(store, { readOnly: true })
  dropPieces()
  const before = pieceStats()
  store.armed = true
  await rejectsCode(r.read(0, MiB), 'ERR_CORRUPT', /CRC-32/)
  store.armed = false
  assert.ok(store.damaged >= 2, `${store.damaged} data answers damaged (the run is fetched once more)`)
  const failed = pieceStats()
  assert.equal(failed.out, before.out, 'pieces taken and not given back')
  assert.ok(failed.keptBytes >= MiB, `${failed.keptBytes} bytes kept in the pool`)
  // Undamaged, the same read gives the file's bytes.
  assert.deepEqual(Buffer.from(await r.read(0, MiB)), ref.subarray(0, MiB))
  await r.close()
})

/**
 * Once armed, fails every `get` (the reads of nodes and summaries; data comes by
 * getChunks), after the next data answer came: the data GET has ended, its pieces taken.
 */
class FailingGets extends DamagingStore {
  failGets = false
  private dataCame: () => void = () => {}
  private data = Promise.resolve()
  arm(): void {
    this.failGets = true
    this.data = new Promise<void>((resolve) => {
      this.dataCame = resolve
    })
  }
  override async getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
    const chunks = await super.getChunks(key, options)
    this.dataCame()
    return chunks
  }
  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    if (!this.failGets) return super.get(key, options)
    await this.data
    throw StreamSegmentError.store(`${key}: get refused by the test`)
  }
}

it("a run's data that came while its summary's GET failed: ERR_STORE, every piece back", async () => {
  const store = new FailingGets(new DirectoryStore(await storeDir()))
  const ref = await written(store, 5)

  // No summary kept: each run's check fetches its object's summary again.
  const r = await SegmentFile.open(store, { readOnly: true, readSummaryCacheBytes: 0 })
  // The walk's nodes are in memory after this read: the next one needs no node GET.
  assert.deepEqual(Buffer.from(await r.read(0, MiB)), ref.subarray(0, MiB))
  dropPieces()
  const before = pieceStats()
  store.arm()
  await rejectsCode(r.read(0, MiB), 'ERR_STORE', /get refused by the test/)
  store.failGets = false
  const failed = pieceStats()
  assert.equal(failed.out, before.out, 'pieces taken and not given back')
  assert.equal(failed.keptBytes, MiB, 'bytes kept in the pool')
  await r.close()
})
