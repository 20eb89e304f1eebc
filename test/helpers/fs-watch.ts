/**
 * The file system calls a test watches, seen through fs.promises (which the library's
 * modules take from node:fs/promises and node:fs): what is made durable, and when.
 */
import assert from 'node:assert/strict'
import { promises as fsp } from 'node:fs'
import { syncBuiltinESMExports } from 'node:module'
import { relative } from 'node:path'
import type { TestContext } from 'node:test'

/**
 * Records, in order, what the code does to folders under `top` through fs.promises:
 * `mkdir P` (a folder made), `unlink P` (a file removed), `fsync P` (a handle opened on a
 * folder and fsynced), each path relative to `top` ('.' for it); `unlinked` runs after each
 * unlink. Undone by `unwatch`.
 */
export function watchFolders(t: TestContext, top: string, unlinked?: () => void): string[] {
  const events: string[] = []
  const rel = (path: unknown) => relative(top, String(path)) || '.'
  const { mkdir, unlink, open } = fsp
  t.mock.method(fsp, 'mkdir', async (...args: Parameters<typeof fsp.mkdir>) => {
    const made = await mkdir(...args)
    events.push(`mkdir ${rel(args[0])}`)
    return made
  })
  t.mock.method(fsp, 'unlink', async (...args: Parameters<typeof fsp.unlink>) => {
    await unlink(...args)
    events.push(`unlink ${rel(args[0])}`)
    unlinked?.()
  })
  t.mock.method(fsp, 'open', async (...args: Parameters<typeof fsp.open>) => {
    const fh = await open(...args)
    if (!(await fh.stat()).isDirectory()) return fh
    const sync = fh.sync.bind(fh)
    Object.assign(fh, {
      sync: async () => {
        await sync()
        events.push(`fsync ${rel(args[0])}`)
      },
    })
    return fh
  })
  syncBuiltinESMExports() // the library takes fs from node:fs/promises
  return events
}

export function unwatch(t: TestContext): void {
  t.mock.restoreAll()
  syncBuiltinESMExports()
}

/** The events after the last one equal to `event` (none when it never happened: then the check fails). */
export function eventsAfter(events: readonly string[], event: string): string[] {
  const at = events.lastIndexOf(event)
  assert.ok(at >= 0, `no ${event} in ${JSON.stringify(events)}`)
  return events.slice(at + 1)
}
