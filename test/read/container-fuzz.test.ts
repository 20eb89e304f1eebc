/**
 * Container fuzzing: a small container of three checkpoints on the memory store, then per
 * case ONE stored object damaged — bits flipped, a field range overwritten with random
 * bytes, truncated, extended, swapped with another object, replaced by another
 * checkpoint's object of its kind (an older `inode` object among them: its successor is
 * then complete and unpublished) or by the same key of another container — or crafted:
 * header, summary, node, inode object or data slot changed and its CRCs sealed again
 * with the project's own helpers, so the checks past them are reached. Then every
 * checkpoint is opened and read whole and in random ranges, the latest through the read
 * stream and exported, each verified and inspected, the checkpoints listed, gc run dry
 * and for real (a checkpoint it keeps that read back before reads back the same after),
 * and a writer opened (rolling forward) that changes a few bytes and flushes (its
 * checkpoint reads back as what it read, changed). What must hold, within a time limit
 * per call: every failure is a StreamSegmentError (ERR_CORRUPT, ERR_NOT_FOUND or
 * ERR_UNSUPPORTED), never a TypeError nor ERR_INTERNAL nor an unhandled rejection; a read
 * returns the written bytes or fails, and verify finds a problem in a checkpoint that
 * cannot be read; unless the case was crafted (a resealed CRC is no defence against
 * crafted bytes): then the reads of one checkpoint must at least agree with each other.
 * Exported with server-side copies, only its size is checked (copied runs are not read,
 * their CRCs unchecked, as documented); sent through the client (copy: false), its bytes
 * are: the checkpoint's, or a failure. Seeded: a failure names the seed and the case;
 * CONTAINER_FUZZ_SEED, CONTAINER_FUZZ_CASES (per format) and CONTAINER_FUZZ_CASE (one case)
 * replay or extend it.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { exportObject, gc, inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { readInode } from '../../lib/container/inode.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { HEADER_BYTES, type ObjectLayout, SUMMARY_ENTRY_BYTES } from '../../lib/format/header.js'
import { encodeInodeObject, INODE_KEY, parseKey, segmentKey } from '../../lib/format/index.js'
import { decodeObject } from '../../lib/format/object.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { crc32 } from '../../lib/util/crc32.js'
import { buildContainer, copyStore, prng, smallSettings, within } from '../helpers/containers.js'
import { resealHeader, resealInodeObject, resealNode, view } from '../helpers/format.js'

const SEED = Number(process.env.CONTAINER_FUZZ_SEED ?? 20261205)
const CASES = Number(process.env.CONTAINER_FUZZ_CASES ?? 40)
const ONLY = process.env.CONTAINER_FUZZ_CASE === undefined ? undefined : Number(process.env.CONTAINER_FUZZ_CASE)
const LIMIT_MS = 10_000
const ALLOWED = new Set(['ERR_CORRUPT', 'ERR_NOT_FOUND', 'ERR_UNSUPPORTED'])
/**
 * A crafted inode may give the file any size up to 2^32 blocks, holes read as zeros: reads
 * stop here, and a checkpoint larger is not streamed, exported nor opened by a writer.
 */
const MAX_READ = 4 * 1024 * 1024

type Rnd = () => number

/** A container as written: its objects, each segment object's layout, each checkpoint's content. */
interface Pristine {
  store: MemoryStore
  keys: string[]
  layouts: Map<string, ObjectLayout>
  refs: Map<number, Buffer>
  /** Every pointer stored in a node or an inode root, (hi, lo): what a crafted entry is set to. */
  pointers: Array<[number, number]>
}

/** What a case did, and whether it was crafted (its CRCs sealed again). */
interface Mutation {
  label: string
  crafted: boolean
}

const int = (rnd: Rnd, n: number) => Math.floor(rnd() * n)
const pick = <T>(rnd: Rnd, xs: readonly T[]): T => xs[int(rnd, xs.length)] as T
function randomBytes(rnd: Rnd, n: number): Uint8Array {
  const b = new Uint8Array(n)
  for (let i = 0; i < n; i++) b[i] = int(rnd, 256)
  return b
}

async function pristine(format: 'stream' | 'parted'): Promise<Pristine> {
  const store = new MemoryStore()
  const refs = await buildContainer(store, { ...smallSettings, format })
  const keys: string[] = []
  const layouts = new Map<string, ObjectLayout>()
  const pointers: Array<[number, number]> = []
  for await (const e of store.list('')) {
    keys.push(e.key)
    if (e.key === INODE_KEY) continue
    const obj = decodeObject(await store.get(e.key), e.key)
    layouts.set(e.key, obj.layout)
    for (const n of obj.nodes)
      for (let i = 0; i < n.count; i++) pointers.push([n.ptrHi[i] as number, n.ptrLo[i] as number])
    const x = obj.header.inode
    for (let i = 0; i < x.rootCount; i++) pointers.push([x.rootPtrHi[i] as number, x.rootPtrLo[i] as number])
  }
  return { store, keys, layouts, refs, pointers }
}

/** A range of the object worth damaging: a header field, a summary entry, a node's start, data, or anywhere. */
function someRange(rnd: Rnd, size: number, l: ObjectLayout | undefined): [number, number] {
  const len = 1 + int(rnd, 16)
  const at = (start: number, end: number) => {
    const s = start + int(rnd, Math.max(1, end - start))
    return [s, Math.min(size, s + len)] as [number, number]
  }
  if (l === undefined || size !== l.objectSize) return at(0, size)
  switch (int(rnd, 5)) {
    case 0:
      return at(l.headerOffset, l.headerOffset + HEADER_BYTES)
    case 1:
      return l.summaryEnd > l.summaryOffset ? at(l.summaryOffset, l.summaryEnd) : at(0, size)
    case 2: {
      if (l.metaEnd === l.metaOffset) return at(0, size)
      const node = l.metaOffset + int(rnd, (l.metaEnd - l.metaOffset) / l.metaBlockSize) * l.metaBlockSize
      return at(node, node + 64)
    }
    case 3:
      return l.dataEnd > l.dataOffset ? at(l.dataOffset, l.dataEnd) : at(0, size)
    default:
      return at(0, size)
  }
}

/** Seals the summary CRC into the header, then the header's own CRC. */
function resealSummary(b: Uint8Array, l: ObjectLayout): void {
  const header = b.subarray(l.headerOffset, l.headerOffset + HEADER_BYTES)
  view(header).setUint32(36, crc32(b.subarray(l.summaryOffset, l.summaryEnd)), true)
  resealHeader(header)
}

/** Random edits of 1..4 bytes in [start, end), each to 0, 1, 0xff or a random byte. */
function edit(rnd: Rnd, b: Uint8Array, start: number, end: number): string {
  const n = 1 + int(rnd, 4)
  const at: number[] = []
  for (let i = 0; i < n; i++) {
    const p = start + int(rnd, end - start)
    b[p] = pick(rnd, [0, 1, 0xff, int(rnd, 256), int(rnd, 256)])
    at.push(p)
  }
  return `bytes ${at.join(',')}`
}

/** Damages one object of `store` (a copy of `p`); says what it did. */
async function mutate(rnd: Rnd, p: Pristine, other: Pristine, store: MemoryStore): Promise<Mutation> {
  const key = pick(rnd, p.keys)
  const b = new Uint8Array(await store.get(key))
  const l = p.layouts.get(key)
  const put = (bytes: Uint8Array) => store.put(key, bytes)
  const kind = int(rnd, 15)
  switch (kind) {
    case 0: {
      const bits: number[] = []
      for (let i = 1 + int(rnd, 4); i > 0; i--) {
        const bit = int(rnd, b.length * 8)
        b[bit >> 3] = (b[bit >> 3] as number) ^ (1 << (bit & 7))
        bits.push(bit)
      }
      await put(b)
      return { label: `${key}: bits ${bits.join(',')} flipped`, crafted: false }
    }
    case 1: {
      const [s, e] = someRange(rnd, b.length, l)
      b.set(randomBytes(rnd, e - s), s)
      await put(b)
      return { label: `${key}: bytes [${s}, ${e}) overwritten`, crafted: false }
    }
    case 2: {
      const cut = pick(rnd, [0, 1, HEADER_BYTES, HEADER_BYTES + 1, 4096, int(rnd, b.length), int(rnd, b.length)])
      const n = Math.max(0, b.length - Math.max(1, cut))
      await put(b.subarray(0, n))
      return { label: `${key}: truncated to ${n} of ${b.length} bytes`, crafted: false }
    }
    case 3: {
      const n = pick(rnd, [1, 16, 255, 4096, 1 + int(rnd, 9000)])
      const tail = rnd() < 0.5 ? new Uint8Array(n) : randomBytes(rnd, n)
      await put(Buffer.concat([b, tail]))
      return { label: `${key}: ${n} bytes appended`, crafted: false }
    }
    case 4: {
      const k2 = pick(rnd, p.keys)
      const b2 = await store.get(k2)
      await store.put(k2, b)
      await put(b2)
      return { label: `${key} and ${k2} swapped`, crafted: false }
    }
    case 5: {
      // Another checkpoint's object of the same kind: a part 0 for a part 0, a data part
      // for a data part, an older inode object (encoded from an older part 0's inode).
      if (key === INODE_KEY) {
        const cnos = [...p.refs.keys()]
        const cno = pick(rnd, cnos)
        const obj = decodeObject(await p.store.get(segmentKey(cno, 0)), segmentKey(cno, 0))
        await put(encodeInodeObject(obj.header.inode))
        return { label: `inode: checkpoint ${cno}'s inode object`, crafted: false }
      }
      const part0 = parseKey(key)?.kind === 'segment' && key.endsWith('.0')
      const kin = p.keys.filter((k) => k !== INODE_KEY && k.endsWith('.0') === part0 && k !== key)
      const k2 = pick(rnd, kin.length > 0 ? kin : [key])
      await put(await store.get(k2))
      return { label: `${key}: replaced by ${k2}'s bytes`, crafted: false }
    }
    case 6: {
      // The same key in another container made at the same place later (or nothing there).
      if (!other.keys.includes(key)) {
        await store.delete(key)
        return { label: `${key}: deleted (no such key in the other container)`, crafted: false }
      }
      await put(await other.store.get(key))
      return { label: `${key}: replaced by another container's ${key}`, crafted: false }
    }
    case 7: {
      if (l === undefined) {
        const what = edit(rnd, b, 8, 124)
        resealInodeObject(b)
        await put(b)
        return { label: `inode: ${what} changed, CRC sealed again`, crafted: true }
      }
      const header = b.subarray(l.headerOffset, l.headerOffset + HEADER_BYTES)
      // Mostly the fields (counts, shifts, names, inode roots), sometimes anywhere.
      const what = rnd() < 0.7 ? edit(rnd, header, 8, 152 + 64) : edit(rnd, header, 0, 252)
      resealHeader(header)
      await put(b)
      return { label: `${key}: header ${what} changed, CRC sealed again`, crafted: true }
    }
    case 8: {
      if (l === undefined || l.summaryEnd === l.summaryOffset) return mutate(rnd, p, other, store)
      const entry = l.summaryOffset + int(rnd, (l.summaryEnd - l.summaryOffset) / SUMMARY_ENTRY_BYTES) * 16
      const what = edit(rnd, b, entry, entry + SUMMARY_ENTRY_BYTES)
      resealSummary(b, l)
      await put(b)
      return { label: `${key}: summary ${what} changed, summary and header CRC sealed again`, crafted: true }
    }
    case 9: {
      if (l === undefined || l.metaEnd === l.metaOffset) return mutate(rnd, p, other, store)
      const j = int(rnd, (l.metaEnd - l.metaOffset) / l.metaBlockSize)
      const node = b.subarray(l.metaOffset + j * l.metaBlockSize, l.metaOffset + (j + 1) * l.metaBlockSize)
      const what = rnd() < 0.8 ? edit(rnd, node, 4, 16 + 4 * 12) : edit(rnd, node, 0, node.length)
      resealNode(node)
      await put(b)
      return { label: `${key}: meta block ${j} ${what} changed, node CRC sealed again`, crafted: true }
    }
    case 10: {
      // A data slot changed and every CRC over it sealed again: undetectable by design.
      if (l === undefined || l.dataEnd === l.dataOffset) return mutate(rnd, p, other, store)
      const slot = int(rnd, (l.dataEnd - l.dataOffset) / l.dataBlockSize)
      const at = l.dataOffset + slot * l.dataBlockSize
      const what = edit(rnd, b, at, at + l.dataBlockSize)
      const entry = l.summaryOffset + slot * SUMMARY_ENTRY_BYTES
      view(b).setUint32(entry + 8, crc32(b.subarray(at, at + l.dataBlockSize)), true)
      resealSummary(b, l)
      await put(b)
      return { label: `${key}: data slot ${slot} ${what} changed, every CRC sealed again`, crafted: true }
    }
    case 12: {
      // A node entry pointed somewhere another entry points, or its key moved by one.
      if (l === undefined || l.metaEnd === l.metaOffset) return mutate(rnd, p, other, store)
      const j = int(rnd, (l.metaEnd - l.metaOffset) / l.metaBlockSize)
      const node = b.subarray(l.metaOffset + j * l.metaBlockSize, l.metaOffset + (j + 1) * l.metaBlockSize)
      const v = view(node)
      const i = int(rnd, v.getUint16(6, true))
      const at = 16 + 12 * i
      let what: string
      if (rnd() < 0.7) {
        const [hi, lo] = pick(rnd, p.pointers)
        v.setUint32(at + 4, lo, true)
        v.setUint32(at + 8, hi, true)
        what = `entry ${i} pointed at (${hi}, ${lo})`
      } else {
        v.setUint32(at, (v.getUint32(at, true) + pick(rnd, [1, -1, 4, 100])) >>> 0, true)
        what = `entry ${i} key moved`
      }
      resealNode(node)
      await put(b)
      return { label: `${key}: meta block ${j} ${what}, node CRC sealed again`, crafted: true }
    }
    case 13: {
      // An inode's fields set to other plausible values: in the inode object, or in a header.
      const x = l === undefined ? b.subarray(16, 112) : b.subarray(l.headerOffset + 152, l.headerOffset + 248)
      const v = view(x)
      const field = int(rnd, 5)
      let what: string
      if (field === 0) {
        const size = Math.max(0, v.getUint32(0, true) + pick(rnd, [-1, 1, -4096, 4096, 40960, -100000]))
        v.setUint32(0, size, true)
        what = `size ${size}`
      } else if (field === 1) {
        const cno = 1 + int(rnd, 5)
        v.setUint32(8, cno, true)
        what = `cno ${cno}`
      } else if (field === 2) {
        const level = int(rnd, 4)
        v.setUint8(15, level)
        what = `rootLevel ${level}`
      } else if (field === 3) {
        const count = int(rnd, 5)
        v.setUint16(16, count, true)
        what = `rootCount ${count}`
      } else {
        const i = int(rnd, 4)
        const [hi, lo] = pick(rnd, p.pointers)
        v.setUint32(40 + 12 * i + 4, lo, true)
        v.setUint32(40 + 12 * i + 8, hi, true)
        what = `root ${i} pointed at (${hi}, ${lo})`
      }
      if (l === undefined) resealInodeObject(b)
      else resealHeader(b.subarray(l.headerOffset, l.headerOffset + HEADER_BYTES))
      await put(b)
      return { label: `${key}: inode ${what}, CRC sealed again`, crafted: true }
    }
    case 14: {
      // Another object of the same kind renamed: its header names this key, CRC sealed again.
      const k = parseKey(key)
      const kin = p.keys.filter((x) => x !== INODE_KEY && x.endsWith('.0') === key.endsWith('.0') && x !== key)
      if (k?.kind !== 'segment' || kin.length === 0) return mutate(rnd, p, other, store)
      const k2 = pick(rnd, kin)
      const b2 = new Uint8Array(await store.get(k2))
      const l2 = p.layouts.get(k2) as ObjectLayout
      const header = b2.subarray(l2.headerOffset, l2.headerOffset + HEADER_BYTES)
      view(header).setUint32(16, k.cno, true)
      view(header).setUint32(20, k.part, true)
      if (k.part === 0) view(header).setUint32(152 + 8, k.cno, true) // part 0's inode is its checkpoint's
      resealHeader(header)
      await put(b2)
      return { label: `${key}: ${k2}'s bytes, its header renamed and sealed again`, crafted: true }
    }
    default: {
      await store.delete(key)
      return { label: `${key}: deleted`, crafted: false }
    }
  }
}

/** What one call gave: its value, or the allowed error it failed with; anything else throws. */
async function attempt<T>(what: string, fn: () => Promise<T>): Promise<{ value: T } | { err: StreamSegmentError }> {
  try {
    return { value: await within(fn(), LIMIT_MS, what) }
  } catch (err) {
    if (err instanceof StreamSegmentError && ALLOWED.has(err.code)) return { err }
    throw new Error(`${what}: ${err instanceof StreamSegmentError ? err.code : 'not a StreamSegmentError'}: ${err}`, {
      cause: err,
    })
  }
}

/** Reads checkpoint `cno` (undefined: the latest) whole and in two random ranges; its cno and bytes. */
async function readAll(
  store: ObjectStore,
  cno: number | undefined,
  rnd: Rnd,
  what: string,
): Promise<{ cno: number; bytes: Buffer; ranges: Array<[number, Buffer]> } | undefined> {
  const r = await attempt(what, async () => {
    const f = await SegmentFile.open(store, { cno, readOnly: true })
    try {
      const bytes = Buffer.from(await f.read(0, Math.min(f.size, MAX_READ) + 10))
      assert.equal(bytes.length, Math.min(f.size, MAX_READ + 10), `${what}: a read past the end gives the size`)
      const ranges: Array<[number, Buffer]> = []
      for (let i = 0; i < 2; i++) {
        // On the same handle: from what its caches hold.
        const at = int(rnd, Math.min(f.size, MAX_READ) + 1)
        ranges.push([at, Buffer.from(await f.read(at, Math.min(f.size - at, 1 + int(rnd, 20000))))])
      }
      for (let i = 0; i < 2; i++) {
        // Each on a fresh handle: cold reads take other paths than the whole read did.
        const g = await SegmentFile.open(store, { cno, readOnly: true })
        try {
          const at = int(rnd, Math.min(f.size, MAX_READ) + 1)
          const n = Math.min(f.size - at, 1 + int(rnd, 3 * 4096 + 100))
          ranges.push([at, Buffer.from(await g.read(at, n))])
        } finally {
          await g.close()
        }
      }
      return { cno: f.cno, bytes, ranges }
    } finally {
      await f.close()
    }
  })
  return 'value' in r ? r.value : undefined
}

/** The bytes of checkpoint `cno` every successful read gave must agree (and be `ref` unless crafted). */
function agree(got: Array<[number, Buffer]>, ref: Buffer | undefined, crafted: boolean, what: string): void {
  const [first] = got
  for (const [at, bytes] of got) {
    if (ref !== undefined && !crafted) {
      assert.ok(bytes.equals(ref.subarray(at, at + bytes.length)), `${what}: WRONG DATA at ${at} (+${bytes.length})`)
    }
    if (first !== undefined && first[0] === 0 && bytes.length > 0) {
      const want = first[1].subarray(at, at + bytes.length)
      assert.ok(bytes.equals(want), `${what}: two reads of the same checkpoint disagree at ${at}`)
    }
  }
}

/** Two whole reads of one checkpoint, the first when there was one. */
function whole(seen: Buffer | undefined, bytes: Buffer): Array<[number, Buffer]> {
  return seen === undefined
    ? [[0, bytes]]
    : [
        [0, seen],
        [0, bytes],
      ]
}

async function runCase(p: Pristine, other: Pristine, seed: number, n: number): Promise<void> {
  const rnd = prng(seed * 1_000_003 + n)
  const store = new MemoryStore()
  await copyStore(p.store, store)
  const m = await mutate(rnd, p, other, store)
  const what = `seed ${seed} case ${n} (${m.label})`
  // What each way of opening read: by number, or 'latest' through the inode object. Crafted,
  // the two may name other inodes for one checkpoint (the inode object and part 0's header).
  const readable = new Map<number | 'latest', Buffer>()
  const cnos = [...p.refs.keys()]
  for (const cno of [undefined, ...cnos]) {
    const w = `${what}: checkpoint ${cno ?? 'latest'}`
    const r = await readAll(store, cno, rnd, w)
    if (r === undefined) continue
    if (cno !== undefined) assert.equal(r.cno, cno, `${w}: opened another checkpoint`)
    const ref = p.refs.get(r.cno)
    if (!m.crafted) assert.ok(ref !== undefined, `${w}: opened checkpoint ${r.cno}, never written`)
    if (!m.crafted) assert.equal(r.bytes.length, ref?.length, `${w}: size`)
    agree([[0, r.bytes], ...r.ranges], ref, m.crafted, w)
    readable.set(cno ?? 'latest', r.bytes)
  }

  // The latest through the read stream, and exported: the same bytes, or a failure.
  const commit = await attempt(`${what}: inode`, () => readInode(store))
  const published = 'value' in commit ? commit.value.inode : undefined
  const small = published === undefined || published.size <= MAX_READ
  const latest = await attempt(`${what}: read stream`, async () => {
    const chunks: Buffer[] = []
    if (!small) return undefined
    for await (const c of createStreamSegmentReadStream({ store, readGetMaxBytes: 16 * 1024 })) {
      chunks.push(Buffer.from(c as Uint8Array))
    }
    return Buffer.concat(chunks)
  })
  if ('value' in latest && latest.value !== undefined && published !== undefined) {
    const ref = p.refs.get(published.cno)
    agree(whole(readable.get('latest'), latest.value), ref, m.crafted, `${what}: read stream`)
  }
  const dest = new MemoryStore()
  const sizes = { minPartBytes: 16 * 1024, sendPartBytes: 32 * 1024 }
  const exported = await attempt(`${what}: export`, async () => {
    if (!small) return undefined
    const r = await exportObject(store, { store: dest, key: 'x' }, sizes)
    return { cno: r.cno, bytes: Buffer.from(await dest.get('x')) }
  })
  // Runs copied server-side are not read, their CRCs unchecked (documented): its size is checked.
  if ('value' in exported && exported.value !== undefined && !m.crafted) {
    assert.equal(exported.value.bytes.length, p.refs.get(exported.value.cno)?.length, `${what}: export: size`)
  }
  // Sent through the client, every byte is checked against its block's CRC: the bytes written, or a failure.
  const sent = await attempt(`${what}: export, copy: false`, async () => {
    if (!small) return undefined
    const r = await exportObject(store, { store: dest, key: 'y' }, { ...sizes, copy: false })
    return { cno: r.cno, bytes: Buffer.from(await dest.get('y')) }
  })
  if ('value' in sent && sent.value !== undefined && !m.crafted) {
    const ref = p.refs.get(sent.value.cno)
    assert.ok(ref !== undefined && sent.value.bytes.equals(ref), `${what}: export, copy: false: WRONG DATA`)
  }

  // The admin wing: problems reported, never thrown but as an allowed error.
  for (const cno of [undefined, ...cnos]) {
    const w = `${what}: checkpoint ${cno ?? 'latest'}`
    const v = await attempt(`${w}: verify`, () => verifyCheckpoint(store, { cno }))
    // Crafted too: a header whose ctime readers refuse (a container made since) is a problem to verify.
    const unread = cno !== undefined && !readable.has(cno)
    if ('value' in v && v.value.problems.length === 0 && unread) {
      assert.fail(`${w}: verify found nothing, but the checkpoint could not be read`)
    }
    await attempt(`${w}: inspect`, () => inspectCheckpoint(store, { cno }))
  }
  await attempt(`${what}: ls`, () => listCheckpoints(store))
  await attempt(`${what}: gc dry run`, () => gc(store, { graceMs: 0, dryRun: true }))

  // gc for real: a checkpoint it keeps that read back before reads back the same after.
  const swept = await attempt(`${what}: gc`, () => gc(store, { graceMs: 0, keep: 3 }))
  if ('value' in swept && swept.value.stopped === undefined) {
    for (const cno of swept.value.kept) {
      const before = readable.get(cno)
      if (before === undefined) continue
      const r = await readAll(store, cno, rnd, `${what}: checkpoint ${cno} after gc`)
      assert.ok(r !== undefined, `${what}: checkpoint ${cno}, kept by gc, read before it and not after`)
      assert.ok(r.bytes.equals(before), `${what}: checkpoint ${cno} reads other bytes after gc`)
    }
  }

  // A writer: it rolls forward a complete checkpoint built on the published one, if any,
  // then changes a few bytes, partial blocks at both ends (read, changed, written back).
  const patch = Buffer.from(randomBytes(rnd, 1 + int(rnd, 9000)))
  const patchAt = int(rnd, 600 * 1024)
  const w = await attempt(`${what}: writer`, async () => {
    const f = await SegmentFile.open(store, { ...smallSettings, rollForwardAfterMs: 0 })
    try {
      if (f.size > MAX_READ) return undefined
      const opened = { cno: f.cno, bytes: Buffer.from(await f.read(0, f.size)) }
      await f.write(patchAt, patch)
      return { ...opened, flushed: (await f.flush()).cno }
    } finally {
      await f.close()
    }
  })
  if ('value' in w && w.value !== undefined) {
    const { cno, bytes, flushed } = w.value
    const ref = p.refs.get(cno)
    if (!m.crafted) assert.ok(ref !== undefined, `${what}: a writer opened checkpoint ${cno}, never written`)
    const seen = cno === published?.cno ? readable.get('latest') : undefined
    agree(whole(seen, bytes), ref, m.crafted, `${what}: writer`)
    const want = Buffer.alloc(Math.max(bytes.length, patchAt + patch.length))
    bytes.copy(want)
    patch.copy(want, patchAt)
    const r = await readAll(store, flushed, rnd, `${what}: checkpoint ${flushed}, the writer's`)
    assert.ok(r !== undefined, `${what}: the checkpoint the writer published (${flushed}) cannot be read`)
    agree([[0, r.bytes], ...r.ranges], want, false, `${what}: checkpoint ${flushed}, the writer's`)
  }
}

for (const format of ['stream', 'parted'] as const) {
  describe(`container fuzz, ${format}`, () => {
    let p: Pristine
    let other: Pristine
    const unhandled: unknown[] = []
    const onUnhandled = (err: unknown) => unhandled.push(err)

    before(async () => {
      p = await pristine(format)
      // Made later at the same place: its objects have the same names, another ctime.
      await new Promise((r) => setTimeout(r, 5))
      other = await pristine(format)
      process.on('unhandledRejection', onUnhandled)
    })
    after(() => {
      process.off('unhandledRejection', onUnhandled)
    })

    it(`${CASES} cases, seed ${SEED}: no crash, no hang, no wrong data`, async () => {
      const seed = format === 'parted' ? SEED + 1 : SEED
      // Every case runs: the failures are reported together, each with its seed and case.
      const failures: string[] = []
      for (let n = 0; n < CASES; n++) {
        if (ONLY !== undefined && n !== ONLY) continue
        try {
          await runCase(p, other, seed, n)
          await new Promise((r) => setImmediate(r))
          assert.deepEqual(unhandled.splice(0), [], `seed ${seed} case ${n}: unhandled rejections`)
        } catch (err) {
          failures.push((err as Error).message)
        }
      }
      assert.deepEqual(failures, [], `${failures.length} of ${CASES} cases failed`)
    })
  })
}
