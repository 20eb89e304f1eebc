import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
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

describe('DirectoryStore.list', () => {
  it('passes over files whose names it would not write for any key (a %-escape where none is needed)', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-dir-'))
    const store = new DirectoryStore(root)
    await store.put('0000000001.0', Buffer.from('a'))
    await store.put('sub/odd name', Buffer.from('b'))
    // Decoded, these name keys whose files are elsewhere ('0000000004.0', 'x', 'sub/odd name').
    writeFileSync(join(root, '0000000004%2E0'), 'not a key of this store')
    writeFileSync(join(root, '%78'), 'not a key of this store')
    mkdirSync(join(root, '%73ub%2F'))
    writeFileSync(join(root, '%73ub%2F', 'y'), 'not a key of this store')
    const keys: string[] = []
    for await (const e of store.list()) keys.push(e.key)
    assert.deepEqual(keys, ['0000000001.0', 'sub/odd name'])
    for (const k of keys) assert.ok(await store.head(k), `${k} is there`)
  })

  it('passes over names that decode to no key segment: a file in a folder’s place, `.`, `..`, a NUL', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ss-dir-'))
    const store = new DirectoryStore(root)
    await store.put('sub/k', Buffer.from('b'))
    // Decoded, these would be listed as 'f/', 'sub/.', 'sub/..', 'n\0', 'd//x': keys no call takes.
    writeFileSync(join(root, 'f%2F'), 'a file where a key’s folder would be')
    writeFileSync(join(root, 'sub%2F', '%2E'), 'not a key of this store')
    writeFileSync(join(root, 'sub%2F', '%2E.'), 'not a key of this store')
    writeFileSync(join(root, 'n%00'), 'not a key of this store')
    mkdirSync(join(root, 'd%2F%2F'))
    writeFileSync(join(root, 'd%2F%2F', 'x'), 'not a key of this store')
    const keys: string[] = []
    for await (const e of store.list()) keys.push(e.key)
    assert.deepEqual(keys, ['sub/k'])
  })
})
