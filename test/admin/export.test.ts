/**
 * exportObject on the memory and directory stores: the part plan's rules (every part but
 * the last at least the minimum, copies only of stored runs, file order, no gap), and
 * exports whose bytes equal the checkpoint's — sequential, patched at random, with holes,
 * empty, small, into a file — and a failure that leaves nothing behind.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { Worker } from 'node:worker_threads'
import { exportObject } from '../../lib/admin/export.js'
import { type Extent, planParts } from '../../lib/admin/export-plan.js'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { walkMap } from '../../lib/admin/map-walk.js'
import { readInode } from '../../lib/container/inode.js'
import {
  decodeInodeObject,
  encodeInodeObject,
  FORMAT_PARTED,
  INODE_KEY,
  isNullInode,
  parseKey,
  pointerLo,
  pointerPart,
  pointerUnit,
  UNIT_BYTES,
} from '../../lib/format/index.js'
import { decodeObject, encodeObject, type SegmentObject } from '../../lib/format/object.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createS3Client } from '../../lib/store/s3.js'
import type { Body, ObjectStore, RequestOptions } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { buildContainer, collect, prng, smallSettings, Tracked } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const KiB = 1024
const MiB = 1024 * KiB
/** Small parts, so that kilobytes of data make many parts. */
const SMALL = { minPartBytes: 16 * KiB, sendPartBytes: 32 * KiB, copyPartBytes: 64 * KiB }

function sha(b: Uint8Array): string {
  return createHash('sha256').update(b).digest('hex')
}

/** The plan's rules, whatever the extents. */
function checkPlan(extents: Extent[], size: number, plan: ReturnType<typeof planParts>, min: number): void {
  let pos = 0
  plan.forEach((p, i) => {
    assert.equal(p.start, pos, `part ${i + 1} starts where the previous ended`)
    assert.ok(p.end > p.start, `part ${i + 1} is not empty`)
    if (i < plan.length - 1) assert.ok(p.end - p.start >= min, `part ${i + 1} (${p.end - p.start} B) ≥ ${min}`)
    if (p.kind === 'copy') {
      const x = extents.find((e) => e.start <= p.start && p.end <= e.end)
      assert.ok(x?.key !== undefined && x.key === p.key, `copy part ${i + 1} lies within one stored run`)
      assert.equal(p.at, x.at + (p.start - x.start), `copy part ${i + 1} reads the run's bytes`)
    }
    pos = p.end
  })
  assert.equal(pos, size, 'the parts cover the file')
}

describe('export: the part plan', () => {
  it('copies long runs, sends short runs and holes, borrows from a long run to reach the minimum', () => {
    const ext: Extent[] = [
      { start: 0, end: 100, key: 'a', at: 0 }, // short: sent
      { start: 100, end: 200, at: 0 }, // hole: sent
      { start: 200, end: 5200, key: 'b', at: 4096 }, // long: lends 800 bytes to the 200 before it
      { start: 5200, end: 5300, key: 'c', at: 0 }, // short, last: sent
    ]
    const plan = planParts(ext, 5300, { minPartBytes: 1000, sendPartBytes: 2000, copyPartBytes: 10_000, copy: true })
    assert.deepEqual(plan, [
      { kind: 'send', start: 0, end: 1000 },
      { kind: 'copy', start: 1000, end: 5200, key: 'b', at: 4896 },
      { kind: 'send', start: 5200, end: 5300 },
    ])
    checkPlan(ext, 5300, plan, 1000)
    const none = planParts(ext, 5300, { minPartBytes: 1000, sendPartBytes: 2000, copyPartBytes: 10_000, copy: false })
    assert.ok(
      none.every((p) => p.kind === 'send'),
      'without copy everything is sent',
    )
    checkPlan(ext, 5300, none, 1000)
  })

  it('holds its rules for random extents, and stays within 10,000 parts', () => {
    const rnd = prng(11)
    for (let run = 0; run < 300; run++) {
      const ext: Extent[] = []
      let pos = 0
      const n = 1 + Math.floor(rnd() * 40)
      for (let i = 0; i < n; i++) {
        const len = 1 + Math.floor(rnd() * (rnd() < 0.3 ? 9000 : 1500))
        const r = rnd()
        ext.push(
          r < 0.2
            ? { start: pos, end: pos + len, at: 0 }
            : { start: pos, end: pos + len, key: `k${i % 5}`, at: i * 8192 },
        )
        pos += len
      }
      const plan = planParts(ext, pos, { minPartBytes: 1000, sendPartBytes: 2000, copyPartBytes: 4000, copy: true })
      checkPlan(ext, pos, plan, 1000)
    }
    // 30,000 runs that could each be copied: sizes double until the parts fit.
    const many: Extent[] = []
    for (let i = 0; i < 30_000; i++) many.push({ start: i * 1000, end: (i + 1) * 1000, key: `k${i}`, at: 0 })
    const plan = planParts(many, 30_000_000, {
      minPartBytes: 1000,
      sendPartBytes: 2000,
      copyPartBytes: 4000,
      copy: true,
    })
    assert.ok(plan.length <= 10_000, `${plan.length} parts`)
    checkPlan(many, 30_000_000, plan, 1000)
  })

  it('a file of 2^53 − 1 bytes, a hole, is refused in a small heap: no plan past 10,000 parts is made', async () => {
    // At 16 MiB a part, its first plan had 2^29 parts: made whole (tens of GB) before its
    // count was looked at. A worker with a 32 MiB heap runs out of memory doing that.
    const size = Number.MAX_SAFE_INTEGER
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads')
      import(workerData.url).then(({ planParts }) => {
        try {
          const o = { minPartBytes: 5 * 2 ** 20, sendPartBytes: 16 * 2 ** 20, copyPartBytes: 256 * 2 ** 20, copy: true }
          parentPort.postMessage(String(planParts([{ start: 0, end: workerData.size, at: 0 }], workerData.size, o).length))
        } catch (err) {
          parentPort.postMessage(\`\${err.code}: \${err.message}\`)
        }
      })`,
      {
        eval: true,
        workerData: { url: new URL('../../lib/admin/export-plan.js', import.meta.url).href, size },
        resourceLimits: { maxOldGenerationSizeMb: 32 },
      },
    )
    const answer = await new Promise((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
    }).finally(() => worker.terminate())
    assert.equal(answer, `ERR_INVALID_ARGUMENT: exportObject: ${size} bytes do not fit in 10000 parts`)
  })

  it('splits a long stretch into even parts, none under the minimum', () => {
    // 2,002,999 bytes sent in parts of at most 2,000: 1,002 parts. Parts of ⌈len / n⌉ =
    // 2,000 bytes would leave a last of 999, under the minimum before the copied run.
    const ext: Extent[] = [
      { start: 0, end: 2_002_999, at: 0 },
      { start: 2_002_999, end: 2_102_999, key: 'k', at: 0 },
    ]
    const opts = { minPartBytes: 1000, sendPartBytes: 2000, copyPartBytes: 200_000, copy: true }
    const plan = planParts(ext, 2_102_999, opts)
    checkPlan(ext, 2_102_999, plan, 1000)
    const sent = plan.filter((p) => p.kind === 'send').map((p) => p.end - p.start)
    assert.equal(sent.length, 1002)
    assert.ok(Math.max(...sent) - Math.min(...sent) <= 1, `even parts: ${Math.min(...sent)}..${Math.max(...sent)}`)
  })
})

describe('export: memory and directory stores', () => {
  it('each checkpoint of a container with holes, rewrites and a truncation exports equal, copied and sent', async () => {
    const store = new MemoryStore()
    const refs = await buildContainer(store)
    for (const [cno, ref] of refs) {
      const dest = new MemoryStore()
      const progress: number[] = []
      const r = await exportObject(
        store,
        { store: dest, key: 'out/file.bin', metadata: { Origin: 'test' } },
        { cno, ...SMALL, onProgress: (p) => progress.push(p.copiedBytes + p.sentBytes) },
      )
      const got = await dest.get('out/file.bin')
      assert.equal(sha(got), sha(ref), `checkpoint ${cno}: same bytes`)
      assert.equal(r.size, ref.length)
      assert.ok(r.copiedBytes > 0 && r.sentBytes > 0, `checkpoint ${cno}: a mix (${r.copiedBytes} / ${r.sentBytes})`)
      assert.equal(r.copiedBytes + r.sentBytes, ref.length, 'every byte copied or sent once')
      assert.ok(r.parts > 1 && r.copyParts > 0)
      assert.equal((await dest.head('out/file.bin'))?.metadata.origin, 'test')
      assert.deepEqual(await collect(dest.listMultipart()), [], 'no upload left open')
      assert.ok(progress.length >= r.parts, 'progress per part')
      assert.ok(
        progress.every((v, i) => i === 0 || v >= (progress[i - 1] as number)),
        'progress never goes back',
      )
      assert.equal(progress.at(-1), ref.length)
    }
  })

  it('a randomly patched checkpoint exports the same bytes, with copy on or off, for several seeds', async () => {
    for (const seed of [1, 2, 3]) {
      const store = new MemoryStore()
      const rnd = prng(seed)
      const t = new Tracked(await SegmentFile.create(store, { ...smallSettings, segmentMaxObjectBytes: 256 * KiB }))
      await t.write(0, 1024 * KiB, seed)
      await t.file.flush()
      for (let i = 0; i < 40; i++) {
        const at = Math.floor(rnd() * 1100 * KiB)
        const len = 1 + Math.floor(rnd() * (rnd() < 0.2 ? 64 * KiB : 6 * KiB))
        await t.write(at, len, seed * 100 + i)
      }
      await t.file.flush()
      await t.file.close()
      for (const copy of [true, false]) {
        const dest = new MemoryStore()
        const r = await exportObject(store, { store: dest, key: 'x' }, { ...SMALL, copy })
        assert.equal(sha(await dest.get('x')), sha(t.ref), `seed ${seed}, copy ${copy}: same bytes`)
        assert.equal(r.copiedBytes + r.sentBytes, t.ref.length)
        if (!copy) assert.equal(r.copiedBytes, 0)
        else assert.ok(r.copiedBytes > 0, `seed ${seed}: some runs copied`)
      }
    }
  })

  it('an empty checkpoint is one empty object; a small one is one put', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.truncate(0)
    await f.write(0, new Uint8Array(0))
    await f.flush()
    const dest = new MemoryStore()
    const empty = await exportObject(store, { store: dest, key: 'e' }, SMALL)
    assert.equal(empty.size, 0)
    assert.equal((await dest.get('e')).byteLength, 0)
    await f.write(0, pattern(0, 10 * KiB, 3))
    await f.flush()
    await f.close()
    const small = await exportObject(store, { store: dest, key: 's' }, SMALL)
    assert.deepEqual(Buffer.from(await dest.get('s')), pattern(0, 10 * KiB, 3))
    assert.equal(small.parts, 0, 'one PutObject')
    assert.equal(small.requests, 1)
  })

  it('a PartedSegment (head-first) container exports equal, its runs copied from past the headers', async () => {
    const store = new MemoryStore()
    const refs = await buildContainer(store, { ...smallSettings, format: 'parted' })
    for (const [cno, ref] of refs) {
      const dest = new MemoryStore()
      const r = await exportObject(store, { store: dest, key: 'p' }, { cno, ...SMALL })
      assert.equal(sha(await dest.get('p')), sha(ref), `checkpoint ${cno}`)
      assert.ok(r.copiedBytes > 0, `checkpoint ${cno}: some runs copied`)
    }
  })

  it('a file of holes only exports as zeros', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.truncate(100 * KiB + 3)
    await f.flush()
    await f.close()
    const dest = new MemoryStore()
    await exportObject(store, { store: dest, key: 'z' }, SMALL)
    assert.deepEqual(Buffer.from(await dest.get('z')), Buffer.alloc(100 * KiB + 3))
  })

  it('to a local file, from a directory-store container: same bytes, progress to the size, no temporary file left', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
    const store = new DirectoryStore(join(root, 'container'))
    const refs = await buildContainer(store)
    const out = join(root, 'out.bin')
    for (const [cno, ref] of refs) {
      const seen: number[] = []
      const r = await exportObject(store, out, {
        cno,
        onProgress: (p) => {
          assert.equal(p.totalBytes, ref.length)
          seen.push(p.copiedBytes + p.sentBytes)
        },
      })
      assert.equal(sha(readFileSync(out)), sha(ref), `checkpoint ${cno}`)
      assert.equal(statSync(out).size, ref.length)
      assert.equal(r.location, out)
      // Its holes (300..400 KiB in the first) are written too: left sparse, they count as done.
      for (let i = 1; i < seen.length; i++) assert.ok((seen[i] as number) >= (seen[i - 1] as number), `${seen}`)
      assert.equal(seen.at(-1), ref.length, `checkpoint ${cno}: progress ends at the size`)
      assert.equal(r.sentBytes, ref.length)
    }
    assert.deepEqual(readdirSync(root).sort(), ['container', 'out.bin'], 'only the file: no temporary file left')
  })

  it('to a local file, a source object gone mid-way: the export stops there, not after reading all the rest', async () => {
    /** Counts GETs, and which one failed first. */
    class Counting extends MemoryStore {
      gets = 0
      failedAt = -1
      override async get(key: string, options?: Parameters<MemoryStore['get']>[1]): Promise<Uint8Array> {
        const n = ++this.gets
        try {
          return await super.get(key, options)
        } catch (err) {
          if (this.failedAt < 0) this.failedAt = n
          throw err
        }
      }
    }
    const store = new Counting()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 4 * MiB, 10)) // 64 objects of 64 KiB: an extent each
    await f.flush()
    await f.close()
    const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
    const out = join(root, 'out.bin')
    let deleted = false
    await rejectsCode(
      exportObject(store, out, {
        onProgress: () => {
          // gc, as it were: an object a few chunks on goes once the first chunk is written.
          if (!deleted) void store.delete(['0000000001.8'])
          deleted = true
        },
      }),
      'ERR_NOT_FOUND',
      /0000000001\.8/,
    )
    assert.ok(store.failedAt > 0)
    // Those in flight when it failed finish; no chunk is read after it (60 are left).
    assert.ok(store.gets - store.failedAt <= 3, `${store.gets - store.failedAt} GETs after the failure`)
    assert.deepEqual(readdirSync(root), [], 'no file, no temporary file')
  })

  it('a source object gone mid-way fails the export clearly and leaves no object, no open upload', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 512 * KiB, 9))
    await f.flush()
    await f.close()
    const dest = new MemoryStore()
    await dest.put('x', Buffer.from('old'))
    let deleted = false
    // gc, as it were: every data part goes once the first part of the export is done.
    const victims = (await collect(store.list())).map((e) => e.key).filter((k) => /\.[1-9]/.test(k))
    const err = await rejectsCode(
      exportObject(
        store,
        { store: dest, key: 'x' },
        {
          ...SMALL,
          concurrency: 1,
          onProgress: () => {
            if (!deleted) void store.delete(victims)
            deleted = true
          },
        },
      ),
      'ERR_NOT_FOUND',
      /gc/,
    )
    assert.ok(
      victims.some((v) => err.message.includes(v)),
      `the message names the object: ${err.message}`,
    )
    assert.equal(Buffer.from(await dest.get('x')).toString(), 'old', 'the object at the key is unchanged')
    assert.deepEqual(await collect(dest.listMultipart()), [], 'the upload was aborted')
  })

  it('refuses targets and options it cannot honour, before any request', async () => {
    const inner: ObjectStore = new MemoryStore()
    await buildContainer(inner)
    // Counts the requests made of the container: none for a target or option refused.
    const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const dest = new MemoryStore()
    const TARGET_CALLS = ['put', 'get', 'createMultipart', 'uploadPart', 'completeMultipart', 'abortMultipart']
    const refused: Array<[string, () => Promise<unknown>, RegExp]> = [
      ['sendPartBytes 1', () => exportObject(store, { store: dest, key: 'x' }, { sendPartBytes: 1 }), /sendPartBytes/],
      ['minPartBytes 0', () => exportObject(store, { store: dest, key: 'x' }, { minPartBytes: 0 }), /minPartBytes/],
      ['concurrency 0', () => exportObject(store, { store: dest, key: 'x' }, { concurrency: 0 }), /concurrency/],
      // Part sizes do nothing for a file, but a bad one is refused there as for an object.
      ...(
        [
          ['minPartBytes 0', { minPartBytes: 0 }, /minPartBytes must be an integer ≥ 1, got 0/],
          ['minPartBytes a string', { minPartBytes: '5' }, /minPartBytes must be an integer/],
          ['sendPartBytes 1', { sendPartBytes: 1 }, /sendPartBytes must be an integer in/],
          ['copyPartBytes 6 GiB', { copyPartBytes: 6 * 1024 * MiB }, /copyPartBytes must be an integer in/],
        ] as const
      ).map(([what, options, message]): [string, () => Promise<unknown>, RegExp] => [
        `${what} with a file`,
        () => exportObject(store, join(tmpdir(), 'ss-export-refused.bin'), options as never),
        message,
      ]),
      ['an ACL', () => exportObject(store, { Bucket: 'b', Key: 'k', ACL: 'public-read' } as never, {}), /ACL/],
      ['a key ending in /', () => exportObject(store, { Bucket: 'b', Key: 'dir/' }, {}), /dir\//],
      ['the inode key', () => exportObject(store, { store: inner, key: 'inode' }), /corrupt the container/],
      // A { store, key } target of the wrong kind: refused before the container is read
      // (a store given as a URL used to fail with a TypeError once the whole checkpoint was read).
      ...(
        [
          [
            'a URL for the store',
            { store: 'mem://dst', key: 'x' },
            /store must be an ObjectStore.*string "mem:\/\/dst"/,
          ],
          ['a null store', { store: null, key: 'x' }, /store must be an ObjectStore.*got null/],
          [
            'a store without multipart calls',
            { store: { url: 'mem://x', put() {}, get() {}, head() {}, list() {}, delete() {} }, key: 'x' },
            /ObjectStore/,
          ],
          [
            'a store without a url',
            { store: { url: 1, ...Object.fromEntries(TARGET_CALLS.map((m) => [m, () => {}])) }, key: 'x' },
            /ObjectStore/,
          ],
          ['no key', { store: dest, key: undefined }, /key must be a non-empty string, got undefined/],
          ['a number for the key', { store: dest, key: 42 }, /key must be a non-empty string, got number 42/],
          ['an empty key', { store: dest, key: '' }, /key must be a non-empty string/],
          ['an unknown field', { store: dest, key: 'y', Bucket: 'b' }, /target: unknown option "Bucket"/],
          [
            'a misspelt field',
            { store: dest, key: 'y', metdata: {} },
            /unknown option "metdata" \(did you mean metadata\?\)/,
          ],
          ['metadata null', { store: dest, key: 'y', metadata: null }, /metadata must be an object, got null/],
          ['attributes a string', { store: dest, key: 'y', attributes: 'text/plain' }, /attributes must be an object/],
          ['Metadata a string', { Bucket: 'b', Key: 'k', Metadata: 'x' }, /Metadata must be an object/],
        ] as const
      ).map(([what, target, message]): [string, () => Promise<unknown>, RegExp] => [
        what,
        () => exportObject(store, target as never),
        message,
      ]),
    ]
    for (const [what, p, message] of refused) {
      await rejectsCode(p(), 'ERR_INVALID_ARGUMENT', message)
      assert.equal(store.totalRequests, 0, `${what}: refused before any request (${JSON.stringify(store.requests)})`)
    }
    await rejectsCode(exportObject(new MemoryStore(), { store: dest, key: 'x' }), 'ERR_NOT_FOUND')
    assert.deepEqual(await collect(dest.list()), [])
  })

  it("an S3 Key is held to S3's 1024 bytes, whole and before any request, not to a container's room", async () => {
    const inner: ObjectStore = new MemoryStore()
    await buildContainer(inner)
    const store = new ThrottledStore(inner, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
    const client = createS3Client({ endpoint: 'http://127.0.0.1:1', region: 'us-east-1' })
    try {
      for (const [Key, bytes] of [
        [`d/${'k'.repeat(1023)}`, 1025],
        [`${'d'.repeat(1020)}/${'\u00E9'.repeat(2)}`, 1025],
        ['k'.repeat(1025), 1025],
      ] as const) {
        await rejectsCode(
          exportObject(store, { client, Bucket: 'b', Key }),
          'ERR_INVALID_ARGUMENT',
          new RegExp(
            `^exportObject: the target's Key: invalid key "[dk/]{60}…": ${bytes} bytes of UTF-8, over the 1024`,
          ),
        )
        assert.equal(store.totalRequests, 0, `${Key.length}: refused before any request`)
      }
      // The store made for the Key holds one object, not a container: a folder of 1018 bytes
      // is no fault (a container's prefix may have 1007). Past the checks, the missing
      // container is what fails.
      for (const Key of [`${'d'.repeat(1018)}/x.bin`, `${'d'.repeat(1022)}/x`]) {
        assert.equal(Buffer.byteLength(Key), 1024)
        await rejectsCode(exportObject(new MemoryStore(), { client, Bucket: 'b', Key }), 'ERR_NOT_FOUND')
      }
    } finally {
      client.destroy()
    }
  })
})

describe('export: a sparse file', () => {
  it('holes go out as views of one buffer of zeros: memory for what is stored, not for the size', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 8 * KiB, 1))
    await f.write(200 * MiB, pattern(200 * MiB, 8 * KiB, 2))
    await f.truncate(256 * MiB)
    await f.flush()
    await f.close()
    // A target that keeps no bodies, and records the memory behind each part's chunks.
    const buffers = new Set<ArrayBufferLike>()
    let sent = 0
    const dest = new (class extends MemoryStore {
      override async uploadPart(key: string, uploadId: string, partNumber: number, body: Body, o?: RequestOptions) {
        for (const c of Array.isArray(body) ? body : [body]) {
          buffers.add(c.buffer)
          sent += c.byteLength
        }
        return super.uploadPart(key, uploadId, partNumber, new Uint8Array(16 * KiB), o)
      }
    })()
    const r = await exportObject(store, { store: dest, key: 'x' }, { sendPartBytes: 16 * MiB })
    assert.equal(sent, 256 * MiB)
    assert.equal(r.sentBytes, 256 * MiB)
    const held = [...buffers].reduce((n, b) => n + b.byteLength, 0)
    assert.ok(held <= 4 * MiB, `${held} bytes of memory behind 256 MiB sent`)
  })

  it('parts grown past sendPartBytes to fit 10,000 go fewer at a time: concurrency × sendPartBytes in flight', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.truncate(24 * MiB) // 12,288 parts of 2 KiB: too many, so 6,144 of 4 KiB
    await f.flush()
    await f.close()
    let inFlight = 0
    let peak = 0
    let parts = 0
    const dest = new (class extends MemoryStore {
      override async uploadPart(key: string, uploadId: string, partNumber: number, body: Body, o?: RequestOptions) {
        const bytes = (Array.isArray(body) ? body : [body]).reduce((n, c) => n + c.byteLength, 0)
        inFlight += bytes
        peak = Math.max(peak, inFlight)
        parts++
        await new Promise((resolve) => setImmediate(resolve))
        inFlight -= bytes
        return super.uploadPart(key, uploadId, partNumber, [], o)
      }
    })()
    const r = await exportObject(
      store,
      { store: dest, key: 'x' },
      { minPartBytes: KiB, sendPartBytes: 2 * KiB, concurrency: 8 },
    )
    assert.equal(r.sentBytes, 24 * MiB)
    assert.equal(parts, 6144, 'parts of 4 KiB')
    assert.equal(peak, 8 * 2 * KiB, 'four 4 KiB parts at once: the bytes of eight of the size asked for')
  })
})

describe('export: sources that do not hold what the map says', () => {
  /** A reached leaf of the published checkpoint with two data entries into its own object. */
  async function reachedLeaf(store: MemoryStore) {
    const { inode } = await readInode(store)
    const walk = await walkMap(store, inode, [])
    for (const [key, r] of walk.reached) {
      const k = parseKey(key) as { cno: number; part: number }
      for (const offset of r.nodes) {
        const obj = decodeObject(await store.get(key), key)
        const j = (offset - obj.layout.metaOffset) / obj.layout.metaBlockSize
        const leaf = obj.nodes[j]
        if (leaf === undefined || leaf.level !== 0 || leaf.count < 2) continue
        const own = (i: number) => leaf.ptrHi[i] === k.cno && pointerPart(leaf.ptrLo[i] as number) === k.part
        if (own(0) && own(1)) return { key, obj, leaf, part: k.part }
      }
    }
    throw new Error('no reached leaf with two entries into its own object')
  }
  const put = (store: MemoryStore, obj: SegmentObject, over: Partial<SegmentObject['header']> = {}) => {
    const { dataCount: _d, metaCount: _m, summaryCrc: _s, ...fields } = { ...obj.header, ...over }
    return store.put(obj.key, encodeObject(fields, obj.data, obj.nodes, obj.summary))
  }
  const slotOf = (obj: SegmentObject, lo: number) =>
    (pointerUnit(lo) * UNIT_BYTES - obj.layout.dataOffset) / obj.layout.dataBlockSize

  const cases: [string, (s: MemoryStore) => Promise<void>, RegExp][] = [
    [
      "a pointer at another block's slot",
      async (s) => {
        const { obj, leaf } = await reachedLeaf(s)
        leaf.ptrLo[1] = leaf.ptrLo[0] as number
        await put(s, obj)
      },
      /points block \d+ at byte \d+, slot \d+, which holds block \d+/,
    ],
    [
      'a pointer into the meta region',
      async (s) => {
        const { obj, leaf, part } = await reachedLeaf(s)
        leaf.ptrLo[1] = pointerLo(part, obj.layout.metaOffset / UNIT_BYTES)
        await put(s, obj)
      },
      /not one of its \d+ data slots/,
    ],
    [
      'a pointer at a dead slot',
      async (s) => {
        const { obj, leaf } = await reachedLeaf(s)
        obj.summary.live[slotOf(obj, leaf.ptrLo[1] as number)] = 0
        await put(s, obj)
      },
      /which is dead/,
    ],
    [
      'an inode object whose block size is not its objects',
      async (s) => {
        const x = decodeInodeObject(await s.get(INODE_KEY))
        await s.put(INODE_KEY, encodeInodeObject({ ...x, dataShift: x.dataShift + 1 }))
      },
      // Its part 0 says otherwise: the commit point is refused before any object is read.
      /inode: names checkpoint 3, but differs from the inode in its part 0/,
    ],
    [
      'an object of the other format',
      async (s) => {
        const { obj } = await reachedLeaf(s)
        const h = obj.header
        await put(s, obj, {
          format: FORMAT_PARTED,
          inode: { ...h.inode, format: FORMAT_PARTED },
          baseInode: isNullInode(h.baseInode) ? h.baseInode : { ...h.baseInode, format: FORMAT_PARTED },
        })
      },
      /export of checkpoint 3: .*0000000003\.\d+/,
    ],
  ]
  for (const [what, damage, message] of cases) {
    it(`${what}: ERR_CORRUPT, and nothing written`, async () => {
      const store = new MemoryStore()
      await buildContainer(store)
      await damage(store)
      const dest = new MemoryStore()
      await rejectsCode(exportObject(store, { store: dest, key: 'x' }, SMALL), 'ERR_CORRUPT', message)
      await rejectsCode(
        exportObject(store, { store: dest, key: 'x' }, { ...SMALL, copy: false }),
        'ERR_CORRUPT',
        message,
      )
      assert.deepEqual(await collect(dest.list()), [])
      assert.deepEqual(await collect(dest.listMultipart()), [])
      const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
      await rejectsCode(exportObject(store, join(root, 'out.bin')), 'ERR_CORRUPT', message)
      assert.deepEqual(readdirSync(root), [])
    })
  }
})

describe('export: targets that would break something', () => {
  it('a missing folder, a path through a file, a directory: refused naming the path, nothing written', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
    const store = new DirectoryStore(join(root, 'container'))
    await buildContainer(store)
    writeFileSync(join(root, 'afile'), 'x')
    await rejectsCode(exportObject(store, join(root, 'nonexist', 'x')), 'ERR_NOT_FOUND', /nonexist\/x: .*no such file/)
    await rejectsCode(
      exportObject(store, join(root, 'afile', 'sub')),
      'ERR_INVALID_ARGUMENT',
      /afile\/sub: cannot be written/,
    )
    await rejectsCode(exportObject(store, root), 'ERR_INVALID_ARGUMENT', /is a directory/)
    assert.deepEqual(readdirSync(root).sort(), ['afile', 'container'])
  })

  it('into its own container: refused before anything is written, the container unchanged', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
    const store = new DirectoryStore(join(root, 'container'))
    await buildContainer(store)
    const before = new Map<string, string>()
    for (const e of await collect(store.list())) before.set(e.key, sha(await store.get(e.key)))
    const again = new DirectoryStore(join(root, '.', 'container'))
    for (const target of [
      { store, key: 'inode' },
      { store, key: '0000000001.0' },
      { store: again, key: '0000000009.1' },
    ]) {
      await rejectsCode(exportObject(store, target), 'ERR_INVALID_ARGUMENT', /the container's own/)
    }
    for (const path of [join(root, 'container', '0000000001.0'), join(root, 'container', 'new', 'x')]) {
      await rejectsCode(exportObject(store, path), 'ERR_INVALID_ARGUMENT', /inside the container's folder/)
    }
    const mem = new MemoryStore()
    await buildContainer(mem)
    await rejectsCode(exportObject(mem, { store: mem, key: 'inode' }), 'ERR_INVALID_ARGUMENT', /own inode/)
    const after = new Map<string, string>()
    for (const e of await collect(store.list())) after.set(e.key, sha(await store.get(e.key)))
    assert.deepEqual(after, before)
    // Another key of the same store is a plain object beside the container: allowed.
    await exportObject(store, { store, key: 'export.bin' })
    assert.deepEqual((await verifyCheckpoint(store)).problems, [])
  })
})

describe('export: data bytes checked against their CRC-32s', () => {
  /** A file of `size` patterned bytes, written in one go into one object (0000000001.0) of a fresh folder. */
  async function written(size: number) {
    const root = mkdtempSync(join(tmpdir(), 'ss-export-'))
    const store = new DirectoryStore(join(root, 'container'))
    const f = await SegmentFile.create(store)
    const ref = pattern(0, size, 7)
    await f.write(0, ref)
    await f.flush()
    await f.close()
    const { inode } = await readInode(store)
    return { root, store, ref, blockSize: 2 ** inode.dataShift }
  }
  /** Flips the lowest bit of byte `at` of the object at `key`. */
  async function flip(store: ObjectStore, key: string, at: number): Promise<void> {
    const bytes = Buffer.from(await store.get(key))
    bytes[at] = (bytes[at] as number) ^ 1
    await store.put(key, bytes)
  }
  /** Every kind of export that reads the data: to a file, and sent to a store (one put, parts). */
  async function exportsFail(store: ObjectStore, root: string, message: RegExp): Promise<void> {
    await rejectsCode(exportObject(store, join(root, 'out.bin')), 'ERR_CORRUPT', message)
    assert.deepEqual(readdirSync(root), ['container'], 'no file, no temporary file left')
    const dest = new MemoryStore()
    await rejectsCode(exportObject(store, { store: dest, key: 'one-put' }), 'ERR_CORRUPT', message)
    await rejectsCode(
      exportObject(store, { store: dest, key: 'parts' }, { ...SMALL, copy: false }),
      'ERR_CORRUPT',
      message,
    )
    assert.deepEqual(await collect(dest.list()), [], 'nothing written')
    assert.deepEqual(await collect(dest.listMultipart()), [], 'no upload left open')
  }

  it('a flipped bit in a data block fails the export as it fails a read, naming the object and block', async () => {
    const { root, store } = await written(64 * KiB)
    await flip(store, '0000000001.0', 100)
    const f = await SegmentFile.open(store)
    await rejectsCode(f.read(0, 4096), 'ERR_CORRUPT')
    await f.close()
    await exportsFail(store, root, /export of checkpoint 1: .*\/0000000001\.0: block 0 at byte 0 has CRC-32 /)
  })

  it('a last block cut by the file size and parts split inside blocks: exported equal, and checked', async () => {
    const { root, store, ref, blockSize } = await written(10 * 4096 + 100)
    const size = ref.length
    const tail = Math.floor(size / blockSize) // the block the file ends inside
    assert.ok(size % blockSize !== 0, 'the file ends inside a block')
    // Parts of 5001 to 10,007 bytes: most start and end inside a block.
    const odd = { minPartBytes: 5001, sendPartBytes: 10_007, copy: false }
    const out = join(root, 'out.bin')
    await exportObject(store, out)
    assert.equal(sha(readFileSync(out)), sha(ref), 'to a file: same bytes')
    const dest = new MemoryStore()
    const r = await exportObject(store, { store: dest, key: 'x' }, odd)
    assert.ok(r.parts > 2)
    assert.equal(sha(await dest.get('x')), sha(ref), 'sent in parts: same bytes')
    rmSync(out)
    await flip(store, '0000000001.0', size - 1)
    const message = new RegExp(`0000000001\\.0: block ${tail} at byte ${tail * blockSize} has CRC-32 `)
    await exportsFail(store, root, message)
    await rejectsCode(exportObject(store, { store: dest, key: 'y' }, odd), 'ERR_CORRUPT', message)
  })
})
