/**
 * A directory store's folder copied (`cp -a`, rsync, a restore from backup): every object
 * file gets a new inode number, while the sidecars in `.ss-meta` keep the names of the old
 * ones. A copied object whose new number names another object's sidecar must take
 * neither that object's ETag nor its metadata (its write id included): it is then as an
 * object written before sidecars, with an ETag made of its file.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { promisify } from 'node:util'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'
import { legacyEtag } from '../helpers/directory-store.js'

const run = async (cmd: string, args: string[]) => void (await promisify(execFile)(cmd, args))
const ino = async (s: DirectoryStore, key: string) => (await fs.stat(s.pathOf(key))).ino
const sidecar = (root: string, n: number) => join(root, '.ss-meta', String(n))

describe('directory store: a copied store folder', () => {
  it("an object whose inode number names another object's sidecar takes neither its ETag nor its metadata", async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-copied-'))
    const s = new DirectoryStore(root)
    const a = await s.put('a', Buffer.from('object a'), { ifNoneMatch: '*', writeId: 'w-a', metadata: { kind: 'a' } })
    await s.put('b', Buffer.from('object b'), { metadata: { kind: 'b' } })
    // As a copy that gave b the number a had: a's sidecar is named by b's number.
    await fs.rename(sidecar(root, await ino(s, 'a')), sidecar(root, await ino(s, 'b')))

    const bSt = await fs.stat(s.pathOf('b'))
    const h = await s.head('b')
    assert.notEqual(h?.etag, a.etag, "head of b gives a's ETag")
    assert.deepEqual(h?.metadata, {}, "head of b gives a's metadata")
    assert.equal(h?.etag, legacyEtag(bSt))
    assert.equal((await collect(s.list('b'))).at(0)?.etag, legacyEtag(bSt), "list gives b a's ETag")
    // a, whose sidecar is gone, is as an object written before sidecars.
    assert.deepEqual(await s.head('a'), { size: 8, etag: legacyEtag(await fs.stat(s.pathOf('a'))), metadata: {} })

    // Nothing takes a's ETag or write id for b's: not a copy's If-Match, a put's, nor a replay.
    const id = await s.createMultipart('c')
    const source = { store: s, key: 'b', range: { start: 0, end: 8 }, ifMatch: a.etag }
    await rejectsCode(s.uploadPartCopy('c', id, 1, source), 'ERR_CONFLICT', /etag is .*, copy expected/)
    await s.abortMultipart('c', id)
    await rejectsCode(s.put('b', Buffer.from('stale'), { ifMatch: a.etag }), 'ERR_CONFLICT')
    await rejectsCode(s.put('b', Buffer.from('object b'), { ifNoneMatch: '*', writeId: 'w-a' }), 'ERR_CONFLICT')
    assert.equal(Buffer.from(await s.get('b')).toString(), 'object b')

    // Its own ETag still swaps it; the new version has a sidecar of its own.
    const next = await s.put('b', Buffer.from('object B'), {
      ifMatch: legacyEtag(bSt),
      writeId: 'w-b',
      metadata: { kind: 'B' },
    })
    assert.deepEqual(await s.head('b'), { size: 8, etag: next.etag, metadata: { kind: 'B', 'hf-write': 'w-b' } })
  })

  it("a sidecar with the file's size and mtime but recorded for another key is not the file's (timestamps a tick wide)", async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-copied-'))
    const s = new DirectoryStore(root)
    const a = await s.put('a', Buffer.from('same size'), { metadata: { kind: 'a' } })
    await s.put('b', Buffer.from('same-size'), { metadata: { kind: 'b' } })
    const aRecord = JSON.parse(await fs.readFile(sidecar(root, await ino(s, 'a')), 'utf8')) as Record<string, string>
    const bRecord = JSON.parse(await fs.readFile(sidecar(root, await ino(s, 'b')), 'utf8')) as Record<string, string>
    // a's sidecar, with b's file's size and mtime, as two objects written in one tick of a
    // file system's clock have them, named by b's number.
    const forged: Record<string, string | undefined> = {
      ...aRecord,
      'ss:size': bRecord['ss:size'],
      'ss:mtime': bRecord['ss:mtime'],
    }
    assert.equal(forged['ss:key'], 'a', "the sidecar records its object's key")
    await fs.writeFile(sidecar(root, await ino(s, 'b')), JSON.stringify(forged))
    const h = await s.head('b')
    assert.notEqual(h?.etag, a.etag)
    assert.deepEqual(h?.metadata, {})
  })

  it('copied (cp -a, fs.cp), no object gives another object’s ETag or metadata; its own sidecar only with its exact mtime', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-copied-'))
    const s = new DirectoryStore(root)
    const keys = ['x', 'y', 'dir/z']
    const written = new Map<string, string>()
    for (const k of keys) written.set(k, (await s.put(k, Buffer.from('eight by'), { metadata: { kind: k } })).etag)
    const oldIno = new Map(await Promise.all(keys.map(async (k) => [k, await ino(s, k)] as const)))

    // `cp -a` keeps mtimes to the nanosecond; fs.cp to about the millisecond, or not at all.
    const copies: Array<[string, (to: string) => Promise<void>, boolean]> = [
      ['cp -a', (to) => run('cp', ['-a', `${root}/.`, to]), true],
      ['fs.cp, timestamps preserved', (to) => fs.cp(root, to, { recursive: true, preserveTimestamps: true }), false],
      ['fs.cp', (to) => fs.cp(root, to, { recursive: true }), false],
    ]
    for (const [how, copyTo, exact] of copies) {
      const copy = await fs.mkdtemp(join(tmpdir(), 'ss-copied-to-'))
      await copyTo(copy)
      const c = new DirectoryStore(copy)
      for (const [k, etag] of written) assert.ok(await c.head(k), `${k} copied (${etag})`)
      // What a copy does when numbers happen to meet, for each object: its new number names
      // the next object's sidecar; or, the luckiest copy, its own one.
      await fs.rm(join(copy, '.ss-meta'), { recursive: true })
      await fs.mkdir(join(copy, '.ss-meta'))
      for (const [i, k] of keys.entries()) {
        const other = keys[(i + 1) % keys.length] as string
        await fs.copyFile(sidecar(root, oldIno.get(other) as number), sidecar(copy, await ino(c, k)))
      }
      for (const k of keys) {
        const h = await c.head(k)
        assert.equal(h?.etag, legacyEtag(await fs.stat(c.pathOf(k))), `${k}, copied by ${how}: an ETag of its file`)
        assert.deepEqual(h?.metadata, {}, `${k}, copied by ${how}: no metadata of another object's`)
      }
      for (const k of keys) await fs.copyFile(sidecar(root, oldIno.get(k) as number), sidecar(copy, await ino(c, k)))
      for (const k of keys) {
        // A sidecar is its file's while the file's size and mtime are those recorded.
        const want = exact
          ? { size: 8, etag: written.get(k), metadata: { kind: k } }
          : { size: 8, etag: legacyEtag(await fs.stat(c.pathOf(k))), metadata: {} }
        assert.deepEqual(await c.head(k), want, `${k}, copied by ${how}`)
      }
    }
  })

  it('copied by cp -a: objects keep bytes and keys, lose ETags and metadata; a claimed upload copied open cannot complete', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-copied-'))
    const s = new DirectoryStore(root)
    const obj = await s.put('obj', Buffer.from('bytes'), {
      ifNoneMatch: '*',
      writeId: 'w-obj',
      metadata: { kind: 'k' },
    })
    const id = await s.createMultipart('up', { ifNoneMatch: '*', metadata: { 'ss-file-size': '10' } })
    const part = await s.uploadPart('up', id, 1, Buffer.from('part'))
    const copy = await fs.mkdtemp(join(tmpdir(), 'ss-copied-to-'))
    await run('cp', ['-a', `${root}/.`, copy])
    const c = new DirectoryStore(copy)

    assert.equal(Buffer.from(await c.get('obj')).toString(), 'bytes')
    const h = await c.head('obj')
    assert.deepEqual(h, { size: 5, etag: legacyEtag(await fs.stat(c.pathOf('obj'))), metadata: {} })
    await rejectsCode(c.put('obj', Buffer.from('next'), { ifMatch: obj.etag }), 'ERR_CONFLICT')
    await rejectsCode(c.put('obj', Buffer.from('bytes'), { ifNoneMatch: '*', writeId: 'w-obj' }), 'ERR_CONFLICT')
    // The open upload is copied, its parts with new ETags, its placeholder without the metadata.
    assert.deepEqual(
      (await collect(c.listMultipart())).map((u) => [u.key, u.uploadId]),
      [['up', id]],
    )
    assert.deepEqual((await c.head('up'))?.metadata, {})
    await rejectsCode(
      c.completeMultipart('up', id, [{ partNumber: 1, etag: part.etag }]),
      'ERR_INVALID_ARGUMENT',
      /was not uploaded/,
    )
    const [listed] = await c.listParts('up', id)
    assert.notEqual(listed?.etag, part.etag)
    await rejectsCode(
      c.completeMultipart('up', id, [{ partNumber: 1, etag: listed?.etag as string }]),
      'ERR_CONFLICT',
      /claimed by another writer/,
    )
    // The original store is as it was.
    assert.deepEqual(await s.head('obj'), { size: 5, etag: obj.etag, metadata: { kind: 'k', 'hf-write': 'w-obj' } })
  })

  it('a sidecar that records no file (as older versions wrote them) is still the object’s', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-copied-'))
    const s = new DirectoryStore(root)
    await s.put('made', Buffer.from('makes the store folders'))
    await fs.writeFile(s.pathOf('old'), Buffer.from('old object'))
    const etag = 'a'.repeat(32)
    await fs.writeFile(sidecar(root, await ino(s, 'old')), JSON.stringify({ 'ss:etag': etag, 'hf-write': 'w-old' }))
    assert.deepEqual(await s.head('old'), { size: 10, etag, metadata: { 'hf-write': 'w-old' } })
    const replay = await s.put('old', Buffer.from('old object'), { ifNoneMatch: '*', writeId: 'w-old' })
    assert.equal(replay.etag, etag)
  })
})
