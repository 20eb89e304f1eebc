/**
 * `Upload`'s constructor, without a server: each Body kind and each lib-storage parameter
 * honoured, ignored or refused (with its name and why) as UPLOAD_PARAMS says, and as the
 * table in docs/api.md says; and the package keeps lib-storage out of lib/ (a devDependency,
 * for the benchmarks and the comparison test). The uploads themselves: upload-s3.test.ts.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { getEventListeners, once } from 'node:events'
import {
  createReadStream,
  createWriteStream,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { builtinModules } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { describe, it } from 'node:test'
import { NoSuchBucket, S3Client, S3ServiceException } from '@aws-sdk/client-s3'
import { Upload as LibStorageUpload } from '@aws-sdk/lib-storage'
import { StreamSegmentError } from '../../lib/errors.js'
import { UPLOAD_PARAMS, Upload, type UploadParams } from '../../lib/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { StreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { publishContent } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { foreignS3Client } from '../helpers/foreign-sdk.js'
import { pattern } from '../helpers/pattern.js'
import { diagnosticsOf } from '../helpers/type-check.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const MiB = 1024 * 1024
const client = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })

describe('Upload: the constructor', () => {
  it('a Body of another kind is refused in the constructor', () => {
    for (const Body of [42, null, { not: 'a stream' }]) {
      assert.throws(
        () => new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: Body as never } }),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && /params\.Body must be/.test(err.message),
      )
    }
  })

  it('each parameter: honoured and ignored ones accepted, refused ones refused naming it and why', () => {
    const sample: Record<string, unknown> = {
      StorageClass: 'GLACIER',
      Tagging: 'team=ml',
      ServerSideEncryption: 'aws:kms',
      ACL: 'public-read',
      ObjectLockMode: 'COMPLIANCE',
      ContentMD5: 'x',
      IfNoneMatch: '*',
      UploadId: 'u',
      PartNumber: 1,
    }
    const refused = Object.entries(UPLOAD_PARAMS).filter(([, t]) => t.kind === 'refused')
    assert.ok(refused.length >= 20, `${refused.length} refused`)
    for (const [name] of refused) {
      const params = { Bucket: 'b', Key: 'k', Body: 'x', [name]: sample[name] ?? 'value' } as UploadParams
      assert.throws(
        () => new Upload({ client: client, params }),
        (err) =>
          StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
          err.message.includes(`params.${name}: `) &&
          err.message.length > 60,
        name,
      )
    }
    for (const [name, t] of Object.entries(UPLOAD_PARAMS)) {
      if (t.kind !== 'ignored') continue
      const value = name === 'Metadata' ? { a: 'b' } : name === 'Expires' ? new Date() : 'value'
      assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x', [name]: value } }), name)
    }
    // Accepted as given: STANDARD, undefined values, an empty tag list, leavePartsOnError.
    assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x', StorageClass: 'STANDARD' } }))
    assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x', ACL: undefined } }))
    assert.ok(
      new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, tags: [], leavePartsOnError: true }),
    )
    assert.throws(
      () => new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x', Unheard: 1 } as UploadParams }),
      /params\.Unheard is not supported/,
    )
    // An option lib-storage ignores (a misspelt one) is refused, as docs/api.md says.
    assert.throws(
      () => new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, queuesize: 2 } as never),
      (err) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
        /"queuesize" \(did you mean queueSize\?\)/.test(err.message),
    )
    assert.throws(
      () =>
        new Upload({
          client: client,
          params: { Bucket: 'b', Key: 'k', Body: 'x' },
          tags: [{ Key: 'a', Value: 'b' }],
        }),
      (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && /^Upload: tags: /.test(err.message),
    )
    const tooLarge = { partSize: 5 * 1024 * MiB + 1 } // past S3's largest part: refused here, not in done()
    for (const bad of [
      { queueSize: -1 },
      { queueSize: 0.5 },
      { queueSize: '0.5' as unknown as number },
      { queueSize: 'three' as unknown as number },
      { queueSize: Symbol('3') as unknown as number },
      { partSize: '4194304' as unknown as number },
      { partSize: '16 MiB' as unknown as number },
      { partSize: 4 * MiB },
      { partSize: 5 * MiB + 0.5 },
      tooLarge,
    ]) {
      assert.throws(
        () => new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, ...bad }),
        (err) =>
          StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && err.message.includes(Object.keys(bad)[0] as string),
      )
    }
    // As lib-storage's: 0 takes the default; a String object is a string.
    assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, queueSize: 0, partSize: 0 }))
    assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, partSize: 5 * 1024 * MiB }))
    assert.ok(new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: new String('x') as never } }))
    assert.throws(() => new Upload({ client: client, params: { Bucket: '', Key: 'k', Body: 'x' } }), /params\.Bucket/)
    assert.throws(
      () => new Upload({ client: client, params: { Bucket: 'b', Key: 'k', Body: 'x', ContentLength: -1 } }),
      /ContentLength/,
    )
  })

  it("docs/api.md's table gives every parameter the treatment UPLOAD_PARAMS gives it", () => {
    const doc = readFileSync('docs/api.md', 'utf8')
    const section = doc.slice(doc.indexOf('## Upload'), doc.indexOf('\n## ', doc.indexOf('## Upload') + 5))
    const rows = section.split('\n').filter((l) => l.startsWith('| `params.'))
    const documented = new Map<string, string>()
    for (const row of rows) {
      const [names = '', treatment = ''] = row
        .split('|')
        .slice(1)
        .map((c) => c.trim())
      for (const m of names.matchAll(/`(?:params\.)?([A-Za-z0-9]+)`/g)) documented.set(m[1] as string, treatment)
    }
    for (const [name, t] of Object.entries(UPLOAD_PARAMS)) {
      const doc = documented.get(name)
      assert.ok(doc !== undefined, `params.${name} is not in the table`)
      assert.ok(
        doc.startsWith(t.kind === 'honoured' ? 'honoured' : t.kind === 'ignored' ? 'ignored' : 'refused'),
        `${name}: ${doc} vs ${t.kind}`,
      )
    }
    for (const name of documented.keys()) assert.ok(name in UPLOAD_PARAMS, `${name} documented, not in UPLOAD_PARAMS`)
  })

  it('the README shows the migration as the example makes it: the one import line', () => {
    const readme = readFileSync('README.md', 'utf8')
    assert.match(
      readme,
      /-import \{ Upload \} from '@aws-sdk\/lib-storage'\n\+import \{ Upload \} from 'stream-segment'/,
    )
    const example = readFileSync('examples/lib-storage-upload.ts', 'utf8')
    assert.match(example, /^import \{ Upload \} from 'stream-segment'$/m)
  })

  it('lib-storage is a devDependency and nothing in lib/ imports it (or any other package not a dependency)', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8'))
    assert.equal(pkg.dependencies['@aws-sdk/lib-storage'], undefined)
    assert.match(pkg.devDependencies['@aws-sdk/lib-storage'], /^\d+\.\d+\.\d+$/, 'pinned exactly')
    const allowed = new Set([...Object.keys(pkg.dependencies), ...Object.keys(pkg.optionalDependencies ?? {})])
    const files = readdirSync('lib', { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'))
    assert.ok(files.length > 20)
    for (const f of files) {
      const source = readFileSync(join('lib', f), 'utf8')
      for (const m of source.matchAll(/^\s*(?:import|export)\b[^'"]*?from\s+'([^']+)'|import\('([^']+)'\)/gm)) {
        const spec = (m[1] ?? m[2]) as string
        if (spec.startsWith('.') || spec.startsWith('node:') || builtinModules.includes(spec)) continue
        const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] as string)
        assert.ok(allowed.has(name), `lib/${f} imports ${spec}, not a dependency`)
      }
    }
  })
})

describe("Upload: done()'s Location, as lib-storage makes it after a PutObject", () => {
  // On AWS (no endpoint configured or in the environment), what the client's endpoint rules
  // give: the region's partition, FIPS, dual-stack and path style; the segments encoded as
  // the SDK encodes them. The uploads go to a memory store: no request leaves the process.
  const cases: Array<[string, ConstructorParameters<typeof S3Client>[0], string, string]> = [
    ['virtual-hosted', {}, 'a/b', 'https://my-bucket.s3.us-east-1.amazonaws.com/a/b'],
    ['forcePathStyle', { forcePathStyle: true }, 'a/b', 'https://s3.us-east-1.amazonaws.com/my-bucket/a/b'],
    ['a China region', { region: 'cn-north-1' }, 'a/b', 'https://my-bucket.s3.cn-north-1.amazonaws.com.cn/a/b'],
    ['dual-stack', { useDualstackEndpoint: true }, 'a', 'https://my-bucket.s3.dualstack.us-east-1.amazonaws.com/a'],
    ['FIPS', { useFipsEndpoint: true }, 'a', 'https://my-bucket.s3-fips.us-east-1.amazonaws.com/a'],
    ['a key with ( ) and a quote', {}, "run(1)/it's", 'https://my-bucket.s3.us-east-1.amazonaws.com/run%281%29/it%27s'],
    [
      'an endpoint of its own, path style',
      { endpoint: 'http://127.0.0.1:9000', forcePathStyle: true },
      'k',
      'http://127.0.0.1:9000/my-bucket/k',
    ],
  ]
  for (const [name, config, Key, expected] of cases) {
    it(name, async () => {
      const saved = { s3: process.env.AWS_ENDPOINT_URL_S3, all: process.env.AWS_ENDPOINT_URL }
      delete process.env.AWS_ENDPOINT_URL_S3
      delete process.env.AWS_ENDPOINT_URL
      try {
        const c = new S3Client({
          region: 'us-east-1',
          credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
          ...config,
        })
        const upload = new Upload({ client: c, params: { Bucket: 'my-bucket', Key, Body: 'x' } })
        Object.defineProperty(upload, 'store', { value: new MemoryStore(`location-${name}`) })
        assert.equal((await upload.done()).Location, expected)
      } finally {
        if (saved.s3 !== undefined) process.env.AWS_ENDPOINT_URL_S3 = saved.s3
        if (saved.all !== undefined) process.env.AWS_ENDPOINT_URL = saved.all
      }
    })
  }
})

describe("Upload: done()'s Location, the same as lib-storage's for each client configuration", () => {
  // lib-storage itself on a client whose send is faked: it resolves the endpoint from the
  // client's configuration as the SDK does for a PutObject (getEndpointFromInstructions).
  const configs: Array<ConstructorParameters<typeof S3Client>[0]> = [
    {},
    { forcePathStyle: true },
    { region: 'eu-west-1', useAccelerateEndpoint: true },
    { useAccelerateEndpoint: true, useDualstackEndpoint: true },
    { useGlobalEndpoint: true },
    { region: 'us-west-2', useGlobalEndpoint: true },
  ]
  for (const config of configs) {
    it(JSON.stringify(config), async () => {
      const saved = { s3: process.env.AWS_ENDPOINT_URL_S3, all: process.env.AWS_ENDPOINT_URL }
      delete process.env.AWS_ENDPOINT_URL_S3
      delete process.env.AWS_ENDPOINT_URL
      try {
        const make = () => {
          const c = new S3Client({
            region: 'us-east-1',
            credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
            ...config,
          })
          c.send = (async () => ({ ETag: '"e"', $metadata: {} })) as unknown as S3Client['send']
          return c
        }
        const params = { Bucket: 'my-bucket', Key: 'run/42', Body: 'x' }
        const theirs = await new LibStorageUpload({ client: make(), params }).done()
        const ours = new Upload({ client: make(), params })
        Object.defineProperty(ours, 'store', { value: new MemoryStore(`location-as-theirs-${JSON.stringify(config)}`) })
        assert.equal((await ours.done()).Location, theirs.Location)
      } finally {
        if (saved.s3 !== undefined) process.env.AWS_ENDPOINT_URL_S3 = saved.s3
        if (saved.all !== undefined) process.env.AWS_ENDPOINT_URL = saved.all
      }
    })
  }
})

describe("Upload: done()'s Location when a client's setting cannot be read", () => {
  it('a provider that throws is left out (the rules default it): done() resolves, the checkpoint published', async () => {
    const saved = { s3: process.env.AWS_ENDPOINT_URL_S3, all: process.env.AWS_ENDPOINT_URL }
    delete process.env.AWS_ENDPOINT_URL_S3
    delete process.env.AWS_ENDPOINT_URL
    try {
      const c = new S3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
      Object.assign(c.config, {
        useFipsEndpoint: async () => {
          throw new Error('cannot read the shared config file')
        },
      })
      const upload = new Upload({ client: c, params: { Bucket: 'my-bucket', Key: 'k', Body: 'x' } })
      Object.defineProperty(upload, 'store', { value: new MemoryStore('location-provider-throws') })
      assert.equal((await upload.done()).Location, 'https://my-bucket.s3.us-east-1.amazonaws.com/k')
    } finally {
      if (saved.s3 !== undefined) process.env.AWS_ENDPOINT_URL_S3 = saved.s3
      if (saved.all !== undefined) process.env.AWS_ENDPOINT_URL = saved.all
    }
  })
})

describe('Upload: abortController, as lib-storage takes it', () => {
  /** @smithy/abort-controller's (and @aws-sdk/abort-controller's), as lib-storage's options type it: `onabort` only. */
  class PolyfillSignal {
    onabort: ((this: PolyfillSignal) => void) | null = null
    aborted = false
    abort() {
      this.aborted = true
      this.onabort?.()
      this.onabort = null
    }
  }
  class PolyfillController {
    readonly signal = new PolyfillSignal()
    abort() {
      this.signal.abort()
    }
  }
  let n = 0
  /** An Upload into a memory store, with a Body that yields one chunk and then waits for the abort. */
  function upload(abortController: PolyfillController | AbortController): { upload: Upload; started: Promise<void> } {
    let start = () => {}
    const started = new Promise<void>((r) => (start = r))
    const Body = Readable.from(
      (async function* () {
        yield Buffer.alloc(1000, 1)
        start()
        await new Promise(() => {}) // never ends: only the abort finishes the upload
      })(),
    )
    const u = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body }, abortController })
    Object.defineProperty(u, 'store', { value: new MemoryStore(`polyfill-${n++}`) })
    return { upload: u, started }
  }

  it("the polyfill's abort() mid-way rejects done() with AbortError, as upload.abort() does", async () => {
    for (const how of ['controller', 'upload'] as const) {
      const controller = new PolyfillController()
      const { upload: u, started } = upload(controller)
      const done = u.done()
      await started
      if (how === 'controller') controller.abort()
      else await u.abort()
      await assert.rejects(done, (err: Error) => err.name === 'AbortError' && StreamSegmentError.is(err, 'ERR_ABORTED'))
      assert.equal(controller.signal.aborted, true, how)
    }
  })

  it('a polyfill aborted before done() rejects it at once; a handler it had still runs', async () => {
    const controller = new PolyfillController()
    let theirs = 0
    controller.signal.onabort = () => theirs++
    const { upload: u } = upload(controller)
    controller.abort()
    assert.equal(theirs, 1)
    await assert.rejects(u.done(), { name: 'AbortError' })
    assert.throws(
      () =>
        new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, abortController: { signal: {} } as never }),
      (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && /abortController/.test(err.message),
    )
  })

  it('one AbortController shared by 12 uploads at once: one listener on its signal, no leak warning, every upload aborted', async () => {
    const controller = new AbortController()
    const warnings: string[] = []
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`)
    process.on('warning', onWarning)
    try {
      const uploads = Array.from({ length: 12 }, () => {
        const { upload: u, started } = upload(controller)
        return { done: u.done(), started }
      })
      await Promise.all(uploads.map((u) => u.started))
      // A server's shutdown controller: Node warns of a leak past 10 listeners on one signal.
      assert.ok(getEventListeners(controller.signal, 'abort').length <= 1)
      controller.abort()
      for (const u of uploads) await assert.rejects(u.done, { name: 'AbortError' })
      await new Promise((r) => setImmediate(r)) // warnings are emitted a tick later
      assert.deepEqual(
        warnings.filter((w) => w.startsWith('MaxListenersExceededWarning')),
        [],
      )
      assert.equal(getEventListeners(controller.signal, 'abort').length, 0)
    } finally {
      process.off('warning', onWarning)
    }
  })

  it('one AbortController shared by uploads one after another holds no listener of theirs once they are done', async () => {
    const controller = new AbortController()
    for (let i = 0; i < 3; i++) {
      const u = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, abortController: controller })
      Object.defineProperty(u, 'store', { value: new MemoryStore() })
      await u.done()
      assert.equal(getEventListeners(controller.signal, 'abort').length, 0)
    }
  })

  it('one polyfill shared by 200 uploads, some at once, holds its own handler again once they are done', async () => {
    const controller = new PolyfillController()
    let theirs = 0
    const handler = () => theirs++
    controller.signal.onabort = handler
    const done = (Body: string) => {
      const u = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body }, abortController: controller })
      Object.defineProperty(u, 'store', { value: new MemoryStore() })
      return u.done()
    }
    for (let i = 0; i < 100; i++) await done(`upload ${i}`)
    // Two at a time: the second one's handler wraps the first one's, whichever ends first.
    for (let i = 0; i < 50; i++) await Promise.all([done('x'.repeat(64 * 1024)), done('y')])
    assert.equal(controller.signal.onabort, handler, "the caller's handler, not one wrapping it per upload served")
    controller.abort()
    assert.equal(theirs, 1)
  })
})

/** A client lib-storage can send through without a server: every command succeeds. */
function stubClient(): S3Client {
  return {
    config: {
      endpoint: async () => ({ protocol: 'https:', hostname: 's3.example', path: '/' }),
      requestHandler: {},
      requestChecksumCalculation: async () => 'WHEN_REQUIRED',
    },
    send: async () => ({ ETag: '"e"', UploadId: 'u', $metadata: {} }),
  } as unknown as S3Client
}

describe("Upload: 'httpUploadProgress' totals, as lib-storage's", () => {
  const stub = stubClient()
  const streams: Array<[string, () => UploadParams['Body'], number?]> = [
    ['a small Readable', () => Readable.from([Buffer.from('hello'), Buffer.from(', world')])],
    ['a small web ReadableStream', () => new Blob(['hello']).stream()],
    ['an empty Readable', () => Readable.from([])],
    ['a Readable of exactly one part', () => Readable.from([Buffer.alloc(5 * MiB, 1)])],
    ['a Readable one byte over a part', () => Readable.from([Buffer.alloc(5 * MiB + 1, 1)])],
    ['a Readable within a larger partSize', () => Readable.from([Buffer.alloc(5 * MiB + 1, 1)]), 6 * MiB],
    [
      'a Readable within a larger partSize given as a string',
      () => Readable.from([Buffer.alloc(5 * MiB + 1, 1)]),
      String(6 * MiB) as unknown as number,
    ],
  ]
  let n = 0
  for (const [name, make, partSize] of streams) {
    it(`${name}: the same total in the last event`, async () => {
      const totals = async (u: {
        on(e: string, l: (p: { total?: number }) => void): unknown
        done(): Promise<unknown>
      }) => {
        const events: Array<number | undefined> = []
        u.on('httpUploadProgress', (p) => events.push(p.total))
        await u.done()
        return events.at(-1)
      }
      const theirs = await totals(
        new LibStorageUpload({ client: stub, params: { Bucket: 'b', Key: 'k', Body: make() }, partSize }),
      )
      const ours = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: make() }, partSize })
      Object.defineProperty(ours, 'store', { value: new MemoryStore(`totals-${n++}`) })
      assert.equal(await totals(ours), theirs)
    })
  }
})

describe("Upload: no 'httpUploadProgress' after abort()", () => {
  /** Upload requests whose answers are on their way: each lands 20 ms late, whatever the abort. */
  class LateAnswers extends WrappedStore {
    protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
      const result = await run()
      if (call.op === 'uploadPart' || call.op === 'put') await new Promise((r) => setTimeout(r, 20))
      return result
    }
  }
  for (const how of ['upload.abort()', 'abortController.abort()'] as const) {
    it(`${how} at the first event: no later event, as lib-storage's uploaders stop notifying once aborted`, async () => {
      const abortController = new AbortController()
      const store = new MemoryStore()
      // Three parts in flight at once; the abort comes as the first one's answer is taken.
      const Body = Buffer.alloc(12 * MiB, 7)
      const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body }, partSize: 5 * MiB, abortController })
      Object.defineProperty(upload, 'store', { value: new LateAnswers(store) })
      const events: Array<{ loaded?: number; aborted: boolean }> = []
      upload.on('httpUploadProgress', (p) => {
        events.push({ loaded: p.loaded, aborted: abortController.signal.aborted })
        if (events.length === 1) {
          if (how === 'upload.abort()') void upload.abort()
          else abortController.abort()
        }
      })
      await assert.rejects(upload.done(), { name: 'AbortError' })
      assert.deepEqual(
        events.filter((e) => e.aborted),
        [],
        'an event after the abort tells a progress bar of bytes that will never be published',
      )
      assert.equal(events.length, 1)
      await assert.rejects(SegmentFile.open(store, { readOnly: true }), (err) =>
        StreamSegmentError.is(err, 'ERR_NOT_FOUND'),
      )
    })
  }
})

describe("Upload: a file read stream of no regular file, its 'httpUploadProgress' total", () => {
  /** Every event's [loaded, total], and the bytes published. */
  async function events(Body: Readable): Promise<{ events: Array<[number?, number?]>; size: number }> {
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body } })
    Object.defineProperty(upload, 'store', { value: new MemoryStore() })
    const seen: Array<[number?, number?]> = []
    upload.on('httpUploadProgress', (p) => seen.push([p.loaded, p.total]))
    const { size } = await upload.done()
    return { events: seen, size }
  }

  it("a named pipe (a size of 0 to stat) has no total until it ends within a part, as lib-storage's PutObject says", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-upload-fifo-'))
    try {
      const fifo = join(dir, 'pipe')
      execFileSync('mkfifo', [fifo])
      const Body = createReadStream(fifo)
      const done = events(Body)
      createWriteStream(fifo).end(Buffer.alloc(3000, 1))
      const { events: seen, size } = await done
      assert.equal(size, 3000)
      // lib-storage's one PutObject reports the bytes it sent as the total.
      assert.deepEqual(seen.at(-1), [3000, 3000])
      for (const [loaded = 0, total] of seen) assert.ok(total === undefined || loaded <= total, `${loaded} of ${total}`)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("a device read to an end (/dev/zero, end 999) totals the range it reads, as lib-storage's start and end do", async () => {
    const { events: seen, size } = await events(createReadStream('/dev/zero', { start: 0, end: 999 }))
    assert.equal(size, 1000)
    assert.deepEqual(seen.at(-1), [1000, 1000])
  })
})

describe('Upload: options set to null, as lib-storage takes them', () => {
  it('queueSize, partSize, tags, abortController and leavePartsOnError set to null take their defaults', async () => {
    let n = 0
    for (const name of ['queueSize', 'partSize', 'tags', 'abortController', 'leavePartsOnError']) {
      const options = { client, params: { Bucket: 'b', Key: 'k', Body: 'null options' }, [name]: null }
      const upload = new Upload(options as never)
      Object.defineProperty(upload, 'store', { value: new MemoryStore(`null-${n++}`) })
      assert.equal((await upload.done()).size, 12, name)
      // abort() still has a controller to abort.
      await upload.abort()
    }
    assert.throws(() => new Upload({ client: null, params: { Bucket: 'b', Key: 'k', Body: 'x' } } as never), /client/)
  })

  it('a parameter set to null is not given, as lib-storage (the SDK sends no header for it): refused ones too', async () => {
    let n = 0
    const names = Object.keys(UPLOAD_PARAMS).filter((name) => !['Bucket', 'Key', 'Body'].includes(name))
    assert.ok(names.includes('ACL') && names.includes('ContentType') && names.includes('ContentLength'))
    for (const name of names) {
      const params = { Bucket: 'b', Key: 'k', Body: 'null params', [name]: null } as unknown as UploadParams
      const upload = new Upload({ client, params })
      assert.equal(name in upload.params, false, name)
      Object.defineProperty(upload, 'store', { value: new MemoryStore(`null-param-${n++}`) })
      const totals: Array<number | undefined> = []
      upload.on('httpUploadProgress', (p) => totals.push(p.total))
      assert.equal((await upload.done()).size, 11, name)
      // A null ContentLength is none: the total is the Body's own.
      assert.deepEqual(totals, [11], name)
    }
    // Bucket, Key and Body set to null are refused, as lib-storage fails on them.
    for (const name of ['Bucket', 'Key', 'Body']) {
      const params = { Bucket: 'b', Key: 'k', Body: 'x', [name]: null } as unknown as UploadParams
      assert.throws(
        () => new Upload({ client, params }),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && err.message.includes(`params.${name}`),
        name,
      )
    }
  })
})

describe('Upload: queueSize and partSize as lib-storage reads them', () => {
  /** The settings an Upload given `options` writes with. */
  async function settingsOf(options: object, label: string) {
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, ...options })
    Object.defineProperty(upload, 'store', { value: new MemoryStore(`sizes-${label}`) })
    await upload.done()
    const s = (upload as unknown as { writer?: StreamSegmentWriteStream }).writer?.file?.settings
    return { queue: s?.segmentMpuMaxConcurrency, part: s?.segmentMpuChunkSize }
  }

  it('NaN or false takes the default (its `||`, tags too); a fractional queueSize runs as many as its loop does; Infinity is capped', async () => {
    const defaults = await settingsOf({}, 'defaults')
    assert.equal(typeof defaults.queue, 'number')
    for (const value of [Number.NaN, false]) {
      const options = { queueSize: value, partSize: value, tags: value }
      assert.deepEqual(await settingsOf(options, String(value)), defaults, String(value))
    }
    // lib-storage starts an uploader for each index below queueSize: 1.5 → 2.
    assert.equal((await settingsOf({ queueSize: 1.5 }, '1.5')).queue, 2)
    assert.equal((await settingsOf({ queueSize: Number.POSITIVE_INFINITY }, 'infinite')).queue, 64)
  })

  /** The most UploadPart requests lib-storage has in flight for a 6-part Body with `queueSize`: its uploaders. */
  async function libStorageQueue(queueSize: unknown): Promise<number> {
    let inFlight = 0
    let most = 0
    const stub = {
      config: {
        endpoint: async () => ({ protocol: 'https:', hostname: 's3.example', path: '/' }),
        requestHandler: {},
        requestChecksumCalculation: async () => 'WHEN_REQUIRED',
      },
      send: async (command: object) => {
        if (command.constructor.name !== 'UploadPartCommand') return { UploadId: 'u', $metadata: {} }
        most = Math.max(most, ++inFlight)
        await new Promise((r) => setTimeout(r, 5))
        inFlight--
        return { ETag: '"e"', $metadata: {} }
      },
    } as unknown as S3Client
    const Body = Buffer.alloc(6 * 5 * MiB)
    await new LibStorageUpload({
      client: stub,
      params: { Bucket: 'b', Key: 'k', Body },
      queueSize: queueSize as number,
    }).done()
    return most
  }

  it("a numeric string, true or [n] is its number, as lib-storage's comparisons make it: '4' runs 4", async () => {
    let n = 0
    for (const value of ['4', ' 2 ', '0x3', '1.5', true, [3]]) {
      const ours = (await settingsOf({ queueSize: value }, `queue-${n++}`)).queue
      assert.equal(ours, await libStorageQueue(value), `queueSize ${JSON.stringify(value)}`)
    }
    // A numeric partSize string: lib-storage's constructor takes it (its `partSize < MIN_PART_SIZE`).
    const partSize = String(6 * MiB) as unknown as number
    new LibStorageUpload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, partSize })
    assert.equal((await settingsOf({ partSize }, 'part-string')).part, 6 * MiB)
  })
})

describe('Upload: partSize over an existing container of larger data blocks', () => {
  it("partSize is rounded up to the container's data block size, not the default one's", async () => {
    const store = new MemoryStore('part-size-64k')
    await publishContent(store, pattern(0, 100_000, 2), { dataBlockSize: 64 * 1024 })
    // Over two parts, so that the multipart pieces are cut at the rounded size.
    const Body = pattern(0, 13_000_000, 3)
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body }, partSize: 6_000_000 })
    Object.defineProperty(upload, 'store', { value: store })
    const result = await upload.done()
    assert.equal(result.cno, 2)
    const s = (upload as unknown as { writer?: StreamSegmentWriteStream }).writer?.file?.settings
    // 6_000_000 is 91.55 blocks of 64 KiB: 92 of them.
    assert.equal(s?.segmentMpuChunkSize, 92 * 64 * 1024)
    assert.equal(s?.dataBlockSize, 64 * 1024)
    const f = await SegmentFile.open(store, { readOnly: true })
    assert.equal(f.size, Body.length)
    assert.ok(Buffer.from(await f.read(0, f.size)).equals(Body), 'the Body reads back')
    await f.close()
  })
})

describe("Upload: a stream's chunks as bytes", () => {
  it("another typed array or a DataView is its memory, not Buffer.from's low byte of each element", async () => {
    const wide = new Uint16Array([0x1234, 0x5678])
    const view = new DataView(new Uint8Array([9, 8, 7]).buffer)
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: Readable.from([wide, view, 'é']) } })
    const store = new MemoryStore('typed-chunks')
    Object.defineProperty(upload, 'store', { value: store })
    assert.equal((await upload.done()).size, 4 + 3 + 2)
    const f = await SegmentFile.open(store, { readOnly: true })
    const expected = Buffer.concat([Buffer.from(wide.buffer), Buffer.from([9, 8, 7]), Buffer.from('é')])
    assert.deepEqual(Buffer.from(await f.read(0, f.size)), expected)
    await f.close()
  })

  it("a String object, a Buffer's JSON form or an array-like is what lib-storage's Buffer.from makes of it", async () => {
    const chunks = () =>
      Readable.from([new String('ab'), { type: 'Buffer', data: [1, 2] }, { length: 2, 0: 3, 1: 4 }, Buffer.from('z')])
    let sent: Uint8Array | undefined
    const stub = {
      ...stubClient(),
      send: async (command: { input: { Body?: Uint8Array } }) => {
        sent = command.input.Body
        return { ETag: '"e"', $metadata: {} }
      },
    } as unknown as S3Client
    await new LibStorageUpload({ client: stub, params: { Bucket: 'b', Key: 'k', Body: chunks() } }).done()
    assert.deepEqual(Buffer.from(sent ?? []), Buffer.from([0x61, 0x62, 1, 2, 3, 4, 0x7a]))
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: chunks() } })
    const store = new MemoryStore('buffer-from-chunks')
    Object.defineProperty(upload, 'store', { value: store })
    await upload.done()
    const f = await SegmentFile.open(store, { readOnly: true })
    assert.deepEqual(Buffer.from(await f.read(0, f.size)), Buffer.from(sent ?? []))
    await f.close()
  })

  it("a chunk Buffer.from refuses (a number, a plain object) fails the upload as it fails lib-storage's", async () => {
    for (const chunk of [42, { not: 'bytes' }]) {
      await assert.rejects(
        new LibStorageUpload({
          client: stubClient(),
          params: { Bucket: 'b', Key: 'k', Body: Readable.from([Buffer.from('a'), chunk]) },
        }).done(),
        TypeError,
      )
      const upload = new Upload({
        client,
        params: { Bucket: 'b', Key: 'k', Body: Readable.from([Buffer.from('a'), chunk]) },
      })
      Object.defineProperty(upload, 'store', { value: new MemoryStore(`refused-chunk-${typeof chunk}`) })
      await assert.rejects(upload.done(), (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'))
    }
  })
})

describe('Upload: a stream Body before done()', () => {
  it('a web ReadableStream is not locked by the constructor; one that errors before done() rejects done() with its error', async () => {
    const failure = new Error('the source failed before done()')
    const Body = new ReadableStream<Uint8Array>({
      start(c) {
        setTimeout(() => c.error(failure), 5)
      },
    })
    const uncaught: unknown[] = []
    const onUncaught = (err: unknown) => uncaught.push(err)
    process.on('uncaughtException', onUncaught)
    try {
      const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body } })
      Object.defineProperty(upload, 'store', { value: new MemoryStore('web-body-fails-early') })
      const lockedBeforeDone = Body.locked
      await new Promise((r) => setTimeout(r, 50))
      await assert.rejects(upload.done(), (err) => err === failure)
      assert.deepEqual(uncaught, [])
      // As lib-storage's: nothing reads the stream until done().
      assert.equal(lockedBeforeDone, false)
    } finally {
      process.off('uncaughtException', onUncaught)
    }
  })

  it('a Body that cannot be read (a locked web stream, a stream() that throws) rejects done(), not the process', async () => {
    const locked = new ReadableStream<Uint8Array>({ start: (c) => c.enqueue(new Uint8Array(3)) })
    locked.getReader()
    const noStream = new Error('stream() failed')
    const bodies: Array<[string, unknown, (err: unknown) => boolean]> = [
      ['a locked web ReadableStream', locked, (err) => (err as { code?: string }).code === 'ERR_INVALID_STATE'],
      [
        'stream() throws',
        {
          size: 3,
          stream: () => {
            throw noStream
          },
        },
        (err) => err === noStream,
      ],
      ['stream() gives no stream', { stream: () => 42 }, (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT')],
    ]
    const uncaught: unknown[] = []
    const onUncaught = (err: unknown) => uncaught.push(err)
    process.on('uncaughtException', onUncaught)
    try {
      for (const [name, Body, expected] of bodies) {
        const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: Body as never } })
        const store = new FailingStore(new MemoryStore())
        Object.defineProperty(upload, 'store', { value: store })
        await assert.rejects(upload.done(), expected, name)
        await new Promise((r) => setImmediate(r)) // an 'error' event nobody hears is thrown a tick later
        assert.deepEqual(uncaught, [], `${name}: an 'error' event thrown out of done()`)
        assert.equal(store.calls.length, 0, `${name}: no request for a Body that cannot be read`)
      }
    } finally {
      process.off('uncaughtException', onUncaught)
    }
  })

  it("done() after abort(): a file's read stream Body is destroyed (its descriptor closed), as lib-storage's", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-upload-abort-'))
    try {
      writeFileSync(join(dir, 'body'), 'bytes never sent')
      const Body = createReadStream(join(dir, 'body'))
      const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body } })
      Object.defineProperty(upload, 'store', { value: new MemoryStore('abort-before-done') })
      await upload.abort()
      await assert.rejects(upload.done(), { name: 'AbortError' })
      assert.equal(Body.destroyed, true)
      await once(Body, 'close')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('Upload: a Blob-like Body, as lib-storage takes it', () => {
  it('an object with stream() (a Blob of another implementation) is read through it, its size the total', async () => {
    // As fetch-blob's or formdata-node's Blob and File: not instances of Node's Blob.
    const bytes = Buffer.from('a blob of another implementation')
    const Body = { size: bytes.length, type: '', stream: () => new Blob([bytes]).stream() }
    const theirs: Array<number | undefined> = []
    const stub = stubClient()
    const original = new LibStorageUpload({ client: stub, params: { Bucket: 'b', Key: 'k', Body: Body as never } })
    original.on('httpUploadProgress', (p) => theirs.push(p.total))
    await original.done()
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: Body as never } })
    const store = new MemoryStore('blob-like')
    Object.defineProperty(upload, 'store', { value: store })
    const ours: Array<number | undefined> = []
    upload.on('httpUploadProgress', (p) => ours.push(p.total))
    assert.equal((await upload.done()).size, bytes.length)
    assert.equal(ours.at(-1), theirs.at(-1))
    assert.equal(ours.at(-1), bytes.length)
    const f = await SegmentFile.open(store, { readOnly: true })
    assert.deepEqual(Buffer.from(await f.read(0, f.size)), bytes)
    await f.close()
  })
})

describe("Upload: a store's S3 error, as lib-storage's callers test it", () => {
  it("done() rejects with the SDK exception's name, $metadata and $fault (a StreamSegmentError still)", async () => {
    const sdkError = new NoSuchBucket({
      message: 'The specified bucket does not exist',
      $metadata: { httpStatusCode: 404 },
    })
    const store = new MemoryStore('s3-error')
    const failing = new Proxy(store, {
      get(target, name, receiver) {
        if (name === 'put' || name === 'createMultipart') {
          return async () => {
            throw StreamSegmentError.notFound('PutObject s3://b/k/…: HTTP 404 NoSuchBucket', sdkError)
          }
        }
        const value = Reflect.get(target, name, receiver)
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x'.repeat(100) } })
    Object.defineProperty(upload, 'store', { value: failing })
    await assert.rejects(upload.done(), (err: Error & { $metadata?: unknown; $fault?: unknown }) => {
      assert.equal(err.name, 'NoSuchBucket')
      assert.deepEqual(err.$metadata, { httpStatusCode: 404 })
      assert.equal(err.$fault, 'client')
      assert.ok(err instanceof NoSuchBucket, 'instanceof the modelled exception, as the SDK judges it')
      assert.ok(S3ServiceException.isInstance(err))
      assert.ok(StreamSegmentError.is(err, 'ERR_NOT_FOUND'))
      assert.equal(err.cause, sdkError)
      return true
    })
  })
})

describe('Upload: params.ContentLength as lib-storage takes it', () => {
  it("a string of digits (an HTTP request's content-length header) is its number, as the SDK sends it", async () => {
    let n = 0
    const upload = (ContentLength: unknown) => {
      const u = new Upload({
        client,
        params: {
          Bucket: 'b',
          Key: 'k',
          Body: Readable.from([Buffer.from('hello')]),
          ContentLength: ContentLength as number,
        },
      })
      Object.defineProperty(u, 'store', { value: new MemoryStore(`content-length-string-${n++}`) })
      return u
    }
    const u = upload('5')
    const totals: Array<number | undefined> = []
    u.on('httpUploadProgress', (p) => totals.push(p.total))
    assert.equal((await u.done()).size, 5)
    assert.deepEqual(totals, [5])
    // Honoured: a Body of another length publishes nothing.
    await assert.rejects(upload('6').done(), (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'))
    for (const bad of ['five', '-1', '1.5', '']) {
      assert.throws(() => upload(bad), /params\.ContentLength/, bad)
    }
  })
})

describe('Upload: params.Key, which names a container', () => {
  it("a Key the container's keys cannot follow is refused in the constructor, naming params.Key", () => {
    const make = (Key: string) => new Upload({ client, params: { Bucket: 'b', Key, Body: 'x' } })
    // Its keys are the Key, a "/" and up to 16 bytes (1073741823.16383): 1007 bytes of UTF-8
    // leave room, as for any S3Store prefix (one rule: prefixFault).
    assert.ok(make('k'.repeat(1007)))
    assert.ok(make(`${'\u00E9'.repeat(503)}k`))
    for (const Key of ['k'.repeat(1008), '\u00E9'.repeat(504), `/${'k'.repeat(1008)}/`]) {
      assert.throws(
        () => make(Key),
        (err) =>
          StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') &&
          /^Upload: params\.Key "\/?[k\u00E9]{59,60}…": 1009 bytes of UTF-8 with its "\/", and a container's keys below it take up to 16 bytes more: 1025, over the 1024 an S3 key may have \(at most 1007 bytes leave them room, 1008 with the "\/"\): a container is written below it$/.test(
            err.message,
          ),
        Key.slice(0, 20),
      )
    }
    // Leading "/"s are dropped, as the store drops them from a prefix: /k is the container k.
    assert.ok(make('/k'))
    assert.ok(make(`//${'k'.repeat(1007)}`))
    // '/' would be the bucket's root: the container's keys among everything else there.
    for (const Key of ['k'.repeat(1008), 'a//b', 'a/./b', 'a/../b', '/', '//']) {
      assert.throws(
        () => make(Key),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && err.message.startsWith('Upload: params.Key'),
        Key.slice(0, 20),
      )
    }
  })
})

describe('Upload: exportTo, the plain object written after the publish', () => {
  it('a target S3 would refuse is refused in the constructor, not by done() after the checkpoint is published', () => {
    const make = (exportTo: unknown) =>
      new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' }, exportTo: exportTo as never })
    // A Key of 1024 bytes is one S3 takes, below a folder of any length.
    assert.ok(make({ Bucket: 'b', Key: `${'d'.repeat(1000)}/${'k'.repeat(23)}` }))
    for (const [exportTo, why] of [
      [
        { Bucket: 'b', Key: 'k'.repeat(1025) },
        /^Upload: exportTo: the target's Key: invalid key "k{60}…": 1025 bytes of UTF-8/,
      ],
      [{ Bucket: 'b', Key: 'a//b' }, /^Upload: exportTo: the target's Key: invalid key "a\/\/b": .*empty/],
      [{ Bucket: 'b', Key: 'a/../b' }, /^Upload: exportTo: the target's Key: invalid key "a\/..\/b"/],
      [{ Bucket: 'b', Key: 'd/' }, /^Upload: exportTo: the target needs a Bucket and a Key not ending in \//],
      [{ Bucket: 'b', Key: 'k', Metadata: 'x' }, /^Upload: exportTo: the target's Metadata must be an object/],
      [{ Bucket: 'b', Key: 'k', ContentTyp: 'x' }, /^Upload: exportTo: target field ContentTyp is not supported/],
    ] as const) {
      assert.throws(
        () => make(exportTo),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && why.test((err as Error).message),
        JSON.stringify(exportTo).slice(0, 40),
      )
    }
  })
})

describe("Upload: bad options, in lib-storage's words", () => {
  it("the constructor's and a second done()'s errors say what lib-storage's say, for callers that match them", async () => {
    const params = { Bucket: 'b', Key: 'k', Body: 'x' }
    const cases: Array<[object, RegExp]> = [
      [{ client }, /Upload requires params to be passed to upload/],
      [{ params }, /Upload requires a AWS client to do uploads with/],
      [
        { client, params, partSize: 1000 },
        /EntityTooSmall: Your proposed upload part size \[1000\] is smaller than the minimum allowed size \[5242880\] \(5MB\)/,
      ],
      [{ client, params, queueSize: -1 }, /Queue size: Must have at least one uploading queue/],
    ]
    for (const [options, words] of cases) {
      assert.throws(() => new LibStorageUpload(options as never), words)
      assert.throws(
        () => new Upload(options as never),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && words.test(err.message),
        String(words),
      )
    }
    const upload = new Upload({ client, params })
    Object.defineProperty(upload, 'store', { value: new MemoryStore('done-twice-words') })
    await upload.done()
    await assert.rejects(upload.done(), /this instance of Upload has already executed \.done\(\)/)
  })
})

describe('Upload: an S3Client of another copy of the SDK', () => {
  it("is taken, as lib-storage takes it (its requests go through the caller's client)", () => {
    const foreign = foreignS3Client({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
    assert.equal(foreign instanceof S3Client, false, 'a class of its own')
    assert.ok(new LibStorageUpload({ client: foreign, params: { Bucket: 'b', Key: 'k', Body: 'x' } }))
    const upload = new Upload({ client: foreign, params: { Bucket: 'b', Key: 'k', Body: 'x' } })
    assert.equal(upload.client, foreign)
  })
})

describe('Upload: a Body lib-storage refuses, in its words', () => {
  it("42, an object, an ArrayBuffer, a Uint16Array, an async generator: lib-storage's done() rejects with words ours says in the constructor", async () => {
    async function* generated() {
      yield Buffer.from('x')
    }
    const bodies: Array<[string, unknown]> = [
      ['a number', 42],
      ['a plain object', { not: 'a stream' }],
      ['an ArrayBuffer', new ArrayBuffer(4)],
      ['a Uint16Array', new Uint16Array(2)],
      ['an async generator', generated()],
    ]
    for (const [name, Body] of bodies) {
      const params = { Bucket: 'b', Key: 'k', Body } as unknown as UploadParams
      const theirs = await new LibStorageUpload({ client: stubClient(), params }).done().then(
        () => assert.fail(`lib-storage took ${name}`),
        (err: Error) => err.message,
      )
      assert.throws(
        () => new Upload({ client, params }),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && err.message.includes(theirs),
        `${name}: ${theirs}`,
      )
    }
  })
})

describe('Upload: a missing Bucket or Key, in the words lib-storage rejects it with', () => {
  it("the SDK's 'No value provided for input HTTP label', which lib-storage's done() rejects with (no request made)", async () => {
    // A client that could not connect: the SDK refuses these before any request.
    const offline = new S3Client({
      region: 'us-east-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      endpoint: 'http://127.0.0.1:1',
      forcePathStyle: true,
      maxAttempts: 1,
    })
    const cases: Array<Record<string, unknown>> = [{ Key: 'k' }, { Bucket: '', Key: 'k' }, { Bucket: 'b' }]
    for (const given of cases) {
      const params = { ...given, Body: 'x' } as unknown as UploadParams
      const theirs = await new LibStorageUpload({ client: offline, params }).done().then(
        () => assert.fail(`lib-storage took ${JSON.stringify(given)}`),
        (err: Error) => err.message,
      )
      assert.match(theirs, /^No value provided for input HTTP label: (Bucket|Key)\.$/)
      assert.throws(
        () => new Upload({ client: offline, params }),
        (err) => StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && err.message.includes(theirs),
        `${JSON.stringify(given)}: ${theirs}`,
      )
    }
  })
})

describe("Upload: done()'s result as lib-storage's callers use it", () => {
  it("has $metadata with the httpStatusCode of a successful PutObject, as lib-storage's (its PutObject's) has", async () => {
    // lib-storage's single-PUT result is its PutObject's output with Bucket, Key and Location.
    const answered = { $metadata: { httpStatusCode: 200 } }
    const stub = { ...stubClient(), send: async () => ({ ETag: '"e"', ...answered }) } as unknown as S3Client
    const theirs = await new LibStorageUpload({ client: stub, params: { Bucket: 'b', Key: 'k', Body: 'x' } }).done()
    const upload = new Upload({ client, params: { Bucket: 'b', Key: 'k', Body: 'x' } })
    Object.defineProperty(upload, 'store', { value: new MemoryStore('result-metadata') })
    // Typed loosely, so that this compiles whatever done() is typed as: the check is at run time.
    const ours = (await upload.done()) as object as { $metadata?: { httpStatusCode?: number } }
    assert.equal(theirs.$metadata.httpStatusCode, 200)
    assert.equal(ours.$metadata?.httpStatusCode, theirs.$metadata.httpStatusCode)
  })

  it('type-checks where code typed against lib-storage does (its Options, Progress, done() as CompleteMultipartUploadCommandOutput)', () => {
    const diagnostics = diagnosticsOf(`
      import { Upload } from PACKAGE
      import type { Options, Progress } from '@aws-sdk/lib-storage'
      import type { CompleteMultipartUploadCommandOutput } from '@aws-sdk/client-s3'
      import type { AbortController as Polyfill } from '@smithy/types'
      declare const options: Options
      declare const polyfill: Polyfill
      const upload = new Upload(options)
      const other = new Upload({ ...options, abortController: polyfill })
      upload.on('httpUploadProgress', (p: Progress) => console.log(p.loaded, p.total, p.part, p.Key, p.Bucket))
      const result: CompleteMultipartUploadCommandOutput = await upload.done()
      const { $metadata, ETag, Location, Bucket, Key, VersionId } = await other.done()
      export const uses = [result.$metadata.httpStatusCode, $metadata.requestId, ETag, Location, Bucket, Key, VersionId, upload.uploadId, upload.abort()]
    `)
    assert.deepEqual(diagnostics, [])
    // The check can fail: a result typed as something it is not.
    const wrong = diagnosticsOf(`
      import { Upload } from PACKAGE
      declare const upload: Upload
      export const n: number = (await upload.done()).Location
    `)
    assert.equal(wrong.length, 1, wrong.join('\n'))
  })

  it("compiles with lib-storage's type names imported from the package, its import line alone changed", () => {
    // Each name as lib-storage's callers use it: the same type as lib-storage's, or for
    // Options and Configuration a wider one (more clients, abort controllers and options).
    const diagnostics = diagnosticsOf(`
      import { Upload, type Options, type Configuration, type BodyDataTypes, type Progress, type RawDataPart, type ServiceClients } from PACKAGE
      import type * as LibStorage from '@aws-sdk/lib-storage'
      declare const client: ServiceClients
      const body: BodyDataTypes = 'x'
      const configuration: Configuration = { queueSize: 4, partSize: 5 * 1024 * 1024, leavePartsOnError: false, tags: [] }
      const options: Options = { client, params: { Bucket: 'b', Key: 'k', Body: body }, ...configuration }
      const upload = new Upload(options)
      upload.on('httpUploadProgress', (p: Progress) => console.log(p.loaded))
      const part: RawDataPart = { partNumber: 1, data: body, lastPart: true }
      const same: [LibStorage.BodyDataTypes, LibStorage.RawDataPart, LibStorage.Progress, LibStorage.ServiceClients] =
        [body, part, { loaded: 1 }, client]
      const theirs: [Options, Configuration] = [{} as LibStorage.Options, {} as LibStorage.Configuration]
      export const uses = [upload, same, theirs]
    `)
    assert.deepEqual(diagnostics, [])
  })
})
