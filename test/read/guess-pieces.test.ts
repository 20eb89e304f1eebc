/**
 * A read stream's first data GET starts on a guess, before the leaf naming its blocks has
 * come (Reader.plan with `guess`). The reader owns the pieces of that GET's answer
 * (util/piece-pool.ts): whether a run takes the answer or none does (the guess was wrong,
 * or the run at its offset is shorter), or the reader is cleared (the stream destroyed,
 * the file closed) or aborted before one does, every piece goes back to the pool once.
 * The store is the directory store, which reads into pieces.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { Reader } from '../../lib/read/reader.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { createStreamSegmentReadStream, type StreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { dropPieces, givePieces, pieceStats } from '../../lib/util/piece-pool.js'
import { drain, rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const KiB = 1024
const MiB = 1024 * KiB
const BS = 4096

/** Objects of about 2 MiB of data: a file of several, each with its own leaves. */
const MANY: Partial<Settings> = { dataCacheDirtyMaxBytesThreshold: 2 * MiB, segmentBufferSize: 4 * MiB }

/**
 * A directory store that logs each data GET (getChunks: key, range) and keeps what each
 * gives, to wait for them all; `came` runs once an answer has come, before it is handed on,
 * and `hold` keeps answers back until it settles.
 */
class GuessStore extends WrappedStore {
  readonly gets: Array<{ key: string; start: number; end: number }> = []
  readonly answers: Promise<unknown>[] = []
  came: (() => void) | undefined
  hold: Promise<void> | undefined
  /** Fail every `get` (the walk's node reads) answered once a data GET has gone out. */
  failGetsAfterData = false
  /** Hand on no `get` answer while a data GET has not answered (`came` has run for it). */
  dataFirst = false
  private dataComing: Promise<void>[] = []
  constructor(readonly dir: DirectoryStore) {
    super(dir)
  }
  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }
  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const bytes = await this.dir.get(key, options)
    if (this.dataFirst) await Promise.all(this.dataComing)
    if (this.failGetsAfterData && this.gets.length > 0)
      throw StreamSegmentError.store(`${key}: get refused by the test`)
    return bytes
  }
  getChunks(key: string, options?: GetOptions): Promise<Uint8Array[]> {
    const r = options?.range
    this.gets.push({
      key,
      start: r !== undefined && 'start' in r ? r.start : -1,
      end: r !== undefined && 'end' in r ? r.end : -1,
    })
    let answered: () => void = () => {}
    this.dataComing.push(new Promise<void>((r) => (answered = r)))
    const answer = (async () => {
      try {
        const chunks = await this.dir.getChunks(key, options)
        const came = this.came
        this.came = undefined
        came?.()
        await this.hold
        return chunks
      } finally {
        answered()
      }
    })()
    this.answers.push(answer.catch(() => undefined))
    return answer
  }
  /** Every data GET made so far has settled (and what its answer went to has run). */
  async settled(): Promise<void> {
    for (let n = 0; n !== this.answers.length; ) {
      n = this.answers.length
      await Promise.all(this.answers)
    }
    await new Promise((r) => setImmediate(r))
  }
}

const dirs: string[] = []
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

async function storeAt(): Promise<GuessStore> {
  const dir = await mkdtemp(join(tmpdir(), 'ss-guess-pieces-'))
  dirs.push(dir)
  return new GuessStore(new DirectoryStore(join(dir, 's')))
}

/**
 * A file of `size` bytes of patterned blocks written in `settings`, published: the bytes
 * (zeros where `holes` are, [offset, length) each), the ranges in `again` written a second
 * time before the flush.
 */
async function written(
  store: GuessStore,
  size: number,
  settings: Partial<Settings>,
  holes: Array<[number, number]> = [],
  again: Array<[number, number]> = [],
): Promise<Buffer> {
  const f = await SegmentFile.create(store, settings)
  const want = pattern(0, size, 5)
  for (const [at, n] of holes) want.fill(0, at, at + n)
  let at = 0
  for (const [h, n] of [...holes, [size, 0] as [number, number]]) {
    if (h > at) await f.write(at, want.subarray(at, h))
    at = h + n
  }
  for (const [a, n] of again) {
    const b = pattern(a, n, 6)
    b.copy(want, a)
    await f.write(a, b)
  }
  await f.flush()
  await f.close()
  return want
}

/**
 * A published file of 8 MiB (written), opened read-only with a reader of its own, the
 * store's data GETs held until `release()`.
 */
async function heldReader(store: GuessStore) {
  const want = await written(store, 8 * MiB, MANY)
  const file = await SegmentFile.open(store, { readOnly: true })
  const reader = new Reader(fileState(file))
  let release: () => void = () => {}
  store.hold = new Promise<void>((r) => {
    release = r
  })
  return { want, file, reader, release: () => release() }
}

/**
 * Pieces out when `read` starts, and once it and every data GET it made have settled and
 * they are back to that (what a stopped stream let go may still be checking a run's CRC on
 * the thread pool), or a second has passed.
 */
async function outAround(store: GuessStore, read: () => Promise<void>): Promise<{ before: number; after: number }> {
  dropPieces()
  const before = pieceStats().out
  await read()
  await store.settled()
  for (const deadline = Date.now() + 1000; pieceStats().out !== before && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 10))
  }
  return { before, after: pieceStats().out }
}

describe("a read stream's guess that no run takes", () => {
  it('guessed wrong: its pieces go back', async () => {
    // Blocks 768… written again go to a later object holding the leaf of blocks 680…, and
    // its data from its start: a stream from block 700 guesses that object at 80 KiB,
    // where block 788 lies.
    const store = await storeAt()
    const want = await written(store, 24 * MiB, MANY, [], [[3 * MiB, 3 * MiB]])
    const start = 700 * BS
    let data = 0
    const { before, after } = await outAround(store, async () => {
      const rs = createStreamSegmentReadStream({ store, start, end: start + MiB - 1 })
      assert.ok((await drain(rs)).equals(want.subarray(start, start + MiB)))
      data = rs.timing?.requests.data ?? 0
    })
    // Blocks 700–767 and 768–955 in their two objects, and the guess.
    assert.equal(data, 3, `data GETs: ${JSON.stringify(store.gets)}`)
    assert.equal(after, before, 'pieces taken and not given back')
  })

  it('the run at its offset is shorter (a hole after it): its pieces go back', async () => {
    // Blocks 0–99, a hole of 10 blocks, then the rest in the same object: the guess of
    // the first window's 256 blocks at byte 0 matches neither run of the object.
    const store = await storeAt()
    const want = await written(store, 8 * MiB, MANY, [[100 * BS, 10 * BS]])
    let data = 0
    const { before, after } = await outAround(store, async () => {
      const rs = createStreamSegmentReadStream({ store })
      assert.ok((await drain(rs)).equals(want))
      data = rs.timing?.requests.data ?? 0
    })
    const first = store.gets[0]
    assert.ok(first !== undefined && first.start === 0 && first.end > 100 * BS, `the guess: ${JSON.stringify(first)}`)
    assert.ok(
      store.gets.some((g) => g.key === first.key && g.start === 0 && g.end === 100 * BS),
      `blocks 0–99 read by a GET of their own: ${JSON.stringify(store.gets)}`,
    )
    assert.ok(data >= 3, `${data} data GETs`)
    assert.equal(after, before, 'pieces taken and not given back')
  })

  it('guessed right: its run takes the pieces, given back once the stream has them', async () => {
    const store = await storeAt()
    const want = await written(store, 8 * MiB, MANY)
    const { before, after } = await outAround(store, async () => {
      const rs = createStreamSegmentReadStream({ store })
      assert.ok((await drain(rs)).equals(want))
    })
    const first = store.gets[0]
    assert.equal(
      store.gets.filter((g) => g.key === first?.key && g.start === 0).length,
      1,
      `the guess at byte 0 taken by its run: ${JSON.stringify(store.gets)}`,
    )
    assert.equal(after, before, 'pieces taken and not given back')
  })
})

describe('a guess whose run has not taken it when the reader stops', () => {
  it('the reader cleared (its stream destroyed, its file closed) before the guess came: its pieces go back', async () => {
    const store = await storeAt()
    const { want, file, reader, release } = await heldReader(store)
    const { before, after } = await outAround(store, async () => {
      const pieces = await reader.plan(0, MiB, true)
      const p = pieces[0]
      assert.ok(p?.kind === 'data', 'a data run first')
      const g = store.gets[0]
      assert.deepEqual(g, { key: p.run.key, start: p.run.at, end: p.run.at + p.run.count * BS }, 'the guess is its run')
      reader.clear()
      release()
      await store.settled()
      // The run reads its bytes itself now.
      const bytes = await reader.fetchPiece(p)
      assert.ok(Buffer.concat(bytes).equals(want.subarray(p.start, p.end)))
      givePieces(bytes)
      assert.equal(store.gets.length, 2, 'the run made its own GET')
    })
    assert.equal(after, before, 'pieces taken and not given back')
    await file.close()
  })

  it('the file aborted before the run takes the guess: the run fails, ERR_ABORTED, and its pieces go back', async () => {
    const store = await storeAt()
    const { file, reader, release } = await heldReader(store)
    const { before, after } = await outAround(store, async () => {
      const pieces = await reader.plan(0, MiB, true)
      const p = pieces[0]
      assert.ok(p?.kind === 'data', 'a data run first')
      file.abort()
      const fetched = reader.fetchPiece(p)
      release()
      await rejectsCode(fetched, 'ERR_ABORTED', /aborted/)
      assert.equal(store.gets.length, 1, 'the guess, and no GET of the run')
    })
    assert.equal(after, before, 'pieces taken and not given back')
    await file.close().catch(() => undefined)
  })

  it('the plan failing (a leaf read refused) while the guess is in flight: its pieces go back', async () => {
    const store = await storeAt()
    const { file, reader, release } = await heldReader(store)
    store.failGetsAfterData = true
    const { before, after } = await outAround(store, async () => {
      await rejectsCode(reader.plan(0, MiB, true), 'ERR_STORE', /get refused by the test/)
      assert.equal(store.gets.length, 1, 'the guess went out')
      release()
    })
    assert.equal(after, before, 'pieces taken and not given back')
    await file.close()
  })

  for (const how of ['destroy()', 'the signal'] as const) {
    it(`a read stream stopped by ${how} as the guess's answer comes, before its leaf's: its pieces go back`, async () => {
      const store = await storeAt()
      await written(store, 8 * MiB, MANY)
      const ac = new AbortController()
      let rs: StreamSegmentReadStream | undefined
      // The leaf's answer comes after the guess's: the stream stops while its first plan waits.
      store.dataFirst = true
      store.came = () => {
        if (how === 'destroy()') rs?.destroy()
        else ac.abort()
      }
      const { before, after } = await outAround(store, async () => {
        rs = createStreamSegmentReadStream({ store, signal: ac.signal })
        const closed = new Promise<void>((r) => rs?.once('close', () => r()))
        const drained = drain(rs).then(
          () => undefined,
          (err) => err,
        )
        await closed
        const err = await drained
        if (how === 'the signal') assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), String(err))
      })
      assert.ok(store.gets.length >= 1, 'the guess was made')
      assert.equal(after, before, 'pieces taken and not given back')
    })
  }
})
