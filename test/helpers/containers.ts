/**
 * Containers for the read tests: several checkpoints over a file with holes, rewrites, a
 * truncation and a multi-level block map, each checkpoint's content kept as a reference.
 */
import { constants, promises as fs } from 'node:fs'
import { SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { pattern } from './pattern.js'

const KiB = 1024

import { smallSettings } from './small-settings.js'

export { smallSettings }

/** A file and its reference, in step. */
export class Tracked {
  ref = Buffer.alloc(0)
  constructor(readonly file: SegmentFile) {}

  async write(at: number, length: number, seed: number): Promise<void> {
    const b = pattern(at, length, seed)
    await this.file.write(at, b)
    this.grow(at + length)
    b.copy(this.ref, at)
  }
  async zero(at: number, length: number): Promise<void> {
    await this.file.writeZeroes(at, length)
    this.grow(at + length)
    this.ref.fill(0, at, at + length)
  }
  async truncate(size: number): Promise<void> {
    await this.file.truncate(size)
    if (size <= this.ref.length) this.ref = Buffer.from(this.ref.subarray(0, size))
    else this.grow(size)
  }
  private grow(n: number): void {
    if (n <= this.ref.length) return
    const b = Buffer.alloc(n)
    this.ref.copy(b)
    this.ref = b
  }
}

/** Writes three checkpoints into `store`; returns each one's content by cno. */
export async function buildContainer(
  store: ObjectStore,
  settings: Partial<Settings> = smallSettings,
): Promise<Map<number, Buffer>> {
  const refs = new Map<number, Buffer>()
  const t = new Tracked(await SegmentFile.create(store, settings))
  await t.write(0, 300 * KiB, 1)
  await t.write(400 * KiB, 100 * KiB + 123, 2) // a hole at 300..400 KiB, a partial last block
  refs.set((await t.file.flush()).cno, Buffer.from(t.ref))
  await t.write(100 * KiB + 7, 50 * KiB, 3)
  await t.zero(200 * KiB, 10 * KiB)
  await t.write(500 * KiB, 100 * KiB, 4)
  refs.set((await t.file.flush()).cno, Buffer.from(t.ref))
  await t.truncate(550 * KiB + 5)
  await t.write(10 * KiB, 50 * KiB, 5)
  await t.write(12 * KiB, 4 * KiB, 6) // written again within the checkpoint
  refs.set((await t.file.flush()).cno, Buffer.from(t.ref))
  await t.file.close()
  return refs
}

/** Copies every object of `from` into `to` (unconditional puts). */
export async function copyStore(from: ObjectStore, to: ObjectStore): Promise<void> {
  for await (const e of from.list('')) await to.put(e.key, await from.get(e.key))
}

/** A deterministic PRNG (mulberry32). */
export function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Rejects after `ms` unless `p` settles first: a hang is a failure, not a stuck test. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms)
  })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

/**
 * `p` settles within 2 s (`within`); a call stuck in a blocking open of `fifo` (the bug a
 * test looks for) is let go afterwards by a writer opening it, or the process could not exit.
 */
export async function withinFreeingFifo<T>(p: Promise<T>, fifo: string, what: string): Promise<T> {
  try {
    return await within(p, 2_000, what)
  } finally {
    const w = await fs.open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined)
    await w?.close()
    await p.catch(() => {})
  }
}

/** The bytes of checkpoint `cno` (default: the published one), read through a handle of its own. */
export async function readAll(store: ObjectStore, cno?: number): Promise<Buffer> {
  const f = await SegmentFile.open(store, { cno, readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

/** The published checkpoint of the container: its number and every byte (a read-only open). */
export async function readPublished(store: ObjectStore): Promise<{ cno: number; bytes: Buffer }> {
  const r = await SegmentFile.open(store, { readOnly: true })
  try {
    return { cno: r.cno, bytes: Buffer.from(await r.read(0, r.size)) }
  } finally {
    await r.close()
  }
}

/** Every item of an async iterable (a listing), in order. */
export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const x of it) out.push(x)
  return out
}

/** Publishes `bytes` as the container's first checkpoint (the content a failing writer must leave). */
export async function publishContent(
  store: ObjectStore,
  bytes: Uint8Array,
  settings?: Partial<Settings>,
): Promise<void> {
  const f = await SegmentFile.create(store, settings)
  await f.write(0, bytes)
  await f.flush()
  await f.close()
}

/**
 * A writer opened through `wrap(base)` (a test store over `base`) on a container whose first
 * checkpoint holds the model `ref` (`size` bytes of pattern 1), published straight to `base`.
 */
export async function openedOver<S extends ObjectStore>(
  settings: Partial<Settings>,
  size: number,
  wrap: (base: MemoryStore) => S,
): Promise<{ base: MemoryStore; store: S; ref: Buffer; f: SegmentFile }> {
  const base = new MemoryStore()
  const ref = pattern(0, size, 1)
  await publishContent(base, ref, settings)
  const store = wrap(base)
  return { base, store, ref, f: await SegmentFile.open(store, settings) }
}

/** How many multipart uploads the store holds open. */
export async function openUploadCount(store: ObjectStore): Promise<number> {
  let n = 0
  for await (const _ of store.listMultipart()) n++
  return n
}

/** 'ok' when `p` resolves within `ms`, else what it rejected with (a hang rejects `within`). */
export function outcomeWithin(p: Promise<unknown>, ms: number, what: string): Promise<unknown> {
  return within(
    p.then(
      () => 'ok',
      (e: unknown) => e,
    ),
    ms,
    what,
  )
}

/**
 * A 24 MiB file of many objects as checkpoint 1 (its last blocks' data and leaves in part
 * 0), and one block written again as checkpoint 2, in a memory store: an older checkpoint
 * to open by number.
 */
export async function olderCheckpointOfMany(format: 'stream' | 'parted'): Promise<MemoryStore> {
  const MiB = 1024 * KiB
  const store = new MemoryStore()
  const f = await SegmentFile.create(store, {
    format,
    dataCacheDirtyMaxBytesThreshold: 2 * MiB,
    segmentBufferSize: 4 * MiB,
  })
  for (let at = 0; at < 24 * MiB; at += MiB) await f.write(at, pattern(at, MiB, 2))
  if ((await f.flush()).objects < 8) throw new Error('olderCheckpointOfMany: fewer than 8 objects')
  await f.write(4 * KiB, pattern(0, 4 * KiB, 3))
  await f.flush()
  await f.close()
  return store
}

/**
 * A conflict loser's part 0 below the published checkpoint, in `store`: checkpoint 1,
 * then two writers on it (conflictPolicy 'retry', the default): a publishes 2, b loses
 * with 3 (its part 0 stays, never published), then publishes its view as 4, built on 2.
 * The content of each: 1 is pattern seed 1, 2 seed 2, 3 and 4 seed 3 (20,000 bytes).
 */
export async function conflictLoser(store: ObjectStore): Promise<void> {
  const f = await SegmentFile.create(store)
  await f.write(0, pattern(0, 20_000, 1))
  if ((await f.flush()).cno !== 1) throw new Error('conflictLoser: the first checkpoint is not 1')
  await f.close()
  const a = await SegmentFile.open(store)
  const b = await SegmentFile.open(store)
  await a.write(0, pattern(0, 20_000, 2))
  await b.write(0, pattern(0, 20_000, 3))
  const [ca, cb] = [(await a.flush()).cno, (await b.flush()).cno]
  await a.close()
  await b.close()
  if (ca !== 2 || cb !== 4)
    throw new Error(`conflictLoser: a published ${ca}, b ${cb}; expected 2 and 4 (b losing with 3)`)
}
