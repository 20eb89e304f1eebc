/**
 * `Upload`, lib-storage's twin, against radosgw (the runner starts it; fails, never
 * skips, without it):
 * - examples/lib-storage-upload.ts, a lib-storage program with only its import changed,
 *   uploads 200 MiB with progress (read back equal by SHA-256, `loaded` never decreasing
 *   and ending at the size, an event per object at least), then aborts a second upload
 *   mid-way (AbortError, nothing published, no multipart upload left open);
 * - the same program with lib-storage's own import, so that our progress events, done()
 *   result and abort error are checked against the real thing's shape;
 * - each Body kind lib-storage takes, queueSize and partSize, abortController,
 *   ContentLength, a failing Body, done() twice.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createReadStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { after, describe, it } from 'node:test'
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  NoSuchBucket,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3'
import { Upload as LibStorageUpload } from '@aws-sdk/lib-storage'
import { StreamSegmentError } from '../../lib/errors.js'
import { Upload, type UploadParams } from '../../lib/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { S3Store } from '../../lib/store/s3.js'
import type { StreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { collected } from '../helpers/child.js'
import { publishContent } from '../helpers/containers.js'
import { foreignS3Client } from '../helpers/foreign-sdk.js'
import { s3TestBucket, s3TestClient, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

async function readBack(store: S3Store): Promise<{ size: number; sha256: string } | undefined> {
  const f = await SegmentFile.open(store, { readOnly: true }).catch((err) => {
    if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return undefined
    throw err
  })
  if (f === undefined) return undefined
  const h = createHash('sha256')
  for (let at = 0; at < f.size; at += 16 * MiB) h.update(await f.read(at, Math.min(16 * MiB, f.size - at)))
  await f.close()
  return { size: f.size, sha256: h.digest('hex') }
}

async function openUploads(store: S3Store): Promise<number> {
  let n = 0
  for await (const _ of store.listMultipart('')) n++
  return n
}

/** Runs a compiled program; resolves with its exit code and the JSON lines it printed. */
function runProgram(path: string, args: string[]): Promise<{ code: number | null; lines: Record<string, unknown>[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    const output = collected(child)
    child.on('error', reject)
    child.on('close', (code) => {
      const lines = output
        .stdout()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
      if (code !== 0) reject(new Error(`${path} exited ${code}: ${output.stderr()}${output.stdout()}`))
      else resolve({ code, lines })
    })
  })
}

type Line = Record<string, unknown>
const progressOf = (lines: Line[], which: string) =>
  lines.filter((l) => l.upload === which && typeof l.loaded === 'number') as Array<Line & { loaded: number }>

const EXAMPLE = 'dist/esm/examples/lib-storage-upload.js'

describe('examples/lib-storage-upload: a lib-storage program, only its import changed', () => {
  it('differs from a lib-storage program by its import line only', () => {
    const source = readFileSync('examples/lib-storage-upload.ts', 'utf8')
    const imports = source.split('\n').filter((l) => /^import .*(lib-storage|stream-segment)/.test(l))
    assert.deepEqual(imports, ["import { Upload } from 'stream-segment'"])
    assert.match(source, /^\/\/ import \{ Upload \} from '@aws-sdk\/lib-storage'$/m)
  })

  it('uploads 200 MiB with progress (reads back equal), then aborts another: AbortError, nothing published, no open upload', async () => {
    const bucket = await s3TestBucket()
    const key = uniquePrefix('lib-storage-example').replace(/\/$/, '')
    const first = await s3TestStore(`${key}/`)
    const second = await s3TestStore(`${key}-aborted/`)
    const { lines } = await runProgram(EXAMPLE, [bucket, key, '200'])
    const size = 200 * MiB

    const done = lines.find((l) => l.upload === 'first' && l.done !== undefined) as Line & {
      done: Record<string, string>
      sha256: string
    }
    assert.ok(done, 'the first upload resolved')
    assert.deepEqual(await readBack(first), { size, sha256: done.sha256 })
    assert.equal(done.done.Bucket, bucket)
    assert.equal(done.done.Key, key)
    assert.match(done.done.ETag ?? '', /^"?[0-9a-f-]+"?$/)
    assert.ok(done.done.Location?.endsWith(`/${bucket}/${key}`), done.done.Location)

    const events = progressOf(lines, 'first')
    for (const [i, e] of events.entries()) {
      assert.deepEqual(
        Object.keys(e).sort(),
        ['Bucket', 'Key', 'loaded', 'part', 'upload'],
        `event ${i}: ${JSON.stringify(e)}`,
      )
      assert.equal(e.Bucket, bucket)
      assert.equal(e.Key, key)
      if (i > 0) assert.ok(e.loaded >= (events[i - 1]?.loaded ?? 0), `loaded decreased at event ${i}`)
      assert.ok(e.loaded <= size)
    }
    assert.equal(events.at(-1)?.loaded, size, 'the last event: every byte')
    let objects = 0
    for await (const { key: k } of first.list('')) if (k !== 'inode') objects++
    assert.ok(events.length >= objects, `${events.length} events, ${objects} objects`)

    const aborted = lines.find((l) => l.upload === 'second' && l.error !== undefined)
    assert.equal(aborted?.error, 'AbortError', JSON.stringify(aborted))
    assert.ok(progressOf(lines, 'second').length > 0, 'the second upload was under way')
    assert.equal(await readBack(second), undefined, 'the aborted upload published nothing')
    assert.equal(await openUploads(second), 0, 'and left no multipart upload open')
  })

  it("the same program with lib-storage's import: the same progress, done() and abort shapes", async () => {
    // The comparison: lib-storage itself, which the program was written for (a devDependency).
    const original = EXAMPLE.replace(/\.js$/, '.lib-storage.js')
    writeFileSync(
      original,
      readFileSync(EXAMPLE, 'utf8').replace(
        "import { Upload } from 'stream-segment'",
        "import { Upload } from '@aws-sdk/lib-storage'",
      ),
    )
    const bucket = await s3TestBucket()
    const key = uniquePrefix('lib-storage-original').replace(/\/$/, '')
    try {
      const { lines: theirs } = await runProgram(original, [bucket, key, '40'])
      const ourKey = uniquePrefix('lib-storage-ours').replace(/\/$/, '')
      await s3TestStore(`${ourKey}/`)
      await s3TestStore(`${ourKey}-aborted/`)
      const { lines: ours } = await runProgram(EXAMPLE, [bucket, ourKey, '40'])
      const shape = (lines: Line[]) => ({
        progressKeys: [...new Set(progressOf(lines, 'first').map((e) => Object.keys(e).sort().join(',')))],
        doneKeys: Object.keys((lines.find((l) => l.done !== undefined)?.done as object) ?? {}).sort(),
        // result.$metadata.httpStatusCode, which lib-storage's callers check for success.
        status: (lines.find((l) => l.done !== undefined)?.done as { status?: unknown } | undefined)?.status,
        abort: lines.find((l) => l.upload === 'second' && l.error !== undefined)?.error,
        lastLoaded: progressOf(lines, 'first').at(-1)?.loaded,
      })
      assert.deepEqual(shape(ours), shape(theirs))
      // lib-storage wrote one object at the key; it has the bytes the program hashed.
      const head = await s3TestClient().send(new HeadObjectCommand({ Bucket: bucket, Key: key }))
      assert.equal(head.ContentLength, 40 * MiB)
    } finally {
      rmSync(original, { force: true })
      await s3TestClient().send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
    }
  })
})

/** A fresh container location; the store is cleaned up after the run. */
async function target(label: string): Promise<{ Bucket: string; Key: string; store: S3Store }> {
  const Bucket = await s3TestBucket()
  const Key = uniquePrefix(label).replace(/\/$/, '')
  return { Bucket, Key, store: await s3TestStore(`${Key}/`) }
}

describe('Upload', () => {
  const client = () => s3TestClient()
  const bytes = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) % 251))
  const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

  const dir = mkdtempSync(join(tmpdir(), 'ss-upload-'))
  const file = join(dir, 'body.bin')
  writeFileSync(file, bytes)
  after(() => rmSync(dir, { recursive: true, force: true }))
  const bodies: Array<[string, () => unknown, Buffer]> = [
    ['an fs.ReadStream', () => createReadStream(file), bytes],
    [
      'an fs.ReadStream with start and end',
      () => createReadStream(file, { start: 10, end: 99_999 }),
      bytes.subarray(10, 100_000),
    ],
    ['an fs.ReadStream with start only', () => createReadStream(file, { start: 100 }), bytes.subarray(100)],
    ['an fs.ReadStream with end only', () => createReadStream(file, { end: 99 }), bytes.subarray(0, 100)],
    ['a string', () => 'hello, container ✓'.repeat(1000), Buffer.from('hello, container ✓'.repeat(1000))],
    ['a Buffer', () => bytes, bytes],
    [
      'a Uint8Array view',
      () => new Uint8Array(bytes.buffer, bytes.byteOffset + 1000, 200_000),
      bytes.subarray(1000, 201_000),
    ],
    ['a Blob', () => new Blob([bytes.subarray(0, 100_000), bytes.subarray(100_000)]), bytes],
    ['a web ReadableStream', () => new Blob([bytes]).stream(), bytes],
    ['a Node Readable', () => Readable.from([bytes.subarray(0, 5), bytes.subarray(5)]), bytes],
    [
      'a web ReadableStream of ArrayBuffers',
      () =>
        new ReadableStream({
          start(c) {
            c.enqueue(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 1000))
            c.enqueue(new Uint8Array(bytes.subarray(1000)).buffer)
            c.close()
          },
        }),
      bytes,
    ],
    ['an object-mode Readable of byte arrays', () => Readable.from([[104, 105], [33]]), Buffer.from('hi!')],
    ['an empty Buffer', () => Buffer.alloc(0), Buffer.alloc(0)],
  ]
  for (const [name, make, expected] of bodies) {
    it(`Body as ${name}: published, reads back equal, progress ends at its size`, async () => {
      const { Bucket, Key, store } = await target('upload-body')
      const upload = new Upload({ client: client(), params: { Bucket, Key, Body: make() as UploadParams['Body'] } })
      const events: Array<{ loaded?: number; total?: number }> = []
      upload.on('httpUploadProgress', (p) => events.push(p))
      const result = await upload.done()
      assert.deepEqual(await readBack(store), { size: expected.length, sha256: sha(expected) })
      assert.equal(result.size, expected.length)
      assert.equal(result.cno, 1)
      assert.equal(result.timing.cno, 1)
      assert.equal(events.at(-1)?.loaded, expected.length)
      // lib-storage knows the total of a string, bytes, a Blob or a file's read stream (its
      // range read) from the start; of another stream, once it has ended within one part
      // (sent in one PutObject, as each Body here is).
      const known = !/web ReadableStream|Readable/.test(name)
      for (const e of events) {
        assert.ok(e.total === expected.length || (!known && e.total === undefined), JSON.stringify(e))
      }
      assert.equal(events.at(-1)?.total, expected.length)
      // One event per request: none repeats the one before.
      for (let i = 1; i < events.length; i++) assert.notDeepEqual(events[i], events[i - 1], `event ${i} repeats`)
    })
  }

  it('exportTo: the checkpoint also as one plain object, which GetObject returns byte for byte', async () => {
    const { Bucket, Key, store } = await target('upload-export')
    const big = Buffer.alloc(12 * MiB)
    for (let i = 0; i < big.length; i += 4) big.writeUInt32LE(Math.imul(i, 2654435761) >>> 0, i)
    const plainKey = `${Key}.plain`
    const upload = new Upload({
      client: client(),
      params: { Bucket, Key, Body: big },
      exportTo: { Bucket, Key: plainKey, ContentType: 'application/octet-stream', Metadata: { run: '42' } },
    })
    const result = await upload.done()
    assert.deepEqual(await readBack(store), { size: big.length, sha256: sha(big) })
    assert.equal(result.export?.size, big.length)
    assert.equal(result.export?.location, `s3://${Bucket}/${plainKey}`)
    assert.equal(result.export?.copiedBytes + (result.export?.sentBytes ?? 0), big.length)
    const got = await client().send(new GetObjectCommand({ Bucket, Key: plainKey }))
    assert.equal(
      sha(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()),
      sha(big),
    )
    assert.equal(got.ContentType, 'application/octet-stream')
    assert.deepEqual(got.Metadata, { run: '42' })
    await client().send(new DeleteObjectCommand({ Bucket, Key: plainKey }))
    assert.throws(
      () => new Upload({ client: client(), params: { Bucket, Key, Body: big }, exportTo: { Bucket } as never }),
      /exportTo: \{ Bucket, Key/,
    )
  })

  it('queueSize and partSize become the requests in flight and the piece size (capped at 64, rounded up to a block)', async () => {
    const { Bucket, Key, store } = await target('upload-sizes')
    const body = Buffer.alloc(20 * MiB, 3)
    const upload = new Upload({
      client: client(),
      params: { Bucket, Key, Body: body },
      queueSize: 100,
      partSize: 5 * MiB + 1,
    })
    const parts = new Set<number>()
    upload.on('httpUploadProgress', (p) => parts.add(p.part ?? -1))
    await upload.done()
    const s = (upload as unknown as { writer?: StreamSegmentWriteStream }).writer?.file?.settings
    assert.equal(s?.segmentMpuMaxConcurrency, 64)
    assert.equal(s?.segmentMpuChunkSize, 5 * MiB + 4096)
    assert.deepEqual(await readBack(store), { size: body.length, sha256: sha(body) })
    assert.ok(parts.size >= 4, `requests counted in part: ${[...parts]}`)
  })

  it("partSize over an existing container of 64 KiB blocks: rounded up to its blocks, not the default's", async () => {
    const { Bucket, Key, store } = await target('upload-part-64k')
    await publishContent(store, Buffer.alloc(100_000, 1), { dataBlockSize: 64 * 1024 })
    const body = Buffer.alloc(13_000_000, 5)
    for (let at = 0; at < body.length; at += 4096) body.writeUInt32LE(at, at)
    const upload = new Upload({ client: client(), params: { Bucket, Key, Body: body }, partSize: 6_000_000 })
    assert.equal((await upload.done()).cno, 2)
    const s = (upload as unknown as { writer?: StreamSegmentWriteStream }).writer?.file?.settings
    assert.equal(s?.segmentMpuChunkSize, 92 * 64 * 1024)
    assert.deepEqual(await readBack(store), { size: body.length, sha256: sha(body) })
    assert.equal(await openUploads(store), 0)
  })

  it('abortController: aborting it mid-way rejects with AbortError, publishes nothing, leaves no open upload', async () => {
    const { Bucket, Key, store } = await target('upload-abort')
    const abortController = new AbortController()
    let produced = 0
    const Body = new Readable({
      read() {
        produced += MiB
        this.push(Buffer.alloc(MiB, produced % 256))
        if (produced === 40 * MiB) abortController.abort()
      },
    })
    const upload = new Upload({ client: client(), params: { Bucket, Key, Body }, abortController })
    await assert.rejects(upload.done(), (err: Error) => {
      assert.equal(err.name, 'AbortError')
      assert.equal(err.message, 'Upload aborted.')
      assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'))
      return true
    })
    assert.equal(await readBack(store), undefined)
    assert.equal(await openUploads(store), 0)
    // abort() before done(): done() rejects at once.
    const early = new Upload({ client: client(), params: { Bucket, Key, Body: 'x' } })
    await early.abort()
    await assert.rejects(early.done(), { name: 'AbortError' })
  })

  it('ContentLength: the total in progress; a Body of another length publishes nothing', async () => {
    const { Bucket, Key, store } = await target('upload-length')
    const ok = new Upload({
      client: client(),
      params: { Bucket, Key, Body: Readable.from([bytes]), ContentLength: bytes.length },
    })
    const totals: Array<number | undefined> = []
    ok.on('httpUploadProgress', (p) => totals.push(p.total))
    await ok.done()
    assert.deepEqual([...new Set(totals)], [bytes.length])
    const short = new Upload({
      client: client(),
      params: { Bucket, Key, Body: Readable.from([bytes]), ContentLength: bytes.length + 1 },
    })
    await assert.rejects(
      short.done(),
      (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && /ContentLength/.test(err.message),
    )
    const back = await readBack(store)
    assert.equal(back?.size, bytes.length, 'the first checkpoint stays the latest')
    assert.equal(await openUploads(store), 0)
  })

  it('a failing Body rejects with its error and publishes nothing; done() twice is refused', async () => {
    const { Bucket, Key, store } = await target('upload-fail')
    const Body = Readable.from(
      (async function* () {
        for (let i = 0; i < 30; i++) yield Buffer.alloc(MiB, i)
        throw new Error('producer crashed')
      })(),
    )
    const upload = new Upload({ client: new S3Client({ forcePathStyle: true }), params: { Bucket, Key, Body } })
    await assert.rejects(upload.done(), /producer crashed/)
    await assert.rejects(upload.done(), /done\(\) was called already/)
    assert.equal(await readBack(store), undefined)
    assert.equal(await openUploads(store), 0)
  })

  it('an S3Client of another copy of the SDK (an application with its own version): published through it, reads back equal', async () => {
    const { Bucket, Key, store } = await target('upload-foreign-client')
    const foreign = foreignS3Client({ forcePathStyle: true })
    let sent = 0
    foreign.middlewareStack.add(
      (next) => async (args) => {
        sent++
        return next(args)
      },
      { step: 'initialize', name: 'countRequests' },
    )
    const upload = new Upload({ client: foreign, params: { Bucket, Key, Body: bytes } })
    const result = await upload.done()
    assert.equal(result.size, bytes.length)
    assert.ok(sent >= 2, `${sent} requests through the caller's client`)
    assert.deepEqual(await readBack(store), { size: bytes.length, sha256: sha(bytes) })
  })

  it("a missing bucket: done() rejects with what lib-storage's callers test, its name, $metadata and $fault", async () => {
    const Bucket = `no-such-bucket-${uniquePrefix('b').replace(/[^a-z0-9]/g, '')}`.slice(0, 63)
    const params = () => ({ Bucket, Key: 'k', Body: 'hello' })
    const failure = async (upload: { done(): Promise<unknown> }) => {
      const err = (await upload.done().then(
        () => assert.fail('published into a missing bucket'),
        (e: unknown) => e,
      )) as Error & { $metadata?: { httpStatusCode?: number }; $fault?: string }
      return {
        name: err.name,
        status: err.$metadata?.httpStatusCode,
        fault: err.$fault,
        modelled: err instanceof NoSuchBucket,
        service: S3ServiceException.isInstance(err),
      }
    }
    const theirs = await failure(new LibStorageUpload({ client: client(), params: params() }))
    assert.deepEqual(theirs, { name: 'NoSuchBucket', status: 404, fault: 'client', modelled: true, service: true })
    const upload = new Upload({ client: client(), params: params() })
    assert.deepEqual(await failure(upload), theirs)
  })
})
