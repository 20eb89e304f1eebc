import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { BufferPool } from '../../lib/util/buffer-pool.js'

describe('BufferPool', () => {
  it('takes the newest buffer that fits, exact or at least the length', () => {
    const pool = new BufferPool(1000)
    const [a, b, c] = [Buffer.alloc(100), Buffer.alloc(200), Buffer.alloc(100)]
    pool.give([a, b])
    pool.give(c)
    assert.equal(pool.bytes, 400)
    assert.equal(pool.take(100, true), c)
    assert.equal(pool.take(150), b)
    assert.equal(pool.take(150), undefined)
    assert.equal(pool.take(100), a)
    assert.equal(pool.bytes, 0)
  })

  it('keeps at most maxBytes, letting the oldest go; one buffer over it is not kept', () => {
    const pool = new BufferPool(300)
    const bufs = [100, 100, 100, 100].map((n) => Buffer.alloc(n))
    pool.give(bufs)
    assert.equal(pool.bytes, 300)
    pool.give(Buffer.alloc(301))
    assert.equal(pool.bytes, 300)
    const taken = [pool.take(100), pool.take(100), pool.take(100), pool.take(100)]
    assert.deepEqual(taken, [bufs[3], bufs[2], bufs[1], undefined], 'the first given went')
  })

  it('with idleMs, lets every buffer go once that long has passed since the last give', async () => {
    // Wide margins: a loaded machine may wake late, never early.
    const pool = new BufferPool(1000, 1000)
    pool.give(Buffer.alloc(10))
    await sleep(600)
    pool.give(Buffer.alloc(10)) // restarts the wait
    await sleep(600)
    assert.equal(pool.bytes, 20, 'kept: 1200 ms after the first give, 600 after the last')
    await sleep(1000)
    assert.equal(pool.bytes, 0)
    const none = new BufferPool(1000)
    none.give(Buffer.alloc(10))
    await sleep(1100)
    assert.equal(none.bytes, 10, 'without idleMs, kept')
  })
})
