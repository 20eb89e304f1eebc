/**
 * Every function and class the package root exports refuses a missing or wrong-typed
 * argument with ERR_INVALID_ARGUMENT naming what was wrong, never a TypeError from deep
 * inside (a JavaScript caller has no type checker to catch it first). The admin functions
 * take a store or its location, as gc and removeContainer do.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { after, before, describe, it } from 'node:test'
import * as api from '../lib/index.js'

/** Exports that are no call (values, classes with no construction of their own to check). */
const NOT_CALLED = new Set([
  'ERROR_CODES',
  'READ_DEFAULTS',
  'SPEC_DEFAULTS',
  'STREAMING_PROFILE',
  'UPLOAD_PARAMS',
  'WRITE_ID_METADATA',
  'StreamSegmentError',
  // Made by createStreamSegmentReadStream and createStreamSegmentWriteStream, checked there.
  'StreamSegmentReadStream',
  'StreamSegmentWriteStream',
  // `new MemoryStore(name?)`: any name, or none, is a store.
  'MemoryStore',
  // A hot primitive: a wrong type is a TypeError, as Node's own zlib.crc32 gives.
  'crc32',
])

/** How each export is called: a class by `new`, SegmentFile by its static constructors. */
function callsOf(name: string, value: unknown): Array<[string, (...args: unknown[]) => unknown]> {
  if (name === 'SegmentFile') {
    return [
      ['SegmentFile.create', (...a) => api.SegmentFile.create(...(a as [never]))],
      ['SegmentFile.open', (...a) => api.SegmentFile.open(...(a as [never]))],
    ]
  }
  const f = value as (...args: unknown[]) => unknown
  const isClass = /^class\b/.test(Function.prototype.toString.call(f))
  return [[name, isClass ? (...a) => Reflect.construct(f, a) : f]]
}

/** The outcome of a call: what it returned (a promise awaited), or what it threw. */
async function outcome(fn: () => unknown): Promise<{ value: unknown } | { err: unknown }> {
  try {
    return { value: await fn() }
  } catch (err) {
    return { err }
  }
}

/** Lets go of what a call that succeeded made (a stream, a client). */
function dispose(value: unknown): void {
  const v = value as { destroy?: () => void } | null
  if (typeof v?.destroy === 'function') v.destroy()
}

/** Each call must fail ERR_INVALID_ARGUMENT with a message matching its pattern; what one made instead is let go. */
async function expectRefused(refused: ReadonlyArray<[() => unknown, RegExp]>): Promise<void> {
  for (const [fn, re] of refused) {
    const r = await outcome(fn)
    if ('value' in r) dispose(r.value)
    assert.ok('err' in r, `${re}: no error`)
    assert.ok(api.StreamSegmentError.is(r.err, 'ERR_INVALID_ARGUMENT'), String(r.err))
    assert.match((r.err as Error).message, re)
  }
}

describe('bad arguments to the package root', () => {
  let dir = ''
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-api-args-'))
  })
  after(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('every export called with no argument, null or a number: ERR_INVALID_ARGUMENT or a result, never another error', async () => {
    const called: string[] = []
    for (const [name, value] of Object.entries(api)) {
      if (NOT_CALLED.has(name) || typeof value !== 'function') continue
      for (const [label, fn] of callsOf(name, value)) {
        called.push(label)
        for (const args of [[], [null], [42]]) {
          const what = `${label}(${args.map(String).join(', ')})`
          const r = await outcome(() => fn(...args))
          if ('value' in r) {
            dispose(r.value)
            continue
          }
          assert.ok(
            api.StreamSegmentError.is(r.err, 'ERR_INVALID_ARGUMENT'),
            `${what} threw ${(r.err as Error)?.constructor?.name}: ${(r.err as Error)?.message}`,
          )
        }
      }
    }
    // The walk reached the entry points (a rename would otherwise shrink it silently).
    for (const name of ['createStreamSegmentWriteStream', 'listCheckpoints', 'SegmentFile.open', 'DirectoryStore']) {
      assert.ok(called.includes(name), `${name} not called: ${called.join(', ')}`)
    }
    assert.ok(called.length >= 20, called.join(', '))
  })

  it('dirtyLimitBytes: the settings not given take their defaults; a bad one or an unknown name is refused', () => {
    assert.equal(api.dirtyLimitBytes({}), 8 * 2 ** 20)
    assert.equal(api.dirtyLimitBytes(api.SPEC_DEFAULTS), 8 * 2 ** 20)
    assert.equal(api.dirtyLimitBytes(api.STREAMING_PROFILE), 96 * 2 ** 20)
    assert.equal(api.dirtyLimitBytes({ dataCacheDirtyMaxBytesThreshold: 2 ** 30 }), 100 * 2 ** 20)
    const invalid = (re: RegExp) => (err: unknown) =>
      api.StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && re.test(err.message)
    assert.throws(() => api.dirtyLimitBytes({ segmentBufferSize: '5' as never }), invalid(/segmentBufferSize = "5"/))
    assert.throws(
      () => api.dirtyLimitBytes({ segmentBuferSize: 5 } as never),
      invalid(/^dirtyLimitBytes: unknown option "segmentBuferSize" \(did you mean segmentBufferSize\?\)/),
    )
  })

  it('resolveSettings: a base is layered on the defaults, as a profile is; a bad base is refused naming it', () => {
    const streaming = api.resolveSettings({}, api.STREAMING_PROFILE)
    assert.deepEqual(streaming, { ...api.SPEC_DEFAULTS, ...api.STREAMING_PROFILE })
    assert.equal(api.dirtyLimitBytes(streaming), api.dirtyLimitBytes(api.STREAMING_PROFILE))
    // The overrides win over the base; a base's undefined is not given.
    const s = api.resolveSettings({ streamSegmentBytes: 0 }, { ...api.STREAMING_PROFILE, format: undefined })
    assert.equal(s.streamSegmentBytes, 0)
    assert.equal(s.format, 'stream')
    assert.equal(s.segmentBufferSize, 96 * 2 ** 20)
    const invalid = (re: RegExp) => (err: unknown) =>
      api.StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && re.test(err.message)
    assert.throws(
      () => api.resolveSettings({}, null as never),
      invalid(/^resolveSettings: base must be an object, got null$/),
    )
    assert.throws(
      () => api.resolveSettings({}, { segmentBuferSize: 5 } as never),
      invalid(/^resolveSettings: base: unknown option "segmentBuferSize" \(did you mean segmentBufferSize\?\)/),
    )
    assert.throws(() => api.resolveSettings({}, { format: 'tape' } as never), invalid(/format = "tape"/))
  })

  it('messages name the call and what came', async () => {
    const cases: Array<[() => unknown, RegExp]> = [
      [
        () => api.createStreamSegmentWriteStream(undefined as never),
        /^createStreamSegmentWriteStream: options must be an object, got undefined$/,
      ],
      [
        () => api.SegmentFile.open(undefined as never),
        /^SegmentFile\.open: store must be an ObjectStore .*got undefined$/,
      ],
      [
        () => api.SegmentFile.create({ put() {} } as never),
        /^SegmentFile\.create: store must be an ObjectStore .*got Object/,
      ],
      [() => api.listCheckpoints(42 as never), /^listCheckpoints: give a store, a URL or path .*got number 42$/],
      [() => api.exportObject(null as never, 'x'), /^exportObject: give a store, .*got null$/],
      [() => new api.DirectoryStore('' as never), /^DirectoryStore: root must be a directory's path .*got string ""$/],
      [() => new api.S3Store(undefined as never), /^S3Store: options must be an object .*got undefined$/],
      [() => api.createS3Client(null as never), /^createS3Client: options must be an object, got null$/],
      [() => api.fileSource(null as never), /^fileSource: expected an open file .*got null$/],
      [() => api.dirtyLimitBytes(undefined as never), /^dirtyLimitBytes: settings must be an object, got undefined$/],
      [() => api.inspectWal(7 as never), /^inspectWal: dir must be a folder's path .*got number 7$/],
    ]
    const file = await api.SegmentFile.create(new api.MemoryStore())
    cases.push([
      () => file.writeRef(0, 4096, undefined as never),
      /^writeRef: source must be a BlockSource .*got undefined$/,
    ])
    for (const [fn, re] of cases) {
      const r = await outcome(fn)
      assert.ok('err' in r, `${re}: no error`)
      assert.ok(api.StreamSegmentError.is(r.err, 'ERR_INVALID_ARGUMENT'), String(r.err))
      assert.match((r.err as Error).message, re)
    }
    await file.close()
  })

  it('the admin functions take a container by its path, and refuse options that are not an object or unknown', async () => {
    const url = join(dir, 'container')
    const bytes = Buffer.alloc(300_000, 7)
    await pipeline(Readable.from([bytes]), api.createStreamSegmentWriteStream({ url }))

    const list = await api.listCheckpoints(url)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.size]),
      [[1, bytes.length]],
    )
    const inspected = await api.inspectCheckpoint(url)
    assert.equal(inspected.cno, 1)
    const verified = await api.verifyCheckpoint(url, { cno: 1 })
    assert.deepEqual(verified.problems, [])
    const out = join(dir, 'exported.bin')
    const exported = await api.exportObject(url, out)
    assert.equal(exported.size, bytes.length)

    const store = api.openStore(url)
    const refused: Array<[() => Promise<unknown>, RegExp]> = [
      [() => api.listCheckpoints(store, null as never), /^listCheckpoints: options must be an object, got null$/],
      [
        () => api.inspectCheckpoint(store, { cnoo: 1 } as never),
        /^inspectCheckpoint: unknown option "cnoo" \(did you mean cno\?\)$/,
      ],
      [
        () => api.verifyCheckpoint(store, { onProgress: 1 } as never),
        /^verifyCheckpoint: onProgress must be a function, got number 1$/,
      ],
      [
        () => api.exportObject(store, out, { signal: 'x' } as never),
        /^exportObject: signal must be an AbortSignal, got string/,
      ],
      [
        () => api.SegmentFile.open(store, { cno: 1.5 }),
        /^SegmentFile.open: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 1.5$/,
      ],
      [
        () => api.SegmentFile.open(store, { cno: 2 ** 32, readOnly: true }),
        /^SegmentFile.open: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 4294967296$/,
      ],
      [
        () => api.SegmentFile.open(store, { cno: 2 ** 30 }),
        /^SegmentFile.open: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 1073741824$/,
      ],
      [
        () => api.downloadFile(store, out, { cno: 2 ** 32 }),
        /^downloadFile: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 4294967296$/,
      ],
      [
        async () => api.createStreamSegmentReadStream({ store, cno: 2 ** 32 }),
        /^createStreamSegmentReadStream: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 4294967296$/,
      ],
      [
        () => api.verifyCheckpoint(store, { cno: 0 }),
        /^verifyCheckpoint: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got number 0$/,
      ],
      [
        () => api.inspectCheckpoint(store, { cno: '1' } as never),
        /^inspectCheckpoint: cno must be a checkpoint number \(an integer in 1\.\.1073741823\), got string "1"$/,
      ],
      [
        () => api.exportObject(store, out, { copy: 'no' } as never),
        /^exportObject: copy must be true or false, got string/,
      ],
      [
        () => api.removeContainer(store, 'all' as never),
        /^removeContainer: options must be an object, got string "all"$/,
      ],
      // An array is no options object: its entries would pass for no options at all.
      [() => api.gc(store, [] as never), /^gc: options = \[\]: must be an object; nothing was deleted$/],
      [() => api.listCheckpoints(store, [] as never), /^listCheckpoints: options must be an object, got Array$/],
      [() => api.removeContainer(store, [] as never), /^removeContainer: options must be an object, got Array$/],
      [
        () => api.SegmentFile.create(new api.MemoryStore(), [] as never),
        /^SegmentFile.create: options must be an object, got Array$/,
      ],
      [() => api.SegmentFile.open(store, [] as never), /^SegmentFile.open: options must be an object, got Array$/],
    ]
    await expectRefused(refused)
    // Nothing refused removed anything.
    assert.equal((await api.listCheckpoints(url)).checkpoints.length, 1)
  })

  it('an option given as null is refused, naming it, not taken for its default (a null keep made gc keep one)', async () => {
    const store = new api.MemoryStore()
    const target = { store: new api.MemoryStore(), key: 'out' }
    const refused: Array<[() => unknown, RegExp]> = [
      [
        () => api.createStreamSegmentReadStream({ store, readAheadBytes: null } as never),
        /^createStreamSegmentReadStream: readAheadBytes null must be a byte count/,
      ],
      [() => api.gc(store, { keep: null } as never), /^gc: keep = null: must be an integer ≥ 1; nothing was deleted$/],
      [() => api.gc(store, { keepCnos: null } as never), /^gc: keepCnos = null: must be a list of checkpoint numbers/],
      [() => api.gc(store, { keepNewerThanMs: null } as never), /^gc: keepNewerThanMs = null: must be an integer ≥ 0/],
      [() => api.gc(store, { graceMs: null } as never), /^gc: graceMs = null: must be an integer ≥ 0/],
      [() => api.gc(store, { spareFromCno: null } as never), /^gc: spareFromCno = null: must be an integer ≥ 1/],
      [
        () => api.exportObject(store, target, { concurrency: null } as never),
        /^exportObject: concurrency must be 1\.\.64, got null$/,
      ],
      [
        () => api.exportObject(store, target, { minPartBytes: null } as never),
        /^exportObject: minPartBytes must be an integer ≥ 1, got null$/,
      ],
      [
        () => api.exportObject(store, target, { sendPartBytes: null } as never),
        /^exportObject: sendPartBytes must be an integer in .*, got null$/,
      ],
      [
        () => api.exportObject(store, target, { copyPartBytes: null } as never),
        /^exportObject: copyPartBytes must be an integer in .*, got null$/,
      ],
    ]
    await expectRefused(refused)
  })

  it('the test hooks are no options: every call that takes settings refuses them, DirectoryStore a second argument', async () => {
    const store = new api.MemoryStore()
    const path = join(dir, 'hooks.bin')
    await writeFile(path, Buffer.alloc(8192, 1))
    const unknown = (who: string, name: string) => new RegExp(`^${who}: unknown option "${name}"`)
    const refused: Array<[() => unknown, RegExp]> = [
      [() => api.resolveSettings({ maxNodeEntries: 4 } as never), unknown('resolveSettings', 'maxNodeEntries')],
      [() => api.resolveSettings({ abortWaitMs: 100 } as never), unknown('resolveSettings', 'abortWaitMs')],
      [
        () => api.SegmentFile.create(store, { maxNodeEntries: 4 } as never),
        unknown('SegmentFile.create', 'maxNodeEntries'),
      ],
      // A null was taken for the default, as no setting's null is.
      [
        () => api.SegmentFile.create(store, { maxNodeEntries: null } as never),
        unknown('SegmentFile.create', 'maxNodeEntries'),
      ],
      [() => api.SegmentFile.open(store, { abortWaitMs: 1 } as never), unknown('SegmentFile.open', 'abortWaitMs')],
      [
        () => api.createStreamSegmentWriteStream({ store, maxNodeEntries: 8 } as never),
        unknown('createStreamSegmentWriteStream', 'maxNodeEntries'),
      ],
      [() => api.uploadFile(path, store, { abortWaitMs: 5 } as never), unknown('uploadFile: settings', 'abortWaitMs')],
      [
        () =>
          new api.Upload({
            client: api.createS3Client({ region: 'us-east-1', endpoint: 'http://127.0.0.1:9' }),
            params: { Bucket: 'b', Key: 'k', Body: Buffer.alloc(1) },
            settings: { maxNodeEntries: 4 } as never,
          }),
        unknown('Upload: settings', 'maxNodeEntries'),
      ],
      [
        () => new (api.DirectoryStore as unknown as new (...a: unknown[]) => unknown)(dir, { lockHeld() {} }),
        /^DirectoryStore: takes one argument, the root directory; got a second: Object/,
      ],
    ]
    await expectRefused(refused)
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
    // resolveSettings returns the settings, not what a handle derives from them.
    assert.deepEqual(Object.keys(api.resolveSettings()).sort(), Object.keys(api.SPEC_DEFAULTS).sort())
  })
})
