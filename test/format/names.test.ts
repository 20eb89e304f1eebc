import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { INODE_KEY, MAX_CNO, MAX_PART, parseKey, segmentKey } from '../../lib/format/index.js'
import { CONTAINER_KEY_MAX_BYTES } from '../../lib/store/common.js'
import { throwsCode } from '../helpers/format.js'

test('segmentKey: cno zero-padded to 10 digits, part decimal', () => {
  assert.equal(segmentKey(7, 0), '0000000007.0')
  assert.equal(segmentKey(7, 12), '0000000007.12')
  assert.equal(segmentKey(MAX_CNO, MAX_PART), '1073741823.16383')
  assert.equal(INODE_KEY, 'inode')
})

test("the store's room for a container's keys (CONTAINER_KEY_MAX_BYTES) is the longest key names.ts builds", () => {
  // store/ states it without importing format/: this keeps the two from drifting apart.
  const longest = Math.max(Buffer.byteLength(segmentKey(MAX_CNO, MAX_PART)), Buffer.byteLength(INODE_KEY))
  assert.equal(CONTAINER_KEY_MAX_BYTES, longest)
  fc.assert(
    fc.property(fc.integer({ min: 1, max: MAX_CNO }), fc.integer({ min: 0, max: MAX_PART }), (cno, part) => {
      assert.ok(Buffer.byteLength(segmentKey(cno, part)) <= CONTAINER_KEY_MAX_BYTES)
    }),
  )
})

test('segmentKey rejects what no pointer can name', () => {
  for (const [cno, part] of [
    [0, 0],
    [MAX_CNO + 1, 0],
    [1, MAX_PART + 1],
    [1, -1],
    [1.5, 0],
    [Number.NaN, 0],
  ] as const) {
    throwsCode(() => segmentKey(cno, part), 'ERR_INVALID_ARGUMENT', `cno ${cno}, part ${part}`)
  }
})

test('parseKey: ours', () => {
  assert.deepEqual(parseKey('inode'), { kind: 'inode' })
  assert.deepEqual(parseKey('0000000007.0'), { kind: 'segment', cno: 7, part: 0 })
  assert.deepEqual(parseKey('0000000001.16383'), { kind: 'segment', cno: 1, part: 16383 })
  assert.deepEqual(parseKey('1073741823.9'), { kind: 'segment', cno: MAX_CNO, part: 9 })
})

test('parseKey: not ours is undefined', () => {
  for (const key of [
    '',
    'inode.bak',
    'INODE',
    '0000000001.01',
    '1.0',
    '000000001.0',
    '00000000001.0',
    '0000000000.0',
    '1073741824.0',
    '9999999999.0',
    '0000000001.16384',
    '0000000001.99999',
    '0000000001.100000',
    '0000000001.0x',
    '0000000001.0\n',
    '0000000001.',
    '0000000001',
    '+000000001.0',
    '0000000001.-1',
    '0000000001.1e3',
    '０000000001.0',
    'dir/0000000001.0',
  ]) {
    assert.equal(parseKey(key), undefined, key)
  }
})

test('every key built parses back, and parse∘build is the identity (fast-check)', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: MAX_CNO }), fc.integer({ min: 0, max: MAX_PART }), (cno, part) => {
      const key = segmentKey(cno, part)
      assert.deepEqual(parseKey(key), { kind: 'segment', cno, part })
    }),
    { numRuns: 5000 },
  )
})

test('every string that parses is the key build gives back (fast-check)', () => {
  const keyish = fc.stringMatching(/^[0-9]{9,11}\.[0-9]{1,6}$/)
  fc.assert(
    fc.property(fc.oneof(keyish, fc.string()), (s) => {
      const p = parseKey(s)
      if (p?.kind === 'segment') assert.equal(segmentKey(p.cno, p.part), s)
      else if (p?.kind === 'inode') assert.equal(s, INODE_KEY)
    }),
    { numRuns: 5000 },
  )
})
