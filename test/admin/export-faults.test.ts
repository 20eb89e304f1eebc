/**
 * exportObject to an S3 target under faults, on the fake S3 server (test/helpers/fake-s3.ts):
 * parts copied (UploadPartCopy) or sent (UploadPart) answered with errors, 200 with an
 * <Error> body or a cut connection; the completion failing, or its answer lost after it
 * landed; the caller's signal. What is left at the target key and in its open uploads,
 * and what the caller is told.
 */
import assert from 'node:assert/strict'
import type { ServerResponse } from 'node:http'
import { before, describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { S3Store } from '../../lib/store/s3.js'
import { rejectsCode } from '../helpers/assert.js'
import { copyStore } from '../helpers/containers.js'
import { type FakeHook, type FakeS3, fakeS3Servers, fakeS3Store, send, testS3Store } from '../helpers/fake-s3.js'
import { pattern } from '../helpers/pattern.js'

const KiB = 1024
const MiB = 1024 * KiB
const SIZE = 23 * MiB

/** The container every test exports, built once: 23 MiB, then 100 KiB at 8 MiB written again. */
const source = new MemoryStore('export-faults')
let want: Buffer

before(async () => {
  const f = await SegmentFile.create(source)
  want = pattern(0, SIZE, 7)
  await f.write(0, want)
  await f.flush()
  const patch = pattern(8 * MiB, 100 * KiB, 8)
  await f.write(8 * MiB, patch)
  patch.copy(want, 8 * MiB)
  await f.flush()
  await f.close()
})

const fake = fakeS3Servers()

/**
 * A fake S3 holding the container under p/, its requests from now on answered by `hook`
 * first; the export's target is key `x.bin` of the store `out` on it (prefix out/), which
 * retries quickly.
 */
async function setup(hook?: FakeHook): Promise<{ s3: FakeS3; store: S3Store; out: S3Store }> {
  const s3 = await fake()
  const store = fakeS3Store(s3)
  await copyStore(source, store)
  s3.log.length = 0
  s3.hook = hook
  return { s3, store, out: testS3Store(s3.url, { prefix: 'out' }) }
}

const INTERNAL_ERROR =
  '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message><RequestId>fake</RequestId></Error>'

/** S3's way of failing a copy or a completion after its 200 went out: the error in the body. */
function errorIn200(res: ServerResponse): true {
  send(res, 200, INTERNAL_ERROR)
  return true
}

/** Requests of `s3` of operation `op`, as logged. */
function ops(s3: FakeS3): string[] {
  return s3.log.map((l) => l.split(' ')[0] as string)
}

describe('export to S3: a part that fails', () => {
  it('parts copied and sent, each answered badly once (200 <Error>, 503, a cut connection): retried, the same bytes', async () => {
    const tried = new Set<string>()
    const { s3, store, out } = await setup((r, res) => {
      if (r.op !== 'UploadPartCopy' && r.op !== 'UploadPart') return false
      const part = `${r.op} ${r.query.get('partNumber')}`
      if (tried.has(part)) return false
      tried.add(part)
      if (r.op === 'UploadPart') res.socket?.destroy()
      else if (tried.size % 2 === 0) send(res, 503, '<Error><Code>SlowDown</Code></Error>')
      else errorIn200(res)
      return true
    })
    const r = await exportObject(store, { store: out, key: 'x.bin' })
    assert.ok(r.copyParts >= 2 && r.parts > r.copyParts, `${r.copyParts} of ${r.parts} parts copied`)
    assert.equal(r.retries, r.parts, 'each part once again')
    assert.ok(s3.objects.get('out/x.bin')?.body.equals(want), 'the object is the checkpoint')
    assert.equal(s3.uploads.size, 0)
  })

  for (const op of ['UploadPartCopy', 'UploadPart'] as const) {
    it(`${op} failing on every try: ERR_STORE naming the part, what it holds and the key, the upload aborted, the object there kept`, async () => {
      const { s3, store, out } = await setup()
      await out.put('x.bin', Buffer.from('before'))
      // What each part's requests asked for: a copy's source object and range, a sent part's bytes.
      const asked = new Map<number, { source?: string; range?: string; body: Buffer }>()
      s3.hook = (r, res) => {
        if (r.op !== op) return false
        const source = r.req.headers['x-amz-copy-source']
        asked.set(Number(r.query.get('partNumber')), {
          source: source === undefined ? undefined : decodeURIComponent(String(source)),
          range: r.req.headers['x-amz-copy-source-range'] as string | undefined,
          body: r.body,
        })
        return errorIn200(res)
      }
      // The part, the checkpoint's bytes it holds (and for a copy its source's), then the store's message.
      const holds = op === 'UploadPart' ? 'sent' : 'copied from s3://bucket/p/(\\S+) bytes \\[(\\d+), (\\d+)\\)'
      const shape = new RegExp(
        `^export of checkpoint \\d+: part (\\d+) \\(the checkpoint's bytes \\[(\\d+), (\\d+)\\), ${holds}\\): ${op} s3://bucket/out/x\\.bin#\\1: HTTP 503 InternalError`,
      )
      const err = await rejectsCode(exportObject(store, { store: out, key: 'x.bin' }), 'ERR_STORE', shape)
      const [, n, start, end, key, from, to] = shape.exec(err.message) as string[]
      const part = asked.get(Number(n))
      assert.ok(part !== undefined, `part ${n} was asked for: ${err.message}`)
      const bytes = want.subarray(Number(start), Number(end))
      if (op === 'UploadPartCopy') {
        assert.equal(part.source, `bucket/p/${key}`, 'the object the part copies')
        assert.equal(part.range, `bytes=${from}-${Number(to) - 1}`, 'the bytes it copies')
        const copied = s3.objects.get(`p/${key}`)?.body.subarray(Number(from), Number(to))
        assert.ok(copied?.equals(bytes), "the bytes copied are the checkpoint's named")
      } else {
        assert.ok(part.body.equals(bytes), "the bytes sent are the checkpoint's named")
      }
      assert.equal(err.retryable, true)
      assert.match((err.cause as Error).message, new RegExp(`^${op} s3://bucket/out/x\\.bin#${n}: HTTP 503`))
      assert.doesNotMatch(err.message, /gc/)
      assert.equal(ops(s3).filter((o) => o === 'AbortMultipartUpload').length, 1, 'the upload aborted')
      assert.equal(s3.uploads.size, 0, 'no upload left open')
      assert.equal(s3.objects.get('out/x.bin')?.body.toString(), 'before', 'the object there unchanged')
    })
  }
})

describe('export to S3: the upload left open', () => {
  it('a part failing for good and the abort failing too: the error says which upload is left open, and why', async () => {
    const { s3, store, out } = await setup((r, res) => {
      if (r.op === 'UploadPart') return errorIn200(res)
      if (r.op === 'AbortMultipartUpload') {
        send(res, 503, '<Error><Code>SlowDown</Code></Error>')
        return true
      }
      return false
    })
    const err = await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }),
      'ERR_STORE',
      /^export of checkpoint \d+: part \d+ .*: UploadPart s3:\/\/bucket\/out\/x\.bin#\d+: HTTP 503 InternalError.*; its multipart upload (\S+) of s3:\/\/bucket\/out\/x\.bin could not be aborted \(AbortMultipartUpload s3:\/\/bucket\/out\/x\.bin: HTTP 503 SlowDown.*\): it stays open, holding the parts uploaded, until it is aborted$/,
    )
    const id = /its multipart upload (\S+) of/.exec(err.message)?.[1]
    assert.deepEqual([...s3.uploads.keys()], [id], 'the upload named is the one left open')
    assert.equal(err.retryable, true, 'the part failure kept as it was')
    assert.equal(s3.objects.has('out/x.bin'), false, 'no object')
  })
})

describe('export to S3: the completion', () => {
  it('answered 200 <Error> on every try: ERR_STORE, the upload aborted, the object there kept', async () => {
    const { s3, store, out } = await setup()
    await out.put('x.bin', Buffer.from('before'))
    s3.hook = (r, res) => r.op === 'CompleteMultipartUpload' && errorIn200(res)
    await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }),
      'ERR_STORE',
      /^CompleteMultipartUpload s3:\/\/bucket\/out\/x\.bin: HTTP 503 InternalError/,
    )
    assert.equal(s3.uploads.size, 0, 'no upload left open')
    assert.equal(s3.objects.get('out/x.bin')?.body.toString(), 'before', 'the object there unchanged')
  })

  it('its answer lost after it landed: the export succeeds, with the ETag of the object it made', async () => {
    let lost = false
    const { s3, store, out } = await setup((r, res) => {
      if (r.op !== 'CompleteMultipartUpload' || lost) return false
      lost = true
      // The completion lands, and the connection is cut before its answer goes out (headers
      // go with the body): the retry finds no upload (404 NoSuchUpload).
      res.end = (() => {
        res.socket?.destroy()
        return res
      }) as typeof res.end
      return false
    })
    const r = await exportObject(store, { store: out, key: 'x.bin' })
    const o = s3.objects.get('out/x.bin')
    assert.ok(o?.body.equals(want), 'the object is the checkpoint')
    assert.equal(r.etag, o?.etag)
    assert.equal(ops(s3).filter((x) => x === 'CompleteMultipartUpload').length, 2, 'made again once')
    assert.equal(s3.uploads.size, 0)
  })

  it('the upload gone (aborted by another client) and no object of its parts: ERR_NOT_FOUND naming the upload, no gc', async () => {
    const { s3, store, out } = await setup()
    await out.put('x.bin', Buffer.from('before'))
    s3.hook = (r, _res, fake) => {
      if (r.op === 'CompleteMultipartUpload') fake.uploads.clear()
      return false
    }
    const err = await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }),
      'ERR_NOT_FOUND',
      /^CompleteMultipartUpload s3:\/\/bucket\/out\/x\.bin: no upload .*, and the object there is not of its parts/,
    )
    assert.doesNotMatch(err.message, /gc/)
    assert.equal(s3.objects.get('out/x.bin')?.body.toString(), 'before', 'the object there unchanged')
  })
})

describe('export to S3: the caller’s signal', () => {
  it('fired while a copy goes unanswered: ERR_ABORTED at once, its connection closed, the upload aborted', {
    timeout: 60_000,
  }, async () => {
    const ac = new AbortController()
    let held: Promise<void> | undefined
    const { s3, store, out } = await setup((r) => {
      if (r.op !== 'UploadPartCopy') return false
      // Never answered: the export must end by the signal, closing this request's socket.
      held ??= new Promise((resolve) => r.req.socket.once('close', () => resolve()))
      ac.abort(new Error('stop'))
      return true
    })
    const err = await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }, { signal: ac.signal }),
      'ERR_ABORTED',
      /^UploadPartCopy s3:\/\/bucket\/out\/x\.bin#\d+ aborted/,
    )
    assert.equal((err.cause as Error).message, 'stop')
    await held
    assert.ok(ops(s3).includes('AbortMultipartUpload'), 'the upload aborted')
    assert.equal(s3.uploads.size, 0, 'no upload left open')
    assert.equal(s3.objects.has('out/x.bin'), false, 'no object')
  })

  it('fired once CreateMultipartUpload is sent: its answer is waited for, and the upload it made aborted', async () => {
    const ac = new AbortController()
    const { s3, store, out } = await setup((r) => {
      if (r.op === 'CreateMultipartUpload') ac.abort(new Error('stop'))
      return false // answered as S3 does: the upload is made
    })
    const err = await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }, { signal: ac.signal }),
      'ERR_ABORTED',
    )
    assert.equal((err.cause as Error).message, 'stop')
    assert.equal(s3.count('CreateMultipartUpload'), 1)
    assert.equal(s3.count('AbortMultipartUpload'), 1, 'the upload aborted')
    assert.equal(s3.uploads.size, 0, 'no upload left open')
    assert.equal(s3.objects.has('out/x.bin'), false, 'no object')
  })

  // The completion (or the one PutObject) is what makes the object: once sent, an abort
  // cut only the client's side of it, and the object landed all the same.
  for (const [op, options] of [
    ['CompleteMultipartUpload', {}],
    ['PutObject', { copy: false, minPartBytes: 32 * MiB, sendPartBytes: 64 * MiB }],
  ] as const) {
    it(`fired once the ${op} that makes the object is sent: its answer is waited for, and the export succeeds`, async () => {
      const ac = new AbortController()
      const { s3, store, out } = await setup((r) => {
        if (r.op === op && r.key === 'out/x.bin') ac.abort(new Error('stop'))
        return false // answered as S3 does: the object lands
      })
      const r = await exportObject(store, { store: out, key: 'x.bin' }, { ...options, signal: ac.signal })
      assert.equal(ac.signal.aborted, true, `the signal fired during the ${op}`)
      const o = s3.objects.get('out/x.bin')
      assert.ok(o?.body.equals(want), 'the object is the checkpoint')
      assert.equal(r.etag, o?.etag)
      assert.equal(r.parts === 0, op === 'PutObject')
      assert.equal(s3.count('AbortMultipartUpload'), 0, 'nothing aborted')
      assert.equal(s3.uploads.size, 0)
    })
  }

  it('fired while the completion goes unanswered: cut once its wait is over, ERR_ABORTED saying the outcome is unknown', {
    timeout: 60_000,
  }, async () => {
    const ac = new AbortController()
    let held: Promise<void> | undefined
    const { s3, store, out } = await setup((r) => {
      if (r.op !== 'CompleteMultipartUpload') return false
      held ??= new Promise((resolve) => r.req.socket.once('close', () => resolve()))
      ac.abort(new Error('stop'))
      return true // never answered, never done
    })
    const err = await rejectsCode(
      exportObject(store, { store: out, key: 'x.bin' }, { signal: ac.signal }),
      'ERR_ABORTED',
      /^export of checkpoint \d+: aborted while its completion was under way, which did not answer within 10000 ms: whether s3:\/\/bucket\/out\/x\.bin was written is unknown$/,
    )
    assert.match((err.cause as Error).message, /^CompleteMultipartUpload s3:\/\/bucket\/out\/x\.bin aborted/)
    await held
    assert.equal(s3.count('AbortMultipartUpload'), 1, 'the upload aborted')
    assert.equal(s3.uploads.size, 0, 'no upload left open')
    assert.equal(s3.objects.has('out/x.bin'), false, 'no object')
  })
})

describe('export to S3: progress', () => {
  it('copied and sent bytes only grow, and end at the size', async () => {
    const { store, out } = await setup()
    const seen: number[] = []
    const r = await exportObject(
      store,
      { store: out, key: 'x.bin' },
      {
        onProgress: (p) => {
          assert.equal(p.totalBytes, SIZE)
          seen.push(p.copiedBytes + p.sentBytes)
        },
      },
    )
    assert.ok(r.copyParts > 0 && r.parts > r.copyParts)
    assert.equal(seen.length, r.parts, 'once a part')
    for (let i = 1; i < seen.length; i++) assert.ok((seen[i] as number) > (seen[i - 1] as number), `${seen}`)
    assert.equal(seen.at(-1), SIZE)
  })
})
