/**
 * The write stream stopped (destroy(), destroy(err), the signal) while its final flush
 * waits on a store that does not answer: a data part, part 0, the inode write. The pipeline
 * ends, with one 'error' then 'close', nothing published, no upload left open. Also: an
 * abort that meets uploadFile's inode write, a source that errors once it has ended, a
 * write after destroy().
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { openUploadCount, outcomeWithin, publishContent, readPublished } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { hooks, smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

/** A store that runs `before` ahead of each call. */
class HookedStore extends WrappedStore {
  before: (call: CallInfo) => void | Promise<void> = () => undefined
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    await this.before(call)
    return run()
  }
}

const OLD = pattern(0, 50_000, 7)
const NEW = pattern(0, 700 * 1024 + 123, 8)

const withOld = (store: ObjectStore) => publishContent(store, OLD)
const outcomeOf = (p: Promise<unknown>) => outcomeWithin(p, 5000, 'the pipeline')

describe('the write stream stopped while its final flush waits on a hung store', () => {
  for (const [what, rule] of [
    ['a data part', { ops: ['uploadPart'] as const, mode: 'hang' as const }],
    ['the inode write', { ops: ['put'] as const, key: /^inode$/, mode: 'hang' as const }],
    ['part 0', { ops: ['put', 'completeMultipart'] as const, key: /^0000000002\.0$/, mode: 'hang' as const }],
  ] as const) {
    for (const how of ['destroy()', 'destroy(err)', 'signal'] as const) {
      it(`${what} hung, ${how}: the pipeline ends, once, and says what happened`, async () => {
        const inner = new MemoryStore(`hung-${what}-${how}`)
        await withOld(inner)
        const store = new FailingStore(inner, [{ ...rule, ops: [...rule.ops] }])
        const ac = new AbortController()
        const ws = createStreamSegmentWriteStream({
          store,
          ...smallSettings,
          ...hooks({ maxNodeEntries: 4, abortWaitMs: 50 }),
          signal: ac.signal,
        })
        const events: string[] = []
        for (const e of ['error', 'finish', 'close', 'flush'] as const) ws.on(e, () => events.push(e))
        const done = outcomeOf(pipeline(Readable.from([NEW]), ws))
        await store.hangOf('put', 'uploadPart', 'completeMultipart')
        const mine = new Error('mine')
        if (how === 'destroy()') ws.destroy()
        else if (how === 'destroy(err)') ws.destroy(mine)
        else ac.abort(new Error('stop'))
        const outcome = await done
        if (!ws.closed) await new Promise((r) => ws.once('close', () => r(undefined)))
        await new Promise((r) => setImmediate(r))
        const pub = await readPublished(inner)
        assert.notEqual(outcome, 'ok', `${what}, ${how}: resolved; published ${pub.cno}`)
        if (how === 'destroy(err)') assert.equal(outcome, mine)
        else assert.ok(StreamSegmentError.is(outcome, 'ERR_ABORTED'), String(outcome))
        // The inode write cut once the wait ran out: not known to be unpublished, and the error says so.
        if (what === 'the inode write' && how !== 'destroy(err)') {
          assert.match((outcome as Error).message, /whether the checkpoint was published is unknown/)
        }
        assert.deepEqual(pub, { cno: 1, bytes: OLD }, `${what}, ${how}`)
        assert.equal(await openUploadCount(inner), 0, 'uploads left open')
        // One 'error' (a destroy() without one, once the input ended, is ERR_ABORTED), then 'close'.
        assert.deepEqual(events, ['error', 'close'], `${what}, ${how}: ${String(outcome)}`)
      })
    }
  }
})

describe('other stops', () => {
  it('uploadFile aborted while its inode write is under way: the write is waited for, published, so it resolves', async () => {
    const inner = new MemoryStore('upload-file-abort-inode')
    await withOld(inner)
    const store = new HookedStore(inner)
    const ac = new AbortController()
    store.before = async (call) => {
      if (call.op === 'put' && call.key === 'inode') {
        ac.abort(new Error('stop'))
        await new Promise((r) => setImmediate(r)) // the answer comes after the abort
      }
    }
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-flush-stops-'))
    roots.push(dir)
    await fs.writeFile(join(dir, 'f'), NEW)
    const timing = await uploadFile(join(dir, 'f'), store, {}, { signal: ac.signal })
    assert.equal(timing.cno, 2)
    assert.deepEqual(await readPublished(inner), { cno: 2, bytes: NEW })
  })

  it('a source that errors once it has ended, while the flush runs: the stream was whole, it is published', async () => {
    const inner = new MemoryStore('late-source-error')
    await withOld(inner)
    const store = new HookedStore(inner)
    const src = new Readable({ read() {} })
    src.push(NEW)
    src.push(null)
    store.before = (call) => {
      if (call.op === 'put' && call.key === '0000000002.0') src.destroy(new Error('late'))
    }
    const ws = createStreamSegmentWriteStream({ store })
    const events: string[] = []
    for (const e of ['error', 'finish', 'close', 'flush'] as const) ws.on(e, () => events.push(e))
    await pipeline(src, ws)
    if (!ws.closed) await new Promise((r) => ws.once('close', () => r(undefined)))
    assert.deepEqual(events, ['flush', 'finish', 'close'])
    assert.deepEqual(await readPublished(inner), { cno: 2, bytes: NEW })
  })

  it('a write after destroy(err): its callback gets ERR_STREAM_DESTROYED, no second error, no request', async () => {
    const store = new FailingStore(new MemoryStore('write-after-destroy'))
    const ws = createStreamSegmentWriteStream({ store })
    const errors: unknown[] = []
    ws.on('error', (e) => errors.push(e))
    ws.write(NEW)
    const mine = new Error('mine')
    ws.destroy(mine)
    const late = await new Promise((r) => ws.write(NEW, (e) => r(e)))
    if (!ws.closed) await new Promise((r) => ws.once('close', () => r(undefined)))
    assert.equal((late as { code?: string }).code, 'ERR_STREAM_DESTROYED')
    assert.deepEqual(errors, [mine])
    assert.equal(await store.inner.head('inode'), undefined)
  })
})
