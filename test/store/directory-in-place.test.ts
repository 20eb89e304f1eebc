/**
 * The directory store's uploads made with `partBytes`: each part written in place, at
 * (partNumber − 1) × partBytes of one file of the upload's folder, and a completion that
 * makes that file the object when this process wrote every part there: nothing copied
 * (the object's inode is the file's). Whatever else happens (a part sent again or twice at
 * once, parts left out of the list, a completion refused, a hand-made record), the object
 * holds exactly the bytes the listed ETags name, and the upload stays whole until it ends.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { DirectoryStore, hookedDirectoryStore } from '../../lib/store/directory.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect } from '../helpers/containers.js'
import { tmpLeft } from '../helpers/directory-store.js'

const P = 64 * 1024

/** The names in the upload's folder (upload.json, records, data files). */
async function folder(root: string, id: string): Promise<string[]> {
  return (await fs.readdir(join(root, '.ss-multipart', id))).sort()
}

/** The upload's data files: the one its parts were written in place in, and any of a part's own. */
async function dataFiles(root: string, id: string): Promise<string[]> {
  return (await folder(root, id)).filter((n) => n.startsWith('data.'))
}

describe('directory store: parts written in place (partBytes)', () => {
  let dir = ''
  let n = 0
  const fresh = () => {
    const root = join(dir, `s${n++}`)
    return { root, store: new DirectoryStore(root) }
  }
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-dir-in-place-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it('parts written in any order go into one file, which the completion makes the object: nothing copied, nothing left', async () => {
    const { root, store } = fresh()
    const parts = [randomBytes(P), randomBytes(P), randomBytes(P), randomBytes(1234)]
    const id = await store.createMultipart('k', { partBytes: P, ifNoneMatch: '*' })
    const etags: string[] = []
    for (const i of [2, 0, 3, 1]) etags[i] = (await store.uploadPart('k', id, i + 1, parts[i] as Buffer)).etag
    const files = await dataFiles(root, id)
    assert.equal(files.length, 1, `the parts went into ${files.length} files`)
    const data = join(root, '.ss-multipart', id, files[0] as string)
    const st = await fs.stat(data)
    assert.equal(st.size, 3 * P + 1234)
    assert.deepEqual(await fs.readFile(data), Buffer.concat(parts), 'each part at (n − 1) × partBytes')
    await store.completeMultipart(
      'k',
      id,
      etags.map((etag, i) => ({ partNumber: i + 1, etag })),
    )
    const object = await fs.stat(join(root, 'k'))
    assert.equal(object.ino, st.ino, 'the object is a copy, not the file the parts were written in')
    assert.equal(object.nlink, 1, 'the data file is still linked elsewhere')
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.concat(parts))
    const head = await store.head('k')
    assert.equal(head?.size, 3 * P + 1234)
    assert.match(head?.etag ?? '', /^[0-9a-f]{32}$/, 'the object has an ETag of its own, from its sidecar')
    assert.deepEqual(await fs.readdir(join(root, '.ss-multipart')), [])
    assert.deepEqual(await tmpLeft(root), [])
    assert.deepEqual(await collect(store.listMultipart()), [])
  })

  it('a part larger than partBytes is refused, and nothing of it is kept', async () => {
    const { root, store } = fresh()
    const id = await store.createMultipart('k', { partBytes: P })
    await rejectsCode(
      store.uploadPart('k', id, 1, randomBytes(P + 1)),
      'ERR_INVALID_ARGUMENT',
      /\/k: part 1 holds 65537 bytes, more than the upload's partBytes \(65536\)/,
    )
    assert.deepEqual(await folder(root, id), ['upload.json'])
    assert.deepEqual(await store.listParts('k', id), [])
  })

  it('a part sent again goes to a file of its own: each ETag names the bytes of its send, and the object is copied from them', async () => {
    const { root, store } = fresh()
    const first = randomBytes(P)
    const again = randomBytes(P)
    const tail = randomBytes(10)
    const id = await store.createMultipart('k', { partBytes: P })
    const e1 = await store.uploadPart('k', id, 1, first)
    const e2 = await store.uploadPart('k', id, 2, tail)
    const e1again = await store.uploadPart('k', id, 1, again)
    assert.equal((await dataFiles(root, id)).length, 2)
    // The first send's bytes are where they were: its ETag is refused for being replaced, not for its bytes.
    await rejectsCode(
      store.completeMultipart('k', id, [
        { partNumber: 1, etag: e1.etag },
        { partNumber: 2, etag: e2.etag },
      ]),
      'ERR_INVALID_ARGUMENT',
      new RegExp(`/k: part 1 with etag ${e1.etag} was not uploaded`),
    )
    await store.completeMultipart('k', id, [
      { partNumber: 1, etag: e1again.etag },
      { partNumber: 2, etag: e2.etag },
    ])
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.concat([again, tail]))
    assert.deepEqual(await fs.readdir(join(root, '.ss-multipart')), [])
    assert.deepEqual(await tmpLeft(root), [])
  })

  it('a part sent twice at once: the part is the last record renamed, with that send bytes, never a mix', async () => {
    const { store } = fresh()
    const a = Buffer.alloc(P, 1)
    const b = Buffer.alloc(P, 2)
    const id = await store.createMultipart('k', { partBytes: P })
    const [ea, eb] = await Promise.all([store.uploadPart('k', id, 1, a), store.uploadPart('k', id, 1, b)])
    const listed = await store.listParts('k', id)
    assert.equal(listed.length, 1)
    const winner = listed[0]?.etag === ea.etag ? a : b
    assert.ok([ea.etag, eb.etag].includes(listed[0]?.etag as string), 'the part listed is neither send')
    await store.completeMultipart('k', id, [{ partNumber: 1, etag: listed[0]?.etag as string }])
    assert.deepEqual(Buffer.from(await store.get('k')), winner)
  })

  it('parts left out of the list (a gap, one after the last) are not in the object: it is copied from the listed ones', async () => {
    const { root, store } = fresh()
    const parts = [randomBytes(P), randomBytes(P), randomBytes(P), randomBytes(P)]
    const id = await store.createMultipart('k', { partBytes: P })
    const etags: string[] = []
    for (const [i, p] of parts.entries()) etags[i] = (await store.uploadPart('k', id, i + 1, p)).etag
    await store.completeMultipart('k', id, [
      { partNumber: 1, etag: etags[0] as string },
      { partNumber: 3, etag: etags[2] as string },
    ])
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.concat([parts[0] as Buffer, parts[2] as Buffer]))
    const second = fresh()
    const id2 = await second.store.createMultipart('k', { partBytes: P })
    const etags2: string[] = []
    for (const [i, p] of parts.entries()) etags2[i] = (await second.store.uploadPart('k', id2, i + 1, p)).etag
    await second.store.completeMultipart('k', id2, [
      { partNumber: 1, etag: etags2[0] as string },
      { partNumber: 2, etag: etags2[1] as string },
    ])
    assert.deepEqual(Buffer.from(await second.store.get('k')), Buffer.concat([parts[0] as Buffer, parts[1] as Buffer]))
    assert.deepEqual(await tmpLeft(root), [])
  })

  it('a completion refused after the file was linked (the claim taken by another) leaves the upload whole, to complete later', async () => {
    const { root, store } = fresh()
    const parts = [randomBytes(P), randomBytes(99)]
    const id = await store.createMultipart('k', { partBytes: P, ifNoneMatch: '*' })
    const etags = [
      (await store.uploadPart('k', id, 1, parts[0] as Buffer)).etag,
      (await store.uploadPart('k', id, 2, parts[1] as Buffer)).etag,
    ]
    const list = etags.map((etag, i) => ({ partNumber: i + 1, etag }))
    const before = await folder(root, id)
    // Another writer's object in the claim's place.
    await store.delete('k')
    await store.put('k', Buffer.from('another writer'))
    await rejectsCode(store.completeMultipart('k', id, list), 'ERR_CONFLICT', /claimed by another writer/)
    assert.equal(Buffer.from(await store.get('k')).toString(), 'another writer')
    assert.deepEqual(await folder(root, id), before, 'the upload changed')
    assert.deepEqual(await tmpLeft(root), [], 'the link into .ss-tmp was left')
    assert.deepEqual(
      (await store.listParts('k', id)).map((p) => p.etag),
      etags,
    )
    // The claim given back, the upload completes with its parts as they were.
    await store.delete('k')
    await store.put('k', new Uint8Array(0), { ifNoneMatch: '*' })
    const side = (await fs.readdir(join(root, '.ss-meta'))).length
    await rejectsCode(store.completeMultipart('k', id, list), 'ERR_CONFLICT') // not its placeholder either
    assert.equal((await fs.readdir(join(root, '.ss-meta'))).length, side, 'a refused completion left a sidecar')
    await store.abortMultipart('k', id)
    assert.deepEqual(await fs.readdir(join(root, '.ss-multipart')), [])
  })

  it('a completion stopped by its signal once the file is linked and synced leaves the upload whole; completed again, the object is the parts', async () => {
    const root = join(dir, `s${n++}`)
    const ac = new AbortController()
    // The signal fires while the completion holds the key's lock, before its rename.
    let fired = 0
    const store = hookedDirectoryStore(root, {
      lockHeld: () => {
        if (fired++ === 0) ac.abort()
      },
    })
    const parts = [randomBytes(P), randomBytes(P), randomBytes(7)]
    const id = await store.createMultipart('k', { partBytes: P, ifNoneMatch: '*' })
    const list = []
    for (const [i, p] of parts.entries())
      list.push({ partNumber: i + 1, ...(await store.uploadPart('k', id, i + 1, p)) })
    const before = await folder(root, id)
    await rejectsCode(store.completeMultipart('k', id, list, { signal: ac.signal }), 'ERR_ABORTED')
    assert.equal(fired, 1, 'the completion never took the lock')
    assert.equal((await store.head('k'))?.size, 0, 'the placeholder was replaced')
    assert.deepEqual(await folder(root, id), before, 'the upload changed')
    assert.deepEqual(await tmpLeft(root), [], 'the link into .ss-tmp was left')
    await store.completeMultipart('k', id, list)
    assert.deepEqual(Buffer.from(await store.get('k')), Buffer.concat(parts))
    assert.deepEqual(await tmpLeft(root), [])
  })

  it('a record the store did not write (bad JSON, a file outside the folder, a range past the file) is no part', async () => {
    const { root, store } = fresh()
    await store.put('secret', Buffer.from('not a part'))
    const id = await store.createMultipart('k', { partBytes: P })
    const good = await store.uploadPart('k', id, 1, randomBytes(P))
    const up = join(root, '.ss-multipart', id)
    const [data] = await dataFiles(root, id)
    const etag = 'ab'.repeat(16)
    const records: Record<string, string> = {
      '2.part': '{not json',
      '3.part': JSON.stringify({ file: '../../secret', at: 0, size: 10, etag }),
      '4.part': JSON.stringify({ file: data, at: 0, size: 2 * P, etag }),
      '5.part': JSON.stringify({ file: data, at: -1, size: 1, etag }),
    }
    for (const [name, text] of Object.entries(records)) await fs.writeFile(join(up, name), text)
    assert.deepEqual(
      (await store.listParts('k', id)).map((p) => p.partNumber),
      [1],
    )
    for (const partNumber of [2, 3, 5]) {
      await rejectsCode(
        store.completeMultipart('k', id, [
          { partNumber: 1, etag: good.etag },
          { partNumber, etag },
        ]),
        'ERR_INVALID_ARGUMENT',
        new RegExp(`part ${partNumber} with etag ${etag} was not uploaded`),
      )
    }
    // Part 4's record names more bytes than its file holds: refused when they are copied.
    await rejectsCode(
      store.completeMultipart('k', id, [{ partNumber: 4, etag }]),
      'ERR_INVALID_ARGUMENT',
      /part 4 with etag .* was not uploaded \(its bytes are gone\)/,
    )
    assert.equal(await store.head('k'), undefined)
    assert.equal(Buffer.from(await store.get('secret')).toString(), 'not a part')
  })
})
