/**
 * Patterned bytes: each byte derived from its file offset and a seed, so an offset bug
 * shows up as wrong bytes, and any range can be regenerated to compare without keeping it.
 */
import { createHash } from 'node:crypto'
import { closeSync, openSync, writeSync } from 'node:fs'

export function patternByte(offset: number, seed: number): number {
  // A cheap integer hash of (offset, seed); the low bits of offset alone would repeat every 256 bytes.
  let x = (Math.imul(offset ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(Math.floor(offset / 2 ** 32) + seed, 0xc2b2ae35)) | 0
  x ^= x >>> 13
  x = Math.imul(x, 0x27d4eb2f)
  return (x ^ (x >>> 15)) & 0xff
}

export function pattern(offset: number, length: number, seed = 1): Buffer {
  const out = Buffer.allocUnsafe(length)
  for (let i = 0; i < length; i++) out[i] = patternByte(offset + i, seed)
  return out
}

/** Fills `out` with the pattern of [offset, offset + out.length) 8 bytes at a time where it can. */
export function fillPattern(out: Uint8Array, offset: number, seed = 1): void {
  for (let i = 0; i < out.length; i++) out[i] = patternByte(offset + i, seed)
}

/**
 * A fast pattern for large streams: each 4 KiB block is a fixed random-looking template
 * with its own block number and seed stamped in at three places, so a misplaced,
 * repeated or missing block changes the bytes.
 */
const TEMPLATE = pattern(0, 4096, 0x5eed)

export function fillBlocks(out: Buffer, offset: number, seed = 1): void {
  if (offset % 4096 !== 0 || out.length % 4096 !== 0) throw new Error('fillBlocks works on whole 4 KiB blocks')
  for (let at = 0; at < out.length; at += 4096) {
    TEMPLATE.copy(out, at)
    const block = (offset + at) / 4096
    for (const p of [0, 2044, 4088]) {
      out.writeUInt32LE(block >>> 0, at + p)
      out.writeUInt32LE(seed >>> 0, at + p + 4)
    }
  }
}

/** `total` bytes of fillBlocks pattern in chunks of `chunk` bytes (multiples of 4 KiB). */
export async function* blockStream(total: number, chunk = 1 << 20, seed = 1): AsyncGenerator<Buffer> {
  for (let at = 0; at < total; at += chunk) {
    const b = Buffer.allocUnsafe(Math.min(chunk, total - at))
    fillBlocks(b, at, seed)
    yield b
  }
}

/** Writes a file of `bytes` fillBlocks bytes (16 MiB at a time); returns its SHA-256, hex. */
export function writeBlocksFile(path: string, bytes: number, seed: number): string {
  const fd = openSync(path, 'w')
  const h = createHash('sha256')
  try {
    const chunk = Buffer.allocUnsafe(16 * 1024 * 1024)
    for (let at = 0; at < bytes; at += chunk.length) {
      const b = chunk.subarray(0, Math.min(chunk.length, bytes - at))
      fillBlocks(b, at, seed)
      h.update(b)
      writeSync(fd, b)
    }
  } finally {
    closeSync(fd)
  }
  return h.digest('hex')
}
