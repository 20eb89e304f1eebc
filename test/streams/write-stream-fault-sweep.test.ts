/**
 * Every store call of a write stream's life, and of uploadFile's, fails in turn (or lands
 * and loses its answer), on the memory and directory stores: each run either publishes the
 * new content whole or rejects with a StreamSegmentError and leaves the previous checkpoint
 * as it was, the stream emitting 'error' once and then 'close' (never 'finish'), with no
 * multipart upload left open and nothing left in the directory store's `.ss-tmp`.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { after, describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { openUploadCount, outcomeWithin, publishContent, readPublished } from '../helpers/containers.js'
import { FailingStore, type FailRule } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const KiB = 1024
const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))
async function tempDir(): Promise<string> {
  // On tmpfs where there is one: the directory store fsyncs each object, and a sweep writes hundreds.
  const base = await fs.stat('/dev/shm').then(
    (st) => (st.isDirectory() ? '/dev/shm' : tmpdir()),
    () => tmpdir(),
  )
  const d = await fs.mkdtemp(join(base, 'ss-sweep-'))
  roots.push(d)
  return d
}

const OLD = pattern(0, 50_000, 7)
const NEW = pattern(0, 200 * KiB + 123, 8)
const settings = smallSettings

const withOld = (store: ObjectStore) => publishContent(store, OLD)

const kinds = ['memory', 'directory'] as const
async function makeStore(kind: (typeof kinds)[number]): Promise<{ inner: ObjectStore; dir?: string }> {
  if (kind === 'memory') return { inner: new MemoryStore(`sweep-${Math.random()}`) }
  const dir = join(await tempDir(), 'c')
  return { inner: new DirectoryStore(dir), dir }
}

async function tmpLeft(dir: string | undefined): Promise<string[]> {
  if (dir === undefined) return []
  return fs.readdir(join(dir, '.ss-tmp')).catch(() => [])
}

async function calls(kind: (typeof kinds)[number], run: (store: ObjectStore) => Promise<unknown>): Promise<number> {
  const { inner } = await makeStore(kind)
  await withOld(inner)
  const store = new FailingStore(inner)
  await run(store)
  return store.calls.length
}

/** A store of `kind` holding the old checkpoint, whose call `nth` fails by `mode`. */
async function failingAt(kind: (typeof kinds)[number], nth: number, mode: FailRule['mode']) {
  const { inner, dir } = await makeStore(kind)
  await withOld(inner)
  return { inner, dir, store: new FailingStore(inner, [{ nth, mode } as FailRule]) }
}

/**
 * What a run that met failure `nth` left, `outcome` its end ('ok' or its error): the new
 * content whole when it succeeded; else a StreamSegmentError and the old checkpoint (an
 * inode write whose answer was lost did land: the one outcome a local store never gives,
 * and the flush cannot tell); no upload open but one whose creation lost its answer (an
 * id the writer never learns: gc's to abort); no temp file. Returns the call it names.
 */
async function checkLeft(
  failing: Awaited<ReturnType<typeof failingAt>>,
  nth: number,
  mode: FailRule['mode'],
  outcome: unknown,
): Promise<string> {
  const { inner, dir, store } = failing
  const failed = store.calls[nth - 1]
  const what = `call ${nth} (${failed?.op} ${failed?.key})`
  const pub = await readPublished(inner)
  if (outcome === 'ok') assert.ok(pub.bytes.equals(NEW), `${what}: ok, but not NEW published`)
  else {
    assert.ok(StreamSegmentError.is(outcome), `${what}: ${outcome}`)
    if (pub.cno === 1) assert.ok(pub.bytes.equals(OLD), what)
    else if (!(mode === 'lose-answer' && failed?.op === 'put' && failed.key === 'inode'))
      assert.fail(`${what}: rejected (${(outcome as Error).message}) but cno ${pub.cno} published`)
  }
  const unknownId = mode === 'lose-answer' && failed?.op === 'createMultipart'
  assert.equal(await openUploadCount(inner), unknownId ? 1 : 0, `${what}: uploads left open`)
  assert.deepEqual(await tmpLeft(dir), [], `${what}: temp files left`)
  return what
}

for (const kind of kinds) {
  for (const mode of ['error', 'lose-answer'] as const) {
    describe(`${kind}: the write stream, each store call failing in turn (${mode})`, () => {
      it('rejects once with a named error; old checkpoint or new, whole; no upload open; no temp file', async () => {
        const source = () => Readable.from([NEW.subarray(0, 100 * KiB), NEW.subarray(100 * KiB)])
        const n = await calls(kind, (store) =>
          pipeline(source(), createStreamSegmentWriteStream({ store, ...settings })),
        )
        for (let nth = 1; nth <= n; nth++) {
          const failing = await failingAt(kind, nth, mode)
          const ws = createStreamSegmentWriteStream({ store: failing.store, ...settings })
          const events: string[] = []
          for (const e of ['error', 'finish', 'close', 'flush'] as const) ws.on(e, () => events.push(e))
          const outcome = await outcomeWithin(pipeline(source(), ws), 20_000, `call ${nth}`)
          if (!ws.closed) await new Promise((r) => ws.once('close', () => r(undefined)))
          const what = await checkLeft(failing, nth, mode, outcome)
          if (outcome === 'ok') assert.deepEqual(events, ['flush', 'finish', 'close'], what)
          else assert.deepEqual(events, ['error', 'close'], `${what}: ${(outcome as Error).message}`)
        }
      })
    })
    describe(`${kind}: uploadFile, each store call failing in turn (${mode})`, () => {
      it('rejects with a named error; old checkpoint or new, whole; no temp file', async () => {
        const src = join(await tempDir(), 'src')
        await fs.writeFile(src, NEW)
        const run = (store: ObjectStore) => uploadFile(src, store, settings, { resume: false })
        const n = await calls(kind, run)
        for (let nth = 1; nth <= n; nth++) {
          const failing = await failingAt(kind, nth, mode)
          await checkLeft(failing, nth, mode, await outcomeWithin(run(failing.store), 20_000, `call ${nth}`))
        }
      })
    })
  }
}
