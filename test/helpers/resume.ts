/**
 * Resumed uploads (uploadFile's `resume`), the same checks on every store: an upload
 * interrupted part-way, then run again, keeps what the first attempt sent and checks it
 * against the file. Used by test/streams/resume.test.ts (memory, directory) and
 * test/streams/resume-s3.test.ts (radosgw).
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import type { StreamSegmentError } from '../../lib/errors.js'
import { parseKey } from '../../lib/format/names.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { CopySource, ListEntry, ObjectStore, RequestOptions } from '../../lib/store/types.js'
import { type UploadFileOptions, uploadFile } from '../../lib/streams/upload-file.js'
import type { FlushTiming } from '../../lib/write/flush.js'
import { fillBlocks } from './pattern.js'
import { type CallInfo, WrappedStore } from './wrapped-store.js'

/**
 * Counts the body bytes sent (PutObject and UploadPart) and the requests, by operation;
 * passes server-side part copies through (counted, no body) when the store makes them.
 */
export class CountingStore extends WrappedStore {
  bytesUp = 0
  readonly requests: Record<string, number> = {}
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const out = await run()
    this.bytesUp += call.bytesUp
    this.requests[call.op] = (this.requests[call.op] ?? 0) + 1
    return out
  }
  canCopyFrom(source: ObjectStore): boolean {
    const from = source instanceof WrappedStore ? source.inner : source
    return this.inner.uploadPartCopy !== undefined && this.inner.canCopyFrom?.(from) === true
  }
  async uploadPartCopy(
    key: string,
    uploadId: string,
    partNumber: number,
    source: CopySource,
    options?: RequestOptions,
  ) {
    const copy = this.inner.uploadPartCopy?.bind(this.inner)
    if (copy === undefined) throw new Error(`${this.inner.url}: no uploadPartCopy`)
    const from = source.store instanceof WrappedStore ? source.store.inner : source.store
    const out = await copy(key, uploadId, partNumber, { ...source, store: from }, options)
    this.requests.uploadPartCopy = (this.requests.uploadPartCopy ?? 0) + 1
    return out
  }
}

/** A store whose part uploads take `delayMs` longer: a writer that stays open a while. */
export class SlowPartsStore extends WrappedStore {
  constructor(
    inner: ObjectStore,
    readonly delayMs: number,
  ) {
    super(inner)
  }
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'uploadPart') await new Promise((r) => setTimeout(r, this.delayMs))
    return run()
  }
}

/** A file of `bytes` patterned bytes (every 4 KiB block distinct, `seed` in each). */
export function writePatternFile(path: string, bytes: number, seed = 1): Buffer {
  const data = Buffer.allocUnsafe(bytes)
  fillBlocks(data, 0, seed)
  writeFileSync(path, data)
  return data
}

export function sha256(b: Uint8Array): string {
  return createHash('sha256').update(b).digest('hex')
}

/** The published checkpoint's bytes' SHA-256 (read back 8 MiB at a time) and size. */
export async function readBackSha256(store: ObjectStore): Promise<{ size: number; sha256: string }> {
  const f = await SegmentFile.open(store, { readOnly: true })
  try {
    const h = createHash('sha256')
    for (let at = 0; at < f.size; at += 8 << 20) h.update(await f.read(at, Math.min(8 << 20, f.size - at)))
    return { size: f.size, sha256: h.digest('hex') }
  } finally {
    await f.close()
  }
}

/** Runs uploadFile and aborts it once `stopAt` body bytes were uploaded; resolves with what was uploaded. */
export async function interruptedUpload(
  path: string,
  store: ObjectStore,
  settings: Partial<Settings>,
  stopAt: number,
): Promise<number> {
  const ac = new AbortController()
  let uploaded = 0
  const options: UploadFileOptions = {
    signal: ac.signal,
    onStart: (file) => {
      const uploader = fileState(file).uploader
      const before = uploader.onRequestDone
      uploader.onRequestDone = () => {
        before?.()
        uploaded = uploader.uploadedBytes
        if (uploaded >= stopAt) ac.abort(new Error('interrupted by the test'))
      }
    },
  }
  await assert.rejects(uploadFile(path, store, settings, options), (e: StreamSegmentError) => {
    assert.equal(e.code, 'ERR_ABORTED', e.message)
    return true
  })
  return uploaded
}

async function assertPublished(store: ObjectStore, data: Buffer, t: FlushTiming): Promise<void> {
  const back = await readBackSha256(store)
  assert.deepEqual(back, { size: data.length, sha256: sha256(data) }, 'the checkpoint is the file, byte for byte')
  const report = await verifyCheckpoint(store)
  assert.deepEqual(report.problems, [], 'every header, node and block CRC checks out')
  assert.equal(report.cno, t.cno)
}

export interface ResumeSuiteOptions {
  /** The multipart piece size to use (the store's minimum or more). */
  pieceSize: number
  /** The file's size: several pieces. */
  fileBytes: number
}

/**
 * `make` returns a fresh, empty store for each test, wrapped or not; the suite wraps it
 * in a CountingStore for the second attempt.
 */
export function runResumeTests(name: string, make: () => Promise<ObjectStore>, o: ResumeSuiteOptions): void {
  const dir = mkdtempSync(join(tmpdir(), 'ss-resume-'))
  after(() => rmSync(dir, { recursive: true, force: true }))
  const settings: Partial<Settings> = { segmentMpuChunkSize: o.pieceSize, segmentMpuMaxConcurrency: 2 }
  let n = 0
  const file = (seed: number) => {
    const path = join(dir, `f${++n}.bin`)
    return { path, data: writePatternFile(path, o.fileBytes, seed) }
  }

  describe(`uploadFile resume: ${name}`, () => {
    it('an upload aborted part-way is resumed: only the rest is sent, the checkpoint is the file', async () => {
      const store = await make()
      const { path, data } = file(11)
      const first = await interruptedUpload(path, store, settings, o.fileBytes / 2)
      assert.ok(first >= o.fileBytes / 2 && first < o.fileBytes, `first attempt uploaded ${first} bytes`)
      const counting = new CountingStore(store)
      const t = await uploadFile(path, counting, settings)
      assert.ok(t.reusedBytes >= o.fileBytes / 2 - 2 * o.pieceSize, `reused ${t.reusedBytes} bytes`)
      assert.equal(t.reusedBytes % o.pieceSize, 0, 'whole pieces are kept')
      // Sent: the rest of the data, plus the leaves, summaries, headers, part 0 and inode.
      assert.ok(
        counting.bytesUp <= o.fileBytes - t.reusedBytes + o.fileBytes / 16,
        `sent ${counting.bytesUp} bytes the second time, ${t.reusedBytes} kept of ${o.fileBytes}`,
      )
      assert.ok(counting.bytesUp + t.reusedBytes >= o.fileBytes, 'every byte was sent or kept')
      assert.ok((counting.requests.listParts ?? 0) >= 1, 'the parts of the interrupted upload were listed')
      await assertPublished(store, data, t)
    })

    it('a file of several objects: the completed ones are copied piece by piece, the open one continued', async () => {
      const store = await make()
      const { path, data } = file(16)
      const small = { ...settings, streamSegmentBytes: 4 * o.pieceSize }
      await interruptedUpload(path, store, small, o.fileBytes * 0.6)
      const counting = new CountingStore(store)
      const t = await uploadFile(path, counting, small)
      assert.ok((counting.requests.uploadPartCopy ?? 0) >= 3, `${counting.requests.uploadPartCopy} parts copied`)
      assert.ok(t.reusedBytes >= o.fileBytes * 0.4, `reused ${t.reusedBytes} bytes`)
      assert.ok(
        counting.bytesUp <= o.fileBytes - t.reusedBytes + o.fileBytes / 8,
        `sent ${counting.bytesUp} bytes the second time, ${t.reusedBytes} kept of ${o.fileBytes}`,
      )
      await assertPublished(store, data, t)
    })

    it('a completed object whose data went bad under an intact summary: the bad piece is sent, not copied', async () => {
      const store = await make()
      const { path, data } = file(18)
      const small = { ...settings, streamSegmentBytes: 4 * o.pieceSize }
      await interruptedUpload(path, store, small, o.fileBytes * 0.6)
      // The first object the interrupted attempt completed (an open upload's claim is empty).
      let key: string | undefined
      for await (const e of store.list('')) {
        if (parseKey(e.key)?.kind === 'segment' && e.size > 0) {
          key = e.key
          break
        }
      }
      assert.ok(key !== undefined, 'the interrupted attempt completed an object')
      // A byte of its first data block changes; its summary (and so the CRC there) and its
      // metadata (what a resume finds it by) do not.
      const bytes = Buffer.from(await store.get(key))
      bytes[100] = (bytes[100] as number) ^ 0x5a
      const info = await store.head(key)
      await store.put(key, bytes, { metadata: info?.metadata ?? {} })
      const counting = new CountingStore(store)
      const t = await uploadFile(path, counting, small)
      // Its first piece was copied, found not the file's bytes and sent over. (How many copies
      // of the other completed objects' pieces started before that depends on timing.)
      const copies = counting.requests.uploadPartCopy ?? 0
      assert.ok(copies >= 1, `${copies} parts copied`)
      assert.equal(t.reusedBytes % o.pieceSize, 0, `reused ${t.reusedBytes} bytes`)
      await assertPublished(store, data, t)
    })

    it("two uploads of the same file at once (the second continues the first's open upload): the file is published whole", async () => {
      const store = await make()
      const { path, data } = file(17)
      const slow = new SlowPartsStore(store, 30)
      let second: Promise<FlushTiming> | undefined
      let started: () => void = () => {}
      const secondStarted = new Promise<void>((r) => {
        started = r
      })
      const first = uploadFile(path, slow, settings, {
        onStart: (f) => {
          const uploader = fileState(f).uploader
          uploader.onRequestDone = () => {
            // Half way through the first, a second upload of the file starts and finds its open upload.
            if (second === undefined && uploader.uploadedBytes >= o.fileBytes / 2) {
              second = uploadFile(path, slow, settings)
              started()
            }
          }
        },
      })
      const results = await Promise.allSettled([first, secondStarted.then(() => second as Promise<FlushTiming>)])
      for (const r of results) {
        // The inode's compare-and-swap may refuse the loser; nothing else may fail.
        if (r.status === 'rejected')
          assert.equal((r.reason as StreamSegmentError).code, 'ERR_CONFLICT', String(r.reason))
      }
      const won = results.filter((r): r is PromiseFulfilledResult<FlushTiming> => r.status === 'fulfilled')
      assert.ok(won.length >= 1, 'at least one published')
      const [, b] = results
      if (b.status === 'fulfilled') assert.ok(b.value.reusedBytes > 0, "the second continued the first's upload")
      const latest = won.map((r) => r.value).sort((a, b) => b.cno - a.cno)[0] as FlushTiming
      await assertPublished(store, data, latest)
    })

    it('after gc (grace 0) took the interrupted upload, nothing is kept and the file is published', async () => {
      const store = await make()
      const { path, data } = file(18)
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      const cleaned = await gc(store, { graceMs: 0 })
      assert.ok(cleaned.abortedUploads >= 1 && cleaned.deletedObjects >= 1, JSON.stringify(cleaned))
      const t = await uploadFile(path, store, settings)
      assert.equal(t.reusedBytes, 0)
      await assertPublished(store, data, t)
    })

    it('an object continued, then deleted (as gc would) before publication: ERR_STATE, nothing published', async () => {
      const store = await make()
      const { path } = file(19)
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      const deleting = new (class extends WrappedStore {
        protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
          const out = await run()
          if (call.op === 'completeMultipart') await this.inner.delete(call.key)
          return out
        }
      })(store)
      await assert.rejects(uploadFile(path, deleting, settings), (e: StreamSegmentError) => {
        assert.equal(e.code, 'ERR_STATE', e.message)
        assert.match(e.message, /continued from an interrupted upload is gone .*nothing was published/)
        return true
      })
      await assert.rejects(
        SegmentFile.open(store, { readOnly: true }),
        (e: StreamSegmentError) => e.code === 'ERR_NOT_FOUND',
      )
    })

    it('an object continued, then deleted and written again at its key before publication: ERR_STATE, nothing published', async () => {
      const store = await make()
      const { path } = file(21)
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      // What gc deleting it, then another writer taking its number, would leave: another
      // object under the key, of the same size and metadata, one byte different.
      const replacing = new (class extends WrappedStore {
        protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
          const out = await run()
          if (call.op === 'completeMultipart') {
            const bytes = Buffer.from(await this.inner.get(call.key))
            const info = await this.inner.head(call.key)
            bytes[100] = (bytes[100] as number) ^ 0x5a
            await this.inner.delete(call.key)
            await this.inner.put(call.key, bytes, { ifNoneMatch: '*', metadata: info?.metadata ?? {} })
          }
          return out
        }
      })(store)
      await assert.rejects(uploadFile(path, replacing, settings), (e: StreamSegmentError) => {
        assert.equal(e.code, 'ERR_STATE', e.message)
        assert.match(e.message, /continued from an interrupted upload was replaced .*nothing was published/)
        return true
      })
      await assert.rejects(
        SegmentFile.open(store, { readOnly: true }),
        (e: StreamSegmentError) => e.code === 'ERR_NOT_FOUND',
      )
    })

    it("an interrupted upload under a number above the new writer's is not continued (nodes never point up)", async () => {
      const store = await make()
      const { path, data } = file(20)
      // Checkpoint number 1 is taken when the first attempt starts: it writes under 2.
      await store.put('0000000001.5', new Uint8Array(0))
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      let open = 0
      for await (const u of store.listMultipart('')) if (u.key.startsWith('0000000002.')) open++
      assert.equal(open, 1, 'the first attempt left its upload under checkpoint number 2')
      await store.delete('0000000001.5')
      // A writer takes a number above every one objects use; one whose listing missed the
      // attempt (its claim stored just after that listing) takes number 1, below it.
      const late = new (class extends WrappedStore {
        protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
          const out = await run()
          if (call.op !== 'list') return out
          return (out as ListEntry[]).filter((e) => !e.key.startsWith('0000000002.')) as T
        }
      })(store)
      const t = await uploadFile(path, late, settings)
      assert.equal(t.cno, 1)
      assert.equal(t.reusedBytes, 0)
      await assertPublished(store, data, t)
    })

    it('a file changed between attempts (new mtime) keeps nothing, and is published right', async () => {
      const store = await make()
      const { path } = file(12)
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      const changed = writePatternFile(path, o.fileBytes, 13) // same size, new bytes, new mtime
      const later = new Date(Date.now() + 5000)
      utimesSync(path, later, later)
      const counting = new CountingStore(store)
      const t = await uploadFile(path, counting, settings)
      assert.equal(t.reusedBytes, 0)
      assert.ok(counting.bytesUp >= o.fileBytes, `sent ${counting.bytesUp} bytes: all of it`)
      await assertPublished(store, changed, t)
    })

    for (const [what, target] of [
      ['one object', undefined],
      ['objects of 4 pieces', 4 * o.pieceSize],
    ] as const) {
      it(`bytes changed under the same size and mtime (${what}): the changed pieces are sent again, the others kept`, async () => {
        const store = await make()
        const { path, data } = file(14)
        const s = { ...settings, streamSegmentBytes: target }
        const t0 = new Date('2026-01-02T03:04:05.678Z')
        utimesSync(path, t0, t0)
        await interruptedUpload(path, store, s, o.fileBytes * 0.6)
        // A byte of the first piece and one of the sixth change; the mtime is set back as it was.
        for (const at of [o.pieceSize / 2, 5 * o.pieceSize + 77]) data[at] = (data[at] as number) ^ 0xff
        writeFileSync(path, data)
        utimesSync(path, t0, t0)
        const counting = new CountingStore(store)
        const t = await uploadFile(path, counting, s)
        assert.ok(t.reusedBytes > 0, 'the unchanged pieces are kept')
        assert.ok(counting.bytesUp >= 2 * o.pieceSize, 'the two changed pieces were sent')
        assert.ok(counting.bytesUp + t.reusedBytes >= o.fileBytes)
        await assertPublished(store, data, t)
      })
    }

    it('resume: false sends everything again; so does an interrupted upload older than resumeMaxAgeMs', async () => {
      const store = await make()
      const { path, data } = file(15)
      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      const old = new CountingStore(store)
      await new Promise((r) => setTimeout(r, 20))
      const t0 = await uploadFile(path, old, settings, { resumeMaxAgeMs: 10 })
      assert.equal(t0.reusedBytes, 0)
      assert.ok(old.bytesUp >= o.fileBytes)
      await assertPublished(store, data, t0)

      await interruptedUpload(path, store, settings, o.fileBytes / 2)
      const counting = new CountingStore(store)
      const t = await uploadFile(path, counting, settings, { resume: false })
      assert.equal(t.reusedBytes, 0)
      assert.equal(counting.requests.listParts ?? 0, 0, 'nothing was looked for')
      assert.ok(counting.bytesUp >= o.fileBytes, `sent ${counting.bytesUp} bytes: all of it`)
      await assertPublished(store, data, t)
      await assert.rejects(
        uploadFile(path, store, settings, { resume: 'yes' as unknown as boolean }),
        (e: StreamSegmentError) => e.code === 'ERR_INVALID_ARGUMENT' && /resume = "yes"/.test(e.message),
      )
    })
  })
}
