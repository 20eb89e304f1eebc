/**
 * A scan (downloadFile, SegmentFile.read and readInto) whose store has a GET that neither
 * answers nor hears its signal (a custom store's; a directory store blocked in a read of a
 * hung network mount): a failure beside it, or the download's signal, still settles the
 * call at once, and the GET answering later writes nothing anywhere (not into the
 * caller's buffer, not into the download's file, which is gone).
 */
import assert from 'node:assert/strict'
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { within } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

/**
 * Once armed, the data GET (one of DATA_GET bytes) of key `deaf` from byte `deafAt`
 * never answers, whatever its signal says, until `release()`; with `failAt`, that key's
 * data GET from there fails, once the other is held. Other GETs pass.
 */
class DeafStore extends WrappedStore {
  armed = false
  deaf = ''
  /** Byte `deafAt` of `deaf`'s data GETs, or 'any': every GET of `deaf`. */
  deafAt: number | 'any' = 0
  failAt: number | undefined
  held = 0
  /** Settles once every released GET has answered. */
  answered: Promise<unknown> = Promise.resolve()
  private wake: Array<() => void> = []
  private onHeld: () => void = () => {}
  private someHeld = new Promise<void>((r) => {
    this.onHeld = r
  })

  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    const r = options?.range
    if (this.armed && this.deafAt === 'any' && key === this.deaf) return this.hold(() => super.get(key, options))
    const data = r !== undefined && 'start' in r && r.end - r.start === DATA_GET && key === this.deaf
    if (!this.armed || !data) return super.get(key, options)
    if (r.start === this.failAt) {
      await this.someHeld
      throw StreamSegmentError.store(`injected failure: get ${key}`)
    }
    if (r.start !== this.deafAt) return super.get(key, options)
    return this.hold(() => super.get(key, options))
  }

  private async hold(get: () => Promise<Uint8Array>): Promise<Uint8Array> {
    this.held++
    this.onHeld()
    await new Promise<void>((w) => this.wake.push(w))
    const answer = get()
    this.answered = Promise.allSettled([this.answered, answer])
    return answer
  }

  protected around<T>(_call: CallInfo, run: () => Promise<T>): Promise<T> {
    return run()
  }

  /** Lets the held GETs answer. */
  release(): void {
    for (const w of this.wake.splice(0)) w()
  }

  /** Resolves once a GET is held. */
  heldOne(): Promise<void> {
    return this.someHeld
  }
}

const SIZE = 1024 * 1024
const DATA_GET = 16 * 1024
const READ = { readGetMaxBytes: DATA_GET, readMaxConcurrency: 4 }

/** A download to `path` whose signal fires once `store` holds a GET: ERR_ABORTED at once, not when the GET answers. */
async function abortWhileHeld(store: DeafStore, path: string): Promise<void> {
  const ac = new AbortController()
  const download = downloadFile(store, path, { ...READ, signal: ac.signal })
  await store.heldOne()
  ac.abort()
  await assert.rejects(within(download, 2000, 'the aborted download'), (err) =>
    StreamSegmentError.is(err, 'ERR_ABORTED'),
  )
  store.release()
  await store.answered
}

describe('a scan beside a GET that does not hear its signal', () => {
  const base = new MemoryStore()
  const ref = pattern(0, SIZE, 7)
  const parts: string[] = []
  let dir = ''
  before(async () => {
    // Objects of 512 KiB: each read in many data GETs, beside each other.
    const large = { segmentMaxObjectBytes: 512 * 1024, dataCacheDirtyMaxBytesThreshold: SIZE }
    const f = await SegmentFile.create(base, { ...smallSettings, ...large })
    await f.write(0, ref)
    await f.flush()
    await f.close()
    for await (const e of base.list('')) if (/^0000000001\.[1-9]\d*$/.test(e.key)) parts.push(e.key)
    parts.sort((a, b) => Number(a.split('.')[1]) - Number(b.split('.')[1]))
    assert.ok(parts.length >= 2)
    dir = await mkdtemp(join(tmpdir(), 'ss-deaf-'))
  })
  after(() => rm(dir, { recursive: true, force: true }))

  const faults = () => {
    const store = new DeafStore(base)
    store.deaf = parts[0] as string
    store.armed = true
    return store
  }

  it('downloadFile: a GET fails beside it: rejects with that failure at once, no file left', async () => {
    const store = faults()
    store.failAt = 2 * DATA_GET
    const path = join(dir, 'failed.bin')
    await assert.rejects(within(downloadFile(store, path, READ), 2000, 'the failed download'), (err) =>
      StreamSegmentError.is(err, 'ERR_STORE'),
    )
    assert.ok(store.held > 0)
    assert.deepEqual(await readdir(dir), [])
    store.release()
    await store.answered
    assert.deepEqual(await readdir(dir), [])
  })

  it('downloadFile: the signal fires while it is held: ERR_ABORTED at once, the file at path as it was', async () => {
    const store = faults()
    const path = join(dir, 'aborted.bin')
    await writeFile(path, 'before')
    await abortWhileHeld(store, path)
    assert.deepEqual(await readdir(dir), ['aborted.bin'])
    assert.equal(await readFile(path, 'utf8'), 'before')
    await rm(path)
  })

  it("downloadFile: the signal fires while the open's inode GET is held: ERR_ABORTED at once, no file left", async () => {
    const store = faults()
    store.deaf = 'inode'
    store.deafAt = 'any'
    await abortWhileHeld(store, join(dir, 'open.bin'))
    assert.deepEqual(await readdir(dir), [])
  })

  it('downloadFile whose handle onStart aborts: the scan starts on an aborted signal: ERR_ABORTED, no file left', async () => {
    for (const stop of [(h: SegmentFile) => h.abort(), (h: SegmentFile) => void h.close()]) {
      await assert.rejects(downloadFile(base, join(dir, 'stopped.bin'), { ...READ, onStart: stop }), (err) =>
        StreamSegmentError.is(err, 'ERR_ABORTED'),
      )
      assert.deepEqual(await readdir(dir), [])
    }
  })

  it("SegmentFile.readInto: a GET fails beside it: rejects at once; its answer, come later, is not written into the caller's buffer", async () => {
    const store = faults()
    const f = await SegmentFile.open(store, { readOnly: true, ...READ })
    store.failAt = 2 * DATA_GET
    const out = Buffer.alloc(SIZE, 0xee)
    await assert.rejects(within(f.readInto(0, out), 2000, 'the failed read'), (err) =>
      StreamSegmentError.is(err, 'ERR_STORE'),
    )
    const seen = Buffer.from(out)
    store.release()
    await store.answered
    await new Promise((r) => setImmediate(r))
    assert.ok(out.equals(seen), 'the buffer changed after the read rejected')
    await f.close()
  })
})
