/** What the directory store's tests share. */
import * as fs from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

/** The ETag of an object whose file has no sidecar of its own (written before sidecars, or copied): its file's identity. */
export function legacyEtag(st: { ino: number; size: number; mtimeMs: number }): string {
  return `${st.ino.toString(16)}-${st.size.toString(16)}-${Math.round(st.mtimeMs * 1000).toString(16)}`
}

/**
 * What stays in the store's `.ss-tmp` at `root` once the store's background sweep is done
 * with it: a sweep started by a store's first write dates leftovers by writing a clock probe
 * there, for a moment. Looked at again for up to 2 s until nothing is left.
 */
export async function tmpLeft(root: string): Promise<string[]> {
  for (let waited = 0; ; waited += 20) {
    const names = await fs.readdir(join(root, '.ss-tmp'))
    if (names.length === 0 || waited >= 2000) return names
    await sleep(20)
  }
}
