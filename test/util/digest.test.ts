import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { test } from 'node:test'
import { digestChunks, sha256BeatsMd5 } from '../../lib/util/digest.js'

test('digestChunks: the digest of the chunks joined, for each algorithm and encoding', () => {
  const whole = Buffer.alloc(100_003)
  for (let i = 0; i < whole.length; i++) whole[i] = (i * 131) & 0xff
  const splits = [[], [whole], [whole.subarray(0, 1), whole.subarray(1, 65_536), whole.subarray(65_536)]]
  for (const algorithm of ['md5', 'sha256'] as const) {
    for (const encoding of ['hex', 'base64'] as const) {
      for (const chunks of splits) {
        const joined = Buffer.concat(chunks)
        assert.equal(
          digestChunks(algorithm, chunks, encoding),
          createHash(algorithm).update(joined).digest(encoding),
          `${algorithm} ${encoding} of ${chunks.length} chunks`,
        )
      }
    }
  }
})

test('sha256BeatsMd5: measured once per process, the same answer after', () => {
  const first = sha256BeatsMd5()
  assert.equal(typeof first, 'boolean')
  for (let i = 0; i < 3; i++) assert.equal(sha256BeatsMd5(), first)
})
