import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { setImmediate as turn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { allocLarge, allocPieces, allocSlabMemory, nativeMemory } from '../../lib/util/huge-memory.js'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

const MiB = 1024 * 1024
const linux = process.platform === 'linux'
/** Reported as skipped, not passed, where the addon exports nothing. */
const linuxOnly = { skip: linux ? false : 'the memory addon maps memory on Linux only' }

/** The kernel's THP mode ("always", "madvise" or "never"), or undefined without THP. */
function thpMode(): string | undefined {
  try {
    return /\[(\w+)\]/.exec(readFileSync('/sys/kernel/mm/transparent_hugepage/enabled', 'utf8'))?.[1]
  } catch {
    return undefined
  }
}

/** kB of this process's mappings the kernel may back with huge pages (smaps' THPeligible). */
function eligibleKiB(): number {
  let total = 0
  for (const vma of readFileSync('/proc/self/smaps', 'utf8').split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    if (!/^THPeligible:\s+1$/m.test(vma)) continue
    total += Number(/^Size:\s+(\d+) kB$/m.exec(vma)?.[1] ?? 0)
  }
  return total
}

it('the memory addon is built and loaded on Linux (npm ci builds it; `npm run build:native` again)', () => {
  if (!linux) return assert.equal(nativeMemory, undefined)
  assert.ok(nativeMemory !== undefined, 'build/Release/stream_segment_memory.node is missing')
  assert.equal(nativeMemory.ALIGN, 2 * MiB)
})

it(
  'maps slab memory the kernel may back with huge pages: zeroed, the size asked, advised as one region',
  linuxOnly,
  () => {
    assert.ok(nativeMemory !== undefined)
    const before = eligibleKiB()
    const [memory, ...more] = nativeMemory.alloc(6 * MiB, 6 * MiB) ?? []
    assert.equal(more.length, 0)
    assert.ok(memory instanceof ArrayBuffer)
    assert.equal(memory.byteLength, 6 * MiB)
    const bytes = new Uint8Array(memory)
    assert.ok(bytes.every((b) => b === 0))
    bytes.fill(0xa5)
    assert.ok(bytes.every((b) => b === 0xa5))
    const added = eligibleKiB() - before
    const mode = thpMode()
    if (mode === 'madvise') assert.equal(added, 6 * 1024, 'exactly the new region became eligible')
    else if (mode === 'always') assert.ok(added >= 6 * 1024, `${added} kB became eligible`)
    else assert.equal(added, 0)
  },
)

it(
  'refuses sizes that are not positive multiples of 2 MiB up to 1 GiB, and pieces that do not divide them',
  linuxOnly,
  () => {
    const addon = nativeMemory
    assert.ok(addon !== undefined)
    for (const bad of [0, -2 * MiB, MiB, 2 * MiB + 4096, 1026 * MiB, Number.NaN]) {
      assert.throws(() => addon.alloc(bad, MiB), /bytes must be a positive multiple of 2 MiB/, String(bad))
    }
    for (const bad of [0, -MiB, 3 * MiB, 3 * 4096, Number.NaN]) {
      assert.throws(() => addon.alloc(2 * MiB, bad), /pieceBytes must be a positive divisor/, String(bad))
    }
    assert.throws(() => (addon.alloc as (...a: unknown[]) => unknown)(2 * MiB), RangeError, 'pieceBytes missing')
  },
)

it('allocPieces: 2 MiB as pieces, each a buffer over an ArrayBuffer of its own, zeroed, apart from the others', () => {
  const pieces = allocPieces(64 * 1024)
  if (!linux) return assert.equal(pieces, undefined)
  assert.ok(pieces !== undefined)
  assert.equal(pieces.length, 32)
  assert.equal(new Set(pieces.map((p) => p.buffer)).size, 32)
  for (const [i, p] of pieces.entries()) {
    assert.equal(p.byteLength, 64 * 1024)
    assert.equal(p.buffer.byteLength, 64 * 1024)
    assert.ok(p.every((b) => b === 0))
    p.fill(i + 1)
  }
  for (const [i, p] of pieces.entries())
    assert.ok(
      p.every((b) => b === i + 1),
      `piece ${i} kept its bytes`,
    )
  assert.equal(allocPieces(3 * 4096), undefined, 'a size that does not divide 2 MiB')
})

it('a region of pieces is unmapped once its last piece is collected, not before', {
  // Told apart by smaps' THPeligible, which only an advised region has.
  skip: !linux || thpMode() === undefined || thpMode() === 'never' ? 'needs Linux with THP not "never"' : false,
}, async () => {
  /** Collects and turns the event loop (where the unmapping runs) until `done`, 50 times at most. */
  const settle = async (done: () => boolean) => {
    for (let i = 0; i < 50 && !done(); i++) {
      gc()
      await turn()
    }
  }
  // What earlier tests left to collect goes first.
  let stable = 0
  for (let i = 0, was = -1; i < 50 && stable < 3; i++, was = eligibleKiB()) {
    gc()
    await turn()
    stable = eligibleKiB() === was ? stable + 1 : 0
  }
  const before = eligibleKiB()
  let pieces: Buffer[] | undefined = allocPieces(64 * 1024)
  assert.equal(eligibleKiB() - before, 2048)
  let last = pieces?.[31]
  pieces = undefined
  await settle(() => eligibleKiB() === before)
  assert.equal(eligibleKiB() - before, 2048, 'one piece alive keeps its region')
  assert.equal(last?.byteLength, 64 * 1024)
  last = undefined
  await settle(() => eligibleKiB() === before)
  assert.equal(eligibleKiB(), before, 'the region went with its last piece')
})

it('allocSlabMemory: the size asked, from the addon at multiples of 2 MiB, from Buffer.allocUnsafeSlow otherwise', () => {
  const aligned = allocSlabMemory(4 * MiB)
  assert.equal(aligned.byteLength, 4 * MiB)
  assert.equal(aligned.byteOffset, 0)
  assert.equal(aligned.buffer.byteLength, 4 * MiB, 'the whole of its own memory')
  const other = allocSlabMemory(3 * MiB)
  assert.equal(other.byteLength, 3 * MiB)
  other.fill(1)
  assert.equal(other[3 * MiB - 1], 1)
})

it('allocSlabMemory and allocLarge past the 1 GiB the addon maps at most: from Buffer.allocUnsafeSlow, not an error', () => {
  // An uploadFile part of more than 1 GiB of the file's blocks is read in one call.
  const GiB = 1024 * MiB
  for (const bytes of [GiB + 2 * MiB, 2 * GiB]) {
    assert.equal(allocSlabMemory(bytes).byteLength, bytes)
    assert.equal(allocLarge(bytes - 4096).byteLength, nativeMemory === undefined ? bytes - 4096 : bytes)
  }
  assert.equal(allocSlabMemory(GiB).byteLength, GiB, 'at 1 GiB, from the addon')
})

it('allocLarge: at least the size asked; from 1 MiB up, rounded up to 2 MiB of the addon', () => {
  const small = allocLarge(4096)
  assert.equal(small.byteLength, 4096)
  const large = allocLarge(3 * MiB)
  assert.equal(large.byteLength, nativeMemory === undefined ? 3 * MiB : 4 * MiB)
  assert.equal(allocLarge(MiB).byteLength, nativeMemory === undefined ? MiB : 2 * MiB)
  assert.equal(allocLarge(MiB - 1).byteLength, MiB - 1, 'under 1 MiB: exact')
})

it(
  'memory that is no longer referenced is unmapped: 1 GiB allocated in turn keeps RSS far below it',
  linuxOnly,
  async () => {
    assert.ok(nativeMemory !== undefined)
    const rss0 = process.memoryUsage.rss()
    let peak = rss0
    for (let i = 0; i < 32; i++) {
      const bytes = new Uint8Array((nativeMemory.alloc(32 * MiB, 32 * MiB) as ArrayBuffer[])[0] as ArrayBuffer)
      for (let at = 0; at < bytes.byteLength; at += 4096) bytes[at] = 1 // every page faulted in
      peak = Math.max(peak, process.memoryUsage.rss())
      await turn() // the unmapping runs on the event loop, after a collection
    }
    assert.ok(peak - rss0 < 512 * MiB, `RSS grew by ${((peak - rss0) / MiB).toFixed(0)} MiB`)
  },
)

it('STREAM_SEGMENT_HUGE_PAGES=0 (or no addon): slabs, reads and GET pieces come from Buffer.allocUnsafeSlow, and work', () => {
  const lib = (file: string) => JSON.stringify(new URL(`../../lib/util/${file}`, import.meta.url).href)
  const r = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const h = await import(${lib('huge-memory.js')})
       const p = await import(${lib('piece-pool.js')})
       const out = { native: h.nativeMemory !== undefined, pieces: h.allocPieces(65536) === undefined }
       const slab = h.allocSlabMemory(4 << 20).fill(7)
       out.slab = slab.byteLength === 4 << 20 && slab.buffer.byteLength >= slab.byteLength && slab[(4 << 20) - 1] === 7
       out.large = h.allocLarge(3 << 20).byteLength
       const a = p.takePiece()
       p.lendPieces([a])
       p.givePieces([a])
       out.piece = a.byteLength === p.PIECE_BYTES && a.buffer.byteLength === p.PIECE_BYTES && p.takePiece().buffer === a.buffer
       console.log(JSON.stringify(out))`,
    ],
    { encoding: 'utf8', env: { ...process.env, STREAM_SEGMENT_HUGE_PAGES: '0' }, timeout: 60_000 },
  )
  assert.equal(r.status, 0, r.stderr)
  assert.deepEqual(JSON.parse(r.stdout), { native: false, pieces: true, slab: true, large: 3 * MiB, piece: true })
})
