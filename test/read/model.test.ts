/**
 * The read model: random sequences of writes, zeroes, truncations and flushes, mixed with
 * reads of the file being written, of the newest checkpoint and of older ones (opened
 * with { cno }, read by SegmentFile.read and by the read stream over random ranges), all
 * against plain reference buffers kept per checkpoint. Small nodes, limits and objects
 * make deep trees, partial segments and multi-part checkpoints. MODEL_RUNS=n runs longer.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import fc from 'fast-check'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ContainerFormat } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { smallSettings, Tracked } from '../helpers/containers.js'
import { commonOps, lengths, offsets } from '../helpers/model.js'

const KiB = 1024
const MAX_FILE = 300 * KiB

type Op =
  | { op: 'write'; offset: number; length: number; seed: number }
  | { op: 'zero'; offset: number; length: number }
  | { op: 'truncate'; size: number }
  | { op: 'flush' }
  | { op: 'read'; offset: number; length: number }
  | { op: 'readOld'; pick: number; offset: number; length: number; stream: boolean; getMax: number }

const offset = offsets(MAX_FILE)
const length = lengths(24)
const common = commonOps(offset, length, MAX_FILE)
const ops: fc.Arbitrary<Op> = fc.oneof(
  { weight: 8, arbitrary: common.write },
  { weight: 2, arbitrary: common.zero },
  { weight: 1, arbitrary: common.truncate },
  { weight: 3, arbitrary: common.flush },
  { weight: 3, arbitrary: common.read },
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant('readOld' as const),
      pick: fc.nat(),
      offset,
      length: fc.oneof(length, fc.constant(MAX_FILE)),
      stream: fc.boolean(),
      getMax: fc.constantFrom(4096, 12 * KiB, 16 * 1024 * KiB),
    }),
  },
)

async function streamBytes(store: MemoryStore, cno: number, start: number, end: number, getMax: number) {
  const chunks: Buffer[] = []
  const rs = createStreamSegmentReadStream({
    store,
    cno,
    start,
    end: end - 1,
    readGetMaxBytes: getMax,
    readAheadBytes: 3 * getMax,
  })
  for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
  return Buffer.concat(chunks)
}

/**
 * readInto of `length` bytes from `offset` into a target of stale bytes reads `want`:
 * every byte up to the end of the file written (holes as zeros), none past it.
 */
async function checkReadInto(file: SegmentFile, offset: number, length: number, want: Buffer, where: string) {
  const target = Buffer.alloc(length + 8, 0xee)
  const n = await file.readInto(offset, target.subarray(0, length))
  assert.equal(n, want.length, `${where}: bytes read`)
  assert.ok(target.subarray(0, n).equals(want), `${where}: wrong bytes`)
  assert.ok(
    target.subarray(n).every((b) => b === 0xee),
    `${where}: bytes past those read changed`,
  )
}

async function runModel(sequence: Op[], format: ContainerFormat = 'stream'): Promise<void> {
  const store = new MemoryStore()
  const t = new Tracked(await SegmentFile.create(store, { ...smallSettings, format }))
  const checkpoints = new Map<number, Buffer>()
  const readers = new Map<number, SegmentFile>()
  for (const [step, o] of sequence.entries()) {
    const where = `step ${step} ${JSON.stringify(o)}`
    switch (o.op) {
      case 'write':
        await t.write(o.offset, o.length, o.seed)
        break
      case 'zero':
        await t.zero(o.offset, o.length)
        break
      case 'truncate':
        await t.truncate(o.size)
        break
      case 'flush': {
        const timing = await t.file.flush()
        if (timing.cno > 0) checkpoints.set(timing.cno, Buffer.from(t.ref))
        break
      }
      case 'read': {
        const got = Buffer.from(await t.file.read(o.offset, o.length))
        const want = t.ref.subarray(Math.min(o.offset, t.ref.length), Math.min(o.offset + o.length, t.ref.length))
        assert.ok(got.equals(want), `${where}: the open file reads wrong bytes`)
        await checkReadInto(t.file, o.offset, o.length, want, `${where}, readInto`)
        break
      }
      case 'readOld': {
        if (checkpoints.size === 0) break
        const cnos = [...checkpoints.keys()]
        const cno = cnos[o.pick % cnos.length] as number
        const ref = checkpoints.get(cno) as Buffer
        const start = Math.min(o.offset, ref.length)
        const end = Math.min(o.offset + o.length, ref.length)
        let got: Buffer
        if (o.stream) {
          got = await streamBytes(store, cno, start, Math.max(end, start + 1), o.getMax)
        } else {
          // Handles stay open across steps: their caches must stay right while the writer publishes.
          let r = readers.get(cno)
          if (r === undefined) readers.set(cno, (r = await SegmentFile.open(store, { cno, readOnly: true })))
          assert.equal(r.size, ref.length, `${where}: size of checkpoint ${cno}`)
          got = Buffer.from(await r.read(start, end - start))
          await checkReadInto(r, start, o.length, ref.subarray(start, end), `${where}: checkpoint ${cno}, readInto`)
        }
        assert.ok(got.equals(ref.subarray(start, end)), `${where}: checkpoint ${cno} reads wrong bytes`)
        break
      }
    }
  }
  for (const r of readers.values()) await r.close()
}

const runs = Number(process.env.MODEL_RUNS ?? 100)

for (const format of ['stream', 'parted'] as const) {
  it(`read model, ${format}: old and new checkpoints, files and streams, match their references (${runs} runs)`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(ops, { minLength: 1, maxLength: 40 }), (seq) => runModel(seq, format)),
      { numRuns: runs },
    )
  })
}

it('read model: every checkpoint of a long history reads back, whole and in streams', async () => {
  const seq: Op[] = []
  for (let i = 0; i < 12; i++) {
    seq.push({ op: 'write', offset: (i * 37 * KiB) % MAX_FILE, length: 40 * KiB, seed: i })
    if (i % 4 === 3) seq.push({ op: 'zero', offset: i * 10 * KiB, length: 20 * KiB })
    seq.push({ op: 'flush' })
  }
  for (let pick = 0; pick < 12; pick++) {
    seq.push({ op: 'readOld', pick, offset: 0, length: MAX_FILE, stream: false, getMax: 16 * KiB })
    seq.push({ op: 'readOld', pick, offset: 5000, length: MAX_FILE, stream: true, getMax: 8 * KiB })
  }
  await runModel(seq)
  await runModel(seq, 'parted')
})
