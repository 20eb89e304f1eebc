/**
 * Export never writes into the container it reads: a target naming the container's inode
 * or one of its segment keys is refused before anything is read, however the target names
 * it — the container's own store, or a store on the same bucket at an outer prefix (the
 * bucket's root) with the container's prefix in the key.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { rejectsCode } from '../helpers/assert.js'
import { fakeS3Servers, fakeS3Store } from '../helpers/fake-s3.js'
import { pattern } from '../helpers/pattern.js'

const fake = fakeS3Servers()

describe('export into its own container on S3', () => {
  it('a store target at the bucket root or an outer prefix, its key inside the container: refused, nothing written', async () => {
    const s3 = await fake()
    const store = fakeS3Store(s3) // s3://bucket/p
    const f = await SegmentFile.create(store)
    await f.write(0, pattern(0, 10_000, 1))
    await f.flush()
    await f.close()
    const digest = () =>
      [...s3.objects].map(([k, o]) => `${k} ${createHash('sha256').update(o.body).digest('hex')}`).sort()
    const before = digest()
    const root = fakeS3Store(s3, { prefix: '' })
    for (const key of ['p/inode', 'p/0000000001.0', 'p/0000000007.3']) {
      await rejectsCode(exportObject(store, { store: root, key }), 'ERR_INVALID_ARGUMENT', /the container's own/)
    }
    assert.deepEqual(digest(), before)
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.ok(Buffer.from(await r.read(0, r.size)).equals(pattern(0, 10_000, 1)))
    await r.close()
    // Beside the container, or a key of it that is not the container's: a plain object.
    await exportObject(store, { store: root, key: 'p/export.bin' })
    await exportObject(store, { store: root, key: 'q/inode' })
    assert.equal(s3.objects.get('p/export.bin')?.body.length, 10_000)
  })
})
