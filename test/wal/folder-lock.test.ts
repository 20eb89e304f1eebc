/**
 * A WAL folder's lock left by a writer that is gone: one killed on this machine, or one
 * copied with the folder from another machine. The next writer takes it over and replays
 * the log; a holder whose heartbeat goes on is another writer (ERR_STATE).
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { promises as fs } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { writerTag } from '../../lib/util/local-fs.js'
import { inspectWal, openWal } from '../../lib/wal/wal.js'
import { rejectsCode } from '../helpers/assert.js'
import { contents, loggedHandle, unwatch, walDirs, watchFolderIO } from '../helpers/wal-dirs.js'

const walDir = walDirs('ss-wallock-')
const localFs = fileURLToPath(new URL('../../lib/util/local-fs.js', import.meta.url))

/** A container with 'base' published and 'one' logged, not published; its log's folder is released. */
async function logged(name: string) {
  const store = new MemoryStore(name)
  const dir = await walDir()
  await (await loggedHandle(store, dir)).close()
  return { store, dir }
}

async function replays(store: MemoryStore, dir: string): Promise<void> {
  const g = await SegmentFile.open(store, { wal: { dir } })
  try {
    assert.equal(g.walReplay?.records, 1)
    assert.equal((await contents(g)).toString(), 'onee')
  } finally {
    await g.close()
  }
}

/** The writer tag of a process of this machine that has exited: it names the lock staging folder such a process left. */
async function goneWriterTag(): Promise<string> {
  const out: string[] = []
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', `console.log(await (await import(${JSON.stringify(localFs)})).writerTag())`],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  for await (const line of createInterface({ input: child.stdout })) out.push(line)
  assert.ok(out[0] !== undefined && out[0] !== '', 'the child printed its writer tag')
  return out[0]
}

const randomToken = () => randomBytes(16).toString('hex')

describe('a WAL folder locked by a writer that is gone', () => {
  it('a writer killed while it held the folder: the next open takes the lock over and replays', async () => {
    const { store, dir } = await logged('wallock-killed')
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { acquireLock } from ${JSON.stringify(localFs)}
         await acquireLock(${JSON.stringify(join(dir, '.lock'))}, ${JSON.stringify(dir)}, 'test', 0)
         console.log('locked')
         setInterval(() => {}, 1000)`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const exited = new Promise((resolve) => child.once('exit', resolve))
    for await (const line of createInterface({ input: child.stdout })) if (line === 'locked') break
    assert.equal((await inspectWal(dir)).lockedBy?.pid, child.pid)
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_STATE',
      new RegExp(`in use by another writer \\(pid ${child.pid} on host ${hostname()}\\)`),
    )
    child.kill('SIGKILL')
    await exited
    await replays(store, dir)
  })

  it('a writer killed while it took the lock leaves its staging folder: the next open removes it, not a live one’s', async () => {
    const { store, dir } = await logged('wallock-staging')
    const gone = join(dir, `lock-${await goneWriterTag()}.${randomToken()}`)
    await fs.mkdir(gone) // killed before its owner file was written
    const live = join(dir, `lock-${await writerTag()}.${randomToken()}`)
    await fs.mkdir(live)
    await replays(store, dir)
    assert.equal(await fs.stat(gone).catch(() => undefined), undefined, `${gone} was left`)
    assert.ok((await fs.stat(live)).isDirectory(), 'a live taker’s folder is kept')
    await fs.rmdir(live)
  })

  it('a staging folder whose taker cannot be checked (a machine crash undid its rename): removed by an open once it is an hour old', async () => {
    const { store, dir } = await logged('wallock-staging-crash')
    const pidNs = await fs.readlink('/proc/self/ns/pid')
    // Its owner file is whole, of this host and an earlier boot: no process of that boot
    // can be checked (nor one of another machine), so only the folder's age tells.
    const staged = async (hoursAgo: number) => {
      const token = randomToken()
      const path = join(dir, `lock-0123456789ab-4242-77.${token}`)
      await fs.mkdir(path)
      const owner = { pid: 4242, token, host: hostname(), boot: 'before-the-crash', pidNs }
      await fs.writeFile(join(path, `owner-${token}`), JSON.stringify(owner))
      const then = new Date(Date.now() - hoursAgo * 3_600_000)
      await fs.utimes(path, then, then)
      return path
    }
    const old = await staged(2)
    const recent = await staged(0.5)
    await replays(store, dir)
    assert.equal(await fs.stat(old).catch(() => undefined), undefined, `${old} was left`)
    assert.ok((await fs.stat(recent)).isDirectory(), 'one younger than an hour is kept')
  })

  it('a staging folder the open removes is gone for good: the folder is fsynced after', async (t) => {
    const dir = await walDir()
    const url = 'memory://wallock-staging-sync'
    const replayer = { apply: async () => {}, heldBy: async () => false }
    const container = { cno: 0, ctimeMs: 0 }
    // A folder with its container and a log file: an open that removes nothing else fsyncs no folder.
    const first = await openWal({ dir }, url, container, replayer)
    await first.log.close()
    await first.release()
    const name = `lock-${await goneWriterTag()}.${randomToken()}`
    await fs.mkdir(join(dir, name))
    const events = watchFolderIO(t, dir)
    const again = await openWal({ dir }, url, container, replayer)
    unwatch(t)
    await again.log.close()
    await again.release()
    assert.equal(await fs.stat(join(dir, name)).catch(() => undefined), undefined, `${name} was left`)
    const at = events.indexOf(`rm ${name}`)
    assert.ok(at >= 0, `the open removes ${name}: ${events.join(', ')}`)
    assert.ok(
      events.indexOf('fsync folder', at) > at,
      `the folder is fsynced after ${name} is removed: ${events.join(', ')}`,
    )
  })

  it('a lock a machine crash left (held then, or released just before and the release lost): taken over once its heartbeat is over 10 s old', async () => {
    const { store, dir } = await logged('wallock-crash')
    // This host, its PID namespace, an earlier boot: every process of that boot is gone.
    const token = randomToken()
    const owner = join(dir, '.lock', `owner-${token}`)
    const pidNs = await fs.readlink('/proc/self/ns/pid')
    await fs.mkdir(join(dir, '.lock'))
    await fs.writeFile(
      owner,
      JSON.stringify({ pid: process.pid, token, host: hostname(), boot: 'before-the-crash', pidNs }),
    )
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_STATE',
      new RegExp(`in use by another writer \\(pid ${process.pid} on host ${hostname()}\\)`),
    )
    // A reboot takes longer than that: by then the heartbeat is stale.
    const then = new Date(Date.now() - 11_000)
    await fs.utimes(owner, then, then)
    await replays(store, dir)
    assert.equal((await inspectWal(dir)).lockedBy, undefined, 'the lock is released after')
  })

  it('a folder copied from another machine with its lock: refused while the heartbeat is fresh, taken over once it stopped', async () => {
    const { store, dir } = await logged('wallock-copied')
    const token = randomBytes(16).toString('hex')
    const owner = join(dir, '.lock', `owner-${token}`)
    await fs.mkdir(join(dir, '.lock'))
    await fs.writeFile(owner, JSON.stringify({ pid: 1, token, host: 'another-machine', boot: 'x', pidNs: 'y' }))
    await rejectsCode(
      SegmentFile.open(store, { wal: { dir } }),
      'ERR_STATE',
      /in use by another writer \(pid 1 on host another-machine\); a lock whose holder cannot be checked from here \(copied from another machine, or another PID namespace\) is taken over once its heartbeat \(the owner file's modification time, by the clock the file system dates files by\) is over 10 s old$/,
    )
    assert.ok((await inspectWal(dir)).records === 1, 'the log is kept')
    // The heartbeat stopped 11 s ago (a holder that cannot be checked is stale after 10 s).
    const then = new Date(Date.now() - 11_000)
    await fs.utimes(owner, then, then)
    await replays(store, dir)
  })
})
