import { readFileSync } from 'node:fs'
import fc from 'fast-check'
import { FORMAT_PARTED, FORMAT_STREAM, type Inode, MAX_CNO } from '../../lib/format/index.js'
import { crc32 } from '../../lib/util/crc32.js'
import { FIXTURES_DIR } from '../fixtures/make-fixtures.js'

export { throwsCode } from './assert.js'

export function view(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength)
}

/** Recomputes a header's CRC (bytes 0..252 → 252), so a crafted field reaches its bounds check. */
export function resealHeader(tail: Uint8Array): Uint8Array {
  view(tail).setUint32(252, crc32(tail.subarray(0, 252)), true)
  return tail
}

export function resealInodeObject(b: Uint8Array): Uint8Array {
  view(b).setUint32(124, crc32(b.subarray(0, 124)), true)
  return b
}

export function resealNode(b: Uint8Array): Uint8Array {
  view(b).setUint32(12, crc32(b.subarray(16), crc32(b.subarray(0, 12))), true)
  return b
}

export function readFixture(name: string): Uint8Array {
  return new Uint8Array(readFileSync(new URL(name, FIXTURES_DIR)))
}

/** Bytes from space-separated hex lines. */
export function hex(...lines: string[]): Uint8Array {
  return Uint8Array.from(
    lines
      .join(' ')
      .split(/\s+/)
      .filter((x) => x !== '')
      .map((x) => Number.parseInt(x, 16)),
  )
}

/** Runs per fast-check property; `FUZZ_RUNS=100000` for a long run. */
export const FUZZ_RUNS = Number(process.env.FUZZ_RUNS ?? 3000)

/** Any valid inode; `fixed` pins some fields (a header pins format and shifts). */
export function arbInode(
  fixed: Partial<Pick<Inode, 'format' | 'dataShift' | 'metaShift' | 'cno'>> = {},
): fc.Arbitrary<Inode> {
  const u32 = fc.integer({ min: 0, max: 0xffffffff })
  const safe = fc.oneof(fc.constantFrom(0, 1, 2 ** 32, Number.MAX_SAFE_INTEGER), fc.maxSafeNat())
  const pin = (v: number | undefined, arb: fc.Arbitrary<number>) => (v === undefined ? arb : fc.constant(v))
  return fc
    .record({
      size: safe,
      cno: pin(fixed.cno, fc.oneof(fc.constantFrom(0, 1, MAX_CNO), fc.integer({ min: 0, max: MAX_CNO }))),
      format: pin(fixed.format, fc.constantFrom(FORMAT_STREAM, FORMAT_PARTED)),
      dataShift: pin(fixed.dataShift, fc.integer({ min: 12, max: 24 })),
      metaShift: pin(fixed.metaShift, fc.integer({ min: 12, max: 16 })),
      rootLevel: fc.integer({ min: 0, max: 8 }),
      ctimeMs: safe,
      mtimeMs: safe,
      keys: fc.uniqueArray(u32, { maxLength: 4 }),
      ptrs: fc.array(fc.tuple(fc.integer({ min: 1, max: MAX_CNO }), u32, fc.boolean()), { minLength: 4, maxLength: 4 }),
    })
    .map(({ keys: drawn, ptrs, ...r }) => {
      // Keys lie below the size in blocks (at most 2^32, and 2^53 bytes): the size is raised
      // to cover the largest key, the keys brought within the largest size first.
      const bs = 2 ** r.dataShift
      const maxBlocks = Math.floor(Math.min(2 ** (32 + r.dataShift), Number.MAX_SAFE_INTEGER) / bs)
      const keys = [...new Set(drawn.map((k) => k % maxBlocks))]
      const count = r.cno === 0 && r.rootLevel > 0 ? 0 : keys.length
      const x: Inode = {
        ...r,
        size: Math.max(Math.min(r.size, maxBlocks * bs), count === 0 ? 0 : (Math.max(...keys) + 1) * bs),
        rootLevel: count === 0 ? 0 : r.rootLevel, // an empty map is a level-0 root
        rootCount: count,
        rootKeys: new Uint32Array(4),
        rootPtrHi: new Uint32Array(4),
        rootPtrLo: new Uint32Array(4),
      }
      keys.sort((a, b) => a - b)
      for (let i = 0; i < x.rootCount; i++) {
        const [hi, lo, zero] = ptrs[i]!
        x.rootKeys[i] = keys[i]!
        if (r.cno === 0 || (zero && r.rootLevel === 0)) continue // ZERO
        x.rootPtrHi[i] = 1 + ((hi - 1) % r.cno)
        x.rootPtrLo[i] = lo
      }
      return x
    })
}
