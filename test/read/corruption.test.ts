/**
 * Corruption anywhere in a stored container is reported, never returned as data: bytes
 * flipped in data, meta blocks, summaries and headers, objects truncated, extended,
 * deleted or swapped between keys, on the memory and the directory store. After each
 * damage every checkpoint is read whole (SegmentFile.read), the latest also through the
 * read stream, by downloadFile (a failed one leaves no file) and by small cold reads
 * (across objects' ends and elsewhere), and verified: a read returns exactly the
 * checkpoint's content or fails with ERR_CORRUPT (ERR_NOT_FOUND for a missing object),
 * within a time limit; verify reports a problem whenever the
 * damaged object belongs to the checkpoint. In both formats: tail first (StreamSegment)
 * and head first (PartedSegment). CORRUPTION_RUNS=n flips more. Each format's cases run in
 * a worker thread (see caseWorker); the directory cases copy a folder written once.
 */
import assert from 'node:assert/strict'
import { cp, mkdtemp, readdir, readFile, rm, truncate as truncateFile, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { isMainThread, type MessagePort, parentPort, Worker, workerData } from 'node:worker_threads'
import { inspectCheckpoint, verifyCheckpoint } from '../../lib/admin/index.js'
import { StreamSegmentError } from '../../lib/errors.js'
import type { objectLayout } from '../../lib/format/header.js'
import { FORMAT_PARTED, FORMAT_STREAM } from '../../lib/format/inode.js'
import { parseKey, segmentKey } from '../../lib/format/names.js'
import { decodeObject } from '../../lib/format/object.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from '../../lib/format/pointer.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { CRC32_OFF_LOOP_MIN_BYTES } from '../../lib/util/crc32.js'
import { buildContainer, copyStore, prng, smallSettings, within } from '../helpers/containers.js'

const ALLOWED = new Set(['ERR_CORRUPT', 'ERR_NOT_FOUND', 'ERR_UNSUPPORTED'])
const runs = Number(process.env.CORRUPTION_RUNS ?? 60)

interface Damage {
  label: string
  /** The damaged key ('inode' included). */
  key: string
  apply: (s: Edit) => Promise<void>
}

/** The few operations a damage needs, on either store kind. */
interface Edit {
  read(key: string): Promise<Buffer>
  write(key: string, bytes: Uint8Array): Promise<void>
  remove(key: string): Promise<void>
}

function memoryEdit(store: MemoryStore): Edit {
  return {
    read: async (k) => Buffer.from(await store.get(k)),
    write: async (k, b) => {
      await store.put(k, b)
    },
    remove: (k) => store.delete(k),
  }
}

function directoryEdit(root: string): Edit {
  // Straight on the files, as a disk or a person would.
  return {
    read: (k) => readFile(join(root, k)),
    write: (k, b) => writeFile(join(root, k), b),
    remove: (k) => rm(join(root, k)),
  }
}

const flip = (key: string, at: (size: number) => number, bit: number, label: string): Damage => ({
  label,
  key,
  apply: async (e) => {
    const b = await e.read(key)
    const i = at(b.length)
    b[i] = (b[i] as number) ^ (1 << bit)
    await e.write(key, b)
  },
})

/** One format's cases, to run in a worker thread (see the end of the file). */
interface Suite {
  setUp(): Promise<void>
  tearDown(): Promise<void>
  cases: Array<[name: string, run: () => Promise<void>]>
}

function corruptionSuite(format: 'stream' | 'parted'): Suite {
  const cases: Suite['cases'] = []
  const pristine = new MemoryStore()
  let refs: Map<number, Buffer>
  let keys: string[]
  /** The keys each checkpoint's verify visits (its objects and parts). */
  const members = new Map<number, Set<string>>()
  /** Offsets of small reads of the latest checkpoint: across objects' ends, and a few more. */
  const small: number[] = []
  /** Per key: its layout, and which data slots the latest checkpoint reads from it. */
  const layouts = new Map<string, ReturnType<typeof objectLayout> & { live: Set<number> }>()
  const dirs: string[] = []
  /** Where downloadFile writes the latest checkpoint after each damage. */
  let downloads = ''
  /** The container as a directory store, written once: each directory case copies the folder. */
  let pristineDir = ''

  const setUp = async (): Promise<void> => {
    refs = await buildContainer(pristine, { ...smallSettings, format })
    keys = []
    for await (const e of pristine.list('')) keys.push(e.key)
    for (const cno of refs.keys()) {
      const r = await inspectCheckpoint(pristine, { cno })
      members.set(cno, new Set(r.objects.map((o) => o.key)))
      const v = await verifyCheckpoint(pristine, { cno })
      assert.deepEqual(v.problems, [], `checkpoint ${cno} verifies before any damage`)
    }
    const latest = Math.max(...refs.keys())
    const file = await SegmentFile.open(pristine, { readOnly: true })
    for (const key of keys) {
      const k = parseKey(key)
      if (k?.kind !== 'segment') continue
      const { layout, summary: s } = decodeObject(await pristine.get(key), key)
      assert.equal(layout.format, format === 'parted' ? FORMAT_PARTED : FORMAT_STREAM, `${key}: format`)
      const live = new Set<number>()
      for (let slot = 0; slot < s.count; slot++) {
        const b = s.blockIndex[slot] as number
        if (b * layout.dataBlockSize >= file.size) continue
        const [hi, lo] = await fileState(file).map.get(b)
        if (
          hi === k.cno &&
          pointerPart(lo) === k.part &&
          pointerUnit(lo) * UNIT_BYTES === layout.dataOffset + slot * layout.dataBlockSize
        ) {
          live.add(slot)
        }
      }
      layouts.set(key, { ...layout, live })
    }
    assert.ok(latest >= 3 && keys.length > 10, `a container of ${keys.length} objects`)
    // 4 KiB reads across the ends of objects' data (the first object's last blocks come
    // with its leaf span), and at a few other places.
    const bs = file.settings.dataBlockSize
    const blocks = Math.floor(file.size / bs)
    let prev = await fileState(file).map.get(0)
    for (let b = 1; b < blocks && small.length < 6; b++) {
      const cur = await fileState(file).map.get(b)
      if (cur[0] !== prev[0] || pointerPart(cur[1]) !== pointerPart(prev[1])) small.push(b * bs - bs / 2)
      prev = cur
    }
    const rnd = prng(3)
    for (let i = 0; i < 3; i++) small.push(Math.floor(rnd() * Math.max(1, file.size - bs)))
    assert.ok(small.length > 3, `${small.length} small reads`)
    await file.close()
    downloads = await mkdtemp(join(tmpdir(), 'ss-corrupt-download-'))
    dirs.push(downloads)
    pristineDir = await mkdtemp(join(tmpdir(), 'ss-corrupt-pristine-'))
    dirs.push(pristineDir)
    await copyStore(pristine, new DirectoryStore(pristineDir))
  }

  const tearDown = async (): Promise<void> => {
    for (const d of dirs) await rm(d, { recursive: true, force: true })
  }

  /** Reads every checkpoint whole, twice (file and stream), then verifies; returns what failed. */
  async function check(store: ObjectStore, d: Damage, mustFailLatest: boolean): Promise<void> {
    const latest = Math.max(...refs.keys())
    for (const [cno, ref] of refs) {
      const where = `${d.label}, checkpoint ${cno}`
      let failed = false
      try {
        const f = await within(SegmentFile.open(store, { cno, readOnly: true }), 10_000, where)
        const got = await within(f.read(0, ref.length + 10), 10_000, where)
        assert.equal(f.size, ref.length, `${where}: size`)
        assert.ok(Buffer.compare(Buffer.from(got), ref) === 0, `${where}: WRONG DATA returned`)
      } catch (err) {
        if (!(err instanceof StreamSegmentError) || !ALLOWED.has(err.code)) throw err
        failed = true
      }
      if (cno === latest && mustFailLatest) assert.ok(failed, `${where}: a damaged block was read without error`)
      if (cno === latest) {
        // Small cold reads, each on a fresh handle: exact bytes or an error.
        for (const at of small) {
          const n = Math.min(4096, ref.length - at)
          try {
            const f = await within(SegmentFile.open(store, { cno, readOnly: true }), 10_000, where)
            const got = await within(f.read(at, n), 10_000, `${where}: read at ${at}`)
            assert.ok(Buffer.compare(Buffer.from(got), ref.subarray(at, at + n)) === 0, `${where}: WRONG DATA at ${at}`)
          } catch (err) {
            if (!(err instanceof StreamSegmentError) || !ALLOWED.has(err.code)) throw err
          }
        }
        try {
          const chunks: Buffer[] = []
          const rs = createStreamSegmentReadStream({ store, readGetMaxBytes: 16 * 1024 })
          await within(
            (async () => {
              for await (const c of rs) chunks.push(Buffer.from(c as Uint8Array))
            })(),
            10_000,
            `${where}: stream`,
          )
          assert.ok(Buffer.compare(Buffer.concat(chunks), ref) === 0, `${where}: WRONG DATA from the stream`)
          assert.ok(!mustFailLatest, `${where}: the stream read a damaged block without error`)
        } catch (err) {
          if (!(err instanceof StreamSegmentError) || !ALLOWED.has(err.code)) throw err
        }
        // downloadFile: the file holds exactly the checkpoint, or there is no file at all.
        const path = join(downloads, 'latest.bin')
        try {
          await within(downloadFile(store, path, { readGetMaxBytes: 16 * 1024 }), 10_000, `${where}: downloadFile`)
          assert.ok(Buffer.compare(await readFile(path), ref) === 0, `${where}: WRONG DATA from downloadFile`)
          assert.ok(!mustFailLatest, `${where}: downloadFile read a damaged block without error`)
        } catch (err) {
          if (!(err instanceof StreamSegmentError) || !ALLOWED.has(err.code)) throw err
          assert.deepEqual(await readdir(downloads), [], `${where}: a failed downloadFile left a file`)
        }
        await rm(path, { force: true })
      }
      let problems = -1
      try {
        problems = (await within(verifyCheckpoint(store, { cno }), 10_000, `${where}: verify`)).problems.length
      } catch (err) {
        // Cannot start: the checkpoint's own entry point (inode or part 0) is gone or damaged.
        if (!(err instanceof StreamSegmentError) || !ALLOWED.has(err.code)) throw err
      }
      if (members.get(cno)?.has(d.key) || (d.key === 'inode' && cno === latest)) {
        assert.notEqual(problems, 0, `${where}: verify found nothing`)
      }
    }
  }

  async function onMemory(d: Damage, mustFailLatest = false): Promise<void> {
    const store = new MemoryStore()
    await copyStore(pristine, store)
    await d.apply(memoryEdit(store))
    await check(store, d, mustFailLatest)
  }

  async function onDirectory(d: Damage, mustFailLatest = false): Promise<void> {
    const root = await mkdtemp(join(tmpdir(), 'ss-corrupt-'))
    dirs.push(root)
    // The same files as putting every object again, without a synced write per object.
    await cp(pristineDir, root, { recursive: true })
    const store = new DirectoryStore(root)
    await d.apply(directoryEdit(root))
    await check(store, d, mustFailLatest)
    await rm(root, { recursive: true, force: true })
  }

  /** A flip in every region of every object: data (live slots must fail the latest read), meta, summary, header. */
  function regionFlips(): Array<[Damage, boolean]> {
    const out: Array<[Damage, boolean]> = []
    for (const [key, l] of layouts) {
      if (l.dataEnd > l.dataOffset) {
        const slot = l.live.size > 0 ? Math.min(...l.live) : 0
        const at = l.dataOffset + slot * l.dataBlockSize + 100
        out.push([flip(key, () => at, 3, `${key}: data slot ${slot} byte 100`), l.live.has(slot)])
      }
      if (l.metaEnd > l.metaOffset) out.push([flip(key, () => l.metaOffset + 20, 0, `${key}: meta`), false])
      if (l.summaryEnd > l.summaryOffset) out.push([flip(key, () => l.summaryOffset + 8, 5, `${key}: summary`), false])
      out.push([flip(key, () => l.headerOffset + 30, 1, `${key}: header`), false])
    }
    return out
  }

  cases.push([
    'flipped bytes in data, meta, summary and header (memory store)',
    async () => {
      for (const [d, must] of regionFlips()) await onMemory(d, must)
    },
  ])

  cases.push([
    `random flipped bits anywhere, inode object included (${runs} runs, memory store)`,
    async () => {
      const rnd = prng(42)
      for (let r = 0; r < runs; r++) {
        const key = keys[Math.floor(rnd() * keys.length)] as string
        const pos = rnd()
        const bit = Math.floor(rnd() * 8)
        await onMemory(flip(key, (n) => Math.floor(pos * n), bit, `run ${r}: ${key} at ${pos.toFixed(4)}, bit ${bit}`))
      }
    },
  ])

  cases.push([
    'truncated, extended, deleted and swapped objects (memory store)',
    async () => {
      const rnd = prng(7)
      for (const key of keys) {
        for (const cut of [0, 1, 255, 256, 257, 4096]) {
          await onMemory({
            label: cut === 0 ? `${key} emptied` : `${key} cut by ${cut}`,
            key,
            apply: async (e) => {
              const b = await e.read(key)
              await e.write(key, b.subarray(0, cut === 0 ? 0 : Math.max(0, b.length - cut)))
            },
          })
        }
        for (const extra of [1, 4096]) {
          await onMemory({
            label: `${key} + ${extra} bytes`,
            key,
            apply: async (e) => e.write(key, Buffer.concat([await e.read(key), Buffer.alloc(extra, 7)])),
          })
        }
        await onMemory({ label: `${key} deleted`, key, apply: (e) => e.remove(key) })
      }
      const segments = keys.filter((k) => k !== 'inode')
      for (let r = 0; r < 20; r++) {
        const a = segments[Math.floor(rnd() * segments.length)] as string
        const b = segments[Math.floor(rnd() * segments.length)] as string
        if (a === b) continue
        for (const key of [a, b]) {
          await onMemory({
            label: `${a} and ${b} swapped`,
            key,
            apply: async (e) => {
              const [x, y] = [await e.read(a), await e.read(b)]
              await e.write(a, y)
              await e.write(b, x)
            },
          })
        }
      }
    },
  ])

  cases.push([
    'flipped, truncated, deleted and swapped files (directory store)',
    async () => {
      const flips = regionFlips()
      for (let i = 0; i < flips.length; i += 3) {
        const [d, must] = flips[i] as [Damage, boolean]
        await onDirectory(d, must)
      }
      const segments = keys.filter((k) => k !== 'inode')
      for (const key of segments.slice(0, 6)) {
        await onDirectory({
          label: `${key} file truncated`,
          key,
          apply: async () => {
            const root = dirs[dirs.length - 1] as string
            await truncateFile(join(root, key), 1000)
          },
        })
        await onDirectory({ label: `${key} file deleted`, key, apply: (e) => e.remove(key) })
      }
      const [a, b] = [segments[1] as string, segments[segments.length - 2] as string]
      await onDirectory({
        label: `${a} and ${b} files swapped`,
        key: a,
        apply: async (e) => {
          const [x, y] = [await e.read(a), await e.read(b)]
          await e.write(a, y)
          await e.write(b, x)
        },
      })
      await onDirectory(flip('inode', () => 40, 2, 'inode object flipped'))
    },
  ])
  return { setUp, tearDown, cases }
}

/*
 * Each format's cases run in a worker thread of their own. node:test follows every promise
 * made in a test (an async hook, with a destroy hook per promise), which costs these reads,
 * tens of thousands of promises per case, about a third of their time; a worker's promises
 * are not followed. A failure in the worker fails its test here, with its message and stack.
 */
interface Reply {
  id: number
  error?: { message: string; stack?: string }
}

/** Runs `setUp`, a case by its name, or `tearDown` of `format`'s suite in a worker. */
function caseWorker(format: 'stream' | 'parted') {
  let worker: Worker | undefined
  let next = 0
  const pending = new Map<number, { resolve: () => void; reject: (err: Error) => void }>()
  const failAll = (err: Error) => {
    for (const p of pending.values()) p.reject(err)
    pending.clear()
  }
  const start = () => {
    const w = new Worker(new URL(import.meta.url), { workerData: { corruptionFormat: format } })
    w.on('message', ({ id, error }: Reply) => {
      const p = pending.get(id)
      pending.delete(id)
      if (error) p?.reject(Object.assign(new Error(error.message), { stack: error.stack }))
      else p?.resolve()
    })
    w.on('error', failAll)
    w.on('exit', (code) => failAll(new Error(`the ${format} corruption worker exited with code ${code}`)))
    return w
  }
  const call = (what: string) =>
    new Promise<void>((resolve, reject) => {
      worker ??= start()
      const id = next++
      pending.set(id, { resolve, reject })
      worker.postMessage({ id, what })
    })
  const close = async () => {
    if (worker === undefined) return
    try {
      await call('tearDown')
    } finally {
      await worker.terminate()
    }
  }
  return { call, close }
}

if (isMainThread) {
  for (const format of ['stream', 'parted'] as const)
    describe(`corruption, ${format}`, () => {
      const worker = caseWorker(format)
      before(() => worker.call('setUp'))
      after(() => worker.close())
      for (const [name] of corruptionSuite(format).cases) it(name, () => worker.call(name))
    })
} else if (workerData?.corruptionFormat !== undefined) {
  const suite = corruptionSuite(workerData.corruptionFormat)
  const cases = new Map(suite.cases)
  const port = parentPort as MessagePort
  port.on('message', async ({ id, what }: { id: number; what: string }) => {
    try {
      if (what === 'setUp') await suite.setUp()
      else if (what === 'tearDown') await suite.tearDown()
      else {
        const run = cases.get(what)
        if (run === undefined) throw new Error(`no case named ${what}`)
        await run()
      }
      port.postMessage({ id } satisfies Reply)
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err))
      port.postMessage({ id, error: { message: e.message, stack: e.stack } } satisfies Reply)
    }
  })
}

if (isMainThread)
  describe('a run long enough to be checked off the event loop', () => {
    const MiB = 1024 * 1024
    const dirs: string[] = []
    after(async () => {
      for (const d of dirs) await rm(d, { recursive: true, force: true })
    })

    it('a flipped byte in a 4 MiB run fails the read naming its block (memory and directory store); the bytes before it read back', async () => {
      assert.ok(CRC32_OFF_LOOP_MIN_BYTES <= 4 * MiB, 'the run below is long enough to be checked on the thread pool')
      const root = await mkdtemp(join(tmpdir(), 'ss-long-run-'))
      dirs.push(root)
      const memory = new MemoryStore()
      const stores: Array<[string, ObjectStore, Edit]> = [
        ['memory', memory, memoryEdit(memory)],
        ['directory', new DirectoryStore(root), directoryEdit(root)],
      ]
      const random = prng(7)
      const content = Buffer.alloc(6 * MiB)
      for (let i = 0; i < content.length; i++) content[i] = Math.floor(random() * 256)
      const block = 700
      for (const [name, store, edit] of stores) {
        const f = await SegmentFile.create(store, {
          dataCacheDirtyMaxBytesThreshold: 8 * MiB,
          segmentBufferSize: 16 * MiB,
        })
        await f.write(0, content)
        await f.flush()
        await f.close()
        const file = await SegmentFile.open(store, { readOnly: true })
        const [hi, lo] = await fileState(file).map.get(block)
        await file.close()
        const key = segmentKey(hi, pointerPart(lo))
        await flip(key, () => pointerUnit(lo) * UNIT_BYTES + 123, 5, 'one data byte').apply(edit)

        const named = (err: unknown) => {
          assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), `${name}: ${String(err)}`)
          assert.match((err as Error).message, new RegExp(`block ${block} at offset`), name)
          return true
        }
        const whole = await SegmentFile.open(store, { readOnly: true, readGetMaxBytes: 16 * MiB })
        await assert.rejects(whole.read(0, content.length), named)
        await whole.close()
        const chunks: Buffer[] = []
        await assert.rejects(async () => {
          for await (const c of createStreamSegmentReadStream({ store, readGetMaxBytes: 16 * MiB }))
            chunks.push(Buffer.from(c as Uint8Array))
        }, named)
        const got = Buffer.concat(chunks)
        assert.ok(got.length < block * 4096, `${name}: nothing at or past the damaged block was pushed`)
        assert.ok(got.equals(content.subarray(0, got.length)), `${name}: what was pushed is the content`)
        const before = await SegmentFile.open(store, { readOnly: true, readGetMaxBytes: 16 * MiB })
        assert.ok(Buffer.from(await before.read(0, block * 4096)).equals(content.subarray(0, block * 4096)), name)
        await before.close()
      }
    })
  })
