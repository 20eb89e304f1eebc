/**
 * One conformance suite for every ObjectStore backend (memory, directory, S3 on radosgw):
 * the contract of lib/store/types.ts, checked the same way everywhere.
 */
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { describe, it } from 'node:test'
import type { StreamSegmentError } from '../../lib/errors.js'
import type { GetOptions, ObjectStore, PutOptions } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'

const MiB = 1024 * 1024

/** That the store's one open upload is `id` at `key`, holding part 1 only, with `etag`. */
async function assertOnlyUpload(s: ObjectStore, key: string, id: string, etag: string): Promise<void> {
  assert.deepEqual(
    (await collect(s.listMultipart())).map((u) => [u.key, u.uploadId]),
    [[key, id]],
  )
  assert.deepEqual(
    (await s.listParts?.(key, id))?.map((p) => [p.partNumber, p.etag]),
    [[1, etag]],
  )
}

/** `make` returns a fresh, empty store for each test. */
export function runStoreConformance(
  name: string,
  make: () => Promise<ObjectStore>,
  opts: {
    partSize?: number
    chunkedGet?: boolean
    /** The most UTF-8 bytes a key of `store` may have: S3's 1024, less what a prefix of the store takes. */
    keyBytes?: (store: ObjectStore) => number
  } = {},
) {
  const partSize = opts.partSize ?? 5 * MiB
  const keyBytes = opts.keyBytes ?? (() => 1024)

  describe(`ObjectStore conformance: ${name}`, () => {
    it('puts, gets, heads and deletes', async () => {
      const s = await make()
      const body = randomBytes(1000)
      const { etag } = await s.put('a', body)
      assert.ok(etag.length > 0 && !etag.includes('"'), `etag ${etag} must be non-empty and unquoted`)
      assert.deepEqual(Buffer.from(await s.get('a')), body)
      const h = await s.head('a')
      assert.equal(h?.size, 1000)
      assert.equal(h?.etag, etag)
      assert.equal(await s.head('missing'), undefined)
      await rejectsCode(s.get('missing'), 'ERR_NOT_FOUND')
      await s.delete('a')
      assert.equal(await s.head('a'), undefined)
      await s.delete(['a', 'never-existed'])
    })

    it('takes a body in several buffers, for puts and parts', async () => {
      const s = await make()
      const a = randomBytes(3000)
      const b = randomBytes(5000)
      await s.put('chunks', [a, new Uint8Array(0), b])
      assert.deepEqual(Buffer.from(await s.get('chunks')), Buffer.concat([a, b]))
      const id = await s.createMultipart('chunked-mp')
      const p1 = randomBytes(partSize)
      const e1 = await s.uploadPart('chunked-mp', id, 1, [p1.subarray(0, 1000), p1.subarray(1000)])
      const e2 = await s.uploadPart('chunked-mp', id, 2, [a, b])
      await s.completeMultipart('chunked-mp', id, [
        { partNumber: 1, etag: e1.etag },
        { partNumber: 2, etag: e2.etag },
      ])
      assert.deepEqual(Buffer.from(await s.get('chunked-mp')), Buffer.concat([p1, a, b]))
    })

    it('stores empty objects', async () => {
      const s = await make()
      await s.put('empty', new Uint8Array(0))
      assert.equal((await s.get('empty')).byteLength, 0)
      assert.equal((await s.head('empty'))?.size, 0)
    })

    it('a stored object does not change when the caller reuses its buffer', async () => {
      const s = await make()
      const body = Buffer.alloc(100, 1)
      await s.put('k', body)
      body.fill(2)
      assert.deepEqual(Buffer.from(await s.get('k')), Buffer.alloc(100, 1))
    })

    it('reads exact, open-ended and suffix ranges; 416 past the end', async () => {
      const s = await make()
      const body = randomBytes(10_000)
      await s.put('r', body)
      assert.deepEqual(Buffer.from(await s.get('r', { range: { start: 10, end: 20 } })), body.subarray(10, 20))
      assert.deepEqual(Buffer.from(await s.get('r', { range: { start: 9_990, end: 20_000 } })), body.subarray(9_990))
      assert.deepEqual(Buffer.from(await s.get('r', { range: { start: 0, end: 10_000 } })), body)
      assert.deepEqual(Buffer.from(await s.get('r', { range: { suffix: 256 } })), body.subarray(10_000 - 256))
      assert.deepEqual(Buffer.from(await s.get('r', { range: { suffix: 50_000 } })), body)
      await rejectsCode(s.get('r', { range: { start: 10_000, end: 10_001 } }), 'ERR_RANGE')
      await rejectsCode(s.get('r', { range: { start: 20_000, end: 30_000 } }), 'ERR_RANGE')
      await rejectsCode(s.get('r', { range: { start: 5, end: 5 } }), 'ERR_INVALID_ARGUMENT')
    })

    it('ranges of an empty object: a suffix is empty, a start at 0 is ERR_RANGE; a zero suffix ERR_INVALID_ARGUMENT', async () => {
      const s = await make()
      await s.put('empty', new Uint8Array(0))
      assert.equal((await s.get('empty', { range: { suffix: 5 } })).byteLength, 0)
      await rejectsCode(s.get('empty', { range: { start: 0, end: 1 } }), 'ERR_RANGE')
      await rejectsCode(s.get('empty', { range: { start: 3, end: 10 } }), 'ERR_RANGE')
      await s.put('ten', Buffer.alloc(10, 7))
      await rejectsCode(s.get('ten', { range: { suffix: 0 } }), 'ERR_INVALID_ARGUMENT')
      await rejectsCode(s.get('ten', { range: { start: 11, end: 12 } }), 'ERR_RANGE')
      await rejectsCode(s.get('missing', { range: { start: 0, end: 1 } }), 'ERR_NOT_FOUND')
    })

    it('a key that only prefixes others is no object; a prefix may end inside a segment or be a key itself', async () => {
      const s = await make()
      for (const k of ['d/f', 'd/g/h', 'd', 'dd', 'd-']) await s.put(k, Buffer.from(k))
      await s.delete('d')
      assert.equal(await s.head('d/g'), undefined)
      await rejectsCode(s.get('d/g'), 'ERR_NOT_FOUND')
      await s.delete('d/g') // nothing there: no error, and the keys under it stay
      const keys = async (prefix: string, startAfter?: string) =>
        (await collect(s.list(prefix, startAfter === undefined ? {} : { startAfter }))).map((e) => e.key)
      assert.deepEqual(await keys('d'), ['d-', 'd/f', 'd/g/h', 'dd'])
      assert.deepEqual(await keys('d/'), ['d/f', 'd/g/h'])
      assert.deepEqual(await keys('d/g'), ['d/g/h'])
      assert.deepEqual(await keys('d/g/h'), ['d/g/h'])
      assert.deepEqual(await keys('d/', 'd/f'), ['d/g/h'])
      assert.deepEqual(await keys('d/g/'), ['d/g/h'])
      assert.deepEqual(await keys('e'), [])
    })

    it('stores keys with control, XML and space characters, and lists them in byte order', async () => {
      const s = await make()
      const keys = ['a\tb', 'a\nb', 'a\x01b', 'a\x7fb', 'a b ', ' lead', 'x\r', 'a<b>&"\'', 'a\uFFFE']
      for (const k of keys) await s.put(k, Buffer.from(k))
      for (const k of keys) assert.equal(Buffer.from(await s.get(k)).toString(), k, JSON.stringify(k))
      assert.deepEqual(
        (await collect(s.list())).map((e) => e.key),
        [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))),
      )
      await s.delete(keys)
      assert.deepEqual(await collect(s.list()), [])
    })

    // Only for the stores that declare getChunks (the memory store has none).
    if (opts.chunkedGet === true)
      it('getChunks: the bytes and the errors of get, for every kind of range', async () => {
        const s = await make()
        const getChunks = s.getChunks?.bind(s)
        assert.ok(getChunks !== undefined, `${name} has no getChunks`)
        const body = randomBytes(300_000)
        await s.put('r', body)
        await s.put('empty', Buffer.alloc(0))
        const ranges: Array<GetOptions['range']> = [
          undefined,
          { start: 0, end: 1 },
          { start: 65_535, end: 65_537 },
          { start: 1000, end: 299_999 },
          { start: 131_072, end: 400_000 },
          { suffix: 70_000 },
        ]
        for (const range of ranges) {
          const want =
            range === undefined
              ? body
              : 'suffix' in range
                ? body.subarray(-range.suffix)
                : body.subarray(range.start, range.end)
          const chunks = await getChunks('r', { range })
          assert.deepEqual(Buffer.concat(chunks), want, JSON.stringify(range))
        }
        assert.equal(Buffer.concat(await getChunks('empty')).byteLength, 0)
        await rejectsCode(getChunks('r', { range: { start: 300_000, end: 300_001 } }), 'ERR_RANGE')
        await rejectsCode(getChunks('missing'), 'ERR_NOT_FOUND')
      })

    it('create-only: exactly one of 8 concurrent writers wins', async () => {
      const s = await make()
      const bodies = Array.from({ length: 8 }, (_, i) => Buffer.alloc(64, i))
      const results = await Promise.allSettled(bodies.map((b) => s.put('race', b, { ifNoneMatch: '*' })))
      const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []))
      assert.equal(won.length, 1, `winners: ${won.join(',')}`)
      for (const r of results) {
        if (r.status === 'rejected') assert.equal((r.reason as StreamSegmentError).code, 'ERR_CONFLICT')
      }
      assert.deepEqual(Buffer.from(await s.get('race')), bodies[won[0] as number])
    })

    it('if-match: current succeeds, stale and missing conflict', async () => {
      const s = await make()
      const v1 = await s.put('cas', Buffer.from('one'), { ifNoneMatch: '*' })
      await rejectsCode(s.put('cas', Buffer.from('x'), { ifNoneMatch: '*' }), 'ERR_CONFLICT')
      const v2 = await s.put('cas', Buffer.from('two'), { ifMatch: v1.etag })
      assert.notEqual(v2.etag, v1.etag)
      await rejectsCode(s.put('cas', Buffer.from('three'), { ifMatch: v1.etag }), 'ERR_CONFLICT')
      assert.equal(Buffer.from(await s.get('cas')).toString(), 'two')
      await rejectsCode(s.put('nothing-here', Buffer.from('x'), { ifMatch: v1.etag }), 'ERR_CONFLICT')
      // A quoted ETag, as S3 hands them out, works too.
      await s.put('cas', Buffer.from('four'), { ifMatch: `"${v2.etag}"` })
      assert.equal(Buffer.from(await s.get('cas')).toString(), 'four')
    })

    it('refuses a condition it could not check as every store does, before writing anything', async () => {
      const s = await make()
      const { etag } = await s.put('cond', Buffer.from('one'))
      // An empty If-Match is no condition on some servers, '*' matches any object on S3, and
      // what is no entity tag (or no string) cannot be sent: none is a stale ETag.
      const bad: Array<[string, PutOptions, RegExp]> = [
        ['empty If-Match', { ifMatch: '' }, /put cond: ifMatch is empty/],
        ['quoted empty If-Match', { ifMatch: '""' }, /put cond: ifMatch is empty/],
        ["If-Match '*'", { ifMatch: '*' }, /put cond: ifMatch '\*' would match any object/],
        ['If-Match with a quote inside', { ifMatch: 'a"b' }, /put cond: ifMatch "a\\"b" is no entity tag/],
        ['If-Match of a number', { ifMatch: 7 as unknown as string }, /put cond: ifMatch must be a string/],
        ["If-None-Match other than '*'", { ifNoneMatch: 'x' as '*' }, /put cond: ifNoneMatch must be '\*'/],
        ['both conditions', { ifNoneMatch: '*', ifMatch: etag }, /put cond: ifNoneMatch and ifMatch together/],
      ]
      for (const [what, options, message] of bad) {
        await rejectsCode(s.put('cond', Buffer.from('two'), options), 'ERR_INVALID_ARGUMENT', message).catch(
          (err: Error) => assert.fail(`${what}: ${err.message}`),
        )
      }
      await rejectsCode(
        s.createMultipart('cond-mp', { ifNoneMatch: 'x' as '*' }),
        'ERR_INVALID_ARGUMENT',
        /createMultipart cond-mp: ifNoneMatch must be '\*'/,
      )
      const id = await s.createMultipart('cond-copy', { unevenParts: true })
      for (const ifMatch of ['', '*', 'a"b']) {
        const copy = s.uploadPartCopy?.('cond-copy', id, 1, {
          store: s,
          key: 'cond',
          range: { start: 0, end: 1 },
          ifMatch,
        })
        await rejectsCode(copy ?? Promise.reject(new Error('no uploadPartCopy')), 'ERR_INVALID_ARGUMENT', /ifMatch/)
      }
      await s.abortMultipart('cond-copy', id)
      assert.equal(Buffer.from(await s.get('cond')).toString(), 'one')
      assert.equal((await s.head('cond'))?.etag, etag)
      assert.equal(await s.head('cond-mp'), undefined)
      assert.deepEqual(await collect(s.listMultipart()), [])
    })

    it('if-match: exactly one of 8 concurrent writers holding the same ETag wins', async () => {
      const s = await make()
      const { etag } = await s.put('cas-race', Buffer.from('base'))
      const bodies = Array.from({ length: 8 }, (_, i) => Buffer.alloc(64, i))
      const results = await Promise.allSettled(bodies.map((b) => s.put('cas-race', b, { ifMatch: etag })))
      const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []))
      assert.equal(won.length, 1, `winners: ${won.join(',')}`)
      for (const r of results) {
        if (r.status === 'rejected') assert.equal((r.reason as StreamSegmentError).code, 'ERR_CONFLICT')
      }
      const winner = results[won[0] as number] as PromiseFulfilledResult<{ etag: string }>
      assert.deepEqual(Buffer.from(await s.get('cas-race')), bodies[won[0] as number])
      assert.equal((await s.head('cas-race'))?.etag, winner.value.etag)
    })

    it('a replayed conditional put with the same write id succeeds; another id conflicts', async () => {
      const s = await make()
      const first = await s.put('once', Buffer.from('v'), { ifNoneMatch: '*', writeId: 'w-1' })
      const again = await s.put('once', Buffer.from('v'), { ifNoneMatch: '*', writeId: 'w-1' })
      assert.equal(again.etag, first.etag)
      await rejectsCode(s.put('once', Buffer.from('v'), { ifNoneMatch: '*', writeId: 'w-2' }), 'ERR_CONFLICT')
      const next = await s.put('once', Buffer.from('w'), { ifMatch: first.etag, writeId: 'w-3' })
      const replay = await s.put('once', Buffer.from('w'), { ifMatch: first.etag, writeId: 'w-3' })
      assert.equal(replay.etag, next.etag)
      await rejectsCode(s.put('once', Buffer.from('w'), { ifMatch: first.etag, writeId: 'w-4' }), 'ERR_CONFLICT')
    })

    it('keeps metadata', async () => {
      const s = await make()
      await s.put('m', Buffer.from('x'), { metadata: { 'hf-test': 'value 1', other: 'two' } })
      const h = await s.head('m')
      assert.equal(h?.metadata['hf-test'], 'value 1')
      assert.equal(h?.metadata.other, 'two')
    })

    it('refuses a metadata value S3 would not keep as it is, before writing anything', async () => {
      const s = await make()
      await s.put('m', Buffer.from('x'), { metadata: { 'hf-test': 'inner  spaces kept', empty: '' } })
      assert.deepEqual((await s.head('m'))?.metadata, { 'hf-test': 'inner  spaces kept', empty: '' })
      // A space at either end S3 trims; a character no HTTP header carries fails the request
      // (a newline), or its signature (radosgw: an ERR_AUTH naming no metadata).
      for (const value of [' lead', 'trail ', 'caf\u00e9', 'two\nlines', 'tab\there']) {
        const metadata = { 'hf-test': value }
        const why = /metadata "hf-test": value .* is not printable ASCII without a space at either end/
        await rejectsCode(s.put('m', Buffer.from('y'), { metadata }), 'ERR_INVALID_ARGUMENT', why)
        await rejectsCode(s.put('m2', Buffer.from('y'), { metadata, ifNoneMatch: '*' }), 'ERR_INVALID_ARGUMENT', why)
        await rejectsCode(s.createMultipart('mp', { metadata }), 'ERR_INVALID_ARGUMENT', why)
        await rejectsCode(s.createMultipart('mp', { metadata, ifNoneMatch: '*' }), 'ERR_INVALID_ARGUMENT', why)
      }
      assert.equal(Buffer.from(await s.get('m')).toString(), 'x')
      assert.deepEqual(
        (await collect(s.list())).map((e) => e.key),
        ['m'],
      )
      assert.deepEqual(await collect(s.listMultipart()), [])
    })

    it('lists keys in order, relative to the container, past 1000 keys', async () => {
      const s = await make()
      const keys = Array.from({ length: 1105 }, (_, i) => `many/${String(i).padStart(5, '0')}`)
      for (let i = 0; i < keys.length; i += 50) {
        await Promise.all(keys.slice(i, i + 50).map((k) => s.put(k, Buffer.from(k))))
      }
      await s.put('other', Buffer.from('o'))
      const listed = await collect(s.list('many/'))
      assert.equal(listed.length, keys.length)
      assert.deepEqual(
        listed.map((e) => e.key),
        keys,
      )
      assert.equal(listed[7]?.size, keys[7]?.length)
      const all = await collect(s.list())
      assert.equal(all.length, keys.length + 1)
      assert.equal(all.at(-1)?.key, 'other')
      // Taken up after a key (present or not), across the page boundary, with and without a prefix.
      const after = async (prefix: string, startAfter: string) =>
        (await collect(s.list(prefix, { startAfter }))).map((e) => e.key)
      assert.deepEqual(await after('many/', 'many/00100'), keys.slice(101))
      assert.deepEqual(await after('', 'many/00099x'), [...keys.slice(100), 'other'])
      assert.deepEqual(await after('many/', 'a'), keys)
      assert.deepEqual(await after('', 'many/01104'), ['other'])
      assert.deepEqual(await after('many/', 'o'), [])
      await s.delete(keys)
      assert.deepEqual(
        (await collect(s.list())).map((e) => e.key),
        ['other'],
      )
    })

    it('list and listMultipart say when each object was written and each upload created', async () => {
      const s = await make()
      // S3 reports whole seconds: allow a second either side of the calls.
      const before = Date.now() - 1000
      await s.put('t/a', new Uint8Array(10))
      const id = await s.createMultipart('t/b')
      const after = Date.now() + 1000
      const [entry] = await collect(s.list('t/'))
      assert.equal(entry?.key, 't/a')
      assert.ok(entry.lastModifiedMs >= before && entry.lastModifiedMs <= after, `${entry.lastModifiedMs}`)
      const uploads = (await collect(s.listMultipart('t/'))).filter((u) => u.uploadId === id)
      assert.equal(uploads.length, 1)
      const initiated = uploads[0]?.initiatedMs ?? 0
      assert.ok(initiated >= before && initiated <= after, `${initiated}`)
      // The store's clock, when it has one, is the one it dated them by (here, this machine's).
      const now = await s.now?.()
      if (now !== undefined) assert.ok(Math.abs(now - Date.now()) <= 1500, `now() ${now}, this machine ${Date.now()}`)
      await s.abortMultipart('t/b', id)
      await s.delete('t/a')
    })

    it('stores odd keys, and a key beside a key it prefixes', async () => {
      const s = await make()
      const odd = ['a b', 'ümlaut', 'x%2Fy', 'q?x=1&y', 'dir/file', 'dir', 'star*', 'tilde~', 'dot.ted', 'a+b']
      for (const k of odd) await s.put(k, Buffer.from(k))
      for (const k of odd) assert.equal(Buffer.from(await s.get(k)).toString(), k, k)
      assert.deepEqual((await collect(s.list())).map((e) => e.key).sort(), [...odd].sort())
    })

    it('refuses keys that could escape the container', async () => {
      const s = await make()
      for (const k of ['', '../x', 'a/../../b', '/abs', 'a\0b', 'a//b']) {
        await rejectsCode(s.put(k, Buffer.from('x')), 'ERR_INVALID_ARGUMENT')
      }
    })

    it('refuses a bad key the same way on every call that takes one, get and head included, naming it and what is wrong', async () => {
      const s = await make()
      await s.put('dir/ok', Buffer.from('x'))
      // An open upload, so that the multipart calls given a bad key have an upload id to name.
      const id = await s.createMultipart('dir/up')
      const part = await s.uploadPart('dir/up', id, 1, Buffer.from('p'))
      const bad: Array<[string, RegExp]> = [
        ['', /invalid key "": empty/],
        ['../x', /invalid key "\.\.\/x": .*"\.\." segment/],
        ['dir/./ok', /invalid key "dir\/\.\/ok": .*"\." segment/],
        ['/abs', /invalid key "\/abs": .*starts with "\/"/],
        ['a//b', /invalid key "a\/\/b": .*empty segment/],
        ['dir/', /invalid key "dir\/": .*empty segment/],
        ['a\0b', /invalid key "a\\u0000b": .*NUL/],
        ['dir\uD800', /invalid key "dir\\ud800": .*lone surrogate/],
        [`dir/${'\u00E9'.repeat(600)}`, /invalid key "dir\/\u00E9+…": 1204 bytes of UTF-8.*1024/],
      ]
      for (const [k, why] of bad) {
        const calls: Array<[string, () => Promise<unknown>]> = [
          ['get', () => s.get(k)],
          ['head', () => s.head(k)],
          ['put', () => s.put(k, Buffer.from('x'))],
          ['delete', () => s.delete(k)],
          // A batch with a bad key in it deletes none of its keys.
          ['delete of a batch', () => s.delete(['dir/ok', k])],
          ['createMultipart', () => s.createMultipart(k)],
          ['uploadPart', () => s.uploadPart(k, id, 2, Buffer.from('x'))],
          ['completeMultipart', () => s.completeMultipart(k, id, [{ partNumber: 1, etag: part.etag }])],
          ['abortMultipart', () => s.abortMultipart(k, id)],
          ['listParts', () => s.listParts?.(k, id) ?? Promise.resolve()],
          [
            'uploadPartCopy',
            () =>
              s.uploadPartCopy?.(k, id, 2, { store: s, key: 'dir/ok', range: { start: 0, end: 1 } }) ??
              Promise.resolve(),
          ],
        ]
        for (const [call, run] of calls) {
          await rejectsCode(run(), 'ERR_INVALID_ARGUMENT', why).catch((err: Error) => {
            assert.fail(`${call} ${JSON.stringify(k).slice(0, 20)}: ${err.message}`)
          })
        }
      }
      assert.equal((await s.head('dir/ok'))?.size, 1, 'no call with a bad key changed the store')
      await assertOnlyUpload(s, 'dir/up', id, part.etag)
      await s.abortMultipart('dir/up', id)
    })

    it('takes keys of its most UTF-8 bytes in characters of 2, 3 and 4 bytes, and refuses one byte more', async () => {
      const s = await make()
      const most = keyBytes(s)
      for (const ch of ['\u00E9', '\u20AC', '\u{1F600}']) {
        // Segments of at most 81 bytes: a file name holds 255 bytes, 3 for each escaped one.
        const key = (n: number) => {
          const seg = ch.repeat(Math.floor(80 / Buffer.byteLength(ch)))
          let k = ''
          while (Buffer.byteLength(k + seg) + 2 <= n) k += `${seg}/`
          return k + 'x'.repeat(n - Buffer.byteLength(k))
        }
        const atLimit = key(most)
        assert.equal(Buffer.byteLength(atLimit), most)
        assert.ok(atLimit.length < most, 'fewer UTF-16 code units than bytes')
        await s.put(atLimit, Buffer.from(ch))
        assert.equal(Buffer.from(await s.get(atLimit)).toString(), ch)
        assert.equal((await s.head(atLimit))?.size, Buffer.byteLength(ch))
        assert.deepEqual(
          (await collect(s.list(atLimit.slice(0, 10)))).map((e) => e.key),
          [atLimit],
        )
        await s.delete(atLimit)
        assert.equal(await s.head(atLimit), undefined)

        const over = key(most + 1)
        await rejectsCode(s.put(over, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
        await rejectsCode(s.get(over), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
        await rejectsCode(s.head(over), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
        await rejectsCode(s.createMultipart(over), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
        // One segment of under 1024 UTF-16 code units, 1200 to 2000 bytes: refused for its
        // byte count (not by the file system, for a file name too long).
        const one = ch === '\u00E9' ? ch.repeat(1000) : ch.repeat(400)
        await rejectsCode(s.put(one, Buffer.from('x')), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
        await rejectsCode(s.get(one), 'ERR_INVALID_ARGUMENT', /bytes of UTF-8.*1024/)
      }
      assert.deepEqual(await collect(s.list()), [])
    })

    it('refuses keys and listing prefixes that are not well-formed UTF-16: a lone surrogate would name another key', async () => {
      const s = await make()
      for (const k of ['seg\uD800', 'seg\uDC00x', '\uDE00\uD83D', 'dir\uD83D/x']) {
        await rejectsCode(s.put(k, Buffer.from('x')), 'ERR_INVALID_ARGUMENT')
      }
      await s.put('seg\uFFFD', Buffer.from('replacement'))
      await s.put('seg\u{1F600}', Buffer.from('pair'))
      assert.deepEqual((await collect(s.list('seg'))).map((e) => e.key).sort(), ['seg\uFFFD', 'seg\u{1F600}'].sort())
      assert.equal(Buffer.from(await s.get('seg\uFFFD')).toString(), 'replacement')
      // Nor a listing's prefix or startAfter, which would match U+FFFD (or skip every key) here and fail on S3.
      await rejectsCode(
        collect(s.list('seg\uD800')),
        'ERR_INVALID_ARGUMENT',
        /list: prefix .* lone surrogate \(U\+D800\)/,
      )
      await rejectsCode(
        collect(s.list('', { startAfter: 'a\uDC00' })),
        'ERR_INVALID_ARGUMENT',
        /list: startAfter .* lone surrogate \(U\+DC00\)/,
      )
      await rejectsCode(
        collect(s.listMultipart('\uD83Dx')),
        'ERR_INVALID_ARGUMENT',
        /listMultipart: prefix .* lone surrogate/,
      )
      await rejectsCode(
        collect(s.list(7 as unknown as string)),
        'ERR_INVALID_ARGUMENT',
        /list: prefix must be a string/,
      )
    })

    it('lists in the order of the UTF-8 bytes of the keys, as S3 does, and takes up after any of them', async () => {
      const s = await make()
      // As UTF-16 code units U+FF01 sorts after the surrogates of U+1F600; as UTF-8 bytes
      // (EF BC 81 against F0 9F 98 80) before.
      const keys = ['a\uFF01', 'a\u{1F600}', 'a\u{1F600}/x', 'b']
      for (const k of [...keys].reverse()) await s.put(k, Buffer.from(k))
      const list = async (startAfter?: string) =>
        (await collect(s.list('', startAfter === undefined ? {} : { startAfter }))).map((e) => e.key)
      assert.deepEqual(await list(), keys)
      assert.deepEqual(await list('a\uFF01'), keys.slice(1))
      assert.deepEqual(await list('a\u{1F600}'), keys.slice(2))
      assert.deepEqual(await list('a\uFFFD'), keys.slice(1), 'taken up after a key not stored')
    })

    it('multipart: equal non-final parts, complete, list and abort', async () => {
      const s = await make()
      const p1 = randomBytes(partSize)
      const p2 = randomBytes(partSize)
      const p3 = randomBytes(1234)
      const id = await s.createMultipart('mp', { metadata: { 'hf-kind': 'segment' } })
      const other = await s.createMultipart('mp-aborted')
      assert.deepEqual((await collect(s.listMultipart())).map((u) => u.uploadId).sort(), [id, other].sort())
      // Parts may arrive in any order.
      const e3 = await s.uploadPart('mp', id, 3, p3)
      const e1 = await s.uploadPart('mp', id, 1, p1)
      const e2 = await s.uploadPart('mp', id, 2, p2)
      assert.equal(await s.head('mp'), undefined, 'nothing is visible before completion')
      const { etag } = await s.completeMultipart('mp', id, [
        { partNumber: 1, etag: e1.etag },
        { partNumber: 2, etag: e2.etag },
        { partNumber: 3, etag: e3.etag },
      ])
      assert.ok(etag.length > 0)
      assert.deepEqual(Buffer.from(await s.get('mp')), Buffer.concat([p1, p2, p3]))
      assert.equal((await s.head('mp'))?.metadata['hf-kind'], 'segment')
      assert.deepEqual(
        Buffer.from(await s.get('mp', { range: { start: partSize - 10, end: partSize + 10 } })),
        Buffer.concat([p1, p2]).subarray(partSize - 10, partSize + 10),
      )
      await s.uploadPart('mp-aborted', other, 1, randomBytes(100))
      await s.abortMultipart('mp-aborted', other)
      await s.abortMultipart('mp-aborted', other) // twice is fine
      assert.deepEqual(await collect(s.listMultipart()), [])
      assert.equal(await s.head('mp-aborted'), undefined)
      await rejectsCode(s.uploadPart('mp-aborted', other, 2, randomBytes(100)), 'ERR_NOT_FOUND')
    })

    it('multipart with partBytes: parts in any order, one sent again, listed and completed; a bad partBytes refused', async () => {
      const s = await make()
      for (const partBytes of [0, -1, 1.5, 5 * 1024 ** 3 + 1, Number.NaN, '4096' as unknown as number]) {
        await rejectsCode(
          s.createMultipart('pb', { partBytes }),
          'ERR_INVALID_ARGUMENT',
          /createMultipart pb: partBytes must be an integer from 1 to 5368709120/,
        )
      }
      await rejectsCode(
        s.createMultipart('pb', { partBytes: partSize, unevenParts: true }),
        'ERR_INVALID_ARGUMENT',
        /partBytes and unevenParts together/,
      )
      assert.deepEqual(await collect(s.listMultipart()), [], 'a refused create made an upload')
      const p1 = randomBytes(partSize)
      const p2 = randomBytes(partSize)
      const p3 = randomBytes(4321)
      const id = await s.createMultipart('pb', { partBytes: partSize, metadata: { 'hf-kind': 'placed' } })
      const e3 = await s.uploadPart('pb', id, 3, p3)
      const early = await s.uploadPart('pb', id, 2, randomBytes(partSize))
      const e1 = await s.uploadPart('pb', id, 1, [p1.subarray(0, 1000), p1.subarray(1000)])
      const e2 = await s.uploadPart('pb', id, 2, p2) // sent again: replaces the first send
      assert.notEqual(e2.etag, early.etag)
      const md5 = (b: Uint8Array) => createHash('md5').update(b).digest('hex')
      const parts = await s.listParts?.('pb', id)
      assert.deepEqual(
        parts?.map((p) => [p.partNumber, p.size, p.etag, p.md5]),
        [
          [1, partSize, e1.etag, md5(p1)],
          [2, partSize, e2.etag, md5(p2)],
          [3, 4321, e3.etag, md5(p3)],
        ],
      )
      assert.equal(await s.head('pb'), undefined, 'nothing is visible before completion')
      // With the replaced send's ETag: refused (S3 answers InvalidPart, ERR_STORE; the local stores ERR_INVALID_ARGUMENT).
      await assert.rejects(
        s.completeMultipart('pb', id, [
          { partNumber: 1, etag: e1.etag },
          { partNumber: 2, etag: early.etag },
          { partNumber: 3, etag: e3.etag },
        ]),
        (err: StreamSegmentError) => ['ERR_INVALID_ARGUMENT', 'ERR_STORE'].includes(err.code),
      )
      assert.equal(await s.head('pb'), undefined, 'a refused completion made the object')
      await s.completeMultipart('pb', id, [
        { partNumber: 1, etag: e1.etag },
        { partNumber: 2, etag: e2.etag },
        { partNumber: 3, etag: e3.etag },
      ])
      assert.deepEqual(Buffer.from(await s.get('pb')), Buffer.concat([p1, p2, p3]))
      assert.equal((await s.head('pb'))?.metadata['hf-kind'], 'placed')
      assert.deepEqual(await collect(s.listMultipart()), [])
    })

    it('multipart: no parts is ERR_INVALID_ARGUMENT; after completion the upload is gone, and an abort leaves the object', async () => {
      const s = await make()
      const id = await s.createMultipart('done')
      await rejectsCode(s.completeMultipart('done', id, []), 'ERR_INVALID_ARGUMENT')
      // An upload is reached by its key and id together.
      await rejectsCode(s.uploadPart('other', id, 1, Buffer.from('x')), 'ERR_NOT_FOUND')
      const e = await s.uploadPart('done', id, 1, Buffer.from('body'))
      await s.completeMultipart('done', id, [{ partNumber: 1, etag: e.etag }])
      await rejectsCode(s.uploadPart('done', id, 2, Buffer.from('more')), 'ERR_NOT_FOUND')
      await s.abortMultipart('done', id)
      assert.equal(Buffer.from(await s.get('done')).toString(), 'body')
      assert.deepEqual(await collect(s.listMultipart()), [])
      await s.delete(['done', 'done', 'never-there'])
      assert.equal(await s.head('done'), undefined)
    })

    it("multipart: an abort naming another key than the upload's is an abort of no upload: the upload stays", async () => {
      const s = await make()
      const id = await s.createMultipart('keep', { metadata: { 'hf-kind': 'kept' } })
      const body = randomBytes(1000)
      const e = await s.uploadPart('keep', id, 1, body)
      // S3 answers NoSuchUpload, as for an upload id it never made: not an error to an abort.
      await s.abortMultipart('other', id)
      await s.abortMultipart('kee', id) // a prefix of the key is another key too
      await assertOnlyUpload(s, 'keep', id, e.etag)
      await s.completeMultipart('keep', id, [{ partNumber: 1, etag: e.etag }])
      assert.deepEqual(Buffer.from(await s.get('keep')), body)
      assert.equal((await s.head('keep'))?.metadata['hf-kind'], 'kept')
      assert.equal(await s.head('other'), undefined)
    })

    it('multipart: parts listed out of order complete in part-number order, ETags quoted or not; a part listed twice or without its ETag is refused', async () => {
      const s = await make()
      const id = await s.createMultipart('order')
      const body1 = randomBytes(partSize)
      const e1 = await s.uploadPart('order', id, 1, body1)
      const e2 = await s.uploadPart('order', id, 2, Buffer.from('tail'))
      const p1 = { partNumber: 1, etag: e1.etag }
      const p2 = { partNumber: 2, etag: e2.etag }
      await rejectsCode(s.completeMultipart('order', id, [p1, p2, p1]), 'ERR_INVALID_ARGUMENT', /increasing order/)
      assert.equal(await s.head('order'), undefined)
      // A part's ETag is taken quoted too, as S3 answers it in its headers and takes it back.
      for (const etag of ['', 'a b', 'x"y', '""']) {
        await rejectsCode(
          s.completeMultipart('order', id, [{ partNumber: 1, etag }, p2]),
          'ERR_INVALID_ARGUMENT',
          /completeMultipart order: part 1 has etag .*, no entity tag/,
        )
      }
      assert.equal(await s.head('order'), undefined)
      await s.completeMultipart('order', id, [p2, { partNumber: 1, etag: `"${e1.etag}"` }])
      assert.deepEqual(Buffer.from(await s.get('order')), Buffer.concat([body1, Buffer.from('tail')]))
    })

    it('multipart create-only claim: one of 8 concurrent claims wins, and completes', async () => {
      const s = await make()
      const results = await Promise.allSettled(
        Array.from({ length: 8 }, () => s.createMultipart('claimed', { ifNoneMatch: '*' })),
      )
      const won = results.filter((r) => r.status === 'fulfilled')
      assert.equal(won.length, 1)
      for (const r of results) {
        if (r.status === 'rejected') assert.equal((r.reason as StreamSegmentError).code, 'ERR_CONFLICT')
      }
      const id = (won[0] as PromiseFulfilledResult<string>).value
      await rejectsCode(s.put('claimed', Buffer.from('x'), { ifNoneMatch: '*' }), 'ERR_CONFLICT')
      const body = randomBytes(4096)
      const e = await s.uploadPart('claimed', id, 1, body)
      await s.completeMultipart('claimed', id, [{ partNumber: 1, etag: e.etag }])
      assert.deepEqual(Buffer.from(await s.get('claimed')), body)
      await rejectsCode(s.createMultipart('claimed', { ifNoneMatch: '*' }), 'ERR_CONFLICT')
    })

    it('listParts: each part with its size, its ETag and the MD5 of its bytes, in order; ERR_NOT_FOUND after completion', async () => {
      const s = await make()
      assert.ok(s.listParts !== undefined, 'every store lists the parts of an open upload')
      const listParts = s.listParts.bind(s)
      const p1 = randomBytes(partSize)
      const p2 = randomBytes(partSize)
      const p3 = randomBytes(777)
      const id = await s.createMultipart('lp', { ifNoneMatch: '*' })
      assert.deepEqual(await listParts('lp', id), [])
      const e3 = await s.uploadPart('lp', id, 3, p3)
      const e1 = await s.uploadPart('lp', id, 1, [p1.subarray(0, 100), p1.subarray(100)])
      const e2 = await s.uploadPart('lp', id, 2, randomBytes(partSize))
      const replaced = await s.uploadPart('lp', id, 2, p2) // a part sent again replaces the first one
      const md5 = (b: Uint8Array) => createHash('md5').update(b).digest('hex')
      const parts = await listParts('lp', id)
      assert.deepEqual(
        parts.map((p) => [p.partNumber, p.size, p.etag]),
        [
          [1, partSize, e1.etag],
          [2, partSize, replaced.etag],
          [3, 777, e3.etag],
        ],
      )
      assert.notEqual(replaced.etag, e2.etag)
      // Where a store gives an MD5 it is the bytes' (radosgw's ETag is the part's MD5).
      assert.deepEqual(
        parts.map((p) => p.md5),
        [md5(p1), md5(p2), md5(p3)],
      )
      await rejectsCode(listParts('lp', 'no-such-upload-0000-0000-000000000000'), 'ERR_NOT_FOUND')
      await s.completeMultipart('lp', id, [
        { partNumber: 1, etag: e1.etag },
        { partNumber: 2, etag: replaced.etag },
        { partNumber: 3, etag: e3.etag },
      ])
      await rejectsCode(listParts('lp', id), 'ERR_NOT_FOUND')
    })

    it("a create-only claim's placeholder carries the upload's metadata while it is open", async () => {
      const s = await make()
      const id = await s.createMultipart('meta-claim', { ifNoneMatch: '*', metadata: { 'ss-file-size': '12345' } })
      const claim = await s.head('meta-claim')
      assert.equal(claim?.size, 0)
      assert.equal(claim?.metadata['ss-file-size'], '12345')
      const e = await s.uploadPart('meta-claim', id, 1, Buffer.from('done'))
      await s.completeMultipart('meta-claim', id, [{ partNumber: 1, etag: e.etag }])
      const done = await s.head('meta-claim')
      assert.equal(done?.size, 4)
      assert.equal(done?.metadata['ss-file-size'], '12345')
    })

    it("an abort with releaseClaim deletes the claim's placeholder, but never an object that is no longer the claim's; a plain abort leaves it", async () => {
      const s = await make()
      const release = { releaseClaim: true }
      const id = await s.createMultipart('given-up', { ifNoneMatch: '*' })
      await s.uploadPart('given-up', id, 1, Buffer.from('part'))
      assert.equal((await s.head('given-up'))?.size, 0, 'the claim holds the key')
      await s.abortMultipart('given-up', id, release)
      assert.equal(await s.head('given-up'), undefined, 'the placeholder went with the upload')
      assert.deepEqual(await collect(s.listMultipart()), [])
      await s.abortMultipart('given-up', id, release) // twice is fine
      // The key is free again: a later attempt claims it.
      const again = await s.createMultipart('given-up', { ifNoneMatch: '*' })
      await s.abortMultipart('given-up', again, release)
      assert.equal(await s.head('given-up'), undefined)

      // A plain abort (gc's) leaves the placeholder: it marks a number in use.
      const kept = await s.createMultipart('kept', { ifNoneMatch: '*' })
      await s.abortMultipart('kept', kept)
      assert.equal((await s.head('kept'))?.size, 0)
      assert.deepEqual(await collect(s.listMultipart()), [])

      // Completed, the object is no placeholder any more: an abort after it leaves it.
      const done = await s.createMultipart('completed', { ifNoneMatch: '*' })
      const e = await s.uploadPart('completed', done, 1, Buffer.from('body'))
      await s.completeMultipart('completed', done, [{ partNumber: 1, etag: e.etag }])
      await s.abortMultipart('completed', done, release)
      assert.equal(Buffer.from(await s.get('completed')).toString(), 'body')

      // The placeholder deleted (by gc) and the key taken again by another writer, with an
      // empty object of its own or with bytes: neither is this upload's claim.
      for (const body of [Buffer.alloc(0), Buffer.from('theirs')]) {
        const taken = await s.createMultipart('taken', { ifNoneMatch: '*' })
        await s.delete('taken')
        await s.put('taken', body, { ifNoneMatch: '*' })
        await s.abortMultipart('taken', taken, release)
        assert.deepEqual(Buffer.from(await s.get('taken')), body)
        await s.delete('taken')
      }
    })

    it('an aborted signal rejects with ERR_ABORTED', async () => {
      const s = await make()
      const ac = new AbortController()
      ac.abort(new Error('stop'))
      const err = await rejectsCode(s.put('x', Buffer.from('x'), { signal: ac.signal }), 'ERR_ABORTED')
      assert.ok(err.cause !== undefined)
      await rejectsCode(s.get('x', { signal: ac.signal }), 'ERR_ABORTED')
      assert.equal(await s.head('x'), undefined, 'an aborted put writes nothing')
    })

    // A store whose ETag is the file's (inode, size, mtime) fails these: a freed inode number is
    // reused at once, and two writes within one clock tick get the same mtime (see
    // test/store/directory-etag.test.ts for a file system where they do). STORE_ABA_RUNS=1000 for more.
    const ABA_RUNS = Number(process.env.STORE_ABA_RUNS ?? 30)

    it('an If-Match with the ETag of a deleted object conflicts, even when a same-size object took its place at once', async () => {
      const s = await make()
      for (let i = 0; i < ABA_RUNS; i++) {
        const first = await s.put('aba', randomBytes(128))
        await s.delete('aba')
        const second = await s.put('aba', randomBytes(128))
        assert.notEqual(second.etag, first.etag, `run ${i}: a new object has the ETag of the deleted one`)
        await rejectsCode(s.put('aba', randomBytes(128), { ifMatch: first.etag }), 'ERR_CONFLICT')
        assert.equal((await s.head('aba'))?.etag, second.etag, `run ${i}: the stale If-Match replaced the object`)
        await s.delete('aba')
      }
    })

    it('two puts of the same size, back to back, get different ETags', async () => {
      const s = await make()
      const seen = new Set<string>()
      let last = (await s.put('b2b', randomBytes(128))).etag
      seen.add(last)
      for (let i = 0; i < ABA_RUNS; i++) {
        const next = (await s.put('b2b', randomBytes(128))).etag
        assert.ok(!seen.has(next), `run ${i}: ETag ${next} given to an earlier version`)
        assert.equal((await s.head('b2b'))?.etag, next)
        await rejectsCode(s.put('b2b', randomBytes(128), { ifMatch: last }), 'ERR_CONFLICT')
        seen.add(next)
        last = next
      }
    })

    describe('uploadPartCopy', () => {
      /** A source store holding `src` (one part and 12,000 bytes, random), and a destination store. */
      const pair = async () => {
        const from = await make()
        const to = await make()
        assert.ok(to.uploadPartCopy !== undefined && to.canCopyFrom?.(from) === true, `${name} copies parts`)
        const src = randomBytes(partSize + 12_000)
        const { etag } = await from.put('dir/src', src)
        return { from, to, src, etag, copy: to.uploadPartCopy.bind(to) }
      }

      it('copies byte ranges of another object, after an uploaded part, with parts of uneven sizes', async () => {
        const { from, to, src, etag, copy } = await pair()
        const first = randomBytes(partSize)
        const id = await to.createMultipart('out', { unevenParts: true })
        const p1 = await to.uploadPart('out', id, 1, first)
        const p2 = await copy('out', id, 2, { store: from, key: 'dir/src', range: { start: 7, end: partSize + 1007 } })
        const p3 = await copy('out', id, 3, {
          store: from,
          key: 'dir/src',
          range: { start: 100, end: 4196 },
          ifMatch: etag,
        })
        await to.completeMultipart('out', id, [
          { partNumber: 1, etag: p1.etag },
          { partNumber: 2, etag: p2.etag },
          { partNumber: 3, etag: p3.etag },
        ])
        const want = Buffer.concat([first, src.subarray(7, partSize + 1007), src.subarray(100, 4196)])
        assert.deepEqual(Buffer.from(await to.get('out')), want)
        assert.deepEqual(Buffer.from(await from.get('dir/src')), src, 'the source is unchanged')
        // Each copy's answer gives the MD5 of the bytes it copied (what a resume checks them by).
        const md5 = (b: Uint8Array) => createHash('md5').update(b).digest('hex')
        assert.equal(p2.md5, md5(src.subarray(7, partSize + 1007)), 'the MD5 of the first range copied')
        assert.equal(p3.md5, md5(src.subarray(100, 4196)), 'the MD5 of the second range copied')
      })

      it('a copied part of a full-size range is the whole part', async () => {
        const { from, to, src, copy } = await pair()
        const id = await to.createMultipart('whole', { unevenParts: true })
        const p = await copy('whole', id, 1, { store: from, key: 'dir/src', range: { start: 0, end: src.byteLength } })
        await to.completeMultipart('whole', id, [{ partNumber: 1, etag: p.etag }])
        assert.deepEqual(Buffer.from(await to.get('whole')), src)
      })

      it('a range starting or ending past the source is ERR_RANGE; an empty one ERR_INVALID_ARGUMENT', async () => {
        const { from, to, src, copy } = await pair()
        const id = await to.createMultipart('bad', { unevenParts: true })
        await rejectsCode(
          copy('bad', id, 1, {
            store: from,
            key: 'dir/src',
            range: { start: src.byteLength, end: src.byteLength + 10 },
          }),
          'ERR_RANGE',
        )
        await rejectsCode(
          copy('bad', id, 1, { store: from, key: 'dir/src', range: { start: 10, end: src.byteLength + 1 } }),
          'ERR_RANGE',
        )
        await rejectsCode(
          copy('bad', id, 1, { store: from, key: 'dir/src', range: { start: 10, end: 10 } }),
          'ERR_INVALID_ARGUMENT',
        )
        await to.abortMultipart('bad', id)
      })

      it('a bad source key is ERR_INVALID_ARGUMENT naming it, not a missing source', async () => {
        const { from, to, copy } = await pair()
        const id = await to.createMultipart('bk', { unevenParts: true })
        const range = { start: 0, end: 10 }
        await rejectsCode(
          copy('bk', id, 1, { store: from, key: 'dir/../src', range }),
          'ERR_INVALID_ARGUMENT',
          /dir\/\.\.\/src/,
        )
        await to.abortMultipart('bk', id)
      })

      it('a missing source is ERR_NOT_FOUND naming it, with or without If-Match', async () => {
        const { from, to, etag, copy } = await pair()
        const id = await to.createMultipart('nf', { unevenParts: true })
        const range = { start: 0, end: 10 }
        await rejectsCode(copy('nf', id, 1, { store: from, key: 'dir/gone', range }), 'ERR_NOT_FOUND', /dir\/gone/)
        await rejectsCode(
          copy('nf', id, 1, { store: from, key: 'dir/gone', range, ifMatch: etag }),
          'ERR_NOT_FOUND',
          /dir\/gone/,
        )
        await to.abortMultipart('nf', id)
      })

      it('a source whose ETag is not If-Match is ERR_CONFLICT: a replaced object is never copied', async () => {
        const { from, to, etag, copy } = await pair()
        const id = await to.createMultipart('im', { unevenParts: true })
        await from.put('dir/src', randomBytes(100))
        await rejectsCode(
          copy('im', id, 1, { store: from, key: 'dir/src', range: { start: 0, end: 10 }, ifMatch: etag }),
          'ERR_CONFLICT',
        )
        await to.abortMultipart('im', id)
        assert.deepEqual(await collect(to.listMultipart('im')), [])
      })

      it('an upload without unevenParts still refuses non-final parts of different sizes', async () => {
        const { from, to, copy } = await pair()
        const id = await to.createMultipart('even')
        const p1 = await to.uploadPart('even', id, 1, randomBytes(partSize))
        const p2 = await copy('even', id, 2, { store: from, key: 'dir/src', range: { start: 0, end: 12_000 } })
        const p3 = await to.uploadPart('even', id, 3, randomBytes(100))
        const parts = [
          { partNumber: 1, etag: p1.etag },
          { partNumber: 2, etag: p2.etag },
          { partNumber: 3, etag: p3.etag },
        ]
        // S3 itself takes any part of at least 5 MiB but refuses a smaller non-final one.
        await assert.rejects(to.completeMultipart('even', id, parts))
        await to.abortMultipart('even', id)
      })
    })
  })
}
