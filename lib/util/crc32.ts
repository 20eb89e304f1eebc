/**
 * CRC-32 (IEEE 802.3, the zlib/PNG polynomial), bit-identical to the `crc-32` package.
 * The implementation is chosen once, at load, by speed as measured by
 * `test/bench/crc32.ts`:
 * - the package's own addon (`lib/native/crc32.c`, built at install by node-gyp) when it
 *   loads and the CPU has carry-less multiply (`pclmul`, or `vpclmul` with AVX-512): the
 *   only one that hashes a run of blocks in one call (`crc32Blocks`), where the others take
 *   one call per block;
 * - `@node-rs/crc32` (SIMD, an optional dependency);
 * - the addon's table path (a CPU without carry-less multiply);
 * - `zlib.crc32` (Node ≥ 20.15);
 * - `crc-32` (pure JS, always present).
 * STREAM_SEGMENT_CRC32 overrides the choice (below). `test/util/crc32.test.ts` pins that
 * every available implementation agrees.
 */
import * as zlib from 'node:zlib'
import crc32js from 'crc-32'
import { StreamSegmentError } from '../errors.js'
import { optionalRequire } from './optional-require.cjs'
import { describeValue } from './typed-arrays.js'

/** crc32(bytes, seed) continues a CRC from `seed` (the CRC of the preceding bytes). */
export type Crc32Fn = (bytes: Uint8Array, seed?: number) => number

/** CRCs of each `blockSize` block of `bytes` (the last may be shorter) into `into[0…]`. */
export type Crc32BlocksFn = (bytes: Uint8Array, blockSize: number, into: Uint32Array) => void

export interface Crc32Implementation {
  readonly name: string
  readonly fn: Crc32Fn
  /** Present when one call hashes many blocks. */
  readonly blocks?: Crc32BlocksFn
}

/** The addon's exports (lib/native/crc32.c). */
interface NativeCrc32 {
  crc32(bytes: Uint8Array, seed?: number): number
  blocks(bytes: Uint8Array, blockSize: number, into: Uint32Array): void
  tableCrc32(bytes: Uint8Array, seed?: number): number
  crc32Async(chunks: readonly Uint8Array[], seed?: number): Promise<number>
  impl: 'vpclmul' | 'pclmul' | 'table'
}

/** Where node-gyp leaves the addon, from dist/{esm,cjs}/lib/util/ (optionalRequire's folder). */
const NATIVE_ADDON_PATH = '../../../../build/Release/stream_segment_crc32.node'

/**
 * The addon, or undefined when it was not built (no compiler at install) or fails its
 * check: its paths against `crc-32` on bytes long enough for every folding step (256-byte
 * steps, 64-byte steps, 16-byte steps, table bytes), at an odd offset.
 */
export const nativeCrc32: NativeCrc32 | undefined = (() => {
  const mod = optionalRequire<NativeCrc32>(NATIVE_ADDON_PATH)
  if (
    mod === undefined ||
    typeof mod.blocks !== 'function' ||
    typeof mod.crc32 !== 'function' ||
    typeof mod.crc32Async !== 'function'
  )
    return undefined
  const bytes = new Uint8Array(1 + 2 * 343).subarray(1)
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 167 + 13) & 0xff
  const want = (b: Uint8Array) => crc32js.buf(b) >>> 0
  const into = new Uint32Array(2)
  mod.blocks(bytes, 343, into)
  const ok =
    mod.crc32(new TextEncoder().encode('123456789')) >>> 0 === 0xcbf43926 &&
    mod.crc32(bytes) >>> 0 === want(bytes) &&
    mod.tableCrc32(bytes) >>> 0 === want(bytes) &&
    into[0] === want(bytes.subarray(0, 343)) &&
    into[1] === want(bytes.subarray(343))
  return ok ? mod : undefined
})()

/** The start of the addon's name in crc32Implementations (its path follows, in brackets). */
const ADDON_NAME = 'stream-segment addon'

function loadNative(fast: boolean): Crc32Implementation | undefined {
  const mod = nativeCrc32
  if (mod === undefined || (mod.impl !== 'table') !== fast) return undefined
  return {
    name: `${ADDON_NAME} (${mod.impl})`,
    fn: (bytes, seed = 0) => mod.crc32(bytes, seed) >>> 0,
    blocks: (bytes, blockSize, into) => mod.blocks(bytes, blockSize, into),
  }
}

function loadNodeRs(): Crc32Implementation | undefined {
  const mod = optionalRequire<{ crc32(input: Uint8Array, initial?: number): number }>('@node-rs/crc32')
  if (mod === undefined) return undefined
  const fn: Crc32Fn = (bytes, seed = 0) => mod.crc32(bytes, seed) >>> 0
  // "123456789" has the check value 0xcbf43926 for this polynomial.
  return fn(new TextEncoder().encode('123456789')) === 0xcbf43926 ? { name: '@node-rs/crc32', fn } : undefined
}

function loadZlib(): Crc32Implementation | undefined {
  const z = zlib as unknown as { crc32?: (data: Uint8Array, value?: number) => number }
  if (typeof z.crc32 !== 'function') return undefined
  const f = z.crc32
  // zlib.crc32 throws on a seed outside [0, 2^32), where the others take the seed's 32 bits
  // (`crc-32` gives CRCs as signed numbers), and answers 0 for no bytes at a null pointer (an
  // empty view of a zero-length ArrayBuffer, or of a detached one: zlib's crc32(crc, NULL, 0)
  // is its initial value), where the others answer the seed.
  return {
    name: 'zlib.crc32',
    fn: (bytes, seed = 0) => (bytes.byteLength === 0 ? seed >>> 0 : f(bytes, seed >>> 0) >>> 0),
  }
}

function loadCrc32Js(): Crc32Implementation {
  return { name: 'crc-32', fn: (bytes, seed = 0) => crc32js.buf(bytes, seed) >>> 0 }
}

/** Every implementation present here, fastest first (exported for the test and benchmark). */
export const crc32Implementations: readonly Crc32Implementation[] = [
  loadNative(true),
  loadNodeRs(),
  loadNative(false),
  loadZlib(),
  loadCrc32Js(),
].filter((x): x is Crc32Implementation => x !== undefined)

/**
 * The environment variable STREAM_SEGMENT_CRC32 picks one by name instead (`addon`,
 * `@node-rs/crc32`, `zlib.crc32`, `crc-32`): a way around a suspect implementation, and how
 * the tests run the write path on one that takes a call per block. A name not present here
 * is an error, not a silent fallback.
 */
function choose(): Crc32Implementation {
  const want = process.env.STREAM_SEGMENT_CRC32
  if (want === undefined || want === '') return crc32Implementations[0] as Crc32Implementation
  const found = crc32Implementations.find((i) => i.name === want || (want === 'addon' && i.name.startsWith(ADDON_NAME)))
  if (found === undefined) {
    throw StreamSegmentError.invalidArgument(
      `STREAM_SEGMENT_CRC32=${JSON.stringify(want)}: no such CRC-32 implementation here; present: ${crc32Implementations
        .map((i) => (i.name.startsWith(ADDON_NAME) ? `addon (${i.name})` : i.name))
        .join(', ')}`,
    )
  }
  return found
}

const chosen = choose()

export const crc32Implementation: string = chosen.name
export const crc32: Crc32Fn = chosen.fn
/**
 * crc32 as the package exports it, its arguments checked: the implementations differ on
 * what is no Uint8Array (zlib.crc32 and crc-32 hash a string, each its own way; the addon
 * throws a plain Error), so a caller's mistake would give a CRC that depends on which one
 * was chosen. The library's own calls use crc32, unchecked.
 */
export function checkedCrc32(bytes: Uint8Array, seed = 0): number {
  if (!(bytes instanceof Uint8Array)) {
    throw StreamSegmentError.invalidArgument(
      `crc32: bytes must be a Uint8Array (a Buffer), got ${describeValue(bytes)}`,
    )
  }
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffff_ffff) {
    throw StreamSegmentError.invalidArgument(
      `crc32: seed must be a CRC-32 (an integer in 0..4294967295), got ${describeValue(seed)}`,
    )
  }
  return crc32(bytes, seed)
}
/** Whether crc32Blocks hashes a run in one call (else it costs one call per block). */
export const crc32HashesRuns: boolean = chosen.blocks !== undefined

/**
 * Runs of at least this many bytes are hashed by crc32OfChunks off the event loop (with the
 * addon). A job's round trip is ~50 µs on the AMD EPYC machine of docs/benchmarks.md, while
 * the addon hashes 1 MiB at once in ~25 µs and 16 MiB in ~0.5 ms: a shorter run costs the
 * event loop less hashed at once than handed over.
 */
export const CRC32_OFF_LOOP_MIN_BYTES = 1024 * 1024

/** The addon's crc32Async, when the addon's fast path is the implementation chosen. */
const offLoop = chosen.name === loadNative(true)?.name ? nativeCrc32?.crc32Async : undefined

/**
 * The CRC-32 of the bytes `chunks` hold in order, continued from `seed`. With the addon's
 * fast path chosen and at least CRC32_OFF_LOOP_MIN_BYTES of bytes, one job on libuv's
 * thread pool hashes them while the event loop goes on (a reader checking a 16 MiB GET
 * keeps its main thread for the next answers); the chunks' bytes must not change until it
 * answers. Else (or with a chunk over a resizable ArrayBuffer) they are hashed here, now,
 * and the CRC is returned as it is.
 */
export function crc32OfChunks(chunks: readonly Uint8Array[], seed = 0): number | Promise<number> {
  if (offLoop !== undefined) {
    let bytes = 0
    let resizable = false // the addon refuses those: a shrink would unmap memory under the job
    for (const c of chunks) {
      bytes += c.byteLength
      resizable ||= (c.buffer as { resizable?: boolean }).resizable === true
    }
    if (bytes >= CRC32_OFF_LOOP_MIN_BYTES && !resizable) return offLoop(chunks, seed)
  }
  let crc = seed
  for (const c of chunks) crc = crc32(c, crc)
  return crc
}

/**
 * The CRC-32 of each `blockSize` block of `bytes` (the last one may be shorter), into
 * `into[0…]`, as the summary holds one CRC per block: one call over the run with the addon,
 * else one call per block. The views are then plain Uint8Arrays: a Buffer's `subarray`
 * makes a FastBuffer, ~0.2 µs here, a fifth of a 4 KiB CRC call; a plain view costs about
 * half that.
 */
export function crc32Blocks(bytes: Uint8Array, blockSize: number, into: Uint32Array): void {
  crc32BlocksWith(chosen, bytes, blockSize, into)
}

/** crc32Blocks by a given implementation (for the test and benchmark). */
export function crc32BlocksWith(
  impl: Crc32Implementation,
  bytes: Uint8Array,
  blockSize: number,
  into: Uint32Array,
): void {
  if (!Number.isSafeInteger(blockSize) || blockSize <= 0 || blockSize > 0xffffffff) {
    throw new RangeError(`crc32Blocks: block size ${blockSize} is not a positive integer`)
  }
  const n = Math.ceil(bytes.byteLength / blockSize)
  if (into.length < n) throw new RangeError(`crc32Blocks: ${n} blocks, room for ${into.length}`)
  if (impl.blocks !== undefined) {
    impl.blocks(bytes, blockSize, into)
    return
  }
  const view = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const fn = impl.fn
  for (let i = 0, at = 0; i < n; i++, at += blockSize) into[i] = fn(view.subarray(at, at + blockSize))
}

/**
 * The CRC-32 of each `blockSize` block of the bytes `chunks` hold in order, into
 * `into[0…]`: the whole blocks inside a chunk in one crc32Blocks call over that view, a
 * block across chunks continued from one to the next (the seed).
 */
export function crc32Chunks(chunks: readonly Uint8Array[], blockSize: number, into: Uint32Array): void {
  let block = 0
  let partial = 0 // bytes of block `block` seen in earlier chunks
  let seed = 0
  for (const c of chunks) {
    let at = 0
    if (partial > 0) {
      const n = Math.min(blockSize - partial, c.byteLength)
      seed = crc32(c.subarray(0, n), seed)
      partial += n
      at = n
      if (partial < blockSize) continue
      into[block++] = seed
      partial = 0
      seed = 0
    }
    const whole = Math.floor((c.byteLength - at) / blockSize)
    if (whole > 0) {
      crc32Blocks(c.subarray(at, at + whole * blockSize), blockSize, into.subarray(block, block + whole))
      block += whole
      at += whole * blockSize
    }
    if (at < c.byteLength) {
      seed = crc32(c.subarray(at))
      partial = c.byteLength - at
    }
  }
  if (partial > 0) into[block] = seed
}

// --- Combining CRCs (zlib's crc32_combine: polynomial arithmetic modulo the CRC's
// polynomial, bit-reflected: x^0 is the top bit) ---

const POLY = 0xedb88320

/** a(x)·b(x) modulo the polynomial. */
function multModP(a: number, b: number): number {
  let m = 0x80000000
  let p = 0
  for (;;) {
    if (a & m) {
      p ^= b
      if ((a & (m - 1)) === 0) break
    }
    m >>>= 1
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1
  }
  return p >>> 0
}

/** X2N[k] = x^(2^k) modulo the polynomial. */
const X2N = new Uint32Array(32)
X2N[0] = 0x40000000 // x^1
for (let k = 1; k < 32; k++) X2N[k] = multModP(X2N[k - 1] as number, X2N[k - 1] as number)

/** x^(8·bytes) modulo the polynomial: what shifts a CRC past `bytes` zero bytes. */
export function crc32Shift(bytes: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`crc32Shift: ${bytes} is not a byte count`)
  let p = 0x80000000 // x^0
  let k = 3
  for (let n = bytes; n > 0; n = Math.floor(n / 2), k++) {
    if (n % 2 === 1) p = multModP(X2N[k & 31] as number, p)
  }
  return p
}

/** The CRC-32 of A then B from crc(A), crc(B) and `shift` = crc32Shift(B's length). */
export function crc32Combine(crcA: number, crcB: number, shift: number): number {
  return (multModP(shift, crcA) ^ crcB) >>> 0
}

/**
 * The CRC-32 of the blocks whose CRCs are `crcs[from…from+count)` (each `blockSize`
 * bytes), one after the other. Shifting a CRC past a block is linear in the CRC's bits,
 * so it is four table lookups (tables per block size, made once): ~5 ns a block, against
 * ~1 µs for a native CRC call on a 4 KiB block. With it a run of blocks is checked by one
 * CRC call over its bytes.
 */
export function crc32OfBlocks(crcs: ArrayLike<number>, from: number, count: number, blockSize: number): number {
  const t = shiftTables(blockSize)
  let crc = 0
  for (let i = from; i < from + count; i++) {
    crc =
      ((t[crc & 0xff] as number) ^
        (t[256 + ((crc >>> 8) & 0xff)] as number) ^
        (t[512 + ((crc >>> 16) & 0xff)] as number) ^
        (t[768 + (crc >>> 24)] as number) ^
        (crcs[i] as number)) >>>
      0
  }
  return crc
}

const tables = new Map<number, Uint32Array>()

/** For each byte j of a CRC and each value v: v << 8j shifted past `blockSize` zero bytes. */
function shiftTables(blockSize: number): Uint32Array {
  let t = tables.get(blockSize)
  if (t === undefined) {
    const shift = crc32Shift(blockSize)
    t = new Uint32Array(1024)
    for (let j = 0; j < 4; j++) for (let v = 0; v < 256; v++) t[j * 256 + v] = multModP(shift, (v << (8 * j)) >>> 0)
    if (tables.size >= 8) tables.clear()
    tables.set(blockSize, t)
  }
  return t
}

/**
 * Checks `count` blocks of `blockSize` bytes, the bytes `chunks` hold in order, against
 * their CRC-32s `crcs[from…]`: one CRC of the run (crc32OfChunks: a long run's off the
 * event loop) against the one the blocks' CRCs combine to (crc32OfBlocks), then block by
 * block only when those differ, to name the block. Undefined when they match; else the
 * first block that does not, by its index in the run and the CRC its bytes have (index -1
 * when every block matches and the run did not, which only a fault here can cause).
 */
export async function badBlockIn(
  chunks: readonly Uint8Array[],
  crcs: ArrayLike<number>,
  from: number,
  count: number,
  blockSize: number,
): Promise<{ index: number; crc: number } | undefined> {
  if ((await crc32OfChunks(chunks)) === crc32OfBlocks(crcs, from, count, blockSize)) return undefined
  const got = new Uint32Array(count)
  crc32Chunks(chunks, blockSize, got)
  const index = got.findIndex((crc, i) => crc !== crcs[from + i])
  return { index, crc: index < 0 ? 0 : (got[index] as number) }
}
