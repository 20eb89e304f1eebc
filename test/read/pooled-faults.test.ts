/**
 * GET pieces (util/piece-pool.ts) under faults: a server that cuts data answers
 * mid-body (a close, a reset), read streams destroyed while their GETs are mid-body, a
 * download aborted part-way, all at once over the lean GET path, sharing one pool of
 * pieces. A piece given back while a consumer or another GET could still see it would be
 * read into again: every chunk each stream pushed is kept, and all of them are compared
 * with the file's bytes at the end, once every read has made its GETs.
 */
import assert from 'node:assert/strict'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import type { Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { dropPieces, pieceStats } from '../../lib/util/piece-pool.js'
import { rejectsCode } from '../helpers/assert.js'
import { type FakeRequest, type FakeS3, startFakeS3, testS3Store } from '../helpers/fake-s3.js'
import { pattern } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const SIZE = 10 * MiB + 4321

let s3: FakeS3 | undefined
const dirs: string[] = []
after(async () => {
  await s3?.close()
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

/**
 * Every `every`-th data GET (a range of 64 KiB or more) is cut after part of its body:
 * closed, or reset. A range is cut once at most, so that its retry is answered: GETs that
 * run at once share the count, and a range cut on every try would fail its read.
 */
function cutting(every: number) {
  let n = 0
  const cut = new Set<string>()
  return (r: FakeRequest, res: import('node:http').ServerResponse, fake: FakeS3): boolean => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(r.req.headers.range ?? '')
    const o = fake.objects.get(r.key)
    if (r.op !== 'GetObject' || m === null || o === undefined) return false
    const start = Number(m[1])
    const end = Math.min(o.body.length, Number(m[2]) + 1)
    const range = `${r.key} ${start}-${end}`
    if (end - start < 64 * 1024 || cut.has(range) || ++n % every !== 0) return false
    cut.add(range)
    res.writeHead(206, {
      etag: `"${o.etag}"`,
      'content-length': String(end - start),
      'content-range': `bytes ${start}-${end - 1}/${o.body.length}`,
    })
    const socket = res.socket as Socket
    res.write(o.body.subarray(start, start + Math.floor((end - start) / 3)), () => {
      if (n % (2 * every) === 0) socket.resetAndDestroy()
      else socket.destroy()
    })
    return true
  }
}

it('pieces given back under cut answers, destroyed streams and an aborted download: every chunk pushed stays right', async () => {
  dropPieces()
  s3 = await startFakeS3()
  const store = testS3Store(s3.url, { maxRetries: 4 })
  const f = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 2 * MiB })
  const ref = pattern(0, SIZE, 7)
  for (let at = 0; at < SIZE; at += MiB) await f.write(at, ref.subarray(at, Math.min(SIZE, at + MiB)))
  await f.flush()
  await f.close()
  s3.hook = cutting(3)
  const retriesBefore = store.retries

  const reads = { readGetMaxBytes: 512 * 1024, readMaxConcurrency: 4 }
  /** The chunks a stream pushed, as the consumer got them (not copies). */
  const read = async (start: number, end: number, stopAfter = Number.POSITIVE_INFINITY) => {
    const rs = createStreamSegmentReadStream({ store, ...reads, start, end })
    const chunks: Uint8Array[] = []
    let bytes = 0
    for await (const c of rs) {
      chunks.push(c as Uint8Array)
      bytes += (c as Uint8Array).byteLength
      // Destroyed while its read-ahead's GETs are in flight, some mid-body.
      if (bytes >= stopAfter) break
    }
    return { start, chunks }
  }
  const dir = await mkdtemp(join(tmpdir(), 'ss-pooled-faults-'))
  dirs.push(dir)
  const ac = new AbortController()
  const download = downloadFile(store, join(dir, 'out'), {
    ...reads,
    signal: ac.signal,
    onProgress: (done) => {
      if (done >= 3 * MiB) ac.abort(new Error('enough'))
    },
  })
  const results = await Promise.all([
    read(0, SIZE - 1),
    read(100, SIZE - 1, 2 * MiB),
    read(MiB + 17, 8 * MiB),
    read(0, SIZE - 1, 3 * MiB + 5),
    read(4 * MiB - 3, SIZE - 1),
    rejectsCode(download, 'ERR_ABORTED'),
  ])
  assert.deepEqual(await readdir(dir), [], 'the aborted download left nothing')
  // More reads after those, over the pieces they gave back.
  results.push(await read(0, SIZE - 1), await read(5 * MiB, SIZE - 1, MiB))
  const r = await SegmentFile.open(store, { readOnly: true })
  assert.ok(Buffer.from(await r.read(333, 6 * MiB)).equals(ref.subarray(333, 333 + 6 * MiB)))
  await r.close()

  assert.ok(store.retries - retriesBefore >= 5, `${store.retries - retriesBefore} GETs cut and made again`)
  assert.ok(pieceStats().reused > 100, `${pieceStats().reused} pieces read into again`)
  let chunks = 0
  for (const res of results) {
    if (res === undefined || !('chunks' in res)) continue
    let at = res.start
    for (const c of res.chunks) {
      assert.ok(
        Buffer.from(c).equals(ref.subarray(at, at + c.byteLength)),
        `the chunk of ${c.byteLength} bytes at ${at}`,
      )
      at += c.byteLength
      chunks++
    }
  }
  assert.ok(chunks > 200, `${chunks} chunks compared`)
  dropPieces()
})
