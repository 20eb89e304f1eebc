/**
 * uploadFile's resume against a store outside the contract whose requests reject with a
 * value that is no Error (`undefined`, a string): what the resume reads of an interrupted
 * upload (the open uploads, their claims and parts, the completed objects' listing, HEADs,
 * headers and summaries, the store's clock) and its check before publication that what it
 * continued is still there. The upload rejects with ERR_STORE naming the request and its
 * key, the value as `cause` (not the bare value, nor ERR_STATE saying that the file
 * changed), and the next upload of the file publishes it whole.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { interruptedUpload, readBackSha256, sha256, writePatternFile } from '../helpers/resume.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024
const FILE_BYTES = 12 * MiB

type Op = StoreOp | 'now'

/**
 * Once armed (by the test, or by the first call `armOn`), its calls `op` reject with
 * `thrown`; the keys of those it failed are in `failed`.
 */
class OddStore extends WrappedStore {
  armed = false
  armOn: StoreOp | undefined
  op: Op = 'head'
  thrown: unknown
  readonly failed: string[] = []

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === this.armOn) this.armed = true
    if (!this.armed || call.op !== this.op) return run()
    this.failed.push(call.key)
    throw this.thrown
  }

  override async now(): Promise<number> {
    if (this.armed && this.op === 'now') {
      this.failed.push('')
      throw this.thrown
    }
    return Date.now()
  }
}

interface Case {
  name: string
  op: Op
  /** The first call of the resume's reads, after the open (which its failures would fail instead). */
  armOn?: StoreOp
  /** Armed once the upload starts writing (onStart): the check before publication. */
  atStart?: boolean
  /** The request named: `<request> of <url>/<key>`; the key `key` matches. */
  request: string
  key: RegExp
}

const segment = /^\d{10}\.[1-9]\d*$/
const cases: Case[] = [
  { name: 'the open uploads listed', op: 'listMultipart', armOn: 'listMultipart', request: 'listMultipart', key: /^$/ },
  { name: "the store's clock", op: 'now', armOn: 'listMultipart', request: 'now', key: /^$/ },
  { name: "an open upload's claim", op: 'head', armOn: 'listMultipart', request: 'head', key: segment },
  { name: "an open upload's parts", op: 'listParts', armOn: 'listMultipart', request: 'listParts', key: segment },
  // findCompleted: its listing comes after every request of findLeftovers.
  { name: 'the numbers taken listed', op: 'list', armOn: 'listMultipart', request: 'list', key: /^$/ },
  { name: "a completed object's HEAD", op: 'head', armOn: 'list', request: 'head', key: segment },
  { name: "a completed object's header", op: 'get', armOn: 'listMultipart', request: 'get', key: segment },
  // checkContinued, from the flush's check of the file (its BlockSource.verify).
  { name: 'a continued object looked at before publication', op: 'head', atStart: true, request: 'head', key: segment },
]

const dir = mkdtempSync(join(tmpdir(), 'ss-odd-resume-'))
after(() => rmSync(dir, { recursive: true, force: true }))
// Objects of 4 pieces: the interrupted attempt completes some and leaves one open.
const settings = { segmentMpuChunkSize: MiB, segmentMpuMaxConcurrency: 2, streamSegmentBytes: 4 * MiB }

describe("uploadFile's resume, its store rejecting with no Error", () => {
  let n = 0
  for (const thrown of ['undefined', 'string'] as const) {
    const value = thrown === 'string' ? 'disk on fire' : undefined
    for (const c of cases) {
      it(`${c.name} (${c.request} failing, ${thrown}): ERR_STORE naming it; the next upload publishes the file`, async () => {
        const base = new MemoryStore()
        const path = join(dir, `f${++n}.bin`)
        const data = writePatternFile(path, FILE_BYTES, n)
        await interruptedUpload(path, base, settings, FILE_BYTES * 0.6)
        const store = new OddStore(base)
        store.thrown = value
        store.op = c.op
        store.armOn = c.armOn
        const onStart = () => {
          if (c.atStart) store.armed = true
        }
        await assert.rejects(uploadFile(path, store, settings, { onStart }), (err) => {
          assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
          const key = store.failed[0] as string
          assert.match(key, c.key)
          const said = thrown === 'string' ? '"disk on fire"' : 'undefined'
          const what = key === '' ? base.url : `${base.url}/${key}`
          assert.equal(err.message, `${c.request} of ${what} failed with ${said}, which is not an Error`)
          assert.equal(err.cause, value)
          return true
        })
        await uploadFile(path, base, settings)
        assert.deepEqual(await readBackSha256(base), { size: data.length, sha256: sha256(data) })
      })
    }
  }
})
