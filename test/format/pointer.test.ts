import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  checkPointer,
  DIRTY_LO,
  isDirtyPointer,
  isZeroPointer,
  MAX_CNO,
  MAX_PART,
  MAX_UNIT,
  pointerLo,
  pointerPart,
  pointerUnit,
  readU64,
  UNIT_BYTES,
  writeU64,
} from '../../lib/format/index.js'
import { throwsCode } from '../helpers/format.js'

test('pointer constants are the layout: 30-bit cno, 14-bit part, 18-bit unit of 4 KiB', () => {
  assert.equal(MAX_CNO, 2 ** 30 - 1)
  assert.equal(MAX_PART, 16383)
  assert.equal(MAX_UNIT, 2 ** 18 - 1)
  assert.equal(UNIT_BYTES, 4096)
  assert.equal((MAX_UNIT + 1) * UNIT_BYTES, 2 ** 30)
})

test('pointerLo packs part and unit without int32 overflow', () => {
  assert.equal(pointerLo(0, 0), 0)
  assert.equal(pointerLo(1, 5), 0x40005)
  assert.equal(pointerLo(MAX_PART, MAX_UNIT), 0xffffffff)
  assert.equal(pointerLo(0x2000, 0), 0x80000000) // bit 31: negative without >>> 0
  assert.equal(pointerPart(0xffffffff), MAX_PART)
  assert.equal(pointerUnit(0xffffffff), MAX_UNIT)
})

test('pointerLo / pointerPart / pointerUnit round trip (fast-check)', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: MAX_PART }), fc.integer({ min: 0, max: MAX_UNIT }), (part, unit) => {
      const lo = pointerLo(part, unit)
      assert.ok(lo >= 0 && lo <= 0xffffffff)
      assert.equal(pointerPart(lo), part)
      assert.equal(pointerUnit(lo), unit)
    }),
  )
})

test('sentinels', () => {
  assert.ok(isZeroPointer(0, 0))
  assert.ok(!isZeroPointer(1, 0))
  assert.ok(isDirtyPointer(0, DIRTY_LO))
  assert.ok(!isDirtyPointer(0, 0))
})

test('checkPointer accepts valid pointers and the ZERO sentinel where allowed', () => {
  checkPointer(1, 0, 'x', { maxCno: 1, allowZero: false })
  checkPointer(MAX_CNO, 0xffffffff, 'x', { maxCno: MAX_CNO, allowZero: false })
  checkPointer(0, 0, 'x', { maxCno: 5, allowZero: true })
})

test('checkPointer rejects with ERR_CORRUPT and the numbers', () => {
  const b = { maxCno: 9, allowZero: true }
  throwsCode(() => checkPointer(0, 1, 'leaf', b), 'ERR_CORRUPT', 'leaf: ', 'DIRTY')
  throwsCode(() => checkPointer(0, 2, 'leaf', b), 'ERR_CORRUPT', 'cno 0', '0x2')
  throwsCode(() => checkPointer(0, 0, 'index', { maxCno: 9, allowZero: false }), 'ERR_CORRUPT', 'index: ZERO')
  throwsCode(
    () => checkPointer(MAX_CNO + 1, 0, 'p', { maxCno: 2 ** 32, allowZero: true }),
    'ERR_CORRUPT',
    `${MAX_CNO + 1}`,
  )
  throwsCode(() => checkPointer(10, pointerLo(3, 7), 'p', b), 'ERR_CORRUPT', '10.3 unit 7', 'newer than cno 9')
  throwsCode(() => checkPointer(-1, 0, 'p', b), 'ERR_CORRUPT', 'not two u32')
})

test('readU64 / writeU64: exact to 2^53-1, larger values read above MAX_SAFE_INTEGER', () => {
  const v = new DataView(new ArrayBuffer(8))
  for (const x of [0, 1, 0xffffffff, 0x100000000, 1700000000000, Number.MAX_SAFE_INTEGER]) {
    writeU64(v, 0, x)
    assert.equal(readU64(v, 0), x)
  }
  v.setUint32(0, 0, true)
  v.setUint32(4, 0x200000, true) // 2^53
  assert.ok(readU64(v, 0) > Number.MAX_SAFE_INTEGER)
  v.setUint32(0, 0xffffffff, true)
  v.setUint32(4, 0xffffffff, true)
  assert.ok(readU64(v, 0) > Number.MAX_SAFE_INTEGER)
})
