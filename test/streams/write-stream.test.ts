import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { Readable } from 'node:stream'
import { finished, pipeline } from 'node:stream/promises'
import { describe, it } from 'node:test'
import { setImmediate as turn } from 'node:timers/promises'
import { pipelinePromise } from 'streamx'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { STREAMING_PROFILE } from '../../lib/settings.js'
import type { MapNode } from '../../lib/state/block-map.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { publishContent } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { blockStream, fillBlocks } from '../helpers/pattern.js'
import { hooks } from '../helpers/small-settings.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const KiB = 1024
const MiB = 1024 * KiB

async function sha(it: AsyncIterable<Buffer> | Iterable<Buffer>): Promise<string> {
  const h = createHash('sha256')
  for await (const b of it) h.update(b)
  return h.digest('hex')
}

async function readAllHash(store: ObjectStore): Promise<{ size: number; hash: string }> {
  const f = await SegmentFile.open(store, { readOnly: true })
  const h = createHash('sha256')
  for (let at = 0; at < f.size; at += 8 * MiB) h.update(await f.read(at, Math.min(8 * MiB, f.size - at)))
  return { size: f.size, hash: h.digest('hex') }
}

async function openUploads(store: ObjectStore): Promise<number> {
  let n = 0
  for await (const _ of store.listMultipart()) n++
  return n
}

describe('createStreamSegmentWriteStream', () => {
  it('node pipeline: commits a checkpoint, then finishes with its FlushTiming', async () => {
    const store = new MemoryStore()
    const ws = createStreamSegmentWriteStream({ store })
    let flushed: unknown
    let inodeAtFinish: unknown
    ws.on('flush', (t) => {
      flushed = t
    })
    ws.on('finish', () => {
      inodeAtFinish = store.head('inode')
    })
    await pipeline(Readable.from(blockStream(20 * MiB, 1 * MiB)), ws)
    assert.ok(ws.flushTiming, 'flushTiming is set when pipeline resolves')
    assert.equal(flushed, ws.flushTiming)
    assert.ok((await inodeAtFinish) !== undefined, "'finish' comes after the inode is written")
    assert.equal(ws.flushTiming.cno, 1)
    assert.ok(ws.flushTiming.objects >= 2, `partials and part 0: ${ws.flushTiming.objects}`)
    assert.deepEqual(await readAllHash(store), { size: 20 * MiB, hash: await sha(blockStream(20 * MiB)) })
  })

  it('a source that reuses one buffer once each write has called back stores what it wrote (chunks are copied by default)', async () => {
    const store = new MemoryStore()
    const ws = createStreamSegmentWriteStream({ store })
    const buf = Buffer.alloc(MiB)
    const want = createHash('sha256')
    for (let i = 0; i < 24; i++) {
      buf.fill(i + 1)
      want.update(buf)
      await new Promise<void>((resolve, reject) => ws.write(buf, (err) => (err ? reject(err) : resolve())))
    }
    await new Promise<void>((resolve, reject) => ws.end((err?: Error | null) => (err ? reject(err) : resolve())))
    assert.deepEqual(await readAllHash(store), { size: 24 * MiB, hash: want.digest('hex') })
  })

  it('adoptChunks keeps the chunks uncopied (a chunk changed after its write shows in what is stored)', async () => {
    // The documented hazard, shown so that the option is known to adopt: never do this.
    const store = new MemoryStore()
    const ws = createStreamSegmentWriteStream({ store, adoptChunks: true })
    const buf = Buffer.alloc(MiB, 1)
    await new Promise<void>((resolve, reject) => ws.write(buf, (err) => (err ? reject(err) : resolve())))
    buf.fill(2)
    await new Promise<void>((resolve, reject) => ws.end((err?: Error | null) => (err ? reject(err) : resolve())))
    const f = await SegmentFile.open(store, { readOnly: true })
    const got = await f.read(0, MiB).then(
      (b) => Buffer.from(b),
      (err: unknown) => err,
    )
    // Adopted, not copied: the object holds the changed bytes, under the CRCs of the bytes
    // as written, so the read fails its check (or, hashed late, returns the changed bytes).
    // A copy would have kept the bytes as written.
    assert.ok(
      StreamSegmentError.is(got, 'ERR_CORRUPT') || (Buffer.isBuffer(got) && got.equals(buf)),
      `got ${got instanceof Error ? got.message : 'the bytes as written'}`,
    )
    assert.throws(() => createStreamSegmentWriteStream({ store, adoptChunks: 'yes' as never }), /adoptChunks "yes"/)
  })

  it('a bad profile or adoptChunks names the call, as the other option errors do', () => {
    const store = new MemoryStore()
    assert.throws(() => createStreamSegmentWriteStream({ store, profile: 'fast' as never }), {
      message: /^createStreamSegmentWriteStream: profile "fast": must be 'streaming' or 'spec'$/,
    })
    assert.throws(() => createStreamSegmentWriteStream({ store, adoptChunks: 'yes' as never }), {
      message: /^createStreamSegmentWriteStream: adoptChunks "yes": must be true or false$/,
    })
  })

  it("a stream closed keeps its file, but not the file's block-map nodes", async () => {
    const ws = createStreamSegmentWriteStream({ store: new MemoryStore(), ...hooks({ maxNodeEntries: 8 }) })
    await pipeline(Readable.from(blockStream(MiB, 64 * KiB, 1)), ws)
    if (!ws.closed) await once(ws, 'close')
    const file = ws.file as SegmentFile
    let nodes = 0
    const count = (n: MapNode) => {
      for (const c of n.children ?? []) {
        if (c === undefined) continue
        nodes++
        count(c)
      }
    }
    count(fileState(file).map.root)
    assert.deepEqual({ nodes, size: file.size }, { nodes: 0, size: MiB })
  })

  it('streamx pipeline, and a second stream replaces the content in a new checkpoint', async () => {
    const store = new MemoryStore()
    await pipelinePromise(
      Readable.from(blockStream(3 * MiB, 256 * KiB, 1)) as never,
      createStreamSegmentWriteStream({ store }) as never,
    )
    const ws = createStreamSegmentWriteStream({ store })
    await pipelinePromise(Readable.from(blockStream(1 * MiB, 256 * KiB, 2)) as never, ws as never)
    assert.equal(ws.flushTiming?.cno, 2)
    assert.deepEqual(await readAllHash(store), { size: 1 * MiB, hash: await sha(blockStream(1 * MiB, 256 * KiB, 2)) })
  })

  it('backpressure: a fast source is paused while partials upload; dirty bytes stay within limit + one chunk', async () => {
    const store = new ThrottledStore(new MemoryStore(), { latencyMs: 2, bandwidth: 40 * MiB })
    const limit = 256 * KiB
    const chunk = 64 * KiB
    const ws = createStreamSegmentWriteStream({
      store,
      dataCacheDirtyMaxBytesThreshold: limit,
      dataCacheDirtyMaxBlocksThreshold: 0,
    })
    let produced = 0
    let maxAhead = 0
    const total = 8 * MiB
    const gen = blockStream(total, chunk)
    const source = new Readable({
      highWaterMark: chunk,
      async read() {
        const { value, done } = await gen.next()
        if (done) return void this.push(null)
        produced += value.length
        maxAhead = Math.max(maxAhead, produced - ws.bytesWritten)
        this.push(value)
      },
    })
    await pipeline(source, ws)
    const file = ws.file as SegmentFile
    assert.ok(file.partials >= 10, `partials written: ${file.partials}`)
    assert.ok(file.peakDirtyBytes <= limit + chunk, `peak dirty ${file.peakDirtyBytes} > ${limit} + ${chunk}`)
    // Unpaused, the source would run megabytes ahead of a 40 MB/s store.
    assert.ok(maxAhead <= 6 * chunk, `source ran ${maxAhead} bytes ahead of the writer`)
  })

  it('one chunk four times the dirty limit, copied or adopted, into a store that holds its answers: the callback waits, the tier holds the limit and a step', async () => {
    const limit = 4 * MiB
    const chunk = Buffer.allocUnsafe(16 * MiB)
    fillBlocks(chunk, 0)
    for (const adoptChunks of [false, true]) {
      // Every object but the inode hangs until released: nothing the writer sends is stored.
      const store = new FailingStore(new MemoryStore(), [
        { ops: ['put', 'uploadPart'], key: /^(?!inode$)/, mode: 'hang' },
      ])
      const ws = createStreamSegmentWriteStream({
        store,
        adoptChunks,
        profile: 'spec',
        dataCacheDirtyMaxBytesThreshold: limit,
      })
      let calledBack = false
      ws.write(chunk, () => {
        calledBack = true
      })
      await store.hangOf('put', 'uploadPart')
      for (let i = 0; i < 20; i++) await turn()
      const file = ws.file as SegmentFile
      const held = fileState(file).tier.usedBytes
      assert.equal(calledBack, false, `adoptChunks ${adoptChunks}: the write called back while no object was stored`)
      // Taken in steps of a quarter of the limit, the writer waits at the first one past it.
      assert.ok(held <= limit + limit / 4, `adoptChunks ${adoptChunks}: ${held / MiB} MiB held, limit ${limit / MiB}`)
      store.clearRules()
      store.release()
      ws.end()
      await finished(ws)
      assert.equal(calledBack, true)
      assert.ok(file.peakDirtyBytes <= limit + limit / 4, `adoptChunks ${adoptChunks}: peak ${file.peakDirtyBytes}`)
      const back = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await back.read(0, chunk.length)).equals(chunk), 'the bytes read back')
      await back.close()
    }
  })

  it('format parted: a head-first container, partials under the limit, reads back; the format stays', async () => {
    const store = new ThrottledStore(new MemoryStore(), { latencyMs: 2, bandwidth: 40 * MiB })
    const limit = 256 * KiB
    const options = { store, format: 'parted' as const, dataCacheDirtyMaxBytesThreshold: limit }
    const ws = createStreamSegmentWriteStream({ ...options, dataCacheDirtyMaxBlocksThreshold: 0 })
    await pipeline(Readable.from(blockStream(4 * MiB + 4096, 64 * KiB)), ws)
    const file = ws.file as SegmentFile
    assert.ok(file.partials >= 10, `partials written: ${file.partials}`)
    assert.ok(file.peakDirtyBytes <= limit + 64 * KiB, `peak dirty ${file.peakDirtyBytes}`)
    assert.equal((ws.flushTiming as { streamSentBytes: number }).streamSentBytes > 0, true)
    assert.deepEqual(await readAllHash(store), {
      size: 4 * MiB + 4096,
      hash: await sha(blockStream(4 * MiB + 4096, 64 * KiB)),
    })
    for await (const { key } of store.list()) {
      if (key === 'inode') continue
      const head = await store.get(key, { range: { start: 0, end: 8 } })
      assert.equal(Buffer.from(head).toString('latin1'), 'SSEGHEAD', `${key} is head first`)
    }
    // A second stream into it without a format keeps it; asking for the other one fails.
    await pipeline(Readable.from([Buffer.alloc(5000, 1)]), createStreamSegmentWriteStream({ store }))
    await assert.rejects(
      pipeline(Readable.from([Buffer.alloc(10)]), createStreamSegmentWriteStream({ store, format: 'stream' })),
      (err) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
        /format stream: the container .* has parted/.test(err.message),
    )
    assert.deepEqual(await readAllHash(store), { size: 5000, hash: await sha([Buffer.alloc(5000, 1)]) })
  })

  it('a source error aborts uploads and publishes nothing', async () => {
    const store = new MemoryStore()
    async function* failing() {
      yield* blockStream(40 * MiB, 4 * MiB)
    }
    const src = Readable.from(
      (async function* () {
        let n = 0
        for await (const b of failing()) {
          if (++n === 5) throw new Error('source broke')
          yield b
        }
      })(),
    )
    const ws = createStreamSegmentWriteStream({ store, segmentMpuChunkSize: 1 * MiB })
    const closed = new Promise<void>((r) => ws.on('close', () => r()))
    await assert.rejects(pipeline(src, ws), /source broke/)
    // node's pipeline rejects before the writable has closed; 'close' means aborted.
    await closed
    assert.equal(await store.head('inode'), undefined)
    assert.equal(await openUploads(store), 0)
  })

  it('a store error rejects the pipeline with a StreamSegmentError and publishes nothing', async () => {
    const store = new FailingStore(new MemoryStore(), [{ ops: ['put', 'uploadPart'], key: /\.0$/ }])
    const ws = createStreamSegmentWriteStream({ store, segmentMpuChunkSize: 1 * MiB })
    await assert.rejects(pipeline(Readable.from(blockStream(4 * MiB)), ws), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
      return true
    })
    assert.equal(await store.head('inode'), undefined)
    assert.equal(await openUploads(store), 0, 'the failed part 0 upload was aborted')
  })

  it('the AbortSignal aborts a hung flush: ERR_ABORTED, nothing published', async () => {
    const store = new FailingStore(new MemoryStore(), [{ ops: ['uploadPart'], mode: 'hang' }])
    const ac = new AbortController()
    const ws = createStreamSegmentWriteStream({ store, signal: ac.signal, segmentMpuChunkSize: 1 * MiB })
    setTimeout(() => ac.abort(new Error('user gave up')), 100)
    await assert.rejects(pipeline(Readable.from(blockStream(4 * MiB)), ws), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), String(err))
      assert.match(String((err as Error).cause), /user gave up/)
      return true
    })
    assert.equal(await store.head('inode'), undefined)
    assert.ok(store.count('uploadPart', 'hung') >= 1)
  })

  it('destroy() mid-stream publishes nothing', async () => {
    const store = new MemoryStore()
    const ws = createStreamSegmentWriteStream({ store })
    ws.write(Buffer.alloc(64 * KiB, 1))
    await new Promise((r) => setTimeout(r, 20))
    ws.destroy()
    await new Promise<void>((r) => ws.on('close', () => r()))
    assert.equal(await store.head('inode'), undefined)
  })

  it('destroy while a write waits for room among hung uploads: the requests stop, none is started again', async () => {
    // Objects sent ahead whole (PutObject), every one hanging until aborted: the writer fills
    // the requests in flight, then waits for room. Aborting frees the room, and an object
    // that fails puts its blocks back: nothing may send them again once the file is aborted.
    const store = new FailingStore(new MemoryStore(), [{ ops: ['put'], mode: 'hang' }])
    const ws = createStreamSegmentWriteStream({ store, streamSegmentBytes: 1 * MiB, segmentMpuChunkSize: 1 * MiB })
    const errors: unknown[] = []
    ws.on('error', (err) => errors.push(err))
    const writes: Promise<unknown>[] = []
    for (let i = 0; i < 24; i++) writes.push(new Promise((r) => ws.write(Buffer.alloc(1 * MiB, i), r)))
    while (store.count('put', 'hung') < 4) await new Promise((r) => setTimeout(r, 5))
    await new Promise((r) => setTimeout(r, 50))
    const before = store.count('put')
    const t0 = performance.now()
    ws.destroy(new Error('stop'))
    await new Promise<void>((r) => ws.on('close', () => r()))
    await Promise.all(writes)
    const after = store.count('put') - before
    assert.ok(after <= 4, `${after} PutObjects started after the abort`)
    assert.ok(performance.now() - t0 < 5_000)
    assert.equal(await store.inner.head('inode'), undefined)
    assert.match(String(errors[0]), /stop/)
  })

  it('a setting given as undefined counts as not given: the streaming profile still applies to it', async () => {
    // As `{ streamSegmentBytes: opts.size }` passes when the caller has no size of its own.
    const ws = createStreamSegmentWriteStream({
      store: new MemoryStore(),
      streamSegmentBytes: undefined,
      dataCacheDirtyMaxBytesThreshold: undefined,
      segmentBufferSize: undefined,
    })
    await new Promise<void>((resolve, reject) => ws.end(() => resolve()).on('error', reject))
    const { streamSegmentBytes, dataCacheDirtyMaxBytesThreshold, segmentBufferSize } = ws.file?.settings ?? {}
    assert.deepEqual(
      { streamSegmentBytes, dataCacheDirtyMaxBytesThreshold, segmentBufferSize },
      { ...STREAMING_PROFILE },
    )
  })

  it("a segmentMpuChunkSize given that is no multiple of an existing container's data block size is refused, naming both and the container", async () => {
    const store = new MemoryStore('chunk-vs-64k-blocks')
    await publishContent(store, Buffer.alloc(100, 1), { dataBlockSize: 64 * KiB })
    // A multiple of the default 4 KiB block, not of this container's.
    const ws = createStreamSegmentWriteStream({ store, segmentMpuChunkSize: 6_000_640 })
    await assert.rejects(
      pipeline(Readable.from([Buffer.alloc(1000, 2)]), ws),
      (err) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
        /segmentMpuChunkSize = 6000640/.test(err.message) &&
        /65536/.test(err.message) &&
        err.message.includes('mem://chunk-vs-64k-blocks'),
    )
    const f = await SegmentFile.open(store, { readOnly: true })
    assert.deepEqual([f.cno, f.size], [1, 100], 'nothing was published')
    await f.close()
  })

  it('rejects bad options with the setting named', () => {
    assert.throws(
      () => createStreamSegmentWriteStream({ store: new MemoryStore(), url: 'mem://x' }),
      /exactly one of url and store/,
    )
  })
})
