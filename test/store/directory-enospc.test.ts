/**
 * The directory store on a full disk: a 4 MiB tmpfs mounted for the test (this needs
 * root). A write that does not fit fails with ERR_STORE naming the cause (ENOSPC) and the
 * key, leaves no temporary file, sidecar or lock behind, and leaves the key as it was; a
 * SegmentFile's flush fails the same way, its published checkpoint stays intact, and once
 * there is room again the same handle flushes what it had. Deleting works on a full disk;
 * on a read-only one (the tmpfs remounted), writes fail with EROFS and reads go on.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const MiB = 1024 * 1024
const ENOSPC = /no space left on the device \(ENOSPC\)/
const disk = mkdtempSync(join(tmpdir(), 'ss-full-'))
let mounted = false

before(() => {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', disk], { stdio: 'pipe' })
  mounted = true
})

after(() => {
  if (mounted) execFileSync('umount', [disk], { stdio: 'pipe' })
  rmSync(disk, { recursive: true, force: true })
})

/** Writes a junk file until the disk is full; returns its path. */
async function fillDisk(name: string): Promise<string> {
  const path = join(disk, name)
  const fh = await fs.open(path, 'w')
  const chunk = Buffer.alloc(64 * 1024, 0xee)
  try {
    for (;;) await fh.write(chunk)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err
  } finally {
    await fh.close()
  }
  assert.equal((await fs.statfs(disk)).bavail, 0, 'the disk is not full')
  return path
}

/** Nothing of a failed write is left: no temporary file or lock, and a sidecar for each object only. */
async function assertClean(root: string, s: DirectoryStore): Promise<void> {
  assert.deepEqual(await fs.readdir(join(root, '.ss-tmp')), [], 'a temporary file was left behind')
  assert.deepEqual(await fs.readdir(join(root, '.ss-lock')), [], 'a lock was left behind')
  const keys = (await collect(s.list())).map((e) => e.key)
  const inos = await Promise.all(keys.map(async (k) => String((await fs.stat(s.pathOf(k))).ino)))
  assert.deepEqual((await fs.readdir(join(root, '.ss-meta'))).sort(), inos.sort(), 'a sidecar was left behind')
}

describe('directory store: a full disk', () => {
  it('a put that does not fit fails with ERR_STORE (ENOSPC), leaves nothing behind and the key as it was', async () => {
    const root = join(disk, 'store')
    const s = new DirectoryStore(root)
    const keep = randomBytes(1000)
    const { etag: keepEtag } = await s.put('dir/keep', keep)
    const { etag: casEtag } = await s.put('cas', Buffer.from('v1'), { ifNoneMatch: '*' })
    const big = randomBytes(6 * MiB)

    const attempts: Array<[string, Parameters<DirectoryStore['put']>[2]]> = [
      ['dir/big', undefined],
      ['dir/big', { ifNoneMatch: '*' }],
      ['dir/keep', undefined],
      ['cas', { ifMatch: casEtag }],
      ['new/deep/key', { metadata: { kind: 'x' } }],
    ]
    for (const [key, options] of attempts) {
      const err = await rejectsCode(s.put(key, big, options), 'ERR_STORE', ENOSPC)
      assert.ok(err.message.includes(`put ${key}`), `${err.message} does not name the key ${key}`)
      assert.equal((err.cause as NodeJS.ErrnoException).code, 'ENOSPC')
      await assertClean(root, s)
    }
    assert.equal(await s.head('dir/big'), undefined)
    assert.equal(await s.head('new/deep/key'), undefined)
    assert.deepEqual(Buffer.from(await s.get('dir/keep')), keep)
    assert.equal((await s.head('dir/keep'))?.etag, keepEtag)
    assert.equal(Buffer.from(await s.get('cas')).toString(), 'v1')
    assert.equal((await s.head('cas'))?.etag, casEtag)

    // A multipart part that does not fit, and a completion that does not.
    const id = await s.createMultipart('mp', { ifNoneMatch: '*' })
    await rejectsCode(s.uploadPart('mp', id, 1, big), 'ERR_STORE', ENOSPC)
    const p1 = await s.uploadPart('mp', id, 1, randomBytes(1536 * 1024))
    const p2 = await s.uploadPart('mp', id, 2, randomBytes(1536 * 1024))
    await rejectsCode(
      s.completeMultipart('mp', id, [
        { partNumber: 1, etag: p1.etag },
        { partNumber: 2, etag: p2.etag },
      ]),
      'ERR_STORE',
      /complete multipart mp failed: no space left on the device \(ENOSPC\)/,
    )
    assert.equal((await s.head('mp'))?.size, 0, 'the claim stays as it was')
    await s.abortMultipart('mp', id)
    await s.delete('mp')
    await assertClean(root, s)

    // Full to the last byte: even a tiny put fails cleanly; reads, lists and deletes go on.
    const junk = await fillDisk('junk-1')
    for (const options of [undefined, { ifNoneMatch: '*' as const }, { ifMatch: casEtag }]) {
      const key = options?.ifMatch ? 'cas' : 'tiny'
      await rejectsCode(s.put(key, randomBytes(5000), options), 'ERR_STORE', ENOSPC)
      await assertClean(root, s)
    }
    await rejectsCode(s.createMultipart('mp2'), 'ERR_STORE', /create multipart mp2 failed: .*\((ENOSPC)\)/)
    assert.deepEqual(Buffer.from(await s.get('dir/keep')), keep)
    assert.deepEqual(
      (await collect(s.list())).map((e) => e.key),
      ['cas', 'dir/keep'],
    )
    // Deleting needs no room: what frees space works on a full disk.
    await s.delete('dir/keep')
    assert.equal(await s.head('dir/keep'), undefined)
    await assertClean(root, s)
    await fs.rm(junk)
    const tiny = await s.put('tiny', Buffer.from('fits now'), { ifNoneMatch: '*' })
    assert.equal((await s.head('tiny'))?.etag, tiny.etag)
    await s.delete(['tiny', 'cas'])
    await assertClean(root, s)
  })

  it('a read-only file system: writes fail with ERR_STORE (EROFS) naming the key, reads go on', async () => {
    const root = join(disk, 'read-only')
    const s = new DirectoryStore(root)
    const body = randomBytes(100)
    const { etag } = await s.put('k', body)
    execFileSync('mount', ['-o', 'remount,ro', disk], { stdio: 'pipe' })
    try {
      const fresh = new DirectoryStore(root) // one that has not made its folders yet
      for (const [what, p] of [
        ['put k', () => s.put('k', randomBytes(100))],
        ['put k', () => s.put('k', randomBytes(100), { ifMatch: etag })],
        ['put other', () => fresh.put('other', randomBytes(100), { ifNoneMatch: '*' })],
        ['delete k', () => s.delete('k')],
        ['create multipart mp', () => s.createMultipart('mp')],
      ] as const) {
        const err = await rejectsCode(p(), 'ERR_STORE', /the file system is read-only \(EROFS\)/)
        assert.ok(err.message.includes(`${what} failed`), err.message)
      }
      assert.deepEqual(Buffer.from(await s.get('k')), body)
      assert.equal((await fresh.head('k'))?.etag, etag)
      assert.deepEqual(
        (await collect(fresh.list())).map((e) => e.key),
        ['k'],
      )
    } finally {
      execFileSync('mount', ['-o', 'remount,rw', disk], { stdio: 'pipe' })
    }
    await s.delete('k')
    await assertClean(root, s)
  })

  it('a SegmentFile: the flush fails with ERR_STORE (ENOSPC), the checkpoint stays, and the same handle flushes once there is room', async () => {
    const root = join(disk, 'container')
    const store = new DirectoryStore(root)
    const f = await SegmentFile.create(store, smallSettings)
    const first = pattern(0, 100_000, 1)
    await f.write(0, first)
    const t1 = await f.flush()
    const junk = await fillDisk('junk-2')

    const second = pattern(100_000, 20_000, 2)
    await f.write(100_000, second)
    await f.write(0, pattern(0, 4096, 3)) // and change a block of the published checkpoint
    const err = await rejectsCode(f.flush(), 'ERR_STORE', ENOSPC)
    assert.match(err.message, new RegExp(`^${root}: put \\S+ failed`))

    // The published checkpoint reads back as it was, in a fresh handle.
    const r = await SegmentFile.open(new DirectoryStore(root), { readOnly: true })
    assert.equal(r.cno, t1.cno)
    assert.equal(r.size, first.length)
    assert.deepEqual(Buffer.from(await r.read(0, first.length)), first)
    await r.close()
    assert.deepEqual(await fs.readdir(join(root, '.ss-tmp')), [], 'a temporary file was left behind')
    // The writer's handle still has everything it wrote.
    const expected = Buffer.concat([pattern(0, 4096, 3), first.subarray(4096), second])
    assert.deepEqual(Buffer.from(await f.read(0, expected.length)), expected)

    await fs.rm(junk)
    const t2 = await f.flush()
    assert.ok(t2.cno > t1.cno)
    const r2 = await SegmentFile.open(new DirectoryStore(root), { readOnly: true })
    assert.equal(r2.cno, t2.cno)
    assert.deepEqual(Buffer.from(await r2.read(0, expected.length)), expected)
    await r2.close()
    await f.close()
  })
})
