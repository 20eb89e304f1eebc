/**
 * The admin calls against a store outside the contract that rejects with a value that is
 * no Error (`undefined`, a string): listCheckpoints, inspectCheckpoint, verifyCheckpoint,
 * exportObject, gc and removeContainer reject with ERR_STORE naming the call and the
 * container, showing what was thrown (a rejection with `undefined` reads as no error to a
 * caller). Each store call they make is failed in turn. A rejection with an Error is
 * passed on as it is.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import {
  exportObject,
  gc,
  inspectCheckpoint,
  listCheckpoints,
  removeContainer,
  verifyCheckpoint,
} from '../../lib/admin/index.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { buildContainer, copyStore } from '../helpers/containers.js'
import { type CallInfo, type StoreOp, WrappedStore } from '../helpers/wrapped-store.js'

type Thrown = 'undefined' | 'string' | 'error'

/** Its first call `op` rejects with `thrown` (the value below); every other call passes. */
class OddStore extends WrappedStore {
  fired = false
  readonly error = new TypeError('a store of its own kind')
  constructor(
    inner: ObjectStore,
    private readonly op: StoreOp,
    private readonly thrown: Thrown,
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (this.fired || call.op !== this.op) return run()
    this.fired = true
    if (this.thrown === 'undefined') throw undefined
    if (this.thrown === 'string') throw 'disk on fire'
    throw this.error
  }
}

const OPS: StoreOp[] = ['list', 'get', 'head', 'put', 'delete', 'listMultipart', 'createMultipart', 'uploadPart']

const shown = { undefined: /failed with undefined, which is not an Error/, string: /failed with "disk on fire"/ }

const calls: Array<[string, (store: OddStore) => Promise<unknown>]> = [
  ['listCheckpoints', (s) => listCheckpoints(s)],
  ['inspectCheckpoint', (s) => inspectCheckpoint(s)],
  ['verifyCheckpoint', (s) => verifyCheckpoint(s, { cno: 2 })],
  ['exportObject', (s) => exportObject(s, { store: s, key: 'exported' })],
  ['gc', (s) => gc(s, { graceMs: 0 })],
  ['removeContainer', (s) => removeContainer(s)],
]

describe('admin calls whose store rejects with no Error', () => {
  const base = new MemoryStore()
  before(async () => {
    await buildContainer(base)
  })

  for (const [name, call] of calls) {
    for (const thrown of ['undefined', 'string', 'error'] as const) {
      it(`${name} (${thrown}): ${thrown === 'error' ? 'the Error as it is' : 'ERR_STORE naming the call and the container'}`, async () => {
        let failed = 0
        for (const op of OPS) {
          const inner = new MemoryStore()
          await copyStore(base, inner)
          const store = new OddStore(inner, op, thrown)
          let outcome: { ok: true } | { ok: false; err: unknown }
          try {
            await call(store)
            outcome = { ok: true }
          } catch (err) {
            outcome = { ok: false, err }
          }
          if (!store.fired) continue
          failed++
          assert.ok(!outcome.ok, `${name} resolved though its ${op} rejected with ${thrown}`)
          const { err } = outcome
          if (thrown === 'error') {
            // Passed on as it is, or as the cause of one saying how far the call came.
            const e = err as Error
            assert.ok(e === store.error || e.cause === store.error, `${op}: rejected with ${String(err)}`)
            continue
          }
          assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `${op}: rejected with ${String(err)}`)
          // An export's upload request is named itself, with its target's URL and key (uploader.ts).
          const upload = name === 'exportObject' && ['put', 'createMultipart', 'uploadPart'].includes(op)
          assert.match(err.message, new RegExp(`${upload ? op : name} of mem:`), `${op}`)
          assert.match(err.message, shown[thrown], `${op}`)
          // gc and removeContainer say how far they came, the ERR_STORE as cause.
          let e: StreamSegmentError = err
          while (StreamSegmentError.is(e.cause)) e = e.cause
          assert.match(e.message, shown[thrown])
          assert.equal(e.cause, thrown === 'string' ? 'disk on fire' : undefined)
        }
        assert.ok(failed >= 2, `${failed} kinds of store call failed`)
      })
    }
  }
})
