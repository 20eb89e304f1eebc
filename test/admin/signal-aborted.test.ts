/**
 * Every admin call given a signal that has fired already: ERR_ABORTED naming the call and
 * the container, before any request (an empty memory store once said it held no
 * container; the others named the store's first request, `list  aborted`), and nothing
 * deleted or written.
 */
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { exportObject } from '../../lib/admin/export.js'
import { gc } from '../../lib/admin/gc.js'
import { inspectCheckpoint } from '../../lib/admin/inspect.js'
import { listCheckpoints } from '../../lib/admin/list.js'
import { removeContainer } from '../../lib/admin/remove.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { readPublished } from '../helpers/containers.js'
import { pattern } from '../helpers/pattern.js'

describe('admin calls with a signal already aborted', () => {
  for (const kind of ['memory, empty', 'memory', 'directory'] as const) {
    it(`${kind}: ERR_ABORTED naming the call and the container, nothing touched`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'ss-aborted-'))
      try {
        const store: ObjectStore = kind === 'directory' ? new DirectoryStore(join(dir, 'c')) : new MemoryStore()
        const bytes = pattern(0, 40_000, 3)
        if (kind !== 'memory, empty') {
          const f = await SegmentFile.create(store)
          await f.write(0, bytes)
          await f.flush()
          await f.close()
        }
        const signal = AbortSignal.abort()
        const calls: Array<[string, () => Promise<unknown>]> = [
          ['gc', () => gc(store, { signal, graceMs: 0 })],
          ['verifyCheckpoint', () => verifyCheckpoint(store, { signal })],
          ['inspectCheckpoint', () => inspectCheckpoint(store, { signal })],
          ['listCheckpoints', () => listCheckpoints(store, { signal })],
          ['removeContainer', () => removeContainer(store, { signal })],
          ['exportObject', () => exportObject(store, join(dir, 'out.bin'), { signal })],
          ['exportObject', () => exportObject(store, { store: new MemoryStore(), key: 'k' }, { signal })],
        ]
        for (const [name, call] of calls) {
          await assert.rejects(
            call(),
            (err) =>
              StreamSegmentError.is(err, 'ERR_ABORTED') && (err as Error).message === `${name} of ${store.url} aborted`,
            name,
          )
        }
        if (kind !== 'memory, empty') assert.deepEqual(await readPublished(store), { cno: 1, bytes })
      } finally {
        await rm(dir, { recursive: true, force: true })
      }
    })
  }

  it("a store's listing of everything aborted is 'list aborted'; of a prefix, names it", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ss-aborted-'))
    try {
      for (const store of [new MemoryStore(), new DirectoryStore(dir)]) {
        await store.put('a', pattern(0, 10, 1))
        for (const [prefix, what] of [
          ['', 'list aborted'],
          ['a', 'list "a" aborted'],
        ] as const) {
          const listing = async () => {
            for await (const _ of store.list(prefix, { signal: AbortSignal.abort() })) break
          }
          await assert.rejects(
            listing(),
            (err) => StreamSegmentError.is(err, 'ERR_ABORTED') && (err as Error).message.includes(what),
            `${store.url} ${what}`,
          )
        }
      }
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
