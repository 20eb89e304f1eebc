/**
 * What every store's failures about an object say first: the object, as the store's URL
 * and its key (`mem://name/k`, `file:///root/k`, `s3://bucket/prefix/k`), so that a message
 * read alone says which store it came from.
 */
import assert from 'node:assert/strict'
import type { ObjectStore } from '../../lib/store/types.js'
import { rejectsCode } from './assert.js'

/** A message that starts with `store`'s URL, then `/key: `. */
export function objectAt(store: ObjectStore, key: string): RegExp {
  return new RegExp(`^${store.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/${key}: `)
}

/**
 * Checks that create-only and if-match puts of `k` that fail, and a completion of `m` whose
 * parts are of unequal sizes, name the object (`store` holds neither key yet).
 */
export async function assertRefusalsNameTheObject(store: ObjectStore): Promise<void> {
  const { etag } = await store.put('k', Buffer.from('v0'))
  const taken = await rejectsCode(store.put('k', Buffer.from('v1'), { ifNoneMatch: '*' }), 'ERR_CONFLICT', /exists/)
  assert.match(taken.message, objectAt(store, 'k'))
  await store.put('k', Buffer.from('v2'))
  const moved = await rejectsCode(store.put('k', Buffer.from('v3'), { ifMatch: etag }), 'ERR_CONFLICT', /put expected/)
  assert.match(moved.message, objectAt(store, 'k'))
  await store.delete('k')
  const gone = await rejectsCode(store.put('k', Buffer.from('v4'), { ifMatch: etag }), 'ERR_CONFLICT', /missing/)
  assert.match(gone.message, objectAt(store, 'k'))
  const id = await store.createMultipart('m')
  const parts = []
  for (const [n, body] of ['one', 'second', '3'].entries()) {
    const { etag } = await store.uploadPart('m', id, n + 1, Buffer.from(body))
    parts.push({ partNumber: n + 1, etag })
  }
  const uneven = await rejectsCode(
    store.completeMultipart('m', id, parts),
    'ERR_INVALID_ARGUMENT',
    /non-final parts must be equal in size/,
  )
  assert.match(uneven.message, objectAt(store, 'm'))
}
