import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { runStoreConformance } from './conformance.js'

runStoreConformance('memory', async () => new MemoryStore())
runStoreConformance('directory', async () => new DirectoryStore(mkdtempSync(join(tmpdir(), 'ss-dir-'))), {
  chunkedGet: true,
})

describe('DirectoryStore.getChunks', () => {
  it('reads 64 KiB pieces, the last one shorter, over more pieces than one readv takes', async () => {
    const store = new DirectoryStore(mkdtempSync(join(tmpdir(), 'ss-dir-')))
    const piece = 64 * 1024
    // 1024 pieces is the most one readv fills: 1100 take two calls.
    const body = Buffer.allocUnsafe(1100 * piece)
    for (let i = 0; i < body.length; i += 4) body.writeUInt32LE(i, i)
    await store.put('big', body)
    for (const [start, end] of [
      [0, body.length],
      [12_345, body.length - 7],
      [piece - 1, piece + 1],
    ] as const) {
      const chunks = await store.getChunks('big', { range: { start, end } })
      const n = Math.ceil((end - start) / piece)
      assert.deepEqual(
        chunks.map((c) => c.byteLength),
        [...Array(n - 1).fill(piece), end - start - (n - 1) * piece],
        `[${start}, ${end})`,
      )
      assert.ok(Buffer.concat(chunks).equals(body.subarray(start, end)), `[${start}, ${end})`)
    }
    assert.ok(Buffer.from(await store.get('big')).equals(body), 'get: the same bytes in one buffer')
  })
})
