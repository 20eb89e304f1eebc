import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { it } from 'node:test'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import fc from 'fast-check'
import { StreamSegmentError } from '../../lib/errors.js'
import {
  badBlockIn,
  CRC32_OFF_LOOP_MIN_BYTES,
  crc32,
  crc32Blocks,
  crc32BlocksWith,
  crc32Chunks,
  crc32HashesRuns,
  crc32Implementation,
  crc32Implementations,
  crc32OfChunks,
  nativeCrc32,
} from '../../lib/util/crc32.js'

const crc32js = createRequire(import.meta.url)('crc-32') as { buf(b: Uint8Array, seed?: number): number }

/** Set when this run was told to use one implementation (see STREAM_SEGMENT_CRC32 below). */
const forced = process.env.STREAM_SEGMENT_CRC32

it('the chosen implementation is the first (fastest) one available, unless STREAM_SEGMENT_CRC32 names one', () => {
  if (forced === undefined || forced === '') assert.equal(crc32Implementation, crc32Implementations[0]?.name)
  else assert.ok(crc32Implementation === forced || (forced === 'addon' && crc32Implementation.includes('addon')))
  assert.ok(
    crc32Implementations.some((i) => i.name === 'crc-32'),
    'the portable fallback is always present',
  )
})

it('the native addon is built and loaded (npm ci builds it; `npm run build:native` again)', () => {
  assert.ok(nativeCrc32 !== undefined, 'build/Release/stream_segment_crc32.node is missing or fails its check')
  const fast = nativeCrc32.impl !== 'table'
  if (forced !== undefined && forced !== '') return
  assert.equal(
    crc32Implementation,
    fast ? `stream-segment addon (${nativeCrc32.impl})` : '@node-rs/crc32',
    'the addon is chosen where the CPU has carry-less multiply',
  )
  assert.equal(crc32HashesRuns, fast)
})

it('check value: CRC-32 of "123456789" is 0xcbf43926 in every implementation', () => {
  for (const { name, fn } of crc32Implementations) {
    assert.equal(fn(new TextEncoder().encode('123456789')), 0xcbf43926, name)
  }
})

it('every implementation agrees with crc-32, whole and continued from a seed', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 9000 }), fc.nat({ max: 9000 }), (bytes, cut) => {
      const want = crc32js.buf(bytes) >>> 0
      const at = Math.min(cut, bytes.length)
      for (const { name, fn } of crc32Implementations) {
        assert.equal(fn(bytes), want, name)
        assert.equal(fn(bytes.subarray(at), fn(bytes.subarray(0, at))), want, `${name} continued at ${at}`)
      }
      assert.equal(crc32(bytes), want)
    }),
    { numRuns: 300 },
  )
})

it('every implementation takes any seed as its 32 bits, and answers the seed for no bytes, wherever they are', () => {
  const bytes = randomBytesAt(100, 1)
  // A CRC from `crc-32` is a signed number; a seed past 2^32 keeps its low 32 bits.
  for (const seed of [-1, -0x12345678, 0x80000000, 2 ** 32 + 5, 2 ** 40 + 0x1234]) {
    const want = crc32js.buf(bytes, seed | 0) >>> 0
    for (const { name, fn } of crc32Implementations) assert.equal(fn(bytes, seed), want, `${name} seed ${seed}`)
  }
  const detached = new ArrayBuffer(8)
  const view = new Uint8Array(detached)
  structuredClone(detached, { transfer: [detached] })
  const empties = {
    'a view of a zero-length ArrayBuffer': new Uint8Array(new ArrayBuffer(0)),
    'TextEncoder of ""': new TextEncoder().encode(''),
    'a zero-length SharedArrayBuffer': new Uint8Array(new SharedArrayBuffer(0)),
    'a view of a detached ArrayBuffer': view,
    'an empty subarray': bytes.subarray(7, 7),
  }
  for (const [what, empty] of Object.entries(empties)) {
    for (const { name, fn } of crc32Implementations) {
      assert.equal(fn(empty, 0x12345678), 0x12345678, `${name}: ${what}`)
      assert.equal(fn(empty, -1), 0xffffffff, `${name}: ${what}, seed -1`)
    }
  }
})

it('crc32Chunks: each block of bytes cut into chunks anywhere has its own CRC-32', () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 1, maxLength: 5000 }),
      fc.array(fc.nat({ max: 5000 }), { maxLength: 8 }),
      fc.constantFrom(16, 512, 1024),
      (bytes, cuts, blockSize) => {
        const at = [...new Set(cuts.map((c) => c % bytes.length))].sort((a, b) => a - b)
        const chunks = [0, ...at].map((from, i) => bytes.subarray(from, [...at, bytes.length][i]))
        const n = Math.ceil(bytes.length / blockSize)
        const got = new Uint32Array(n + 1).fill(0xdeadbeef)
        crc32Chunks(chunks, blockSize, got)
        for (let b = 0; b < n; b++) {
          assert.equal(got[b], crc32(bytes.subarray(b * blockSize, (b + 1) * blockSize)), `block ${b}`)
        }
        assert.equal(got[n], 0xdeadbeef, 'nothing written past the last block')
      },
    ),
  )
})

/** Random bytes (fast-check's arrays are too small to reach the 64-byte folding path often). */
function randomBytesAt(length: number, offset: number): Uint8Array {
  const backing = new Uint8Array(length + offset)
  for (let i = 0; i < backing.length; i++) backing[i] = (i * 2654435761) >>> 24
  return backing.subarray(offset)
}

it("the addon's paths agree with crc-32 at every length around its folding steps, at any alignment and seed", () => {
  assert.ok(nativeCrc32 !== undefined, 'addon missing')
  // 64 and 256 bytes start the two folding paths; 16-byte steps and table bytes end them.
  const lengths = [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 191, 255, 256, 257, 271, 272]
  lengths.push(319, 320, 335, 511, 512, 513, 527, 4095, 4096, 4097, 65536 + 48 + 5)
  for (const length of lengths) {
    for (const offset of [0, 1, 3, 8, 13]) {
      const bytes = randomBytesAt(length, offset)
      for (const seed of [0, 1, 0xffffffff, 0x12345678]) {
        const want = crc32js.buf(bytes, seed | 0) >>> 0
        assert.equal(nativeCrc32.crc32(bytes, seed) >>> 0, want, `crc32 length ${length} offset ${offset} seed ${seed}`)
        assert.equal(nativeCrc32.tableCrc32(bytes, seed) >>> 0, want, `table length ${length} offset ${offset}`)
      }
    }
  }
})

it('crc32Blocks: every implementation gives each block its own CRC, the last one short, nothing past it', () => {
  fc.assert(
    fc.property(
      fc.nat({ max: 40000 }),
      fc.nat({ max: 15 }),
      fc.constantFrom(1, 16, 64, 100, 512, 4096, 8192),
      (length, offset, blockSize) => {
        const bytes = randomBytesAt(length, offset)
        const n = Math.ceil(length / blockSize)
        for (const impl of crc32Implementations) {
          const got = new Uint32Array(n + 1).fill(0xdeadbeef)
          crc32BlocksWith(impl, bytes, blockSize, got)
          for (let b = 0; b < n; b++) {
            const want = crc32js.buf(bytes.subarray(b * blockSize, (b + 1) * blockSize)) >>> 0
            assert.equal(got[b], want, `${impl.name}: block ${b} of ${n}`)
          }
          assert.equal(got[n], 0xdeadbeef, `${impl.name}: nothing written past the last block`)
        }
      },
    ),
    { numRuns: 60 },
  )
})

it('crc32Blocks refuses a bad block size or too little room, in every implementation', () => {
  const bytes = new Uint8Array(100)
  for (const impl of crc32Implementations) {
    assert.throws(() => crc32BlocksWith(impl, bytes, 0, new Uint32Array(4)), /block size 0/, impl.name)
    assert.throws(() => crc32BlocksWith(impl, bytes, 1.5, new Uint32Array(100)), /block size 1.5/, impl.name)
    assert.throws(() => crc32BlocksWith(impl, bytes, 32, new Uint32Array(3)), /4 blocks, room for 3/, impl.name)
  }
  assert.throws(() => crc32Blocks(bytes, 32, new Uint32Array(3)), RangeError)
})

it("the addon's own argument checks: wrong types and sizes throw, never crash", () => {
  assert.ok(nativeCrc32 !== undefined, 'addon missing')
  const addon = nativeCrc32 as unknown as Record<string, (...a: unknown[]) => unknown>
  const blocks = addon.blocks as (...a: unknown[]) => unknown
  const one = addon.crc32 as (...a: unknown[]) => unknown
  assert.throws(() => one('text'), TypeError)
  assert.throws(() => one(new Uint16Array(4)), TypeError)
  assert.throws(() => one(new Uint8Array(4), 'seed'), TypeError)
  assert.throws(() => blocks(new Uint8Array(64), 16), TypeError)
  assert.throws(() => blocks(new Uint8Array(64), 0, new Uint32Array(4)), RangeError)
  assert.throws(() => blocks(new Uint8Array(64), 16, new Int32Array(4)), TypeError)
  assert.throws(() => blocks(new Uint8Array(64), 16, new Uint32Array(3)), RangeError)
  assert.throws(() => blocks([1, 2, 3], 16, new Uint32Array(3)), TypeError)
})

it("the addon's folding constants are the remainders of x^n modulo the polynomial, as its comments say", () => {
  const source = readFileSync(new URL('../../../../lib/native/crc32.c', import.meta.url), 'utf8')
  const defined = (name: string) => {
    const m = new RegExp(`#define ${name} 0x([0-9a-f]+)ull`).exec(source)
    assert.ok(m !== null, `${name} is defined`)
    return BigInt(`0x${m[1]}`)
  }
  const P = 0x104c11db7n
  /** x^n mod P, 32 bits, most significant bit first. */
  const xPowMod = (n: number) => {
    let r = 1n
    for (let i = 0; i < n; i++) {
      r <<= 1n
      if (r & (1n << 32n)) r ^= P
    }
    return r
  }
  const reflect = (v: bigint, bits: number) => {
    let out = 0n
    for (let i = 0; i < bits; i++) if ((v >> BigInt(i)) & 1n) out |= 1n << BigInt(bits - 1 - i)
    return out
  }
  const k = (n: number) => reflect(xPowMod(n), 32) << 1n
  const want: Record<string, bigint> = {
    K1: k(4 * 128 + 32),
    K2: k(4 * 128 - 32),
    K3: k(128 + 32),
    K4: k(128 - 32),
    K5: k(64),
    K2048_LO: k(2048 + 32),
    K2048_HI: k(2048 - 32),
    PX: reflect(P, 33),
  }
  // MU: floor(x^64 / P), 33 bits, reflected.
  let q = 0n
  let rem = 1n << 64n
  for (let bit = 64; bit >= 32; bit--) {
    if ((rem >> BigInt(bit)) & 1n) {
      q |= 1n << BigInt(bit - 32)
      rem ^= P << BigInt(bit - 32)
    }
  }
  want.MU = reflect(q, 33)
  for (const [name, value] of Object.entries(want)) {
    assert.equal(defined(name).toString(16), value.toString(16), name)
  }
})

it('crc32Blocks in a worker thread, while the main thread hashes too, gives the same CRCs', async () => {
  const { Worker } = await import('node:worker_threads')
  const bytes = randomBytesAt(1 << 20, 3)
  const want = new Uint32Array(256)
  crc32BlocksWith({ name: 'crc-32', fn: (b, seed = 0) => crc32js.buf(b, seed) >>> 0 }, bytes, 4096, want)
  const url = new URL('../../lib/util/crc32.js', import.meta.url).href
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads')
     import(workerData.url).then((m) => {
       const into = new Uint32Array(256)
       for (let i = 0; i < 50; i++) m.crc32Blocks(workerData.bytes, 4096, into)
       parentPort.postMessage({ name: m.crc32Implementation, into })
     })`,
    { eval: true, workerData: { url, bytes } },
  )
  const got = new Promise<{ name: string; into: Uint32Array }>((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  const mine = new Uint32Array(256)
  for (let i = 0; i < 50; i++) crc32Blocks(bytes, 4096, mine)
  const { name, into } = await got
  await worker.terminate()
  assert.equal(name, crc32Implementation, 'the worker loads the same implementation')
  assert.deepEqual([...into], [...want])
  assert.deepEqual([...mine], [...want])
})

it('crc32OfChunks: a long run hashed off the event loop (with the addon chosen), a short one at once; both agree with crc-32, cut anywhere, from a seed', async () => {
  const offLoop = crc32Implementation.startsWith('stream-segment addon') && nativeCrc32?.impl !== 'table'
  const bytes = randomBytesAt(CRC32_OFF_LOOP_MIN_BYTES + 5000, 1)
  const short = bytes.subarray(0, 9000)
  await fc.assert(
    fc.asyncProperty(fc.array(fc.nat({ max: bytes.length }), { maxLength: 6 }), fc.nat(), async (cuts, seed) => {
      for (const whole of [bytes, short]) {
        const at = [0, ...cuts.map((c) => c % (whole.length + 1)).sort((a, b) => a - b), whole.length]
        const chunks = at.slice(1).map((end, i) => whole.subarray(at[i], end))
        const got = crc32OfChunks(chunks, seed)
        if (offLoop && whole === bytes) assert.ok(got instanceof Promise, 'a long run answers later')
        else assert.equal(typeof got, 'number', 'a short run (or another implementation) answers at once')
        assert.equal(await got, crc32js.buf(whole, seed) >>> 0)
      }
    }),
    { numRuns: 30 },
  )
  assert.equal(await crc32OfChunks([]), 0)
})

it("the addon's crc32Async: arguments checked (no crash), many jobs at once, its chunks kept alive until it answers", async () => {
  assert.ok(nativeCrc32 !== undefined, 'addon missing')
  const later = (nativeCrc32 as unknown as { crc32Async: (...a: unknown[]) => Promise<number> }).crc32Async
  assert.throws(() => later(new Uint8Array(4)), TypeError)
  assert.throws(() => later([new Uint8Array(4), 'text']), TypeError)
  assert.throws(() => later([new Uint16Array(4)]), TypeError)
  assert.throws(() => later([new Uint8Array(4)], 'seed'), TypeError)
  assert.equal(await later([]), 0)
  assert.equal(await later([], 0x1234), 0x1234)
  // Jobs whose chunks nothing else holds, memory collected while they run.
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const jobs: Array<Promise<number>> = []
  const wants: number[] = []
  for (let i = 0; i < 64; i++) {
    const chunks = [randomBytesAt(2 << 20, i % 7), randomBytesAt(4096 + i, 3)]
    wants.push(crc32js.buf(chunks[1] as Uint8Array, crc32js.buf(chunks[0] as Uint8Array)) >>> 0)
    jobs.push(later(chunks))
  }
  gc()
  assert.deepEqual(await Promise.all(jobs), wants)
})

it('a chunk over a resizable ArrayBuffer is never hashed off the event loop: shrunk meanwhile, it would crash the process', () => {
  assert.ok(nativeCrc32 !== undefined, 'addon missing')
  const later = nativeCrc32.crc32Async
  // (Node 20 has resizable buffers; this project's TypeScript lib does not know them.)
  const Resizable = ArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => ArrayBuffer
  const Growable = SharedArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => SharedArrayBuffer
  const resizable = new Resizable(64, { maxByteLength: 1024 })
  assert.throws(() => later([new Uint8Array(8), new Uint8Array(resizable)]), /resizable ArrayBuffer/)
  const growable = new Growable(64, { maxByteLength: 1024 })
  assert.ok(later([new Uint8Array(growable)]) instanceof Promise, 'a SharedArrayBuffer only grows: its memory stays')
  // Through crc32OfChunks, in a child (the crash would take this runner with it): jobs
  // started on a long run, its buffer shrunk to nothing while they run.
  const r = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `const m = await import(${JSON.stringify(new URL('../../lib/util/crc32.js', import.meta.url).href)})
       const ab = new ArrayBuffer(64 << 20, { maxByteLength: 64 << 20 })
       const v = new Uint8Array(ab, 0, 64 << 20).fill(1)
       const jobs = [0, 1, 2, 3].map(() => m.crc32OfChunks([v]))
       ab.resize(0)
       console.log(new Set(await Promise.all(jobs)).size)`,
    ],
    { encoding: 'utf8', timeout: 120_000 },
  )
  assert.equal(r.signal, null, `the child died of ${r.signal}`)
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.stdout.trim(), '1', 'each job hashed the 64 MiB as they were when it started')
})

it('crc32Async in worker threads terminated with jobs in flight: the process goes on, and its own jobs answer', async () => {
  const { Worker } = await import('node:worker_threads')
  const url = new URL('../../lib/util/crc32.js', import.meta.url).href
  for (let round = 0; round < 8; round++) {
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads')
       import(workerData.url).then((m) => {
         const big = new Uint8Array(32 << 20).fill(7)
         for (let i = 0; i < 8; i++) m.crc32OfChunks([big]).then(() => {}, () => {})
         parentPort.postMessage('started')
       })`,
      { eval: true, workerData: { url } },
    )
    await new Promise((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
    })
    await worker.terminate()
  }
  const bytes = randomBytesAt(CRC32_OFF_LOOP_MIN_BYTES, 0)
  assert.equal(await crc32OfChunks([bytes]), crc32js.buf(bytes) >>> 0)
})

/** Runs `args` in a child node with STREAM_SEGMENT_CRC32=`name`, in the project's root. */
function withCrc32(name: string, args: string[]) {
  const root = new URL('../../../../', import.meta.url)
  return spawnSync(process.execPath, args, {
    cwd: root,
    // Without NODE_TEST_CONTEXT: with it, a child `node --test` reports to this runner.
    env: { ...process.env, NODE_TEST_CONTEXT: undefined, STREAM_SEGMENT_CRC32: name },
    encoding: 'utf8',
    timeout: 120_000,
  })
}

it('STREAM_SEGMENT_CRC32 picks the implementation; the write path works on one that takes a call per block', () => {
  const name = '@node-rs/crc32'
  assert.ok(
    crc32Implementations.some((i) => i.name === name),
    `${name} (an optional dependency) is installed`,
  )
  const which = withCrc32(name, [
    '--input-type=module',
    '-e',
    "const m = await import('./dist/esm/lib/util/crc32.js'); console.log(m.crc32Implementation, m.crc32HashesRuns)",
  ])
  assert.equal(which.status, 0, which.stderr)
  assert.equal(which.stdout.trim(), `${name} false`)
  // The write model in every mode, the write stream and the dirty tier: writeRun's
  // per-block CRCs instead of one call per run.
  const files = ['write/model.test.js', 'streams/write-stream.test.js', 'state/dirty-tier.test.js']
  // The three files side by side (node --test runs one at a time on 2 cores): the write
  // model takes most of the time, the other two fit beside it.
  const run = withCrc32(name, [
    '--test',
    '--test-reporter=tap',
    `--test-concurrency=${files.length}`,
    ...files.map((f) => `dist/esm/test/${f}`),
  ])
  assert.equal(run.status, 0, `${run.stdout.slice(-3000)}\n${run.stderr.slice(-2000)}`)
  const count = (what: string) => Number(new RegExp(`^# ${what} (\\d+)$`, 'm').exec(run.stdout)?.[1] ?? Number.NaN)
  assert.equal(count('fail'), 0)
  assert.ok(count('pass') >= 20, `${count('pass')} tests passed`)
})

it('STREAM_SEGMENT_CRC32 naming an implementation not present fails at load, saying which are', () => {
  const r = withCrc32('crc-33', [
    '--input-type=module',
    '-e',
    "await import('./dist/esm/lib/index.js').then(() => console.log('loaded'), (e) => console.log(e.code, e.message))",
  ])
  assert.equal(r.status, 0, r.stderr)
  assert.match(
    r.stdout,
    /^ERR_INVALID_ARGUMENT STREAM_SEGMENT_CRC32="crc-33": no such CRC-32 implementation here; present: .*crc-32/,
  )
})

it('badBlockIn: a run split across chunks matches its blocks, and a changed byte names its block and CRC', async () => {
  const bs = 512
  const bytes = new Uint8Array(5 * bs)
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 31 + 7) & 0xff
  // The summary's CRCs of blocks 0..4, behind two of another object's: the run starts at 2.
  const crcs = [1, 2, ...Array.from({ length: 5 }, (_, b) => crc32(bytes.subarray(b * bs, (b + 1) * bs)))]
  const chunks = [bytes.subarray(0, 700), bytes.subarray(700, 2100), bytes.subarray(2100)]
  assert.equal(await badBlockIn(chunks, crcs, 2, 5, bs), undefined)
  bytes[3 * bs + 10] = (bytes[3 * bs + 10] as number) ^ 0x40
  assert.deepEqual(await badBlockIn(chunks, crcs, 2, 5, bs), {
    index: 3,
    crc: crc32(bytes.subarray(3 * bs, 4 * bs)),
  })
  // A run of a million bytes and more goes off the event loop with the addon: the same answer.
  const big = new Uint8Array(CRC32_OFF_LOOP_MIN_BYTES * 2)
  const bigCrcs = Array.from({ length: big.length / 4096 }, (_, b) => crc32(big.subarray(b * 4096, (b + 1) * 4096)))
  big[5 * 4096] = 1
  assert.deepEqual(await badBlockIn([big], bigCrcs, 0, bigCrcs.length, 4096), {
    index: 5,
    crc: crc32(big.subarray(5 * 4096, 6 * 4096)),
  })
})

it("the package's crc32 refuses bytes or a seed of the wrong kind with ERR_INVALID_ARGUMENT, whichever implementation", async () => {
  const api = await import('../../lib/index.js')
  const invalid = (re: RegExp) => (err: unknown) =>
    StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && re.test(err.message)
  // zlib.crc32 and crc-32 would hash a string (each its own way), the addon throw a plain Error.
  assert.throws(() => api.crc32('abc' as never), invalid(/^crc32: bytes must be a Uint8Array .*got string "abc"/))
  assert.throws(
    () => api.crc32(new Uint16Array(2) as never),
    invalid(/^crc32: bytes must be a Uint8Array .*Uint16Array/),
  )
  for (const seed of ['x', -1, 2 ** 32, 1.5]) {
    assert.throws(() => api.crc32(Buffer.from('abc'), seed as never), invalid(/^crc32: seed must be/))
  }
  assert.equal(api.crc32(Buffer.from('abc')), 0x352441c2)
  assert.equal(api.crc32(Buffer.from('c'), api.crc32(Buffer.from('ab'))), 0x352441c2)
})
