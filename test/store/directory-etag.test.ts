/**
 * The directory store's ETags. On ext4 made with 128-byte inodes, timestamps are whole
 * seconds and a freed inode number goes to the next new file, so an ETag made of the
 * file's (inode, size, mtime) repeats: a stale If-Match then succeeds. The whole
 * conformance suite runs on such a file system (a loop-mounted image: this needs root,
 * mkfs.ext4 and a loop device). Then: objects written by the older version keep the ETag
 * they had until rewritten, and no sidecar or temporary file outlives its object.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'
import { legacyEtag } from '../helpers/directory-store.js'
import { runStoreConformance } from './conformance.js'

const MiB = 1024 * 1024
const base = mkdtempSync(join(tmpdir(), 'ss-coarse-'))
const mnt = join(base, 'mnt')
const PATH = `${process.env.PATH ?? ''}:/usr/sbin:/sbin`
let mounted = false

before(() => {
  const image = join(base, 'ext4-128.img')
  const fd = openSync(image, 'w')
  ftruncateSync(fd, 256 * MiB)
  closeSync(fd)
  execFileSync('mkfs.ext4', ['-q', '-F', '-I', '128', image], { stdio: 'pipe', env: { ...process.env, PATH } })
  mkdirSync(mnt)
  execFileSync('mount', ['-o', 'loop', image, mnt], { stdio: 'pipe', env: { ...process.env, PATH } })
  mounted = true
})

after(() => {
  if (mounted) execFileSync('umount', [mnt], { stdio: 'pipe', env: { ...process.env, PATH } })
  rmSync(base, { recursive: true, force: true })
})

let stores = 0
runStoreConformance('directory on ext4 with whole-second timestamps', async () => {
  // The premise: this file system does repeat (inode, size, mtime).
  if (stores++ === 0) await assertCoarse(join(mnt, 'probe'))
  return new DirectoryStore(await fs.mkdtemp(join(mnt, 'c-')))
})

/** Two files written in turn in one second get the same inode number and mtime here. */
async function assertCoarse(path: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await fs.writeFile(path, randomBytes(128))
    const a = await fs.stat(path)
    await fs.rm(path)
    await fs.writeFile(path, randomBytes(128))
    const b = await fs.stat(path)
    await fs.rm(path)
    if (a.ino === b.ino && a.mtimeMs === b.mtimeMs) return
  }
  assert.fail('the test file system does not reuse inode numbers within one mtime tick')
}

describe('directory store: ETags', () => {
  it('put, head and list give the same ETag: 128 random bits, a new one for every write', async () => {
    const s = new DirectoryStore(await fs.mkdtemp(join(tmpdir(), 'ss-etag-')))
    const etags = new Set<string>()
    for (let i = 0; i < 20; i++) {
      const key = `k/${i % 4}`
      const current = await s.head(key)
      const options = current === undefined ? { ifNoneMatch: '*' as const } : i % 2 ? { ifMatch: current.etag } : {}
      const { etag } = await s.put(key, randomBytes(128), options)
      assert.match(etag, /^[0-9a-f]{32}$/)
      assert.ok(!etags.has(etag))
      etags.add(etag)
      assert.equal((await s.head(key))?.etag, etag)
      assert.equal((await collect(s.list('k/'))).find((e) => e.key === key)?.etag, etag)
    }
    const id = await s.createMultipart('mp', { ifNoneMatch: '*' })
    const part = await s.uploadPart('mp', id, 1, randomBytes(1000))
    const { etag } = await s.completeMultipart('mp', id, [{ partNumber: 1, etag: part.etag }])
    assert.match(etag, /^[0-9a-f]{32}$/)
    assert.equal((await s.head('mp'))?.etag, etag)
  })

  it('an object written by the older version keeps its ETag and metadata until it is rewritten', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-etag-'))
    const s = new DirectoryStore(root)
    await s.put('other', Buffer.from('makes the store folders'))
    // As the older version left them: the object's bytes, and a sidecar by inode number with
    // its metadata only (none at all when it had no metadata).
    await fs.writeFile(s.pathOf('plain'), Buffer.from('old plain'))
    await fs.writeFile(s.pathOf('inode'), Buffer.from('old inode'))
    const inodeSt = await fs.stat(s.pathOf('inode'))
    await fs.writeFile(join(root, '.ss-meta', String(inodeSt.ino)), JSON.stringify({ 'hf-write': 'w-old' }))

    const plainSt = await fs.stat(s.pathOf('plain'))
    const old = legacyEtag(plainSt)
    assert.equal((await s.head('plain'))?.etag, old)
    assert.equal((await collect(s.list('plain'))).at(0)?.etag, old)
    const h = await s.head('inode')
    assert.equal(h?.etag, legacyEtag(inodeSt))
    assert.deepEqual(h?.metadata, { 'hf-write': 'w-old' })

    // The write that landed before, replayed, is recognised by its write id.
    const replay = await s.put('inode', Buffer.from('old inode'), { ifNoneMatch: '*', writeId: 'w-old' })
    assert.equal(replay.etag, legacyEtag(inodeSt))

    // If-Match with the old ETag replaces it once; the new version has a new-style ETag.
    const next = await s.put('plain', Buffer.from('new plain'), { ifMatch: old })
    assert.match(next.etag, /^[0-9a-f]{32}$/)
    assert.equal((await s.head('plain'))?.etag, next.etag)
    await rejectsCode(s.put('plain', Buffer.from('stale'), { ifMatch: old }), 'ERR_CONFLICT')
    const inode2 = await s.put('inode', Buffer.from('new inode'), { ifMatch: `"${legacyEtag(inodeSt)}"` })
    assert.notEqual((await s.head('inode'))?.metadata['hf-write'], 'w-old')
    assert.equal((await s.head('inode'))?.etag, inode2.etag)
    // The old sidecar went with the version it described.
    await assert.rejects(fs.stat(join(root, '.ss-meta', String(inodeSt.ino))), { code: 'ENOENT' })
  })

  it('no sidecar or temporary file outlives its object, whatever the put', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-etag-'))
    const s = new DirectoryStore(root)
    const a = await s.put('a', randomBytes(100), { ifNoneMatch: '*', writeId: 'w-a' })
    await rejectsCode(s.put('a', randomBytes(100), { ifNoneMatch: '*' }), 'ERR_CONFLICT')
    await s.put('a', randomBytes(100), { ifNoneMatch: '*', writeId: 'w-a' }) // replayed
    await rejectsCode(s.put('a', randomBytes(100), { ifMatch: 'nope' }), 'ERR_CONFLICT')
    const a2 = await s.put('a', randomBytes(100), { ifMatch: a.etag, writeId: 'w-a2' })
    await s.put('a', randomBytes(100), { ifMatch: a.etag, writeId: 'w-a2' }) // replayed
    await s.put('a', randomBytes(100), { ifMatch: a2.etag, metadata: { kind: 'x' } })
    for (let i = 0; i < 10; i++) await s.put('b', randomBytes(100 + i))
    await s.put('c/d', randomBytes(10))
    await s.delete(['c/d', 'missing'])
    const id = await s.createMultipart('mp', { ifNoneMatch: '*' })
    const p1 = await s.uploadPart('mp', id, 1, randomBytes(5000))
    await s.uploadPart('mp', id, 1, randomBytes(5000)) // replaced by the same part number
    await rejectsCode(s.completeMultipart('mp', id, [{ partNumber: 1, etag: p1.etag }]), 'ERR_INVALID_ARGUMENT')
    const p1b = await s.uploadPart('mp', id, 1, randomBytes(5000))
    await s.completeMultipart('mp', id, [{ partNumber: 1, etag: p1b.etag }])
    const gone = await s.createMultipart('gone', { ifNoneMatch: '*' })
    await s.uploadPart('gone', gone, 1, randomBytes(10))
    await s.abortMultipart('gone', gone)
    await s.delete('gone') // the claim's placeholder

    const live = ['a', 'b', 'mp']
    assert.deepEqual(
      (await collect(s.list())).map((e) => e.key),
      live,
    )
    const inos = await Promise.all(live.map(async (k) => String((await fs.stat(s.pathOf(k))).ino)))
    assert.deepEqual((await fs.readdir(join(root, '.ss-meta'))).sort(), inos.sort())
    assert.deepEqual(await fs.readdir(join(root, '.ss-tmp')), [])
    assert.deepEqual(await fs.readdir(join(root, '.ss-lock')), [])
  })
})
