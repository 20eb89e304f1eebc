import assert from 'node:assert/strict'
import { constants } from 'node:buffer'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../lib/errors.js'
import { fileState, SegmentFile } from '../lib/segment-file.js'
import { resolveSettings, type Settings, type WithHooks } from '../lib/settings.js'
import type { MapNode } from '../lib/state/block-map.js'
import { MemoryStore } from '../lib/store/memory.js'
import { createStreamSegmentWriteStream } from '../lib/streams/write-stream.js'
import { pattern } from './helpers/pattern.js'
import { hooks } from './helpers/small-settings.js'
import { countingCalls } from './helpers/wrapped-store.js'

const code = (c: string) => (err: unknown) => StreamSegmentError.is(err) && err.code === c

describe('SegmentFile', () => {
  it('settings are the resolved settings, every setting and nothing else: they create a container as they are', async () => {
    const given = { dataBlockSize: 8192, conflictPolicy: 'fail' as const, retainCheckpoints: 2 }
    const f = await SegmentFile.create(new MemoryStore(), given)
    try {
      assert.deepEqual(f.settings, resolveSettings(given))
      // What a handle says its settings are makes another handle with them.
      const again = await SegmentFile.create(new MemoryStore(), f.settings)
      assert.deepEqual(again.settings, f.settings)
      await again.close()
      // A copy: changing it leaves the handle's own as they were.
      const mine = f.settings
      mine.conflictPolicy = 'retry'
      assert.equal(f.settings.conflictPolicy, 'fail')
    } finally {
      await f.close()
    }
  })

  it('settings are validated once, naming the setting and the value', () => {
    assert.throws(
      () => resolveSettings({ dataBlockSize: 5000 }),
      /setting dataBlockSize = 5000: must be a power of two/,
    )
    assert.throws(() => resolveSettings({ conflictPolicy: 'maybe' as never }), /conflictPolicy = "maybe"/)
    assert.throws(() => resolveSettings({ segmentMpuChunkSize: 6000 }), /segmentMpuChunkSize = 6000/)
    assert.throws(() => resolveSettings({ segmentMaxObjectBytes: 2 ** 31 }), /segmentMaxObjectBytes = 2147483648/)
    assert.throws(() => resolveSettings({ streamSegmentBytes: -1 }), code('ERR_INVALID_ARGUMENT'))
    // NaN as NaN, a string quoted: "1" is not 1.
    assert.throws(() => resolveSettings({ segmentMpuMaxConcurrency: Number.NaN }), /segmentMpuMaxConcurrency = NaN:/)
    assert.throws(() => resolveSettings({ segmentMpuMaxConcurrency: '4' as never }), /segmentMpuMaxConcurrency = "4":/)
    // Block sizes whose two full leaves no object can hold: named as such, with the largest that fits.
    assert.throws(
      () => resolveSettings({ dataBlockSize: 16 * 2 ** 20 }),
      /setting dataBlockSize = 16777216: with metaBlockSize 4096 \(340 entries per leaf\), .* more than the largest object \(1073741824\); at most 1048576 with this metaBlockSize/,
    )
    assert.throws(() => resolveSettings({ dataBlockSize: 128 * 1024, metaBlockSize: 65536 }), /at most 65536 with this/)
    assert.equal(resolveSettings({ dataBlockSize: 2 ** 20 }).dataBlockSize, 2 ** 20)
    // A dirty limit under one block names the setting that made it so: the cap, or the two thresholds.
    assert.throws(
      () => resolveSettings({ segmentBufferSize: 100 }),
      /^StreamSegmentError: setting segmentBufferSize = 100: the dirty limit \(100 bytes\) must hold at least one data block \(4096\)$/,
    )
    assert.throws(
      () => resolveSettings({ dataCacheDirtyMaxBytesThreshold: 100, dataCacheDirtyMaxBlocksThreshold: 0 }),
      /setting dataCacheDirtyMaxBytesThreshold = 100: the dirty limit \(100 bytes\) .*, with dataCacheDirtyMaxBlocksThreshold 0$/,
    )
  })

  it('resolveSettings refuses a name that is no setting, naming the nearest, as the calls taking settings do', async () => {
    assert.throws(() => resolveSettings({ segmentMpuChunksize: 1 } as never), {
      code: 'ERR_INVALID_ARGUMENT',
      message: 'resolveSettings: unknown option "segmentMpuChunksize" (did you mean segmentMpuChunkSize?)',
    })
    assert.throws(() => resolveSettings({ wal: { dir: '/tmp' } } as never), /unknown option "wal"/)
    assert.equal(resolveSettings({ segmentMpuChunkSize: 128 * 1024 }).segmentMpuChunkSize, 128 * 1024)
    // The calls that take settings beside options of their own still take both.
    const f = await SegmentFile.create(new MemoryStore(), { readMaxConcurrency: 2, segmentMpuChunkSize: 128 * 1024 })
    assert.equal(f.settings.segmentMpuChunkSize, 128 * 1024)
    await f.flush()
    await f.close()
  })

  it('a setting or read option given as null is refused, not taken for its default', async () => {
    // The write stream's profile gave way to the spec's default under a null: a 1 GiB target.
    assert.throws(() => resolveSettings({ streamSegmentBytes: null as never }), /setting streamSegmentBytes = null:/)
    assert.throws(() => resolveSettings({ conflictPolicy: null as never }), /setting conflictPolicy = null:/)
    assert.throws(
      () => createStreamSegmentWriteStream({ store: new MemoryStore(), segmentBufferSize: null as never }),
      (err) => code('ERR_INVALID_ARGUMENT')(err) && /setting segmentBufferSize = null:/.test(String(err)),
    )
    await assert.rejects(
      SegmentFile.create(new MemoryStore(), { readMaxConcurrency: null as never }),
      /setting readMaxConcurrency = null:/,
    )
    // Undefined is not given: the default.
    assert.equal(resolveSettings({ streamSegmentBytes: undefined }).streamSegmentBytes, 2 ** 30)
  })

  it('open checks each setting given before any request', async () => {
    const { store, calls: requests } = countingCalls(new MemoryStore())
    await assert.rejects(
      SegmentFile.open(store, { segmentMpuMaxConcurrency: 0 }),
      (err) => code('ERR_INVALID_ARGUMENT')(err) && /segmentMpuMaxConcurrency = 0/.test(String(err)),
    )
    assert.equal(requests(), 0)
  })

  it('create refuses an existing container; open refuses an empty prefix', async () => {
    const store = new MemoryStore()
    await assert.rejects(SegmentFile.open(store), code('ERR_NOT_FOUND'))
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 10))
    await f.flush()
    await assert.rejects(SegmentFile.create(store), code('ERR_CONFLICT'))
    // A writer is told that only a complete checkpoint above the published one opens read-only;
    // checkpoint 7 is none, and a reader opening it is ERR_NOT_FOUND too.
    await assert.rejects(
      SegmentFile.open(store, { cno: 7 }),
      (err) => code('ERR_NOT_FOUND')(err) && /a complete checkpoint above it, if there is one/.test(String(err)),
    )
    await assert.rejects(SegmentFile.open(store, { cno: 7, readOnly: true }), code('ERR_NOT_FOUND'))
    await assert.rejects(SegmentFile.open(store, { dataBlockSize: 8192 }), /dataBlockSize 8192: the container/)
  })

  it('close lets go of the block-map nodes and the cached summaries: a handle held after it keeps none', async () => {
    const store = new MemoryStore()
    const settings: Partial<Settings> & WithHooks = { dataBlockSize: 4096, ...hooks({ maxNodeEntries: 8 }) }
    const f = await SegmentFile.create(store, settings)
    await f.write(0, pattern(0, 1 << 20))
    await f.flush()
    await f.read(0, f.size) // clean nodes stay cached; the summaries of the objects read too
    await f.write(3 * 4096, pattern(0, 4096, 2)) // and a dirty path, given up
    assert.ok(nodesHeld(f) > 32, `${nodesHeld(f)} nodes held while open`)
    assert.ok(summariesHeld(f) > 0)
    await f.close()
    assert.deepEqual({ nodes: nodesHeld(f), summaries: summariesHeld(f) }, { nodes: 0, summaries: 0 })
    assert.equal(f.size, 1 << 20, 'the size is still told')

    const r = await SegmentFile.open(store, { readOnly: true })
    await r.read(0, r.size)
    assert.ok(nodesHeld(r) > 32 && summariesHeld(r) > 0)
    await r.close()
    assert.deepEqual({ nodes: nodesHeld(r), summaries: summariesHeld(r) }, { nodes: 0, summaries: 0 })
  })

  it('a flush with nothing changed writes nothing', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 5000))
    assert.equal((await f.flush()).objects, 1)
    const t = await f.flush()
    assert.equal(t.objects, 0)
    assert.equal(t.cno, 1)
  })

  it('a write, writeZeroes or writeRef of no bytes changes nothing, as pwrite of 0 bytes: the file does not grow', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.flush() // checkpoint 1, empty
    const unread = { read: async () => assert.fail('a source of no bytes is not read') }
    await f.write(10_000, new Uint8Array(0))
    await f.writeZeroes(20_000, 0)
    await f.writeRef(30_000, 0, unread)
    assert.equal(f.size, 0)
    assert.equal((await f.flush()).objects, 0, 'nothing changed: nothing published')
    await f.write(0, pattern(0, 100))
    await f.flush()
    await f.write(5_000, new Uint8Array(0)) // past the end, and inside the last block
    await f.write(100, new Uint8Array(0))
    await f.writeZeroes(50, 0)
    await f.writeRef(4096 * 3, 0, unread)
    assert.equal(f.size, 100)
    assert.equal((await f.flush()).objects, 0)
    // The arguments are checked all the same.
    await assert.rejects(f.write(-1, new Uint8Array(0)), code('ERR_INVALID_ARGUMENT'))
    await assert.rejects(f.writeZeroes(1.5, 0), code('ERR_INVALID_ARGUMENT'))
    await assert.rejects(f.writeRef(0, 0, {} as never), code('ERR_INVALID_ARGUMENT'))
    await f.close()
  })

  it('bad offsets, read-only and closed handles give clear errors', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    // Each message names the call, the argument and what came.
    for (const [call, message] of [
      [() => f.write(-1, pattern(0, 1)), /^write: offset must be an integer ≥ 0, got number -1$/],
      [
        () => f.write(2 ** 32 * 4096, pattern(0, 1)),
        /^write: offset 17592186044416 \+ length 1 is past the largest file/,
      ],
      [
        () => f.write(0, pattern(0, 1), { adpot: true } as never),
        /^write: unknown option "adpot" \(did you mean adopt\?\)$/,
      ],
      [
        () => f.write(0, pattern(0, 1), { adopt: 'yes' } as never),
        /^write: adopt must be true or false, got string "yes"$/,
      ],
      [() => f.truncate(1.5), /^truncate: size must be an integer ≥ 0, got number 1.5$/],
      [() => f.truncate(2 ** 60), /^truncate: size \d+ is past the largest file/],
      [() => f.writeZeroes(0, -5), /^writeZeroes: length must be an integer ≥ 0, got number -5$/],
      [
        () => f.writeRef(0, 4096, { read: async (_at: number, n: number) => new Uint8Array(n) }, -1),
        /^writeRef: sourceOffset must be an integer ≥ 0, got number -1$/,
      ],
      [() => f.read(Number.NaN, 1), /^read: offset must be an integer ≥ 0, got number NaN$/],
      [() => f.read(0, '1' as never), /^read: length must be an integer ≥ 0, got string "1"$/],
      [() => f.readInto(2 ** 44, Buffer.alloc(1)), /^readInto: offset \d+ \+ length 1 is past the largest file/],
    ] as const) {
      await assert.rejects(call(), (err) => code('ERR_INVALID_ARGUMENT')(err) && message.test((err as Error).message))
    }
    await f.write(0, pattern(0, 100))
    await f.flush()
    const r = await SegmentFile.open(store, { readOnly: true })
    await assert.rejects(r.write(0, pattern(0, 1)), code('ERR_STATE'))
    await assert.rejects(r.readInto(-1, Buffer.alloc(1)), code('ERR_INVALID_ARGUMENT'))
    await assert.rejects(
      r.readInto(0, [1, 2, 3] as unknown as Uint8Array),
      (err) =>
        code('ERR_INVALID_ARGUMENT')(err) &&
        /target must be a Buffer, a Uint8Array or another ArrayBufferView, got Array/.test(String(err)),
    )
    await assert.rejects(r.readInto(0, 'abc' as unknown as Uint8Array), /got string/)
    await f.close()
    await assert.rejects(f.read(0, 1), code('ERR_STATE'))
    await assert.rejects(f.readInto(0, Buffer.alloc(1)), code('ERR_STATE'))
    await r.close()
  })

  it('readOnly must be true or false: a string "false" is refused, not taken for a read-only handle', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 100))
    await f.flush()
    await f.close()
    for (const readOnly of ['false', 1, null]) {
      await assert.rejects(
        SegmentFile.open(store, { readOnly: readOnly as never }),
        (err) =>
          code('ERR_INVALID_ARGUMENT')(err) &&
          /^SegmentFile\.open: readOnly must be true or false, got /.test(String((err as Error).message)),
      )
    }
  })

  it('a read larger than a Buffer can hold fails that call only, not the handle and its unflushed writes', {
    skip: constants.MAX_LENGTH + 2 * 4096 > 2 ** 44 ? 'a Buffer holds the largest file here' : false,
  }, async () => {
    const f = await SegmentFile.create(new MemoryStore())
    await f.truncate(constants.MAX_LENGTH + 2 * 4096) // a hole: costs nothing
    await f.write(0, pattern(0, 100))
    await assert.rejects(
      f.read(0, constants.MAX_LENGTH + 1),
      (err) => code('ERR_INVALID_ARGUMENT')(err) && /^read: \d+ bytes .*readInto/.test((err as Error).message),
    )
    // Clipped to the file first: a long length at the end is a short read, not refused.
    assert.equal((await f.read(f.size - 10, constants.MAX_LENGTH + 1)).byteLength, 10)
    assert.deepEqual(Buffer.from(await f.read(0, 100)), pattern(0, 100))
    assert.equal((await f.flush()).objects > 0, true)
    await f.close()
  })

  it('write takes any ArrayBufferView as its bytes; anything else fails that call only, not the handle', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    for (const bad of [null, undefined, 'abc', [1, 2], { byteLength: 10 }, new ArrayBuffer(8)]) {
      await assert.rejects(
        f.write(0, bad as unknown as Uint8Array),
        (err) => code('ERR_INVALID_ARGUMENT')(err) && /write: bytes must be a Buffer, a Uint8Array/.test(String(err)),
      )
    }
    // A typed array's bytes, not its elements; a DataView's window.
    const words = new Uint16Array([0x0201, 0x0403])
    const doubles = new Float64Array([1.5])
    const window = new DataView(pattern(7, 64).buffer, 8, 16)
    await f.write(0, words)
    await f.write(4, doubles)
    await f.write(12, window)
    await f.flush()
    const want = Buffer.concat([
      Buffer.from(words.buffer),
      Buffer.from(doubles.buffer),
      Buffer.from(window.buffer, window.byteOffset, window.byteLength),
    ])
    assert.deepEqual(Buffer.from(await f.read(0, 28)), want)
    // readInto fills a typed array's bytes the same way.
    const into = new Uint32Array(7)
    assert.equal(await f.readInto(0, into), 28)
    assert.deepEqual(Buffer.from(into.buffer), want)
    await f.close()
  })

  it('readInto fills memory the caller owns, GETs as the read options say; once it has failed nothing writes into it', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, {
      segmentBufferSize: 64 * 1024,
      dataCacheDirtyMaxBytesThreshold: 64 * 1024,
    })
    const want = pattern(3, 256 * 1024)
    await f.write(0, want)
    await f.flush()
    await f.close()
    let armed = false
    let fail = false
    const sizes: number[] = []
    let inFlight = 0
    let most = 0
    const slow = new Proxy(store, {
      get(target, name, receiver) {
        if (name !== 'get') return Reflect.get(target, name, receiver)
        return async (key: string, options?: { range?: { start: number; end: number } }) => {
          if (!armed) return target.get(key, options)
          sizes.push((options?.range?.end ?? 0) - (options?.range?.start ?? 0))
          most = Math.max(most, ++inFlight)
          try {
            // With `fail`, the first GET fails at once; every GET answers late.
            if (fail && sizes.length === 1) throw new Error('the link went down')
            await new Promise((r) => setTimeout(r, 5))
            return await target.get(key, options)
          } finally {
            inFlight--
          }
        }
      },
    })
    await assert.rejects(SegmentFile.open(slow, { readOnly: true, readMaxConcurrency: 0 }), /readMaxConcurrency/)
    const r = await SegmentFile.open(slow, { readOnly: true, readGetMaxBytes: 8192, readMaxConcurrency: 2 })
    const target = Buffer.alloc(want.length + 100, 0xee)
    assert.equal(await r.readInto(0, target), want.length)
    assert.ok(target.subarray(0, want.length).equals(want))
    assert.ok(
      target.subarray(want.length).every((b) => b === 0xee),
      'bytes past the end of the file are left as they were',
    )
    // The index is known now: the next reads make data GETs only, of 8 KiB, 2 at a time.
    armed = true
    target.fill(0xee)
    assert.equal(await r.readInto(0, target), want.length)
    assert.ok(target.subarray(0, want.length).equals(want))
    // 8 KiB GETs (the default would make one per object); part 0's few data blocks may
    // come with its index, read before.
    assert.ok(sizes.length >= 28, `${sizes.length} data GETs`)
    assert.ok(
      sizes.every((n) => n <= 8192),
      `GET sizes ${sizes}`,
    )
    assert.equal(most, 2, 'GETs in flight at most')
    sizes.length = 0
    fail = true
    target.fill(0xee)
    await assert.rejects(r.readInto(0, target), /the link went down/)
    assert.ok(sizes.length <= 2, `${sizes.length} data GETs: none is started after one failed`)
    const seen = Buffer.from(target)
    await new Promise((r) => setTimeout(r, 100))
    assert.ok(target.equals(seen), 'the target changed after readInto failed')
    await r.close()
  })

  it('memory detached (transferred) or shrunk away, before or during the call, fails that call only, not the handle', async () => {
    // V8's TypeError for a detached buffer, taken for a bug, made the handle unusable and
    // lost its unflushed writes; a detached typed array (0 bytes) was read into and
    // written as nothing, without a word.
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    const want = pattern(5, 256 * 1024)
    await f.write(0, want)
    await f.flush()
    await f.write(0, pattern(6, 100)) // not flushed: must survive the calls below
    want.set(pattern(6, 100), 0)
    /** A view made over 64 bytes, their buffer then detached. */
    const detached = (view: (b: ArrayBuffer) => ArrayBufferView) => {
      const bytes = new ArrayBuffer(64)
      const v = view(bytes)
      structuredClone(bytes, { transfer: [bytes] })
      return v
    }
    const refused = (err: unknown) => code('ERR_INVALID_ARGUMENT')(err) && /detached/.test(String(err))
    const views = [
      (b: ArrayBuffer) => new DataView(b),
      (b: ArrayBuffer) => new Uint8Array(b),
      (b: ArrayBuffer) => new Float32Array(b),
    ]
    for (const view of views.map(detached)) {
      await assert.rejects(f.readInto(0, view), refused)
      await assert.rejects(f.write(0, view), refused)
    }
    assert.deepEqual(Buffer.from(await f.read(0, want.length)), want)
    assert.ok((await f.flush()).objects > 0, 'the unflushed write is published')
    await f.close()

    // Detached, or a resizable buffer shrunk, while the GETs run.
    let gate: Promise<void> | undefined
    let held: () => void = () => {}
    const gated = new Proxy(store, {
      get(target, name, receiver) {
        if (name !== 'get') return Reflect.get(target, name, receiver)
        return async (key: string, options?: object) => {
          const wait = gate
          if (wait !== undefined) {
            held()
            await wait
          }
          return target.get(key, options)
        }
      },
    })
    const r = await SegmentFile.open(gated, { readOnly: true })
    assert.deepEqual(Buffer.from(await r.read(0, want.length)), want) // the index is known now
    type Resizable = ArrayBuffer & { resize(n: number): void }
    const Resizable = ArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => Resizable
    const ways: Array<[ArrayBuffer, (b: ArrayBuffer) => void]> = [
      [new ArrayBuffer(want.length), (b) => structuredClone(b, { transfer: [b] })],
      [new Resizable(want.length, { maxByteLength: want.length }), (b) => (b as Resizable).resize(10)],
    ]
    for (const [memory, takeAway] of ways) {
      let release: () => void = () => {}
      gate = new Promise<void>((r) => {
        release = r
      })
      const isHeld = new Promise<void>((r) => {
        held = r
      })
      const reading = r.readInto(0, new Uint8Array(memory))
      await isHeld
      takeAway(memory)
      gate = undefined
      release()
      await assert.rejects(
        reading,
        (err) => code('ERR_INVALID_ARGUMENT')(err) && /detached or shrunk/.test(String(err)),
      )
      assert.deepEqual(Buffer.from(await r.read(0, want.length)), want, 'the handle still reads')
    }
    await r.close()
  })

  it('an older checkpoint opens as it was, and writing to it publishes a new checkpoint on top', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 20000, 1))
    await f.flush()
    await f.write(0, pattern(0, 30000, 2))
    await f.flush()
    const old = await SegmentFile.open(store, { cno: 1 })
    assert.equal(old.size, 20000)
    assert.deepEqual(Buffer.from(await old.read(0, 20000)), pattern(0, 20000, 1))
    await old.write(20000, pattern(20000, 5, 3))
    assert.equal((await old.flush()).cno, 3)
    const latest = await SegmentFile.open(store)
    assert.deepEqual(
      Buffer.from(await latest.read(0, 20005)),
      Buffer.concat([pattern(0, 20000, 1), pattern(20000, 5, 3)]),
    )
  })
})

/** Block-map nodes in memory below the root (loaded, cached or dirty). */
function nodesHeld(f: SegmentFile): number {
  const count = (n: MapNode): number =>
    (n.children ?? []).reduce((sum, c) => sum + (c === undefined ? 0 : 1 + count(c)), 0)
  return count(fileState(f).map.root)
}

/** Objects whose summaries the handle's reader holds. */
function summariesHeld(f: SegmentFile): number {
  const reader = (f as unknown as { reader: { objects: { objects: Map<string, { summary?: unknown }> } } }).reader
  return [...reader.objects.objects.values()].filter((o) => o.summary !== undefined).length
}
