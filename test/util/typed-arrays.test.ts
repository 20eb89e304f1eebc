import assert from 'node:assert/strict'
import { test } from 'node:test'
import { U32List } from '../../lib/util/typed-arrays.js'

test('U32List keeps every value pushed, in order, as it grows past its first room', () => {
  const list = new U32List()
  assert.equal(list.length, 0)
  const n = 100_003
  for (let i = 0; i < n; i++) list.push((i * 2654435761) >>> 0)
  assert.equal(list.length, n)
  for (let i = 0; i < n; i++) assert.equal(list.get(i), (i * 2654435761) >>> 0)
  list.push(0xffffffff)
  assert.equal(list.get(n), 0xffffffff)
})
