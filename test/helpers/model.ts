/**
 * fast-check generators the model tests share: offsets and lengths that hit block
 * boundaries often, and the operations both models run (write, zero, truncate, flush,
 * read) over a file of at most `maxFile` bytes.
 */
import fc from 'fast-check'

const KiB = 1024
const BLOCK = 4096

/** Any offset below `maxFile`, or a block boundary. */
export function offsets(maxFile: number): fc.Arbitrary<number> {
  return fc.oneof(
    fc.nat(maxFile),
    fc.nat(maxFile / BLOCK).map((b) => b * BLOCK),
  )
}

/** Any length up to 64 KiB, or whole blocks up to `maxBlocks`. */
export function lengths(maxBlocks: number): fc.Arbitrary<number> {
  return fc.oneof(
    fc.integer({ min: 1, max: 64 * KiB }),
    fc.integer({ min: 1, max: maxBlocks }).map((b) => b * BLOCK),
  )
}

/** The operations common to both models, from `offset` and `length` generators. */
export function commonOps(offset: fc.Arbitrary<number>, length: fc.Arbitrary<number>, maxFile: number) {
  return {
    write: fc.record({ op: fc.constant('write' as const), offset, length, seed: fc.nat(1000) }),
    zero: fc.record({ op: fc.constant('zero' as const), offset, length }),
    truncate: fc.record({ op: fc.constant('truncate' as const), size: fc.nat(maxFile) }),
    flush: fc.constant({ op: 'flush' as const }),
    read: fc.record({ op: fc.constant('read' as const), offset, length }),
  }
}
