/**
 * The memory store's failures about an object name it as `mem://<name>/<key>`, as the
 * directory store's name its root and key and S3Store's `s3://bucket/key`: a message read
 * alone says which store it came from.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode } from '../helpers/assert.js'
import { assertRefusalsNameTheObject, objectAt } from '../helpers/store-messages.js'

describe('memory store: what its failures name', () => {
  it('create-only and if-match puts that fail, and a completion of parts of unequal sizes, name the object', async () => {
    const store = new MemoryStore('messages-conditions')
    await assertRefusalsNameTheObject(store)
    // A claimed multipart upload (createMultipart ifNoneMatch) of a key taken.
    await store.put('c', Buffer.from('taken'))
    const claimed = await rejectsCode(store.createMultipart('c', { ifNoneMatch: '*' }), 'ERR_CONFLICT', /exists/)
    assert.match(claimed.message, objectAt(store, 'c'))
  })

  it('a private store (no name) names its objects mem:///key', async () => {
    const store = new MemoryStore()
    await store.put('k', Buffer.from('v0'))
    const taken = await rejectsCode(store.put('k', Buffer.from('v1'), { ifNoneMatch: '*' }), 'ERR_CONFLICT')
    assert.match(taken.message, /^mem:\/\/\/k: exists/)
  })

  it('a completion with a part never uploaded, or a last part larger than the others, names the object', async () => {
    const store = new MemoryStore('messages-multipart')
    const id = await store.createMultipart('m')
    const p1 = await store.uploadPart('m', id, 1, Buffer.from('one'))
    const stale = await rejectsCode(
      store.completeMultipart('m', id, [
        { partNumber: 1, etag: p1.etag },
        { partNumber: 2, etag: '"0-0-0"' },
      ]),
      'ERR_INVALID_ARGUMENT',
      /part 2 with etag "0-0-0" was not uploaded/,
    )
    assert.match(stale.message, objectAt(store, 'm'))
    const larger = await store.createMultipart('l')
    const q1 = await store.uploadPart('l', larger, 1, Buffer.from('one'))
    const q2 = await store.uploadPart('l', larger, 2, Buffer.from('longer'))
    const last = await rejectsCode(
      store.completeMultipart('l', larger, [
        { partNumber: 1, etag: q1.etag },
        { partNumber: 2, etag: q2.etag },
      ]),
      'ERR_INVALID_ARGUMENT',
      /final part \(6 bytes\) is larger/,
    )
    assert.match(last.message, objectAt(store, 'l'))
  })

  it('its other failures about an object name it as well', async () => {
    const store = new MemoryStore('messages-others')
    await rejectsCode(store.get('none'), 'ERR_NOT_FOUND', objectAt(store, 'none'))
    await store.put('k', Buffer.from('four'))
    await rejectsCode(store.get('k', { range: { start: 9, end: 10 } }), 'ERR_RANGE', objectAt(store, 'k'))
    await rejectsCode(
      store.uploadPart('m', 'no-such-upload', 1, Buffer.from('x')),
      'ERR_NOT_FOUND',
      objectAt(store, 'm'),
    )
    await rejectsCode(store.listParts('m', 'no-such-upload'), 'ERR_NOT_FOUND', objectAt(store, 'm'))
    await rejectsCode(
      store.completeMultipart('m', 'no-such-upload', [{ partNumber: 1, etag: 'e' }]),
      'ERR_NOT_FOUND',
      objectAt(store, 'm'),
    )
    const id = await store.createMultipart('m')
    const copy = (source: Parameters<MemoryStore['uploadPartCopy']>[3]) => store.uploadPartCopy('m', id, 1, source)
    await rejectsCode(
      copy({ store, key: 'none', range: { start: 0, end: 1 } }),
      'ERR_NOT_FOUND',
      objectAt(store, 'none'),
    )
    await rejectsCode(copy({ store, key: 'k', range: { start: 0, end: 9 } }), 'ERR_RANGE', objectAt(store, 'k'))
    await rejectsCode(
      copy({ store, key: 'k', range: { start: 0, end: 1 }, ifMatch: '"stale"' }),
      'ERR_CONFLICT',
      objectAt(store, 'k'),
    )
  })
})
