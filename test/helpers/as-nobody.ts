/**
 * Runs an ES module script in a child Node process as a user without CAP_FSETID: as
 * nobody (uid and gid 65534) when the tests run as root, as this user otherwise. The
 * kernel clears setuid and setgid on a write only by such a user, so a test of a file's
 * mode kept across a rewrite must write as one to be able to fail.
 */
import { execFileSync } from 'node:child_process'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** A compiled module of lib/ (`store/memory.js`) as a string an `import()` in the script can take. */
export function libModule(name: string): string {
  return JSON.stringify(fileURLToPath(new URL(`../../lib/${name}`, import.meta.url)))
}

/** A compiled test helper (`containers.js`), as libModule. */
export function helperModule(name: string): string {
  return JSON.stringify(fileURLToPath(new URL(`./${name}`, import.meta.url)))
}

/**
 * Runs `script` with `args(home)` as its process.argv.slice(1), its working folder `home`:
 * a new folder (`prefix` and a random end) that anyone may write, removed after. Resolves
 * with what `check` makes of its stdout and the folder; a script that fails rejects with
 * its stderr.
 */
export async function runAsNobody<T>(
  prefix: string,
  script: string,
  args: (home: string) => string[],
  check: (out: string, home: string) => Promise<T> | T,
): Promise<T> {
  const home = await mkdtemp(join(tmpdir(), prefix))
  try {
    await chmod(home, 0o777)
    const nobody = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {}
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script, ...args(home)], {
      ...nobody,
      cwd: home,
      encoding: 'utf8',
      timeout: 60_000,
    })
    return await check(out, home)
  } finally {
    await rm(home, { recursive: true, force: true })
  }
}
