/**
 * A multipart upload has at most 10000 pieces (S3's limit): settings whose largest object
 * needs more pieces of segmentMpuChunkSize are refused when they are resolved, not by
 * every flush that makes such an object.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { resolveSettings } from '../../lib/settings.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { rejectsCode, throwsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'

const KiB = 1024
const MiB = 1024 * KiB

describe('segmentMaxObjectBytes within 10000 pieces of segmentMpuChunkSize', () => {
  it('small pieces with the default largest object (1 GiB) are refused, naming both settings and the ways out', () => {
    throwsCode(
      () => resolveSettings({ segmentMpuChunkSize: 4 * KiB }),
      'ERR_INVALID_ARGUMENT',
      'setting segmentMaxObjectBytes = 1073741824',
      'more than 10000 pieces of segmentMpuChunkSize (4096 bytes)',
      'segmentMaxObjectBytes at most 40960000',
      // 1 GiB / 10000 = 107374.2, rounded up to a whole 4 KiB block
      'segmentMpuChunkSize at least 110592',
    )
    throwsCode(
      () => resolveSettings({ segmentMpuChunkSize: 64 * KiB, dataBlockSize: 64 * KiB }),
      'ERR_INVALID_ARGUMENT',
      'segmentMpuChunkSize at least 131072',
    )
  })

  it('exactly 10000 pieces is taken; one byte more is not', () => {
    const s = resolveSettings({ segmentMpuChunkSize: 4 * KiB, segmentMaxObjectBytes: 10_000 * 4 * KiB })
    assert.equal(s.segmentMaxObjectBytes, 40_960_000)
    throwsCode(
      () => resolveSettings({ segmentMpuChunkSize: 4 * KiB, segmentMaxObjectBytes: 10_000 * 4 * KiB + 1 }),
      'ERR_INVALID_ARGUMENT',
      'segmentMaxObjectBytes = 40960001',
    )
    assert.equal(resolveSettings({ segmentMpuChunkSize: 108 * KiB }).segmentMpuChunkSize, 108 * KiB)
    assert.equal(resolveSettings({}).segmentMpuChunkSize, 16 * MiB) // the defaults fit
  })

  for (const format of ['stream', 'parted'] as const) {
    it(`${format}: a file is refused at create, before any request, not at its flush`, async () => {
      const store = new MemoryStore(`pieces-${format}`)
      await rejectsCode(
        SegmentFile.create(store, { format, segmentMpuChunkSize: 4 * KiB }),
        'ERR_INVALID_ARGUMENT',
        /segmentMaxObjectBytes = 1073741824: .*10000 pieces/,
      )
      const keys: string[] = []
      for await (const e of store.list('')) keys.push(e.key)
      assert.deepEqual(keys, [])
      // Within the limit, small pieces work: part 0 goes up in some 65 pieces.
      const f = await SegmentFile.create(store, {
        format,
        segmentMpuChunkSize: 4 * KiB,
        segmentMaxObjectBytes: 4 * MiB,
      })
      const data = pattern(0, 256 * KiB, 3)
      await f.write(0, data)
      await f.flush()
      await f.close()
      const r = await SegmentFile.open(store, { readOnly: true })
      assert.deepEqual(Buffer.from(await r.read(0, r.size)), data)
      await r.close()
    })
  }
})
