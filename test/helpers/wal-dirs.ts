/** Temporary log folders for WAL tests, removed after the file's tests; a handle's whole content. */
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after } from 'node:test'
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
