/**
 * Every stream entry point refuses a bad argument in the call itself, with
 * ERR_INVALID_ARGUMENT naming it, before it starts any work: a stream that is made starts
 * opening its container, and an option found bad only then would fail that work (or, for
 * an option the work itself needs, such as the signal, throw where no one listens).
 */
import assert from 'node:assert/strict'
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { S3Client } from '@aws-sdk/client-s3'
import { gc } from '../../lib/admin/gc.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { openStore } from '../../lib/store/open.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { Upload } from '../../lib/streams/upload.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'

const invalid = (pattern: RegExp) => (err: unknown) => {
  assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
  assert.match(err.message, pattern)
  return true
}

describe('bad arguments to the stream entry points', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-bad-args-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('the read stream: a highWaterMark or readAheadBytes that is not a byte count, a signal that is not one', () => {
    const store = new MemoryStore()
    for (const highWaterMark of [-1, Number.NaN, 1.5, '1MiB']) {
      assert.throws(
        () => createStreamSegmentReadStream({ store, highWaterMark: highWaterMark as number }),
        invalid(/createStreamSegmentReadStream: highWaterMark .* must be a byte count/),
      )
    }
    // A string shown quoted: "5" is not 5.
    for (const [readAheadBytes, shown] of [
      [-1, 'number -1'],
      [Number.POSITIVE_INFINITY, 'number Infinity'],
      ['5', 'string "5"'],
    ] as const) {
      assert.throws(
        () => createStreamSegmentReadStream({ store, readAheadBytes: readAheadBytes as number }),
        invalid(new RegExp(`^createStreamSegmentReadStream: readAheadBytes ${shown} must be a byte count`)),
      )
    }
    assert.throws(
      () => createStreamSegmentReadStream({ store, signal: {} as AbortSignal }),
      invalid(/signal must be an AbortSignal, got Object/),
    )
    assert.throws(() => createStreamSegmentReadStream(null as never), invalid(/options must be an object, got null/))
  })

  it('the read and write streams: a store that is not one (a URL given as the store, say) throws in the call', () => {
    for (const store of ['mem://x', {}, { url: 'mem://x', get() {} }, null]) {
      assert.throws(
        () => createStreamSegmentReadStream({ store: store as never }),
        invalid(/createStreamSegmentReadStream: store must be an ObjectStore .*, got /),
      )
      assert.throws(
        () => createStreamSegmentWriteStream({ store: store as never }),
        invalid(/createStreamSegmentWriteStream: store must be an ObjectStore .*, got /),
      )
    }
  })

  it('the read and write streams: a url that is no location names the call and the option', () => {
    for (const [url, shown] of [
      [null, 'null'],
      [5, 'number 5'],
      [true, 'boolean true'],
    ] as const) {
      for (const [who, make] of [
        ['createStreamSegmentReadStream', () => createStreamSegmentReadStream({ url: url as never })],
        ['createStreamSegmentWriteStream', () => createStreamSegmentWriteStream({ url: url as never })],
      ] as const) {
        assert.throws(make, invalid(new RegExp(`^${who}: url must be a URL or path .*, got ${shown}$`)))
      }
    }
  })

  it('the write stream: a bad signal or highWaterMark throws before the stream opens anything', async () => {
    // A container path under a regular file: an open would fail, and with no one listening
    // for the stream's 'error' that failure would end the process.
    const file = join(dir, 'a-file')
    await writeFile(file, 'x')
    const url = join(file, 'container')
    let unhandled: unknown
    const onUncaught = (err: unknown) => {
      unhandled = err
    }
    process.on('uncaughtException', onUncaught)
    try {
      assert.throws(
        () => createStreamSegmentWriteStream({ url, signal: { aborted: false } as AbortSignal }),
        invalid(/createStreamSegmentWriteStream: signal must be an AbortSignal/),
      )
      assert.throws(
        () => createStreamSegmentWriteStream({ url, highWaterMark: -5 }),
        invalid(/createStreamSegmentWriteStream: highWaterMark number -5 must be a byte count/),
      )
      await new Promise((resolve) => setTimeout(resolve, 200))
    } finally {
      process.off('uncaughtException', onUncaught)
    }
    assert.equal(unhandled, undefined)
  })

  it('Upload: an abortController without an AbortSignal is refused in the constructor', () => {
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: 'http://127.0.0.1:9',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    })
    assert.throws(
      () =>
        new Upload({
          client,
          params: { Bucket: 'b', Key: 'k', Body: 'x' },
          abortController: { abort() {} } as unknown as AbortController,
        }),
      invalid(/abortController: must be an AbortController/),
    )
    assert.throws(
      () => new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, queuesize: 4 } as never),
      invalid(/Upload: unknown option "queuesize" \(did you mean queueSize\?\)/),
    )
    client.destroy()
  })

  it('downloadFile: options that are not an object, a bad signal', async () => {
    const store = new MemoryStore()
    await assert.rejects(
      downloadFile(store, join(dir, 'out'), null as never),
      invalid(/downloadFile: options must be an object/),
    )
    await assert.rejects(
      downloadFile(store, join(dir, 'out'), { signal: 'stop' as unknown as AbortSignal }),
      invalid(/downloadFile: signal must be an AbortSignal, got string/),
    )
  })

  it('a misspelt option is refused, naming it and the nearest known name, not ignored', async () => {
    const store = new MemoryStore()
    const typo = (name: string, near: string) =>
      invalid(new RegExp(`unknown option "${name}" \\(did you mean ${near}\\?\\)`))
    assert.throws(
      () => createStreamSegmentWriteStream({ store, segmentMpuMaxConcurency: 8 } as never),
      typo('segmentMpuMaxConcurency', 'segmentMpuMaxConcurrency'),
    )
    assert.throws(
      () => createStreamSegmentReadStream({ store, readAhead: 5 } as never),
      typo('readAhead', 'readAheadBytes'),
    )
    await assert.rejects(
      SegmentFile.create(store, { dataBlocksize: 8192 } as never),
      typo('dataBlocksize', 'dataBlockSize'),
    )
    await assert.rejects(SegmentFile.open(store, { readonly: true } as never), typo('readonly', 'readOnly'))
    await assert.rejects(
      downloadFile(store, join(dir, 'o'), { onprogress: () => {} } as never),
      typo('onprogress', 'onProgress'),
    )
    await assert.rejects(
      uploadFile(join(dir, 'x'), store, {}, { resumeMaxAge: 5 } as never),
      typo('resumeMaxAge', 'resumeMaxAgeMs'),
    )
    await assert.rejects(gc(store, { kep: 2 } as never), typo('kep', 'keep'))
    await assert.rejects(gc(store, { signal: 'x' } as never), invalid(/gc: signal = "x": must be an AbortSignal/))
    // A name far from any is named alone; an undefined value counts as not given.
    assert.throws(
      () => createStreamSegmentWriteStream({ store, colour: 'red' } as never),
      invalid(/unknown option "colour"$/),
    )
    createStreamSegmentReadStream({ store, cno: undefined, somethingElse: undefined } as never).destroy()
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  })

  it("a bigint or a cycle where a value goes is ERR_INVALID_ARGUMENT naming the option, not JSON's TypeError", async () => {
    const store = new MemoryStore()
    const cycle: Record<string, unknown> = {}
    cycle.self = cycle
    const file = join(dir, 'bigint')
    await writeFile(file, 'hello')
    assert.throws(
      () => createStreamSegmentWriteStream({ store, dataBlockSize: 4096n as never }),
      invalid(/setting dataBlockSize = 4096n: must be a power of two/),
    )
    assert.throws(
      () => createStreamSegmentWriteStream({ store, segmentMpuMaxConcurrency: cycle as never }),
      invalid(/setting segmentMpuMaxConcurrency = Object: must be an integer/),
    )
    assert.throws(
      () => createStreamSegmentWriteStream({ store, profile: 1n as never }),
      invalid(/createStreamSegmentWriteStream: profile 1n: must be 'streaming' or 'spec'/),
    )
    assert.throws(
      () => createStreamSegmentWriteStream({ store, adoptChunks: 1n as never }),
      invalid(/createStreamSegmentWriteStream: adoptChunks 1n: must be true or false/),
    )
    assert.throws(
      () => createStreamSegmentWriteStream({ store, wal: { dir: 1n } as never }),
      invalid(/wal: \{ dir \} must name a folder, got Object/),
    )
    await assert.rejects(
      uploadFile(file, store, { segmentMpuChunkSize: 65536n as never }),
      invalid(/setting segmentMpuChunkSize = 65536n/),
    )
    await assert.rejects(
      uploadFile(file, store, {}, { resumeMaxAgeMs: 5n as never }),
      invalid(/uploadFile: resumeMaxAgeMs = 5n: must be an integer/),
    )
    await assert.rejects(
      uploadFile(file, store, {}, { resume: cycle as never }),
      invalid(/uploadFile: resume = Object/),
    )
    await assert.rejects(
      downloadFile(store, join(dir, 'o'), { readGetMaxBytes: 65536n as never }),
      invalid(/setting readGetMaxBytes = 65536n/),
    )
    await assert.rejects(downloadFile(store, 5n as never), invalid(/downloadFile: path 5n must name a file/))
    await assert.rejects(SegmentFile.create(store, { metaBlockSize: 4096n as never }), invalid(/metaBlockSize = 4096n/))
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  })

  it('callbacks that are not functions, options that are not objects, a location that is not one', async () => {
    const store = new MemoryStore()
    await assert.rejects(
      downloadFile(store, join(dir, 'o'), { onProgress: 'x' as never }),
      invalid(/downloadFile: onProgress must be a function, got string "x"/),
    )
    await assert.rejects(
      uploadFile(join(dir, 'x'), store, {}, { onStart: 5 as never }),
      invalid(/uploadFile: onStart must be a function, got number 5/),
    )
    await assert.rejects(
      SegmentFile.create(store, null as never),
      invalid(/SegmentFile.create: options must be an object/),
    )
    await assert.rejects(SegmentFile.open(store, null as never), invalid(/SegmentFile.open: options must be an object/))
    assert.throws(() => openStore(5 as never), invalid(/openStore: 5: give a URL or path/))
    assert.throws(() => openStore(null as never), invalid(/openStore: object: give a URL or path|openStore: .*null/))
  })

  it('uploadFile: a directory, a non-path, an empty path, a closed handle, settings that are not an object; nothing is published', async () => {
    const store = new MemoryStore()
    await assert.rejects(uploadFile(dir, store), invalid(/: not a regular file/))
    await assert.rejects(
      uploadFile(5 as never, store),
      invalid(/uploadFile: path must be a path or an open FileHandle, got number 5/),
    )
    const file = join(dir, 'small')
    await writeFile(file, 'hello')
    // An empty path is no file (it was ': no such file'); a handle closed already was Node's bare 'file closed'.
    await assert.rejects(uploadFile('', store), invalid(/^uploadFile: path must be a path .*, got string ""$/))
    const closed = await open(file)
    await closed.close()
    await assert.rejects(
      uploadFile(closed, store),
      invalid(/^uploadFile: the FileHandle cannot be read \(file closed\)$/),
    )
    await assert.rejects(uploadFile(file, store, null as never), invalid(/uploadFile: settings must be an object/))
    await assert.rejects(
      uploadFile(file, store, {}, { signal: 1 as never }),
      invalid(/uploadFile: signal must be an AbortSignal/),
    )
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  })
})
