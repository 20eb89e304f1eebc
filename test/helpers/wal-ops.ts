/** A seeded sequence of writes, zeroes and truncates, and a plain-buffer model to apply them to. */
import { prng } from './containers.js'
import { pattern } from './pattern.js'

export type WalOp =
  | { kind: 'write'; offset: number; data: Buffer }
  | { kind: 'zeroes'; offset: number; length: number }
  | { kind: 'truncate'; size: number }

/** `count` operations over a file of at most ~3 MiB, mostly writes of 1 byte to 300 KiB. */
export function walOps(seed: number, count: number): WalOp[] {
  const rnd = prng(seed)
  const ops: WalOp[] = []
  for (let i = 0; i < count; i++) {
    const r = rnd()
    const offset = Math.floor(rnd() * 3_000_000)
    if (r < 0.8)
      ops.push({ kind: 'write', offset, data: pattern(offset, 1 + Math.floor(rnd() * 300_000), seed * 1000 + i) })
    else if (r < 0.9) ops.push({ kind: 'zeroes', offset, length: 1 + Math.floor(rnd() * 200_000) })
    else ops.push({ kind: 'truncate', size: offset })
  }
  return ops
}

/** The file after `ops` on top of `base`. */
export function applyOps(base: Buffer, ops: readonly WalOp[]): Buffer {
  let b = Buffer.from(base)
  const grow = (end: number) => {
    if (end > b.length) b = Buffer.concat([b, Buffer.alloc(end - b.length)])
  }
  for (const op of ops) {
    if (op.kind === 'write') {
      grow(op.offset + op.data.length)
      op.data.copy(b, op.offset)
    } else if (op.kind === 'zeroes') {
      grow(op.offset + op.length)
      b.fill(0, op.offset, op.offset + op.length)
    } else if (op.size < b.length) b = b.subarray(0, op.size)
    else grow(op.size)
  }
  return b
}
