/**
 * The fault proxy names each request's S3 operation as the server takes it: a PUT of a
 * part with x-amz-copy-source is UploadPartCopy, without it UploadPart. Tests match
 * faults and counts on these names, so a copy taken for a part sent (or the reverse)
 * would put a fault on the wrong request. Checked against the fake S3 server, which
 * tells them apart by the same header, behind the proxy.
 */
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { copyStore } from './containers.js'
import { type FakeS3, startFakeS3, testS3Store } from './fake-s3.js'
import { type FaultProxy, s3Op, startFaultProxy } from './fault-proxy.js'
import { pattern } from './pattern.js'

const MiB = 1024 * 1024

describe('fault proxy: s3Op', () => {
  const q = (s: string) => new URLSearchParams(s)

  it('a PUT with an uploadId is UploadPartCopy with x-amz-copy-source, else UploadPart', () => {
    assert.equal(s3Op('PUT', 'k', q('partNumber=1&uploadId=u'), true), 'UploadPartCopy')
    assert.equal(s3Op('PUT', 'k', q('partNumber=1&uploadId=u'), false), 'UploadPart')
    assert.equal(s3Op('PUT', 'k', q('partNumber=1&uploadId=u')), 'UploadPart')
  })

  it('a PUT of an object is CopyObject with x-amz-copy-source, else PutObject', () => {
    assert.equal(s3Op('PUT', 'k', q(''), true), 'CopyObject')
    assert.equal(s3Op('PUT', 'k', q(''), false), 'PutObject')
  })
})

describe('fault proxy: in front of the fake S3', () => {
  let s3: FakeS3 | undefined
  let proxy: FaultProxy | undefined
  after(async () => {
    await proxy?.close()
    await s3?.close()
  })

  it('an export of copied and sent parts: the proxy counts UploadPartCopy and UploadPart as the server does', async () => {
    // 23 MiB, then 1 MiB at 8 MiB written again: runs long enough to copy, and a patch to send.
    const source = new MemoryStore('fault-proxy')
    const f = await SegmentFile.create(source)
    await f.write(0, pattern(0, 23 * MiB, 3))
    await f.flush()
    await f.write(8 * MiB, pattern(8 * MiB, MiB, 4))
    await f.flush()
    await f.close()
    s3 = await startFakeS3()
    proxy = await startFaultProxy({ target: s3.url })
    const store = testS3Store(proxy.url)
    await copyStore(source, store)
    const r = await exportObject(store, { store: testS3Store(proxy.url, { prefix: 'out' }), key: 'x.bin' })
    assert.ok(r.copyParts > 0 && r.parts > r.copyParts, `${r.copyParts} of ${r.parts} parts copied`)
    const { byOp } = proxy.stats()
    assert.equal(byOp.UploadPartCopy, s3.count('UploadPartCopy'), 'copies')
    assert.equal(byOp.UploadPart, s3.count('UploadPart'), 'parts sent')
    assert.equal(byOp.UploadPartCopy, r.copyParts)
    assert.equal(byOp.UploadPart, r.parts - r.copyParts)
  })
})
