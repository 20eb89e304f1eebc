/**
 * uploadFile and its resume on radosgw through the fault proxy (test/helpers/fault-proxy.ts):
 * one fault on one kind of request of the upload (a part, a part copy, a claim, part 0,
 * the inode, a completion), with the store's retries and without; an abort while a request
 * of each kind is under way, of a first attempt and of a resume; and a first attempt that
 * fails for good. Each is followed by a check that what is published is the file byte for
 * byte (or that nothing is, but where the docs say an inode write's outcome is unknown),
 * and by an attempt that publishes it, reusing what was sent.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { gc } from '../../lib/admin/gc.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import type { Settings } from '../../lib/settings.js'
import type { S3StoreOptions } from '../../lib/store/s3.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { type UploadFileOptions, uploadFile } from '../../lib/streams/upload-file.js'
import type { FlushTiming } from '../../lib/write/flush.js'
import { type FaultKind, type FaultProxy, type RequestInfo, useFaultProxy } from '../helpers/fault-proxy.js'
import { interruptedUpload, readBackSha256, sha256, writePatternFile } from '../helpers/resume.js'
import { s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024
/** radosgw's smallest piece; a file of four pieces, the last one short. */
const PIECE = 5 * MiB
const FILE_BYTES = 17 * MiB
const SETTINGS: Partial<Settings> = { segmentMpuChunkSize: PIECE, segmentMpuMaxConcurrency: 2 }
/** Below a stall, above the proxy's short delays. */
const IDLE_TIMEOUT_MS = 1500

const dir = mkdtempSync(join(tmpdir(), 'ss-upload-faults-'))
after(() => rmSync(dir, { recursive: true, force: true }))
let files = 0
function patternFile(bytes = FILE_BYTES): { path: string; data: Buffer } {
  const path = join(dir, `f${++files}.bin`)
  return { path, data: writePatternFile(path, bytes, 100 + files) }
}

async function openUploads(store: ObjectStore): Promise<string[]> {
  const open: string[] = []
  for await (const u of store.listMultipart('')) open.push(u.key)
  return open
}

/** The checkpoint published is the file, byte for byte, and verifies. */
async function assertPublished(store: ObjectStore, data: Buffer, t: FlushTiming, what: string): Promise<void> {
  assert.deepEqual(await readBackSha256(store), { size: data.length, sha256: sha256(data) }, `${what}: the file`)
  const report = await verifyCheckpoint(store)
  assert.deepEqual(report.problems, [], `${what}: verify`)
  assert.equal(report.cno, t.cno, what)
}

/** Nothing is published in the container (no inode). */
async function assertNothingPublished(store: ObjectStore, what: string): Promise<void> {
  await assert.rejects(
    SegmentFile.open(store, { readOnly: true }),
    (e: StreamSegmentError) => e.code === 'ERR_NOT_FOUND',
    `${what}: nothing was published`,
  )
}

/** Records `file.progress.uploadedBytes` after every request, to check it never goes back. */
function progressRecorder(): { options: UploadFileOptions; seen: number[] } {
  const seen: number[] = []
  return {
    seen,
    options: {
      onStart: (file) => {
        const uploader = fileState(file).uploader
        const before = uploader.onRequestDone
        uploader.onRequestDone = () => {
          before?.()
          seen.push(file.progress.uploadedBytes)
        }
      },
    },
  }
}

/** Where a fault goes: a name for messages, and which requests match. */
interface Target {
  name: string
  match: (r: RequestInfo) => boolean
}

/** A case that threw, as the list of failures says it: its code and message. */
function failed(what: string, err: unknown): string {
  return `${what}: ${(err as StreamSegmentError).code ?? ''} ${(err as Error).message}`
}

const isPart0 = (r: RequestInfo) => /\.0$/.test(r.key)
const TARGETS: Target[] = [
  { name: 'UploadPart', match: (r) => r.op === 'UploadPart' },
  { name: 'a claim (PutObject, empty)', match: (r) => r.op === 'PutObject' && r.length === 0 },
  { name: 'CreateMultipartUpload', match: (r) => r.op === 'CreateMultipartUpload' },
  { name: 'CompleteMultipartUpload', match: (r) => r.op === 'CompleteMultipartUpload' },
  { name: 'part 0 (PutObject)', match: (r) => r.op === 'PutObject' && isPart0(r) },
  { name: 'the inode (PutObject)', match: (r) => r.op === 'PutObject' && r.key.endsWith('/inode') },
]
const KINDS: FaultKind[] = ['slowdown', 'reset', 'lost', 'cut', 'stall', 'stallBody']

describe('uploadFile on radosgw through a fault proxy', () => {
  let proxy: FaultProxy
  const proxiedStore = useFaultProxy({ seed: 7, stallMaxMs: 30_000 }, (started) => {
    proxy = started
  })

  /** A store on the test bucket whose requests go through the proxy, and one that goes direct. */
  async function stores(label: string, options: Partial<S3StoreOptions> = {}) {
    const prefix = uniquePrefix(label)
    const direct = await s3TestStore(prefix)
    const proxied = await proxiedStore(prefix, { retryBaseMs: 10, ...options }, IDLE_TIMEOUT_MS)
    return { direct, proxied }
  }

  test('one fault on each kind of request, each fault kind twice: retried, and the checkpoint is the file; progress never goes back', async () => {
    const failures: string[] = []
    for (const [t, target] of TARGETS.entries()) {
      // Each kind on two kinds of request, each request kind meeting two kinds: the whole
      // cross (36 uploads) takes a minute of CI for little more.
      for (const kind of [KINDS[t % KINDS.length], KINDS[(t + 3) % KINDS.length]] as FaultKind[]) {
        const what = `${kind} on ${target.name}`
        const { direct, proxied } = await stores('uf-one')
        const { path, data } = patternFile()
        proxy.resetStats()
        proxy.inject(kind, target.match)
        const progress = progressRecorder()
        try {
          const t = await uploadFile(path, proxied, SETTINGS, progress.options)
          await assertPublished(direct, data, t, what)
          const given = proxy.stats().faulted
          if (given !== 1) failures.push(`${what}: ${given} faults given`)
          const open = await openUploads(direct)
          if (open.length > 0) failures.push(`${what}: uploads left open: ${open.join(', ')}`)
          const back = progress.seen.findIndex((n, i) => i > 0 && n < (progress.seen[i - 1] as number))
          if (back >= 0) failures.push(`${what}: progress went back: ${progress.seen.join(', ')}`)
          const last = progress.seen.at(-1) ?? 0
          if (last < FILE_BYTES) failures.push(`${what}: progress ended at ${last} of ${FILE_BYTES}`)
        } catch (err) {
          failures.push(failed(what, err))
        }
        proxy.clearInjected()
      }
    }
    assert.deepEqual(failures, [])
  })

  test('one fault on a request of each kind, no retries: the file, or a retryable error (not ERR_TIMEOUT) and nothing published but at the inode write; run again, the file', async () => {
    const failures: string[] = []
    for (const target of TARGETS) {
      for (const kind of ['slowdown', 'lost'] as FaultKind[]) {
        const what = `${kind} on ${target.name}, no retries`
        const { direct, proxied } = await stores('uf-noretry', { maxRetries: 0 })
        const { path, data } = patternFile()
        proxy.resetStats()
        proxy.inject(kind, target.match)
        try {
          let failure: StreamSegmentError | undefined
          const t = await uploadFile(path, proxied, SETTINGS).catch((e: StreamSegmentError) => {
            failure = e
            assert.ok(StreamSegmentError.is(e), String(e))
            assert.equal(e.retryable, true, `${e.code}: ${e.message}`)
            // A connection reset or closed under the request is no time limit run out.
            assert.notEqual(e.code, 'ERR_TIMEOUT', e.message)
            return undefined
          })
          if (t !== undefined) await assertPublished(direct, data, t, what)
          else {
            // What a writer opening the container finds: nothing, even once a roll-forward may take a part 0.
            const w = await SegmentFile.open(direct, { rollForwardAfterMs: 0 }).catch((e: StreamSegmentError) => e)
            if (w instanceof SegmentFile) {
              await w.close()
              // The commit point: an inode write whose answer was lost may have landed (docs/api.md).
              if (target.name.startsWith('the inode')) {
                console.log(`# ${what}: ${failure?.code} ${failure?.message}`)
                await assertPublished(direct, data, { cno: fileState(w).published.cno } as FlushTiming, what)
              } else
                failures.push(
                  `${what}: failed, yet a writer opening the container finds checkpoint ${fileState(w).published.cno}`,
                )
            }
            const again = await uploadFile(path, direct, SETTINGS)
            await assertPublished(direct, data, again, `${what}, then again`)
          }
        } catch (err) {
          failures.push(failed(what, err))
        }
        proxy.clearInjected()
      }
    }
    assert.deepEqual(failures, [])
  })

  test('a part 0 whose answer was lost, no retries: the flush fails ERR_STORE and deletes it at once (it may have landed)', async () => {
    const { direct, proxied } = await stores('uf-part0-lost', { maxRetries: 0 })
    proxy.inject('lost', (r) => r.op === 'PutObject' && isPart0(r))
    const f = await SegmentFile.create(proxied, SETTINGS)
    try {
      await f.write(0, Buffer.alloc(64 * 1024, 7))
      await assert.rejects(f.flush(), (e: StreamSegmentError) => {
        // Not ERR_TIMEOUT: no time limit ran out, so there was time to delete it.
        assert.equal(e.code, 'ERR_STORE', e.message)
        assert.match(e.message, /connection was closed before the answer came/)
        return true
      })
      assert.equal(proxy.stats().faults.lost, 1)
      const part0s: string[] = []
      for await (const e of direct.list('')) if (isPart0({ key: e.key } as RequestInfo)) part0s.push(e.key)
      // Left, a writer opening the container while this one lives would roll it forward.
      assert.deepEqual(part0s, [], 'the part 0 that landed is deleted before the flush fails')
    } finally {
      await f.close()
    }
  })

  test('a resume whose part copies meet one fault each: retried, and the checkpoint is the file', async () => {
    const failures: string[] = []
    const small = { ...SETTINGS, streamSegmentBytes: 2 * PIECE }
    for (const kind of KINDS) {
      const what = `${kind} on UploadPartCopy`
      const { direct, proxied } = await stores('uf-copy')
      const { path, data } = patternFile(6 * PIECE)
      await interruptedUpload(path, direct, small, 0.7 * data.length)
      proxy.resetStats()
      proxy.inject(kind, (r) => r.op === 'UploadPartCopy')
      try {
        const t = await uploadFile(path, proxied, small)
        await assertPublished(direct, data, t, what)
        const s = proxy.stats()
        if (s.faulted !== 1) failures.push(`${what}: ${s.faulted} faults given`)
        if ((s.byOp.UploadPartCopy ?? 0) < 2) failures.push(`${what}: ${s.byOp.UploadPartCopy ?? 0} part copies`)
        if (t.reusedBytes < PIECE) failures.push(`${what}: reused ${t.reusedBytes}`)
      } catch (err) {
        failures.push(failed(what, err))
      }
      proxy.clearInjected()
    }
    assert.deepEqual(failures, [])
  })

  test('a resume whose continued upload meets one fault on each kind of request (the fault kinds in turn): the checkpoint is the file', async () => {
    const failures: string[] = []
    const kinds: FaultKind[] = ['lost', 'slowdown', 'stall']
    for (const [t, target] of TARGETS.entries()) {
      // One kind per request kind, in turn: each kind meets two of them.
      for (const kind of [kinds[t % kinds.length]] as FaultKind[]) {
        const what = `resume, ${kind} on ${target.name}`
        const { direct, proxied } = await stores('uf-resume-one')
        const { path, data } = patternFile(6 * PIECE)
        await interruptedUpload(path, direct, SETTINGS, data.length / 2)
        proxy.resetStats()
        proxy.inject(kind, target.match)
        try {
          const t = await uploadFile(path, proxied, SETTINGS)
          await assertPublished(direct, data, t, what)
          if (t.reusedBytes < PIECE) failures.push(`${what}: reused ${t.reusedBytes}`)
          const open = await openUploads(direct)
          if (open.length > 0) failures.push(`${what}: uploads left open: ${open.join(', ')}`)
        } catch (err) {
          failures.push(failed(what, err))
        }
        proxy.clearInjected()
      }
    }
    assert.deepEqual(failures, [])
  })

  test('an abort while a request of each kind is under way: nothing published (or, at the inode write, the file); the resume publishes the file', async () => {
    const failures: string[] = []
    for (const target of TARGETS) {
      const what = `abort during ${target.name}`
      const { direct, proxied } = await stores('uf-abort')
      const { path, data } = patternFile()
      proxy.resetStats()
      proxy.inject('stall', target.match)
      const ac = new AbortController()
      const stalled = setInterval(() => {
        if (proxy.stats().faulted > 0) ac.abort(new Error('interrupted by the test'))
      }, 20)
      try {
        const first = await uploadFile(path, proxied, SETTINGS, { signal: ac.signal }).then(
          (t) => t,
          (e: StreamSegmentError) => {
            assert.equal(e.code, 'ERR_ABORTED', e.message)
            return undefined
          },
        )
        clearInterval(stalled)
        if (first !== undefined) {
          // The commit point: an abort waits for the inode write's answer (docs/api.md, Aborting),
          // here its retry after the stall, and the flush resolves when it published.
          assert.ok(target.name.startsWith('the inode'), `${what}: resolved ${JSON.stringify(first)}`)
          await assertPublished(direct, data, first, what)
        } else {
          await assertNothingPublished(direct, what)
        }
        const t = await uploadFile(path, direct, SETTINGS)
        await assertPublished(direct, data, t, `${what}, then again`)
      } catch (err) {
        failures.push(failed(what, err))
      } finally {
        clearInterval(stalled)
      }
      proxy.clearInjected()
    }
    assert.deepEqual(failures, [])
  })

  test('a resume aborted while a request of each kind is under way, then run again: the file; gc (grace 0) leaves the checkpoint whole', async () => {
    const failures: string[] = []
    const small = { ...SETTINGS, streamSegmentBytes: 2 * PIECE }
    const targets: Target[] = [
      { name: 'ListParts', match: (r) => r.op === 'ListParts' },
      { name: 'UploadPartCopy', match: (r) => r.op === 'UploadPartCopy' },
      ...TARGETS.filter((t) => !t.name.startsWith('the inode')),
    ]
    for (const target of targets) {
      const what = `resume aborted during ${target.name}`
      const { direct, proxied } = await stores('uf-resume-abort')
      const { path, data } = patternFile(6 * PIECE)
      await interruptedUpload(path, direct, small, 0.7 * data.length)
      proxy.resetStats()
      proxy.inject('stall', target.match)
      const ac = new AbortController()
      const stalled = setInterval(() => {
        if (proxy.stats().faulted > 0) ac.abort(new Error('interrupted by the test'))
      }, 20)
      try {
        await assert.rejects(uploadFile(path, proxied, small, { signal: ac.signal }), (e: StreamSegmentError) => {
          assert.equal(e.code, 'ERR_ABORTED', e.message)
          return true
        })
        clearInterval(stalled)
        if (proxy.stats().faulted !== 1) failures.push(`${what}: no such request was made`)
        await assertNothingPublished(direct, what)
        const t = await uploadFile(path, direct, small)
        await assertPublished(direct, data, t, `${what}, then again`)
        if (t.reusedBytes < PIECE) failures.push(`${what}: the third attempt reused ${t.reusedBytes}`)
        await gc(direct, { graceMs: 0 })
        await assertPublished(direct, data, t, `${what}, then again, then gc`)
        const open = await openUploads(direct)
        if (open.length > 0) failures.push(`${what}: uploads left open after gc: ${open.join(', ')}`)
      } catch (err) {
        failures.push(failed(what, err))
      } finally {
        clearInterval(stalled)
      }
      proxy.clearInjected()
    }
    assert.deepEqual(failures, [])
  })

  test('a first attempt failing for good (every part refused): a retryable error, nothing published; the next attempt publishes the file', async () => {
    const { direct, proxied } = await stores('uf-fail', { maxRetries: 1 })
    const { path, data } = patternFile(6 * PIECE)
    proxy.setRate(0)
    const failing = uploadFile(path, proxied, SETTINGS, {
      onStart: (file) => {
        const uploader = fileState(file).uploader
        uploader.onRequestDone = () => {
          // Half way, every part is refused from now on.
          if (uploader.uploadedBytes >= data.length / 2) proxy.setRate(1, ['slowdown'])
        }
      },
    })
    let failure: StreamSegmentError | undefined
    await assert.rejects(failing, (e: StreamSegmentError) => {
      failure = e
      return true
    })
    proxy.setRate(0)
    assert.ok(StreamSegmentError.is(failure), String(failure))
    assert.equal(failure.retryable, true, `${failure.code}: ${failure.message}`)
    await assertNothingPublished(direct, 'the failed attempt')
    const t = await uploadFile(path, proxied, SETTINGS)
    await assertPublished(direct, data, t, 'the next attempt')
    console.log(`# the next attempt reused ${t.reusedBytes} bytes`)
  })
})
