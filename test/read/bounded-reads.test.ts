/**
 * What a read allocates is bounded by what it wants, never by what an object holds or
 * claims: data parts of a directory container are replaced by sparse files (cheap on
 * disk, zeros when read) of tens of MiB, and no GET of a read may answer more than a few
 * MiB. An object with no header at its end fails the read with ERR_CORRUPT; a valid
 * object with a long run of meta blocks above its leaves (on paper) is read exactly, its
 * header and summary fetched from its end. verifyCheckpoint reads such an object's meta
 * blocks 16 MiB at a time, as its data, and keeps 20 of its problems.
 */
import assert from 'node:assert/strict'
import { open, readdir, readFile, rm, truncate } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { verifyCheckpoint } from '../../lib/admin/index.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { objectLayout } from '../../lib/format/header.js'
import { parseKey } from '../../lib/format/names.js'
import { decodeObject, encodeObjectTail } from '../../lib/format/object.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { buildContainer, within } from '../helpers/containers.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024
/** How long the damaged objects are made: far more than any read of the test wants. */
const LONG = 48 * MiB
/** The most one GET of a read may answer. */
const GET_LIMIT = 2 * MiB

/** Records the largest GET answer. */
class LargestGet extends WrappedStore {
  largest = 0
  gets = 0
  protected async around<T>(call: CallInfo, run: () => Promise<T>, bytesDown: (r: T) => number): Promise<T> {
    const r = await run()
    if (call.op === 'get') {
      this.gets++
      this.largest = Math.max(this.largest, bytesDown(r))
    }
    return r
  }
}

/** The data parts (part ≥ 1) holding meta blocks, as keys. */
async function dataParts(dir: string): Promise<string[]> {
  const out: string[] = []
  for (const key of await readdir(dir)) {
    const k = parseKey(key)
    if (k?.kind !== 'segment' || k.part === 0) continue
    if (decodeObject(await readFile(join(dir, key)), key).header.metaCount > 0) out.push(key)
  }
  return out
}

/** Rewrites object `key` as a valid one whose header counts meta blocks up to `size` bytes (zeros above its own). */
async function lengthenMeta(dir: string, key: string, size: number): Promise<void> {
  const path = join(dir, key)
  const o = decodeObject(await readFile(path), key)
  const prefix = (await readFile(path)).subarray(0, o.layout.summaryOffset)
  const { dataCount, summaryCrc: _, ...fields } = o.header
  const tailBytes = o.layout.objectSize - o.layout.summaryOffset
  const metaCount = o.header.metaCount + Math.floor((size - o.layout.objectSize) / o.layout.metaBlockSize)
  const tail = encodeObjectTail({ ...fields, metaCount }, o.summary)
  const layout = objectLayout({ dataCount, metaCount }, o.header)
  assert.equal(tail.byteLength, tailBytes)
  const fh = await open(path, 'r+')
  try {
    await fh.truncate(0)
    await fh.write(prefix, 0, prefix.byteLength, 0)
    await fh.write(tail, 0, tail.byteLength, layout.summaryOffset)
  } finally {
    await fh.close()
  }
}

async function readWhole(store: ObjectStore): Promise<Buffer> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/** Cold 4 KiB reads (a fresh handle each) at every 4 KiB of the file; the first error, if any. */
async function coldReads(store: ObjectStore, ref: Buffer): Promise<unknown> {
  let first: unknown
  for (let at = 0; at < ref.length; at += 4096) {
    const f = await SegmentFile.open(store, { readOnly: true })
    try {
      const n = Math.min(4096, ref.length - at)
      assert.deepEqual(Buffer.from(await f.read(at, n)), ref.subarray(at, at + n), `bytes at ${at}`)
    } catch (err) {
      if (err instanceof assert.AssertionError) throw err
      first ??= err
    } finally {
      await f.close()
    }
  }
  return first
}

describe('reads of objects longer than their tails', () => {
  const dirs: string[] = []
  const fresh = async (name: string) => {
    const dir = join(tmpdir(), `ss-bounded-${name}-${process.pid}`)
    await rm(dir, { recursive: true, force: true })
    dirs.push(dir)
    const refs = await buildContainer(new DirectoryStore(dir))
    const ref = [...refs.values()].at(-1) as Buffer
    const parts = await dataParts(dir)
    assert.ok(parts.length > 0, 'the container has data parts with leaves')
    return { dir, parts, ref }
  }
  after(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true })
  })

  it('a data part cut off from its header (a sparse file of 48 MiB): ERR_CORRUPT, no GET of more than 2 MiB', async () => {
    const { dir, parts, ref } = await fresh('long')
    for (const key of parts) await truncate(join(dir, key), LONG)
    const store = new LargestGet(new DirectoryStore(dir))
    const err = await within(coldReads(store, ref), 60_000, 'cold reads')
    assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), `cold reads fail with ERR_CORRUPT: ${err}`)
    await assert.rejects(readWhole(store), (e) => StreamSegmentError.is(e, 'ERR_CORRUPT'))
    assert.ok(store.largest <= GET_LIMIT, `largest GET answered ${store.largest} bytes`)
  })

  it('a valid data part whose header counts 48 MiB of meta blocks: read exactly, no GET of more than 2 MiB', async () => {
    const { dir, parts, ref } = await fresh('meta')
    for (const key of parts) await lengthenMeta(dir, key, LONG)
    const store = new LargestGet(new DirectoryStore(dir))
    assert.equal(await within(coldReads(store, ref), 60_000, 'cold reads'), undefined)
    assert.ok((await readWhole(store)).equals(ref), 'the whole file reads back')
    const chunks: Buffer[] = []
    for await (const c of createStreamSegmentReadStream({ store })) chunks.push(c as Buffer)
    assert.ok(Buffer.concat(chunks).equals(ref), 'the read stream reads it back')
    assert.ok(store.largest <= GET_LIMIT, `largest GET answered ${store.largest} bytes`)
  })
})

describe('verifyCheckpoint of an object counting 48 MiB of meta blocks', () => {
  it('reads them 16 MiB at a time, reports the zero blocks as nodes, keeps 20 problems and counts the rest', async () => {
    const dir = join(tmpdir(), `ss-bounded-verify-${process.pid}`)
    await rm(dir, { recursive: true, force: true })
    try {
      await buildContainer(new DirectoryStore(dir))
      const [key] = await dataParts(dir)
      assert.ok(key !== undefined)
      await lengthenMeta(dir, key, LONG)
      const store = new LargestGet(new DirectoryStore(dir))
      const cno = (parseKey(key) as { cno: number }).cno
      const report = await verifyCheckpoint(store, { cno })
      const mine = report.problems.filter((p) => p.where.startsWith(key))
      assert.equal(mine.length, 21, 'the first 20 problems and one counting the rest')
      assert.ok(mine.some((p) => p.what === 'node'))
      assert.ok(mine.some((p) => /and \d+ more problems/.test(p.message)))
      assert.ok(store.largest <= 16 * MiB, `largest GET answered ${store.largest} bytes`)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
