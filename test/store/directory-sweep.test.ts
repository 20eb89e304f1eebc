/**
 * What crashed writers leave in a directory store is swept: temporary files in `.ss-tmp`
 * (and their sidecars), lock staging folders, locks nobody holds, upload folders a crash
 * left without their `upload.json`, and (by `removeContainer`) sidecars no file holds.
 * A leftover whose writer ran on this machine goes as soon as that process is gone and
 * never while it runs; one whose writer cannot be checked (another machine, an older
 * version's name) only once it is an hour old.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import * as fs from 'node:fs/promises'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { removeContainer } from '../../lib/admin/remove.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore, sweepStoreLeftovers } from '../../lib/store/directory.js'
import { writerTag } from '../../lib/util/local-fs.js'
import { collected } from '../helpers/child.js'
import { collect } from '../helpers/containers.js'

const DIRECTORY_MODULE = new URL('../../lib/store/directory.js', import.meta.url).href
const LOCAL_FS_MODULE = new URL('../../lib/util/local-fs.js', import.meta.url).href
const TWO_HOURS_AGO = () => new Date(Date.now() - 2 * 3600_000)

/** Runs `source` (an ES module) in a child process; its stdout once it has exited. */
async function runChild(source: string, ...args: string[]): Promise<string> {
  const p = spawn(process.execPath, ['--input-type=module', '-e', source, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const output = collected(p)
  await new Promise((resolve) => p.once('close', resolve))
  return output.stdout()
}

/**
 * A process of this machine that has exited: its writer tag, pid and start time, and what
 * it wrote. With `root`, it put the objects `obj` and `linked` there and opened an upload
 * of `big`; it exits once its store's own sweep is done, so none runs meanwhile.
 */
async function deadWriter(root?: string): Promise<{ tag: string; pid: number; start: string; wrote: string[] }> {
  const out = await runChild(
    `const { writerTag } = await import(process.argv[1])
    const { DirectoryStore } = await import(process.argv[2])
    const root = process.argv[3]
    const wrote = []
    if (root !== undefined) {
      const store = new DirectoryStore(root)
      wrote.push((await store.put('obj', Buffer.from('object'))).etag)
      wrote.push((await store.put('linked', Buffer.from('linked object'))).etag)
      wrote.push(await store.createMultipart('big'))
    }
    console.log(JSON.stringify({ tag: await writerTag(), wrote }))`,
    LOCAL_FS_MODULE,
    DIRECTORY_MODULE,
    ...(root === undefined ? [] : [root]),
  )
  const { tag, wrote } = JSON.parse(out) as { tag: string; wrote: string[] }
  const [, pid, start] = tag.split('-')
  return { tag, pid: Number(pid), start: start as string, wrote }
}

async function exists(path: string): Promise<boolean> {
  return fs.lstat(path).then(
    () => true,
    () => false,
  )
}

/** A file at `path`, with a sidecar named by its inode number; both made `old` when asked. */
async function plantFile(root: string, path: string, old: boolean): Promise<string> {
  await fs.writeFile(path, randomBytes(100))
  const sidecar = join(root, '.ss-meta', String((await fs.stat(path)).ino))
  await fs.writeFile(sidecar, JSON.stringify({ 'ss:etag': randomBytes(16).toString('hex') }))
  if (old) for (const p of [path, sidecar]) await fs.utimes(p, TWO_HOURS_AGO(), TWO_HOURS_AGO())
  return sidecar
}

describe('directory store: sweeping what crashed writers left', () => {
  let dir = ''
  let identity: { host: string; boot: string; pidNs: string }
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-sweep-'))
    identity = {
      host: hostname(),
      boot: (await fs.readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim(),
      pidNs: await fs.readlink('/proc/self/ns/pid'),
    }
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('takes the leftovers of gone writers and those an hour old, keeps young ones, live ones and objects', async () => {
    const root = join(dir, 'full')
    // Only reads here until the sweep: a write would start this store's own sweep meanwhile.
    const store = new DirectoryStore(root)
    const dead = await deadWriter(root)
    const [objEtag, linkedEtag, uploadId] = dead.wrote as [string, string, string]
    const me = await writerTag()
    const tmp = (name: string) => join(root, '.ss-tmp', name)

    // Temporary files, each with its sidecar.
    const gone = tmp(`${dead.tag}.${randomUUID()}`)
    const goneSidecar = await plantFile(root, gone, false)
    const live = tmp(`${me}.${randomUUID()}`)
    const liveSidecar = await plantFile(root, live, true)
    const foreignOld = tmp(`aaaaaaaaaaaa-1-1.${randomUUID()}`)
    const foreignOldSidecar = await plantFile(root, foreignOld, true)
    const foreignYoung = tmp(`aaaaaaaaaaaa-1-1.${randomUUID()}`)
    const foreignYoungSidecar = await plantFile(root, foreignYoung, false)
    const untaggedOld = tmp(randomUUID())
    const untaggedOldSidecar = await plantFile(root, untaggedOld, true)
    const untaggedYoung = tmp(randomUUID())
    await plantFile(root, untaggedYoung, false)
    // A writer that died between linking its file into place and removing its temporary name.
    const linkedTmp = tmp(`${dead.tag}.${randomUUID()}`)
    await fs.link(store.pathOf('linked'), linkedTmp)

    // Lock staging folders: a gone taker's, and two without an owner file yet (one old),
    // named as an older version named them.
    const token = randomBytes(16).toString('hex')
    const stagingGone = tmp(`lock-${token}`)
    await fs.mkdir(stagingGone)
    const owner = { ...identity, pid: dead.pid, start: dead.start, token }
    await fs.writeFile(join(stagingGone, `owner-${token}`), JSON.stringify(owner))
    const stagingOld = tmp(`lock-${randomBytes(16).toString('hex')}`)
    await fs.mkdir(stagingOld)
    await fs.utimes(stagingOld, TWO_HOURS_AGO(), TWO_HOURS_AGO())
    const stagingYoung = tmp(`lock-${randomBytes(16).toString('hex')}`)
    await fs.mkdir(stagingYoung)
    // Named by their takers: a gone one's killed before its owner file (none, or cut
    // empty), taken by the name; a live one's, kept.
    const stagingGoneBare = tmp(`lock-${dead.tag}.${randomBytes(16).toString('hex')}`)
    await fs.mkdir(stagingGoneBare)
    const stagingGoneCut = tmp(`lock-${dead.tag}.${token}`)
    await fs.mkdir(stagingGoneCut)
    await fs.writeFile(join(stagingGoneCut, `owner-${token}`), '')
    const stagingLive = tmp(`lock-${me}.${randomBytes(16).toString('hex')}`)
    await fs.mkdir(stagingLive)
    // Upload folders being built: a gone writer's (killed before or after its upload.json), a live one's.
    const uploadGoneBare = tmp(`upload-${dead.tag}.${randomUUID()}`)
    await fs.mkdir(uploadGoneBare)
    const uploadGoneWritten = tmp(`upload-${dead.tag}.${randomUUID()}`)
    await fs.mkdir(uploadGoneWritten)
    await fs.writeFile(join(uploadGoneWritten, 'upload.json'), '{"key":"big"}')
    const uploadLive = tmp(`upload-${me}.${randomUUID()}`)
    await fs.mkdir(uploadLive)

    // A lock whose holder is gone.
    const lock = join(root, '.ss-lock', createHash('sha256').update('obj').digest('hex'))
    await fs.mkdir(lock)
    await fs.writeFile(join(lock, `owner-${token}`), JSON.stringify(owner))

    // Upload folders without upload.json, and an open upload grown old.
    const headlessOld = join(root, '.ss-multipart', randomUUID())
    await fs.mkdir(headlessOld)
    await fs.writeFile(join(headlessOld, 'upload.json.tmp'), '{')
    await fs.utimes(headlessOld, TWO_HOURS_AGO(), TWO_HOURS_AGO())
    const headlessYoung = join(root, '.ss-multipart', randomUUID())
    await fs.mkdir(headlessYoung)
    await fs.utimes(join(root, '.ss-multipart', uploadId), TWO_HOURS_AGO(), TWO_HOURS_AGO())

    // Sidecars no file holds, old and young; the objects' own, made old.
    const orphanOld = join(root, '.ss-meta', '999999999')
    const orphanYoung = join(root, '.ss-meta', '999999998')
    for (const p of [orphanOld, orphanYoung]) await fs.writeFile(p, '{}')
    await fs.utimes(orphanOld, TWO_HOURS_AGO(), TWO_HOURS_AGO())
    for (const key of ['obj', 'linked']) {
      const side = join(root, '.ss-meta', String((await fs.stat(store.pathOf(key))).ino))
      await fs.utimes(side, TWO_HOURS_AGO(), TWO_HOURS_AGO())
    }

    await sweepStoreLeftovers(store)

    const taken = [gone, goneSidecar, foreignOld, foreignOldSidecar, untaggedOld, untaggedOldSidecar, linkedTmp]
    taken.push(stagingGone, stagingOld, stagingGoneBare, stagingGoneCut, uploadGoneBare, uploadGoneWritten)
    taken.push(lock, headlessOld, orphanOld)
    for (const p of taken) assert.equal(await exists(p), false, `${p} was left`)
    const kept = [live, liveSidecar, foreignYoung, foreignYoungSidecar, untaggedYoung, stagingYoung, stagingLive]
    kept.push(uploadLive)
    kept.push(headlessYoung, join(root, '.ss-multipart', uploadId, 'upload.json'), orphanYoung)
    for (const p of kept) assert.equal(await exists(p), true, `${p} was taken`)
    assert.equal((await store.head('obj'))?.etag, objEtag, "an object's sidecar was taken")
    assert.equal((await store.head('linked'))?.etag, linkedEtag, 'the linked object lost its sidecar')
    assert.equal(Buffer.from(await store.get('linked')).toString(), 'linked object')
    assert.deepEqual(
      (await collect(store.listMultipart())).map((u) => u.uploadId),
      [uploadId],
    )
  })

  it('an upload folder whose upload.json names no key (a power loss left it empty) goes once an hour old', async () => {
    const root = join(dir, 'torn-upload')
    const store = new DirectoryStore(root)
    const live = await store.createMultipart('live')
    await store.uploadPart('live', live, 1, Buffer.from('kept'))
    const torn: string[] = []
    for (const record of ['', '{"key":', 'null', '{"metadata":{}}']) {
      const id = await store.createMultipart('torn')
      await store.uploadPart('torn', id, 1, randomBytes(1000))
      await fs.writeFile(join(root, '.ss-multipart', id, 'upload.json'), record)
      torn.push(join(root, '.ss-multipart', id))
    }
    const young = torn.pop() as string
    for (const p of [...torn, join(root, '.ss-multipart', live)]) await fs.utimes(p, TWO_HOURS_AGO(), TWO_HOURS_AGO())
    // No call reaches them: they are not listed, so gc and rm cannot abort them.
    assert.deepEqual(
      (await collect(store.listMultipart())).map((u) => u.uploadId),
      [live],
    )

    await sweepStoreLeftovers(store)

    for (const p of torn) assert.equal(await exists(p), false, `${p} was left`)
    assert.equal(await exists(young), true, 'an upload folder younger than an hour was taken')
    assert.deepEqual(
      (await store.listParts('live', live)).map((p) => p.size),
      [4],
      'an open upload was taken',
    )
  })

  it("a store's first write sweeps in the background; a read does not", async () => {
    const root = join(dir, 'background')
    await fs.mkdir(join(root, '.ss-tmp'), { recursive: true })
    await fs.mkdir(join(root, '.ss-meta'))
    const dead = await deadWriter()
    const left = join(root, '.ss-tmp', `${dead.tag}.${randomUUID()}`)
    const sidecar = await plantFile(root, left, false)
    const store = new DirectoryStore(root)
    assert.equal(await store.head('x'), undefined)
    await sleep(100)
    assert.equal(await exists(left), true, 'a read swept')
    await store.put('x', Buffer.from('x'))
    for (let i = 0; (await exists(left)) || (await exists(sidecar)); i++) {
      assert.ok(i < 500, 'the leftover was not swept within 5 s of the first write')
      await sleep(10)
    }
    assert.equal(Buffer.from(await store.get('x')).toString(), 'x')
  })

  it('rm leaves none of the store: a writer killed holding the lock of its inode CAS', async () => {
    const root = join(dir, 'rm')
    const f = await SegmentFile.create(new DirectoryStore(root), { dataBlockSize: 4096 })
    await f.write(0, Buffer.alloc(64 * 1024, 1))
    await f.flush()
    await f.close()
    // A writer that has written its temporary file and its sidecar, taken the key's lock,
    // and is killed before its rename.
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { hookedDirectoryStore } = await import(process.argv[1])
        setInterval(() => {}, 60_000)
        const store = hookedDirectoryStore(process.argv[2], {
          lockHeld: () => { process.stdout.write('held\\n'); return new Promise(() => {}) },
        })
        await store.put('inode', Buffer.alloc(1 << 20, 7), { ifMatch: 'any' })`,
        DIRECTORY_MODULE,
        root,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    await new Promise((resolve) => child.stdout.once('data', resolve))
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.kill('SIGKILL')
    await exited
    assert.equal((await fs.readdir(join(root, '.ss-tmp'))).length, 1, 'the killed writer left its temporary file')
    assert.equal((await fs.readdir(join(root, '.ss-lock'))).length, 1, 'the killed writer left its lock')

    const result = await removeContainer(new DirectoryStore(root))
    assert.ok(result.deletedObjects >= 2)
    assert.deepEqual(await collect(new DirectoryStore(root).list()), [])
    // The store's folders, emptied, went, and then the container's folder (docs/cli.md, rm).
    assert.equal(await exists(root), false, `left: ${await fs.readdir(root, { recursive: true }).catch(() => [])}`)
  })
})
