import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { StreamSegmentError } from '../../lib/errors.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { FailingStore } from './failing-store.js'
import { ThrottledStore } from './throttled-store.js'

const code = (err: unknown) => (err as StreamSegmentError).code

describe('FailingStore', () => {
  it('fails the nth matching call only', async () => {
    const s = new FailingStore(new MemoryStore(), [{ ops: ['put'], key: /^seg/, nth: 2 }])
    await s.put('seg1', Buffer.from('a'))
    await s.put('other', Buffer.from('a'))
    await assert.rejects(s.put('seg2', Buffer.from('b')), (e) => code(e) === 'ERR_STORE')
    await s.put('seg3', Buffer.from('c'))
    assert.equal(await s.head('seg2'), undefined, 'a failed put writes nothing')
    assert.deepEqual(
      s.calls.map((c) => `${c.key}:${c.outcome}`),
      ['seg1:ok', 'other:ok', 'seg2:failed', 'seg3:ok', 'seg2:ok'],
    )
  })

  it('loses the answer of a write that landed', async () => {
    const s = new FailingStore(new MemoryStore(), [{ ops: ['put'], mode: 'lose-answer', nth: 1 }])
    await assert.rejects(s.put('k', Buffer.from('landed')), (e) => code(e) === 'ERR_STORE')
    assert.equal(Buffer.from(await s.get('k')).toString(), 'landed')
  })

  it('hangs until the signal fires, or until released', async () => {
    const s = new FailingStore(new MemoryStore(), [{ ops: ['get', 'head'], mode: 'hang' }])
    await s.put('k', Buffer.from('v'))
    const ac = new AbortController()
    const hung = s.get('k', { signal: ac.signal })
    setTimeout(() => ac.abort(), 20)
    await assert.rejects(hung, (e) => code(e) === 'ERR_ABORTED')
    const later = s.head('k')
    s.release()
    assert.equal((await later)?.size, 1)
  })
})

describe('ThrottledStore', () => {
  it('charges latency per request and shares bandwidth between transfers', async () => {
    const s = new ThrottledStore(new MemoryStore(), { latencyMs: 20, bandwidth: 10e6 })
    const t0 = performance.now()
    await Promise.all([s.put('a', new Uint8Array(500_000)), s.put('b', new Uint8Array(500_000))])
    const ms = performance.now() - t0
    // 20 ms latency + 1 MB at 10 MB/s = 120 ms at least, whatever the order.
    assert.ok(ms >= 115, `took ${ms} ms`)
    assert.equal(s.requests.put, 2)
    assert.equal(s.bytesUp, 1_000_000)
    assert.equal(s.peakInFlight, 2)
    await s.get('a', { range: { start: 0, end: 1000 } })
    assert.equal(s.bytesDown, 1000)
    assert.equal(s.totalRequests, 3)
  })

  it('caps one request at the per-request bandwidth', async () => {
    const s = new ThrottledStore(new MemoryStore(), { latencyMs: 0, bandwidth: 1e9, perRequestBandwidth: 5e6 })
    const t0 = performance.now()
    await s.put('a', new Uint8Array(500_000))
    const ms = performance.now() - t0
    assert.ok(ms >= 95, `500 kB at 5 MB/s took ${ms} ms`)
  })
})
