/**
 * The read calls against a store outside the contract whose GET rejects with a value that
 * is no Error (`undefined`, a string): SegmentFile.open (and create), read, readInto and downloadFile
 * reject with ERR_STORE naming the call and showing what was thrown (a rejection with
 * `undefined` reads as no error to a caller), and the handle stays usable, as after any
 * store failure. A rejection with an Error is passed on as it is. (The read stream:
 * test/streams/read-stream-stops.test.ts.)
 */
import assert from 'node:assert/strict'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { pattern } from '../helpers/pattern.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

type Thrown = 'undefined' | 'string' | 'error'

/** Once armed, its GETs (or calls `op`) reject with `thrown` (the value below); other calls pass. */
class OddStore extends WrappedStore {
  armed = false
  op: CallInfo['op'] = 'get'
  thrown: Thrown = 'undefined'
  readonly error = new TypeError('a store of its own kind')

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (!this.armed || call.op !== this.op) return run()
    if (this.thrown === 'undefined') throw undefined
    if (this.thrown === 'string') throw 'disk on fire'
    throw this.error
  }
}

const shown = { undefined: /failed with undefined, which is not an Error/, string: /failed with "disk on fire"/ }

/** ERR_STORE naming `call` and the value thrown. */
function notAnError(thrown: 'undefined' | 'string', call: RegExp) {
  return (err: unknown) => {
    assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
    assert.match(err.message, call)
    assert.match(err.message, shown[thrown])
    assert.equal(err.cause, thrown === 'string' ? 'disk on fire' : undefined)
    return true
  }
}

describe('read calls whose store rejects with no Error', () => {
  const base = new MemoryStore()
  const ref = pattern(0, 300 * 1024, 5)
  let dir = ''
  before(async () => {
    const f = await SegmentFile.create(base)
    await f.write(0, ref)
    await f.flush()
    await f.close()
    dir = await mkdtemp(join(tmpdir(), 'ss-odd-'))
  })
  after(() => rm(dir, { recursive: true, force: true }))

  for (const thrown of ['undefined', 'string'] as const) {
    it(`SegmentFile.open (${thrown}): ERR_STORE naming the open`, async () => {
      const store = new OddStore(base)
      store.armed = true
      store.thrown = thrown
      for (const options of [{}, { readOnly: true }, { readOnly: true, cno: 1 }]) {
        await assert.rejects(SegmentFile.open(store, options), notAnError(thrown, /SegmentFile\.open of mem:/))
      }
    })

    it(`SegmentFile.create (${thrown}): ERR_STORE naming the create`, async () => {
      for (const op of ['head', 'list'] as const) {
        const store = new OddStore(new MemoryStore())
        store.armed = true
        store.op = op
        store.thrown = thrown
        await assert.rejects(SegmentFile.create(store), notAnError(thrown, /SegmentFile\.create in mem:/))
      }
    })

    it(`read and readInto (${thrown}): ERR_STORE naming the call; the handle stays usable`, async () => {
      const store = new OddStore(base)
      const f = await SegmentFile.open(store, { readOnly: true })
      store.armed = true
      store.thrown = thrown
      await assert.rejects(f.read(0, 4096), notAnError(thrown, /read of 4096 bytes at 0 of mem:/))
      await assert.rejects(
        f.readInto(8192, Buffer.alloc(100)),
        notAnError(thrown, /readInto of 100 bytes at 8192 of mem:/),
      )
      store.armed = false
      assert.deepEqual(Buffer.from(await f.read(0, 4096)), ref.subarray(0, 4096))
      await f.close()
    })

    for (const stage of ['open', 'data'] as const) {
      it(`downloadFile, a GET of the ${stage} (${thrown}): ERR_STORE naming the download, no file left`, async () => {
        const store = new OddStore(base)
        store.thrown = thrown
        const path = join(dir, `${stage}-${thrown}.bin`)
        store.armed = stage === 'open'
        const onStart = () => {
          store.armed = true
        }
        await assert.rejects(
          downloadFile(store, path, { onStart }),
          notAnError(thrown, stage === 'open' ? /SegmentFile\.open of mem:/ : /download of mem:.* to /),
        )
        assert.deepEqual(await readdir(dir), [])
      })
    }
  }

  it('a rejection with an Error is passed on as it is', async () => {
    const store = new OddStore(base)
    store.thrown = 'error'
    const f = await SegmentFile.open(store, { readOnly: true })
    store.armed = true
    await assert.rejects(f.read(0, 4096), (err) => err === store.error)
    await assert.rejects(SegmentFile.open(store, { readOnly: true }), (err) => err === store.error)
    await assert.rejects(downloadFile(store, join(dir, 'error.bin')), (err) => err === store.error)
    await f.close().catch(() => undefined)
  })

  it("downloadFile: what the caller's onStart or onProgress throws ends it as it is, whatever it is", async () => {
    for (const thrown of [undefined, 'stop', new RangeError('enough')]) {
      for (const at of ['onStart', 'onProgress'] as const) {
        const hook = () => {
          throw thrown
        }
        await assert.rejects(downloadFile(base, join(dir, 'hooked.bin'), { [at]: hook }), (err) => err === thrown)
      }
    }
    assert.deepEqual(await readdir(dir), [])
  })
})
