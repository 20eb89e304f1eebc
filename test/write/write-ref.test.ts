/** Blocks written by reference: sent ahead with the default limits, stored on completion, re-read only when needed. */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { closeSync, mkdtempSync, openSync, rmSync, statSync, utimesSync, writeFileSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setImmediate as turn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { BlockSource } from '../../lib/state/dirty-tier.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { fillBlocks, pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024

/** A source over a buffer that counts the bytes read and can be shut. */
function bufferSource(data: Buffer): BlockSource & { bytesRead: number; shut: boolean } {
  const s = {
    bytesRead: 0,
    shut: false,
    async read(position: number, length: number) {
      if (s.shut) throw new Error('the source was read after its blocks were stored')
      s.bytesRead += length
      return data.subarray(position, position + length)
    },
  }
  return s
}

describe('writeRef', () => {
  it('with the spec default limits, a file written only by reference is sent ahead, then stored', async () => {
    const data = randomBytes(40 * MiB)
    const src = bufferSource(data)
    const store = new MemoryStore()
    const f = await SegmentFile.create(store) // the spec's defaults: 8 MiB dirty limit, 1 GiB target
    await f.writeRef(0, data.length, src)
    assert.equal(f.dirtyBytes, 0, 'references hold no bytes in the dirty tier')
    await f.settle()
    assert.ok(src.bytesRead >= 32 * MiB, `read ${src.bytesRead} bytes while writing: two 16 MiB pieces went ahead`)
    const sentBefore = src.bytesRead
    const t = await f.flush()
    assert.equal(t.streamSentBytes + t.streamFlushBytes, data.length)
    assert.ok(t.streamSentBytes >= 32 * MiB)
    assert.equal(t.streamDeadBytes, 0)
    assert.equal(src.bytesRead - sentBefore, data.length - sentBefore, 'the flush read only what was not sent')
    src.shut = true // every block is stored now: reads come from the objects
    assert.deepEqual(Buffer.from(await f.read(0, data.length)), data)
    const g = await SegmentFile.open(store)
    assert.deepEqual(Buffer.from(await g.read(7 * MiB + 3, 5 * MiB)), data.subarray(7 * MiB + 3, 12 * MiB + 3))
  })

  it('a handle that writes from one source after another, flushing between, keeps none whose blocks are stored', async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const f = await SegmentFile.create(new MemoryStore(), { streamSegmentBytes: 0 })
    const data = randomBytes(256 * 1024)
    // Each source stands for a fileSource, which keeps up to 64 MiB of read buffers.
    const kept: WeakRef<BlockSource>[] = []
    const cycle = async (i: number) => {
      const src = bufferSource(data)
      kept.push(new WeakRef(src))
      await f.writeRef(i * data.length, data.length, src)
      await f.flush()
    }
    for (let i = 0; i < 50; i++) await cycle(i)
    await turn() // a WeakRef holds its target until the turn that made it ends
    gc()
    const alive = kept.filter((r) => r.deref() !== undefined).length
    assert.equal(alive, 0, `${alive} of 50 sources still held after their blocks were stored`)
    assert.deepEqual(Buffer.from(await f.read(49 * data.length, data.length)), data)
    await f.close()
  })

  it('a range of many objects is taken in steps: the references held stay near what is in flight, not the range', async () => {
    // Each reference costs ~50 bytes of per-block state and its leaf's entry: taken whole,
    // a 1 TiB file held some 16 GiB of them before anything was stored.
    const f = await SegmentFile.create(new MemoryStore(), {
      streamSegmentBytes: 4 * MiB,
      segmentMpuChunkSize: MiB,
      segmentMpuMaxConcurrency: 4,
    })
    const size = 128 * MiB
    const tier = fileState(f).tier
    let peak = 0
    const src: BlockSource = {
      async read(position, length) {
        peak = Math.max(peak, tier.refBlocks) // as each piece goes out
        const out = Buffer.allocUnsafe(length)
        fillBlocks(out, position)
        return out
      },
    }
    await f.writeRef(0, size, src)
    peak = Math.max(peak, tier.refBlocks)
    await f.flush()
    assert.equal(tier.refBlocks, 0, 'every reference freed once stored')
    // The 4 MiB object being filled, the objects closing, the 4 pieces in flight, a leaf
    // still growing and a step (a quarter of the 8 MiB dirty limit): well under 32 MiB.
    const held = (peak * 4096) / MiB
    assert.ok(held <= 32, `${held} MiB of the ${size / MiB} MiB range held as references at once`)
    const want = Buffer.allocUnsafe(4 * MiB)
    fillBlocks(want, 77 * MiB)
    assert.deepEqual(Buffer.from(await f.read(77 * MiB, 4 * MiB)), want)
    await f.close()
  })

  it('unaligned ranges: the partial blocks at the ends go by value; rewrites by value replace references', async () => {
    const data = randomBytes(3 * MiB)
    const f = await SegmentFile.create(new MemoryStore())
    await f.writeRef(1000, 2 * MiB, bufferSource(data), 5000)
    const want = Buffer.alloc(1000 + 2 * MiB)
    data.copy(want, 1000, 5000, 5000 + 2 * MiB)
    assert.deepEqual(Buffer.from(await f.read(0, want.length)), want)
    await f.write(4096 + 10, Buffer.from('hello'))
    want.write('hello', 4096 + 10)
    await f.flush()
    assert.deepEqual(Buffer.from(await f.read(0, want.length)), want)
  })

  it('an object that fails leaves its blocks as references, and the flush reads the source again', async () => {
    const data = randomBytes(40 * MiB)
    const src = bufferSource(data)
    const store = new FailingStore(new MemoryStore(), [{ ops: ['uploadPart'], key: /^0000000001\.1$/, nth: 1 }])
    const f = await SegmentFile.create(store)
    await f.writeRef(0, data.length, src)
    const t = await f.flush()
    assert.ok(t.streamDeadBytes > 0, 'the failed object counted dead')
    assert.ok(src.bytesRead > data.length, `the failed object's blocks were read twice: ${src.bytesRead}`)
    const g = await SegmentFile.open(store)
    assert.deepEqual(Buffer.from(await g.read(0, data.length)), data)
  })

  it("a source of the caller's that fails with its own Error: ERR_STORE for that call, the handle and its writes kept", async () => {
    const data = randomBytes(64 * 1024)
    const src = bufferSource(data)
    src.shut = true // every read fails with a plain Error, as a user's source on a failing disk would
    const store = new MemoryStore()
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.from('kept'))
    // A partial block is read at once; whole blocks when the flush sends them.
    await rejectsCode(f.writeRef(100, 10, src), 'ERR_STORE', /block source: .*the source was read after/)
    await f.writeRef(8192, data.length, src)
    const err = await rejectsCode(f.flush(), 'ERR_STORE', /block source: /)
    assert.match(String((err.cause as Error).message), /the source was read after/)
    src.shut = false // the source is back: the same handle flushes what it was given
    await f.flush()
    const g = await SegmentFile.open(store, { readOnly: true })
    assert.deepEqual(Buffer.from(await g.read(0, 4)), Buffer.from('kept'))
    assert.deepEqual(Buffer.from(await g.read(8192, data.length)), data)
    await g.close()
    await f.close()
  })

  it('a source whose verify() rejects with no Error (undefined, a string): ERR_STATE for that flush, the handle kept', async () => {
    for (const value of [undefined, 'moved']) {
      const data = randomBytes(64 * 1024)
      let changed = true
      const src = Object.assign(bufferSource(data), {
        async verify() {
          if (changed) throw value
        },
      })
      const store = new MemoryStore()
      const f = await SegmentFile.create(store)
      await f.writeRef(0, data.length, src)
      const err = await rejectsCode(f.flush(), 'ERR_STATE', /a source changed: /)
      assert.equal(err.cause, value)
      assert.equal(await store.get('inode').catch(() => undefined), undefined, 'nothing published')
      changed = false // the source is as it was: the same handle flushes what it was given
      await f.flush()
      const g = await SegmentFile.open(store, { readOnly: true })
      assert.deepEqual(Buffer.from(await g.read(0, data.length)), data)
      await g.close()
      await f.close()
    }
  })

  it('uploadFile writes a local file by reference, replacing what the container held', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-upload-'))
    try {
      const path = join(dir, 'model.bin')
      const data = randomBytes(5 * MiB + 123)
      writeFileSync(path, data)
      const store = new MemoryStore()
      const t = await uploadFile(path, store)
      assert.equal(t.cno, 1)
      const f = await SegmentFile.open(store)
      assert.deepEqual(Buffer.from(await f.read(0, f.size)), data)
      writeFileSync(path, data.subarray(0, 1000))
      assert.equal((await uploadFile(path, store)).cno, 2)
      assert.equal((await SegmentFile.open(store)).size, 1000)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a file rewritten in place during uploadFile: ERR_STATE, nothing published, no part 0 left', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-torn-'))
    try {
      const path = join(dir, 'model.bin')
      const first = randomBytes(256 * 1024)
      writeFileSync(path, first)
      const store = new MemoryStore()
      assert.equal((await uploadFile(path, store)).cno, 1)
      const before = await store.get('inode')
      writeFileSync(path, randomBytes(1024 * 1024))
      // The file changes once the container is open and before the flush: same size even,
      // its mtime and ctime move.
      const err = await uploadFile(
        path,
        store,
        {},
        {
          onStart: () => {
            const fd = openSync(path, 'r+')
            writeSync(fd, Buffer.from('torn'), 0, 4, 500_000)
            closeSync(fd)
          },
        },
      ).then(
        () => assert.fail('published a torn file'),
        (e: unknown) => e,
      )
      assert.ok(StreamSegmentError.is(err, 'ERR_STATE'), String(err))
      assert.match((err as Error).message, /changed while being uploaded/)
      assert.deepEqual(await store.get('inode'), before, 'the inode is unchanged')
      const f = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await f.read(0, f.size)).equals(first), 'checkpoint 1 still reads back')
      for await (const e of store.list('')) assert.ok(!/^0000000002\.0$/.test(e.key), 'no part 0 left to roll forward')
      // Unchanged, the same file uploads.
      assert.equal((await uploadFile(path, store)).cno, 2)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a file rewritten in place mid-upload with the same size and its mtime set back: ERR_STATE (its ctime moved)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-torn-mtime-'))
    try {
      const path = join(dir, 'model.bin')
      const size = 512 * 1024
      writeFileSync(path, pattern(0, size, 1))
      const t0 = new Date('2026-01-02T03:04:05.000Z')
      utimesSync(path, t0, t0)
      /** Once the first segment object's bytes are on their way, the file's second half changes. */
      class RewritingStore extends WrappedStore {
        rewritten = false
        protected override around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
          if (!this.rewritten && (call.op === 'put' || call.op === 'uploadPart') && /^\d+\.\d+$/.test(call.key)) {
            this.rewritten = true
            const fd = openSync(path, 'r+')
            writeSync(fd, pattern(size / 2, size / 2, 2), 0, size / 2, size / 2)
            closeSync(fd)
            utimesSync(path, t0, t0) // size and mtime as they were: only the ctime tells
          }
          return run()
        }
      }
      const store = new RewritingStore(new MemoryStore())
      await rejectsCode(
        uploadFile(path, store, smallSettings),
        'ERR_STATE',
        /changed while being uploaded \(size 524288 → 524288, mtime 2026-01-02T03:04:05\.000Z → 2026-01-02T03:04:05\.000Z, ctime \S+ → \S+\)/,
      )
      assert.ok(store.rewritten, 'the file was rewritten during the upload')
      assert.equal(statSync(path).size, size)
      assert.equal(statSync(path).mtimeMs, t0.getTime())
      assert.equal(await store.head('inode'), undefined, 'nothing was published')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('settings a store cannot take are refused before any request: S3 pieces under 5 MiB', async () => {
    const store = new S3Store({
      client: createS3Client({
        endpoint: 'http://127.0.0.1:9',
        region: 'us-east-1',
        credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
      }),
      bucket: 'b',
      prefix: 'p',
    })
    await rejectsCode(
      SegmentFile.create(store, { segmentMpuChunkSize: 1024 * 1024 }),
      'ERR_INVALID_ARGUMENT',
      /segmentMpuChunkSize = 1048576: the store at s3:\/\/b\/p takes multipart pieces of at least 5242880 bytes/,
    )
  })
})
