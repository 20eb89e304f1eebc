import assert from 'node:assert/strict'
import { test } from 'node:test'
import { sliceChunks } from '../../lib/util/chunks.js'

test('sliceChunks: every range of chunks of mixed sizes gives the bytes Buffer.concat would, as views', () => {
  const sizes = [0, 1, 5, 3, 0, 8, 2]
  let next = 0
  const chunks = sizes.map((n) => Uint8Array.from({ length: n }, () => next++ & 255))
  const all = Buffer.concat(chunks)
  for (let from = 0; from <= all.length; from++) {
    for (let to = from; to <= all.length; to++) {
      const views = sliceChunks(chunks, from, to)
      assert.deepEqual(Buffer.concat(views), all.subarray(from, to), `[${from}, ${to})`)
      assert.ok(
        views.every((v) => v.byteLength > 0 && chunks.some((c) => c.buffer === v.buffer)),
        `[${from}, ${to}): views, none empty`,
      )
    }
  }
  // A chunk wholly inside the range is handed on as it is.
  assert.equal(sliceChunks(chunks, 0, all.length)[1], chunks[2])
})
