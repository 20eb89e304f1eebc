/**
 * A put to a local container whose folder cannot be made is a bad argument (exit 2), as a
 * `--wal` folder or a file `get` writes is, naming the folder and why: not a store that
 * failed (exit 7), nor credentials refused (exit 12).
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { bin, quietEnv } from './helpers/cli.js'

const dir = mkdtempSync(join(tmpdir(), 'ss-cli-put-target-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** The CLI as a process, some bytes on stdin; as `user` when given. */
function run(args: string[], user: { uid?: number; gid?: number } = {}) {
  const r = spawnSync(process.execPath, [bin, ...args], {
    ...user,
    env: quietEnv(),
    input: 'some bytes',
    encoding: 'utf8',
    timeout: 60_000,
    killSignal: 'SIGKILL',
  })
  assert.equal(r.signal, null, 'the put ended on its own, not killed by the timer')
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

describe('put to a local container whose folder cannot be made', () => {
  it('a file system that makes no folder there (/proc/c): exit 2, by value and by reference, naming it and why', () => {
    const file = join(dir, 'in.bin')
    writeFileSync(file, 'a regular file')
    for (const source of ['-', file]) {
      const r = run(['put', source, '/proc/c'])
      assert.equal(r.status, 2, r.stderr)
      assert.equal(
        r.stderr,
        "stream-segment: ERR_INVALID_ARGUMENT: /proc/c: the container's folder cannot be made: " +
          'the file system makes no folder there (ENOENT): mkdir /proc/c\n',
        source,
      )
      assert.equal(r.stdout, '')
    }
  })

  it('a folder above it this user may not write: exit 2, naming that folder, EACCES', () => {
    // Root may write anywhere: the put runs as nobody then.
    const user = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {}
    const home = join(dir, 'home')
    mkdirSync(join(home, 'ro'), { recursive: true })
    chmodSync(dir, 0o755)
    chmodSync(home, 0o755)
    chmodSync(join(home, 'ro'), 0o555)
    const url = join(home, 'ro', 'sub', 'c')
    const r = run(['put', '-', url], user)
    assert.equal(r.status, 2, r.stderr)
    assert.equal(
      r.stderr,
      `stream-segment: ERR_INVALID_ARGUMENT: ${url}: the container's folder cannot be made: ` +
        `permission denied (EACCES): mkdir ${join(home, 'ro', 'sub')}\n`,
    )
    assert.ok(!existsSync(join(home, 'ro', 'sub')))
  })

  it("a container folder that is there but may not be written: the store's own error (ERR_AUTH, exit 12), unchanged", () => {
    const user = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {}
    const url = join(dir, 'locked')
    mkdirSync(url)
    chmodSync(dir, 0o755)
    chmodSync(url, 0o555)
    const r = run(['put', '-', url], user)
    assert.equal(r.status, 12, r.stderr)
    assert.match(r.stderr, /^stream-segment: ERR_AUTH: .*locked: .*permission denied \(EACCES\)/)
  })
})
