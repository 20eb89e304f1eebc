import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  DIRTY_LO,
  decodeInode,
  decodeInodeObject,
  emptyInode,
  encodeInode,
  encodeInodeObject,
  FORMAT_STREAM,
  INODE_BYTES,
  INODE_OBJECT_BYTES,
  type Inode,
  isNullInode,
  MAX_CNO,
  pointerLo,
} from '../../lib/format/index.js'
import { arbInode, resealInodeObject, throwsCode, view } from '../helpers/format.js'

/** Every field at its largest. */
function maxInode(): Inode {
  return {
    size: Number.MAX_SAFE_INTEGER,
    cno: MAX_CNO,
    format: 2,
    dataShift: 24,
    metaShift: 16,
    rootLevel: 8,
    rootCount: 4,
    ctimeMs: Number.MAX_SAFE_INTEGER,
    mtimeMs: Number.MAX_SAFE_INTEGER - 1,
    // The largest key a file of this size maps: 2^53-1 bytes in 16 MiB blocks are 2^29 blocks.
    rootKeys: Uint32Array.from([0, 1, 0x10000000, 0x1fffffff]),
    rootPtrHi: Uint32Array.from([1, MAX_CNO, 5, MAX_CNO]),
    rootPtrLo: Uint32Array.from([0, 0xffffffff, pointerLo(0x2000, 1), pointerLo(3, 4)]),
  }
}

/** A small valid inode, encoded at offset 16 of a 128-byte buffer (to exercise offsets). */
function encoded(x: Inode = maxInode()): Uint8Array {
  const b = new Uint8Array(128)
  encodeInode(b, 16, x)
  return b
}

test('inode round trip at the boundaries: 4 root entries, MAX_CNO, 2^53-1, largest shifts and level', () => {
  const b = encoded()
  assert.deepEqual(decodeInode(b, 16, 'x'), maxInode())
  const v = view(b)
  assert.equal(v.getUint32(16, true), 0xffffffff) // size lo
  assert.equal(v.getUint32(20, true), 0x1fffff) // size hi
  assert.equal(v.getUint32(24, true), MAX_CNO)
  assert.deepEqual([...b.subarray(28, 32)], [2, 24, 16, 8])
  assert.equal(v.getUint16(32, true), 4)
  assert.equal(v.getUint32(16 + 40 + 36, true), 0x1fffffff) // root[3].key
  assert.equal(v.getUint32(16 + 40 + 44, true), MAX_CNO) // root[3].ptrHi
})

test('inode round trip (fast-check)', () => {
  fc.assert(
    fc.property(arbInode(), (x) => {
      const b = new Uint8Array(INODE_BYTES)
      encodeInode(b, 0, x)
      assert.deepEqual(decodeInode(b, 0, 'x'), x)
    }),
  )
})

test('the NULL inode is 96 zero bytes; emptyInode(init) is a new container at cno 0', () => {
  const b = new Uint8Array(INODE_BYTES).fill(0xee)
  encodeInode(b, 0, emptyInode())
  assert.deepEqual([...b], new Array(96).fill(0))
  assert.ok(isNullInode(decodeInode(b, 0, 'x')))
  const fresh = emptyInode({ dataShift: 12, metaShift: 12, ctimeMs: 1700000000000 })
  assert.equal(fresh.format, FORMAT_STREAM)
  assert.equal(fresh.cno, 0)
  assert.ok(!isNullInode(fresh))
  encodeInode(b, 0, fresh)
  assert.deepEqual(decodeInode(b, 0, 'x'), fresh)
})

test('decodeInode checks each field and says which, with the numbers', () => {
  const cases: [string, (v: DataView, b: Uint8Array) => void, ...string[]][] = [
    ['reserved u16', (v) => v.setUint16(16 + 18, 1, true), 'reserved byte 18'],
    ['reserved u32', (v) => v.setUint32(16 + 20, 1, true), 'reserved byte 20'],
    ['reserved tail', (_, b) => (b[16 + 95] = 1), 'reserved byte 95'],
    ['format 3', (v) => v.setUint8(16 + 12, 3), 'format 3'],
    ['dataShift 11', (v) => v.setUint8(16 + 13, 11), 'dataShift 11'],
    ['dataShift 25', (v) => v.setUint8(16 + 13, 25), 'dataShift 25'],
    ['metaShift 17', (v) => v.setUint8(16 + 14, 17), 'metaShift 17'],
    ['rootLevel 9', (v) => v.setUint8(16 + 15, 9), 'rootLevel 9'],
    ['rootCount 5', (v) => v.setUint16(16 + 16, 5, true), 'rootCount 5'],
    ['an index root without entries', (v) => v.setUint16(16 + 16, 0, true), 'rootLevel 8 over no root entries'],
    [
      'a root key past the last block',
      (v) => v.setUint32(16 + 40 + 36, 0x20000000, true),
      'root key 3 (536870912) is at or past the last block (536870912 blocks',
    ],
    [
      'size 2^53',
      (v) => {
        v.setUint32(16, 0, true)
        v.setUint32(16 + 4, 0x200000, true)
      },
      'size 9007199254740992',
    ],
    ['ctime 2^64-1', (v) => v.setUint32(16 + 28, 0xffffffff, true), 'ctimeMs'],
    ['cno above MAX_CNO', (v) => v.setUint32(16 + 8, MAX_CNO + 1, true), `cno ${MAX_CNO + 1}`],
    ['keys not increasing', (v) => v.setUint32(16 + 40 + 12, 0, true), 'root key 1 (0) is not above root key 0'],
    ['pointer newer than the inode', (v) => v.setUint32(16 + 8, 4, true), 'root entry 1', `newer than cno 4`],
    [
      'DIRTY root pointer',
      (v) => {
        v.setUint32(16 + 40 + 4, DIRTY_LO, true)
        v.setUint32(16 + 40 + 8, 0, true)
      },
      'DIRTY',
    ],
    [
      'ZERO above level 0',
      (v) => {
        v.setUint32(16 + 40 + 4, 0, true)
        v.setUint32(16 + 40 + 8, 0, true)
      },
      'ZERO',
    ],
  ]
  for (const [name, mutate, ...parts] of cases) {
    const b = encoded()
    mutate(view(b), b)
    throwsCode(() => decodeInode(b, 16, 'here'), 'ERR_CORRUPT', 'here: ', ...parts)
    assert.ok(name)
  }
  // An unused entry must be zero.
  const x = maxInode()
  x.rootCount = 3
  x.rootKeys[3] = 0
  x.rootPtrHi[3] = 0
  x.rootPtrLo[3] = 0
  const b = encoded(x)
  view(b).setUint32(16 + 40 + 36 + 4, 1, true)
  throwsCode(() => decodeInode(b, 16, 'here'), 'ERR_CORRUPT', 'unused root entry 3')
  // A ZERO pointer is fine at level 0.
  x.rootLevel = 0
  x.rootPtrHi[0] = 0
  x.rootPtrLo[0] = 0
  assert.deepEqual(decodeInode(encoded(x), 16, 'x'), x)
})

test('encodeInode refuses an invalid inode with ERR_INVALID_ARGUMENT', () => {
  const bad: [Partial<Inode>, string][] = [
    [{ size: -1 }, 'size -1'],
    [{ size: 2 ** 53 }, 'size'],
    [{ size: 1.5 }, 'size 1.5'],
    [{ format: 0 }, 'format 0'],
    [{ cno: 2 }, 'newer than cno 2'],
    [{ rootKeys: new Uint32Array(3) }, 'root arrays'],
    [{ mtimeMs: Number.NaN }, 'mtimeMs NaN'],
  ]
  for (const [patch, msg] of bad) {
    throwsCode(() => encodeInode(new Uint8Array(96), 0, { ...maxInode(), ...patch }), 'ERR_INVALID_ARGUMENT', msg)
  }
})

test('inode object: 128 bytes, magic, version 1, the inode at 16, CRC at 124; round trip', () => {
  const x = maxInode()
  const b = encodeInodeObject(x)
  assert.equal(b.length, INODE_OBJECT_BYTES)
  assert.equal(new TextDecoder().decode(b.subarray(0, 8)), 'SSEGINOD')
  assert.equal(view(b).getUint16(8, true), 1)
  assert.deepEqual(b.subarray(16, 112), encoded(x).subarray(16, 112))
  assert.deepEqual(decodeInodeObject(b), x)
})

test('inode object round trip (fast-check)', () => {
  fc.assert(
    fc.property(arbInode(), (x) => {
      if (isNullInode(x)) return
      if (x.cno === 0) {
        throwsCode(() => decodeInodeObject(encodeInodeObject(x)), 'ERR_CORRUPT', 'cno 0')
        return
      }
      assert.deepEqual(decodeInodeObject(encodeInodeObject(x)), x)
    }),
  )
})

test('decodeInodeObject: length, magic, version, CRC, flags, reserved, inode, in that order', () => {
  const good = () => encodeInodeObject(maxInode())
  throwsCode(() => decodeInodeObject(good().subarray(0, 127)), 'ERR_CORRUPT', '127 bytes, expected 128')
  throwsCode(() => decodeInodeObject(new Uint8Array(129)), 'ERR_CORRUPT', '129 bytes')
  let b = good()
  b[3] = 0x78
  throwsCode(() => decodeInodeObject(b), 'ERR_CORRUPT', 'bad magic', 'SSExINOD')
  b = good()
  view(b).setUint16(8, 2, true) // CRC now wrong too: the version is checked first
  throwsCode(() => decodeInodeObject(b), 'ERR_UNSUPPORTED', 'layout version 2')
  b = good()
  view(b).setUint16(8, 0, true)
  throwsCode(() => decodeInodeObject(b), 'ERR_CORRUPT', 'layout version 0')
  b = good()
  b[40] = b[40]! ^ 0x10
  throwsCode(() => decodeInodeObject(b), 'ERR_CORRUPT', /CRC 0x[0-9a-f]{8} stored, 0x[0-9a-f]{8} computed/)
  b = good()
  view(b).setUint16(10, 1, true)
  throwsCode(() => decodeInodeObject(resealInodeObject(b)), 'ERR_CORRUPT', 'flags 0x1')
  b = good()
  b[14] = 1
  throwsCode(() => decodeInodeObject(resealInodeObject(b)), 'ERR_CORRUPT', 'reserved byte 14')
  b = good()
  b[120] = 1
  throwsCode(() => decodeInodeObject(resealInodeObject(b)), 'ERR_CORRUPT', 'reserved byte 120')
  b = good()
  b[16 + 13] = 30
  throwsCode(() => decodeInodeObject(resealInodeObject(b)), 'ERR_CORRUPT', 'inode object: dataShift 30')
  b = good()
  b.fill(0, 16, 112)
  throwsCode(() => decodeInodeObject(resealInodeObject(b)), 'ERR_CORRUPT', 'NULL inode')
  throwsCode(() => encodeInodeObject(emptyInode()), 'ERR_INVALID_ARGUMENT', 'NULL inode')
})

test('decodeInodeObject refuses cno 0: no writer publishes it, and gc would keep nothing', () => {
  const x = { ...maxInode(), cno: 0, rootLevel: 0, rootCount: 0 }
  x.rootKeys = new Uint32Array(4)
  x.rootPtrHi = new Uint32Array(4)
  x.rootPtrLo = new Uint32Array(4)
  throwsCode(() => decodeInodeObject(encodeInodeObject(x)), 'ERR_CORRUPT', 'inode object: cno 0', 'numbered from 1')
  assert.equal(decodeInodeObject(encodeInodeObject({ ...x, cno: 1 })).cno, 1)
})

test('the size is at most 2^32 blocks: refused past it, in the inode object and when encoding', () => {
  for (const dataShift of [12, 16, 20]) {
    const largest = 2 ** (32 + dataShift)
    const x = { ...maxInode(), dataShift, size: largest }
    assert.equal(decodeInodeObject(encodeInodeObject(x)).size, largest)
    const b = encodeInodeObject(x)
    view(b).setUint32(16, 1, true) // size largest + 1 (its low word was 0)
    throwsCode(
      () => decodeInodeObject(resealInodeObject(b)),
      'ERR_CORRUPT',
      `size ${largest + 1} is past the largest file, 2^32 blocks of ${2 ** dataShift} bytes`,
    )
    throwsCode(() => encodeInodeObject({ ...x, size: largest + 1 }), 'ERR_INVALID_ARGUMENT', 'past the largest file')
  }
  const b = encodeInodeObject({ ...maxInode(), dataShift: 12, size: 2 ** 44 })
  view(b).setUint32(16, 0xffffffff, true)
  view(b).setUint32(20, 0x1fffff, true) // 2^53 - 1
  throwsCode(
    () => decodeInodeObject(resealInodeObject(b)),
    'ERR_CORRUPT',
    `size ${2 ** 53 - 1} is past the largest file`,
  )
})
