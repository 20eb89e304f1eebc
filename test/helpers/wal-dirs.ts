/** Temporary log folders for WAL tests, removed after the file's tests; a handle's whole content. */
import { promises as fs } from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { after, type TestContext } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import type { ObjectStore } from '../../lib/store/types.js'

/** A maker of fresh `…/wal` paths under temporary folders named `prefix…`, all removed after the tests. */
export function walDirs(prefix: string): () => Promise<string> {
  const roots: string[] = []
  after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))
  return async () => {
    const d = await fs.mkdtemp(join(tmpdir(), prefix))
    roots.push(d)
    return join(d, 'wal')
  }
}

/** Every byte of the file as the handle sees it. */
export async function contents(f: SegmentFile): Promise<Buffer> {
  return Buffer.from(await f.read(0, f.size))
}

/** A handle on `store` with a log in `dir`: 'base' published, then 'one' written (logged, not published). */
export async function loggedHandle(store: ObjectStore, dir: string): Promise<SegmentFile> {
  const f = await SegmentFile.create(store, { wal: { dir } })
  await f.write(0, Buffer.from('base'))
  await f.flush()
  await f.write(0, Buffer.from('one'))
  return f
}

/**
 * Records, in order, what is done to a log folder `dir` through fs.promises: each entry
 * removed (`rm NAME`), each fsync of the folder itself (`fsync folder`), each file in it cut
 * by its path (`truncate NAME`), and for each file in it opened, each truncate, write and
 * fsync (`truncate NAME`, `write NAME`, `fsync NAME`). The mocks go with `t`; restore them
 * with `unwatch`.
 */
export function watchFolderIO(t: TestContext, dir: string): string[] {
  const events: string[] = []
  const named = (path: unknown) => (dirname(String(path)) === dir ? basename(String(path)) : undefined)
  const rm = fs.rm
  t.mock.method(fs, 'rm', (...args: Parameters<typeof fs.rm>) => {
    const name = named(args[0])
    if (name !== undefined) events.push(`rm ${name}`)
    return rm(...args)
  })
  const truncate = fs.truncate
  t.mock.method(fs, 'truncate', (...args: Parameters<typeof fs.truncate>) => {
    const name = named(args[0])
    if (name !== undefined) events.push(`truncate ${name}`)
    return truncate(...args)
  })
  const open = fs.open
  t.mock.method(fs, 'open', async (...args: Parameters<typeof fs.open>) => {
    const fh = await open(...args)
    const name = String(args[0]) === dir ? 'folder' : named(args[0])
    if (name === undefined) return fh
    const watch = <K extends 'sync' | 'truncate' | 'write' | 'writev'>(method: K, event: string) => {
      const call = (fh[method] as (...a: unknown[]) => Promise<unknown>).bind(fh)
      Object.assign(fh, {
        [method]: (...a: unknown[]) => {
          events.push(`${event} ${name}`)
          return call(...a)
        },
      })
    }
    watch('sync', 'fsync')
    watch('truncate', 'truncate')
    watch('write', 'write')
    watch('writev', 'write')
    return fh
  })
  syncBuiltinESMExports() // syncDir takes fs from node:fs/promises
  return events
}

/** Ends watchFolderIO's watch (and any other mock of `t`). */
export function unwatch(t: TestContext): void {
  t.mock.restoreAll()
  syncBuiltinESMExports()
}
