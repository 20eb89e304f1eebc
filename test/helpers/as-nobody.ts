/**
 * Runs an ES module script in a child Node process as a user without CAP_FSETID: as
 * nobody (uid and gid 65534) when the tests run as root, as this user otherwise. The
 * kernel clears setuid and setgid on a write only by such a user, so a test of a file's
 * mode kept across a rewrite must write as one to be able to fail.
 */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { chmod, mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

/** A compiled module of lib/ (`store/memory.js`) as a string an `import()` in the script can take. */
function libModule(name: string): string {
  return JSON.stringify(fileURLToPath(new URL(`../../lib/${name}`, import.meta.url)))
}

/** A compiled test helper (`containers.js`), as libModule. */
function helperModule(name: string): string {
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

/**
 * Checks that `call` keeps the permission bits of the file it rewrites, setuid and setgid
 * among them, when run by a user without CAP_FSETID (runAsNobody): `call` is an expression
 * of the script on `mem`, a memory store holding a 300 KiB checkpoint, and `path`, a file
 * of mode 6755 it replaces with that checkpoint; `name` is what it calls, exported by lib's
 * `module`. The file must then hold the checkpoint, with mode 6755, and no temporary file be left.
 */
export async function assertModeKeptByNobody(
  prefix: string,
  use: { module: string; name: string; call: string },
): Promise<void> {
  const script = `
    import { chmod, stat, writeFile } from 'node:fs/promises'
    const { MemoryStore } = await import(${libModule('store/memory.js')})
    const { ${use.name} } = await import(${libModule(use.module)})
    const { publishContent } = await import(${helperModule('containers.js')})
    const { pattern } = await import(${helperModule('pattern.js')})
    const [path] = process.argv.slice(1)
    const mem = new MemoryStore()
    await publishContent(mem, pattern(0, 300 * 1024, 9))
    await writeFile(path, 'old')
    await chmod(path, 0o6755)
    await ${use.call}
    process.stdout.write(JSON.stringify({ uid: process.getuid(), mode: (await stat(path)).mode & 0o7777 }))
  `
  await runAsNobody(
    prefix,
    script,
    (home) => [join(home, 'tool')],
    async (out, home) => {
      const { uid, mode } = JSON.parse(out) as { uid: number; mode: number }
      assert.notEqual(uid, 0, 'written as a user without CAP_FSETID')
      assert.equal(mode.toString(8), '6755', 'the permission bits, setuid and setgid among them')
      assert.equal((await stat(join(home, 'tool'))).size, 300 * 1024)
      assert.deepEqual(
        (await readdir(home)).filter((n) => n.endsWith('.tmp')),
        [],
      )
    },
  )
}
