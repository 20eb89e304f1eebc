/**
 * A first write to a container that does not exist yet, failing before anything was
 * stored (the file cannot be read, onStart throws, the signal fires, the stream is
 * destroyed or its source fails): no container is left behind, on the directory store
 * (given as a path or a file:// URL: no folder, not even the store's own `.ss-*` ones) nor
 * on the memory store (no object, no open upload). What was there before the call stays
 * as it was. (What a failure after objects were stored leaves: docs/api.md.)
 */
import assert from 'node:assert/strict'
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { after, before, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { MemoryStore } from '../../lib/store/memory.js'
import { openStore } from '../../lib/store/open.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream, type StreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { rejectsCode } from '../helpers/assert.js'
import { collect, publishContent, readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'
import { interruptedUpload, writePatternFile } from '../helpers/resume.js'

const KiB = 1024
const MiB = 1024 * KiB

/** A memory store whose clock, counted, runs `aheadMs` past the one it dates uploads by. */
class ClockStore extends MemoryStore {
  clockReads = 0
  aheadMs = 0
  now(): number {
    this.clockReads++
    return Date.now() + this.aheadMs
  }
}

/** What `store` holds: its objects' keys and its open uploads' keys. */
async function contents(store: ObjectStore): Promise<{ objects: string[]; uploads: string[] }> {
  const objects = (await collect(store.list(''))).map((e) => e.key)
  const uploads = (await collect(store.listMultipart(''))).map((u) => u.key)
  return { objects, uploads }
}

/** Every path under `dir`, relative to it, sorted ('' for none). */
async function tree(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true })).sort()
}

async function assertMissing(path: string): Promise<void> {
  const st = await stat(path).catch((err: NodeJS.ErrnoException) => err.code)
  assert.equal(st, 'ENOENT', `${path} was made: ${typeof st === 'string' ? st : (await tree(path)).join(', ')}`)
}

/** A FileHandle of a `size`-byte file whose every read fails (a failing disk), but for the one at its end. */
function unreadable(size: number) {
  const now = Date.now()
  return {
    stat: async () => ({ size, mtimeMs: now, ctimeMs: now, isFile: () => true }),
    read: async (_b: Uint8Array, _o: number, _l: number, position: number) => {
      if (position >= size) return { bytesRead: 0 }
      throw Object.assign(new Error('i/o error'), { code: 'EIO' })
    },
    close: async () => {},
  }
}

/** Ends once `ws` has closed (pipeline() may settle before that: its requests then still run). */
function closed(ws: StreamSegmentWriteStream): Promise<void> {
  return new Promise((resolve) => (ws.closed ? resolve() : ws.once('close', () => resolve())))
}

/** A source that yields 64 KiB, then fails with 'source failed'. */
function failingSource(): Readable {
  return Readable.from(
    (async function* () {
      yield pattern(0, 64 * KiB, 1)
      throw new Error('source failed')
    })(),
  )
}

describe('a failed first write to a new container leaves none', () => {
  let dir = ''
  let file = ''
  let n = 0
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ss-new-container-'))
    file = join(dir, 'source.bin')
    await writeFile(file, pattern(0, 256 * KiB, 3))
  })
  after(() => rm(dir, { recursive: true, force: true }))

  /** A container not made yet, as a path, a file:// URL, and a memory store. */
  function places(): Array<{ name: string; url: string; check(): Promise<void> }> {
    const path = join(dir, `c${++n}`)
    const url = pathToFileURL(join(dir, `c${++n}`)).href
    const mem = `mem://ss-new-container-${process.pid}-${++n}`
    return [
      { name: 'a path', url: path, check: () => assertMissing(path) },
      { name: 'a file:// URL', url, check: () => assertMissing(new URL(url).pathname) },
      {
        name: 'a memory store',
        url: mem,
        check: async () => assert.deepEqual(await contents(openStore(mem)), { objects: [], uploads: [] }),
      },
    ]
  }

  it('uploadFile whose onStart throws', async () => {
    for (const p of places()) {
      await assert.rejects(
        uploadFile(
          file,
          p.url,
          {},
          {
            onStart: () => {
              throw new Error('no display')
            },
          },
        ),
        /no display/,
      )
      await p.check()
    }
  })

  it('uploadFile of a file that cannot be read', async () => {
    for (const p of places()) {
      await rejectsCode(uploadFile(unreadable(256 * KiB) as never, p.url), 'ERR_STORE', /cannot be read at byte 0/)
      await p.check()
    }
  })

  it('uploadFile aborted before it sends anything', async () => {
    for (const p of places()) {
      const ac = new AbortController()
      await rejectsCode(uploadFile(file, p.url, {}, { signal: ac.signal, onStart: () => ac.abort() }), 'ERR_ABORTED')
      await p.check()
    }
  })

  it('uploadFile to a container under folders that do not exist makes none of them', async () => {
    const top = join(dir, `missing${++n}`)
    await assert.rejects(
      uploadFile(
        file,
        join(top, 'a', 'b'),
        {},
        {
          onStart: () => {
            throw new Error('stop')
          },
        },
      ),
      /stop/,
    )
    await assertMissing(top)
  })

  it('the write stream destroyed, its source failing, or aborted before its first object', async () => {
    for (const p of places()) {
      const ws = createStreamSegmentWriteStream({ url: p.url })
      const source = failingSource()
      await assert.rejects(pipeline(source, ws), /source failed/)
      await closed(ws)
      await p.check()
    }
    for (const p of places()) {
      const ws = createStreamSegmentWriteStream({ url: p.url })
      ws.on('error', () => {})
      ws.write(pattern(0, 8 * KiB, 1))
      ws.destroy(new Error('given up'))
      await closed(ws)
      await p.check()
    }
    for (const p of places()) {
      const ac = new AbortController()
      const ws = createStreamSegmentWriteStream({ url: p.url, signal: ac.signal })
      ws.on('error', () => {})
      ws.write(pattern(0, 8 * KiB, 1), () => ac.abort())
      await closed(ws)
      assert.equal((ws.errored as { code?: string } | null)?.code, 'ERR_ABORTED')
      await p.check()
    }
  })

  it('a folder that was there before the call is left as it was', async () => {
    const path = join(dir, `c${++n}`)
    await mkdir(join(path, 'notes'), { recursive: true })
    await writeFile(join(path, 'notes', 'readme.txt'), 'mine')
    await assert.rejects(
      uploadFile(
        file,
        path,
        {},
        {
          onStart: () => {
            throw new Error('stop')
          },
        },
      ),
      /stop/,
    )
    assert.deepEqual(await tree(path), ['notes', join('notes', 'readme.txt')])
  })

  it('a container that was there keeps its checkpoint', async () => {
    for (const url of [join(dir, `c${++n}`), `mem://ss-new-container-${process.pid}-${++n}`]) {
      const kept = pattern(0, 20 * KiB, 7)
      await publishContent(openStore(url), kept)
      await rejectsCode(uploadFile(unreadable(256 * KiB) as never, url), 'ERR_STORE')
      const ws = createStreamSegmentWriteStream({ url })
      const source = failingSource()
      await assert.rejects(pipeline(source, ws), /source failed/)
      await closed(ws)
      const { cno, bytes } = await readPublished(openStore(url))
      assert.equal(cno, 1)
      assert.ok(bytes.equals(kept))
    }
  })

  it("uploadFile's resume reads the store's clock only to age an upload it may continue", async () => {
    // A directory store makes a file, and the container's folders, to read its clock.
    const path = join(dir, 'aged.bin')
    const data = writePatternFile(path, 6 * MiB, 5)
    const settings = { segmentMpuChunkSize: MiB, segmentMpuMaxConcurrency: 2 }
    const fresh = new ClockStore()
    await uploadFile(path, fresh, settings)
    assert.equal(fresh.clockReads, 0, 'no open upload: no clock read')
    // Read when there is one, and its age judged by it: 31 minutes by the store's clock is too old.
    const store = new ClockStore()
    await interruptedUpload(path, store, settings, 3 * MiB)
    store.aheadMs = 31 * 60_000
    const late = await uploadFile(path, store, settings)
    assert.ok(store.clockReads > 0)
    assert.equal(late.reusedBytes, 0, 'an upload older than resumeMaxAgeMs is not continued')
    const again = new ClockStore()
    await interruptedUpload(path, again, settings, 3 * MiB)
    const t = await uploadFile(path, again, settings)
    assert.ok(t.reusedBytes > 0, `reused ${t.reusedBytes} bytes of an upload interrupted just now`)
    assert.ok((await readPublished(again)).bytes.equals(data))
  })
})
