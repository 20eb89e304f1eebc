/**
 * The directory store's per-key lock (If-Match puts, claimed multipart completions),
 * across processes: a holder killed with SIGKILL while holding it delays the next
 * writers by well under 2 s (not LOCK_STALE_MS), of several waiters that find it stale
 * exactly one takes it, a live holder is never broken, and no two ever hold it at once.
 *
 * Every holder but the one to be killed runs a probe while it holds the lock: it creates
 * `held` in a probe folder create-only, waits a little, and removes it. A second holder
 * at the same time finds `held` there and leaves an `overlap-*` file; each run checks
 * that there is none. DIR_LOCK_RUNS=1000 runs the crash test 1,000 times (default 5).
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import * as fs from 'node:fs/promises'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { StreamSegmentError } from '../../lib/errors.js'
import { type DirectoryStore, hookedDirectoryStore } from '../../lib/store/directory.js'
import { acquireLock } from '../../lib/util/local-fs.js'

const RUNS = Number(process.env.DIR_LOCK_RUNS ?? 5)
/** How soon after its holder died every waiter must be done. */
const DEADLINE_MS = 2000
const MODULE = new URL('../../lib/store/directory.js', import.meta.url).href

/** The folder of a key's lock: named after the key's SHA-256 (a key may be longer than a file name). */
const lockDir = (root: string, key: string) => join(root, '.ss-lock', createHash('sha256').update(key).digest('hex'))

/** The probe, in the test process and (as source) in the children. */
async function probe(dir: string): Promise<void> {
  const held = join(dir, 'held')
  try {
    await (await fs.open(held, 'wx')).close()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    await fs.writeFile(join(dir, `overlap-${process.pid}-${randomBytes(4).toString('hex')}`), '')
    return
  }
  await sleep(1 + Math.random() * 3)
  await fs.rm(held)
}

/**
 * A child: `hold <key> [ms]` takes the key's lock with an If-Match put, says {"held"} and
 * keeps it (forever, or `ms` with the probe running); `serve` does the puts it is sent,
 * one JSON line each, answering with a line.
 */
const CHILD = `
import * as fs from 'node:fs/promises'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
const [moduleUrl, root, probeDir, mode, key, ms] = process.argv.slice(1)
const { hookedDirectoryStore } = await import(moduleUrl)
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n')
${probe.toString()}
if (mode === 'hold') {
  const alive = setInterval(() => {}, 60_000) // a pending promise alone would not keep the process running
  const store = hookedDirectoryStore(root, {
    lockHeld: async () => {
      say({ held: key, pid: process.pid })
      if (ms === undefined) return new Promise(() => {})
      await probe(probeDir)
      await sleep(Number(ms))
      await probe(probeDir)
    },
  })
  await store.put(key, Buffer.from('held'), { ifMatch: 'no-such-etag' }).catch(() => {})
  say({ released: key })
  clearInterval(alive)
} else {
  const store = hookedDirectoryStore(root, { lockHeld: () => probe(probeDir) })
  say({ ready: true })
  for await (const line of createInterface({ input: process.stdin })) {
    const cmd = JSON.parse(line)
    store.put(cmd.key, Buffer.from(cmd.body, 'hex'), cmd.options).then(
      (r) => say({ id: cmd.id, etag: r.etag }),
      (err) => say({ id: cmd.id, code: err.code ?? String(err), message: err.message }),
    )
  }
}
`

interface Outcome {
  etag?: string
  code?: string
  message?: string
}

class Child {
  readonly proc: ChildProcess
  private readonly waiting = new Map<string, (o: Outcome & Record<string, unknown>) => void>()
  private readonly lines: Array<Record<string, unknown>> = []
  private nextId = 0
  exited: Promise<void>

  constructor(args: string[]) {
    this.proc = spawn(process.execPath, ['--input-type=module', '-e', CHILD, MODULE, ...args], {
      stdio: ['pipe', 'pipe', 'inherit'],
    })
    this.exited = new Promise((resolve) => this.proc.once('exit', () => resolve()))
    createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      const msg = JSON.parse(line) as Record<string, unknown>
      const w = this.waiting.get(String(msg.id ?? Object.keys(msg)[0]))
      if (w !== undefined) {
        this.waiting.delete(String(msg.id ?? Object.keys(msg)[0]))
        w(msg)
      } else this.lines.push(msg)
    })
  }

  /** The next line with this field (`held`, `ready`, `released`). */
  async next(field: string, timeoutMs = 20_000): Promise<Record<string, unknown>> {
    const seen = this.lines.findIndex((l) => field in l)
    if (seen >= 0) return this.lines.splice(seen, 1)[0] as Record<string, unknown>
    const got = new Promise<Record<string, unknown>>((resolve) => this.waiting.set(field, resolve))
    const ac = new AbortController()
    const timer = sleep(timeoutMs, undefined, { signal: ac.signal }).then(() => {
      throw new Error(`child ${this.proc.pid}: no "${field}" within ${timeoutMs} ms`)
    })
    try {
      return await Promise.race([got, timer])
    } finally {
      ac.abort()
    }
  }

  put(key: string, body: Buffer, options: object): Promise<Outcome> {
    const id = `p${this.nextId++}`
    const p = new Promise<Outcome>((resolve) => this.waiting.set(id, resolve))
    this.proc.stdin!.write(`${JSON.stringify({ id, key, body: body.toString('hex'), options })}\n`)
    return p
  }
}

function outcome(p: Promise<{ etag: string }>): Promise<Outcome> {
  return p.then(
    (r) => ({ etag: r.etag }),
    (err) => ({ code: StreamSegmentError.is(err) ? err.code : String(err), message: (err as Error).message }),
  )
}

describe('directory store: the per-key lock across processes', () => {
  let root: string
  let probeDir: string
  let store: DirectoryStore
  const servers: Child[] = []

  before(async () => {
    root = await fs.mkdtemp(join(tmpdir(), 'ss-lock-'))
    probeDir = await fs.mkdtemp(join(tmpdir(), 'ss-lock-probe-'))
    store = hookedDirectoryStore(root, { lockHeld: () => probe(probeDir) })
    for (let i = 0; i < 2; i++) servers.push(new Child([root, probeDir, 'serve']))
    await Promise.all(servers.map((c) => c.next('ready')))
  })

  after(async () => {
    for (const c of servers) c.proc.kill()
    await Promise.all(servers.map((c) => c.exited))
    await fs.rm(root, { recursive: true, force: true })
    await fs.rm(probeDir, { recursive: true, force: true })
  })

  async function noOverlaps(): Promise<void> {
    const left = await fs.readdir(probeDir)
    assert.deepEqual(
      left.filter((n) => n.startsWith('overlap-')),
      [],
      'two holders held the lock at once',
    )
    assert.deepEqual(left, [], 'a holder did not finish its probe')
  }

  it(`a holder killed with SIGKILL: 4 waiters in 3 processes are done within ${DEADLINE_MS} ms, and one If-Match wins (${RUNS} runs)`, async (t) => {
    let worst = 0
    let total = 0
    const started = performance.now()
    for (let run = 0; run < RUNS; run++) {
      const key = `crash/${run}`
      const e0 = (await store.put(key, randomBytes(128))).etag
      const holder = new Child([root, probeDir, 'hold', key])
      await holder.next('held')
      // The waiters start while the holder lives: none may get through.
      let killedAt = Number.POSITIVE_INFINITY
      const waiters = [0, 1, 2, 3].map((i) => {
        const body = randomBytes(128)
        const p =
          i < 2
            ? outcome(store.put(key, body, { ifMatch: e0 }))
            : (servers[i - 2] as Child).put(key, body, { ifMatch: e0 })
        return { body, done: p.then((o) => ({ ...o, ms: performance.now() - killedAt })) }
      })
      await sleep(20)
      killedAt = performance.now()
      holder.proc.kill('SIGKILL')
      const results = await Promise.all(waiters.map((w) => w.done))
      await holder.exited
      for (const r of results) {
        assert.ok(r.ms >= 0, `run ${run}: a waiter got through while the holder lived: ${JSON.stringify(r)}`)
        assert.ok(r.ms < DEADLINE_MS, `run ${run}: a waiter took ${r.ms.toFixed(0)} ms after the holder died`)
        worst = Math.max(worst, r.ms)
        total += r.ms
      }
      const won = results.flatMap((r, i) => (r.etag !== undefined ? [i] : []))
      assert.equal(won.length, 1, `run ${run}: ${JSON.stringify(results)}`)
      for (const r of results) if (r.etag === undefined) assert.equal(r.code, 'ERR_CONFLICT', r.message)
      const winner = won[0] as number
      assert.equal((await store.head(key))?.etag, results[winner]?.etag)
      assert.deepEqual(Buffer.from(await store.get(key)), waiters[winner]?.body)
      await noOverlaps()
      assert.deepEqual(await fs.readdir(join(root, '.ss-lock')), [], `run ${run}: a lock was left behind`)
    }
    t.diagnostic(
      `${RUNS} runs in ${((performance.now() - started) / 1000).toFixed(1)} s; after the kill, waiters were done in ` +
        `${(total / (4 * RUNS)).toFixed(1)} ms on average, ${worst.toFixed(1)} ms at worst`,
    )
  })

  it('a live holder is never broken, however long it holds the lock, and keeps its heartbeat going', async () => {
    const key = 'live'
    const e0 = (await store.put(key, randomBytes(128))).etag
    const holder = new Child([root, probeDir, 'hold', key, '1500'])
    await holder.next('held')
    const t0 = performance.now()
    const [name] = await fs.readdir(lockDir(root, key))
    const owner = join(lockDir(root, key), name as string)
    const firstBeat = (await fs.stat(owner)).mtimeMs
    const waiters = Promise.all([
      outcome(store.put(key, randomBytes(128), { ifMatch: e0 })),
      outcome(store.put(key, randomBytes(128), { ifMatch: e0 })),
      (servers[0] as Child).put(key, randomBytes(128), { ifMatch: e0 }),
    ])
    await sleep(1250)
    const lastBeat = (await fs.stat(owner)).mtimeMs
    assert.ok(lastBeat - firstBeat >= 900, `the holder touched its lock ${lastBeat - firstBeat} ms later`)
    const results = await waiters
    const ms = performance.now() - t0
    await holder.next('released')
    await holder.exited
    assert.ok(ms >= 1400, `the waiters got through after ${ms.toFixed(0)} ms, before the holder let go`)
    assert.equal(results.filter((r) => r.etag !== undefined).length, 1, JSON.stringify(results))
    await noOverlaps()
  })

  it(`locks left by other gone holders are broken at once: a reused pid, a zombie, the older version's (${RUNS} runs)`, async () => {
    const boot = (await fs.readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim()
    const pidNs = await fs.readlink('/proc/self/ns/pid')
    // A process that has exited but is not reaped: its parent, sh exec'd into sleep, never
    // waits. The child outlives the exec (sh reaps a child that is already done before it).
    const zombieParent = spawn('sh', ['-c', 'sleep 0.3 & echo $!; exec sleep 30'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const zombie = Number(
      await new Promise<string>((resolve) => zombieParent.stdout.once('data', (d) => resolve(String(d)))),
    )
    for (let i = 0; ; i++) {
      const state = (await fs.readFile(`/proc/${zombie}/stat`, 'utf8')).split(') ')[1]?.[0]
      if (state === 'Z') break
      assert.ok(i < 600, `process ${zombie} did not become a zombie (${state})`)
      await sleep(5)
    }
    const me = { host: hostname(), boot, pidNs }
    const kinds: Array<[string, object | undefined]> = [
      ['a reused pid', { ...me, pid: process.pid, start: '1' }],
      ['a zombie', { ...me, pid: zombie }],
      ["the older version's (an empty folder)", undefined],
    ]
    try {
      for (let run = 0; run < RUNS; run++) {
        for (const [kind, owner] of kinds) {
          const key = `stale-${run}-${kind.split(' ')[1]}`
          const e0 = (await store.put(key, randomBytes(128))).etag
          const dir = lockDir(root, key)
          await fs.mkdir(dir)
          if (owner !== undefined) {
            const token = randomBytes(16).toString('hex')
            await fs.writeFile(join(dir, `owner-${token}`), JSON.stringify({ ...owner, token }))
          }
          const t0 = performance.now()
          const results = await Promise.all([
            ...Array.from({ length: 6 }, () => outcome(store.put(key, randomBytes(128), { ifMatch: e0 }))),
            ...servers.map((c) => c.put(key, randomBytes(128), { ifMatch: e0 })),
          ])
          const ms = performance.now() - t0
          assert.ok(ms < DEADLINE_MS, `${kind}: ${ms.toFixed(0)} ms`)
          assert.equal(results.filter((r) => r.etag !== undefined).length, 1, `${kind}: ${JSON.stringify(results)}`)
          for (const r of results) if (r.etag === undefined) assert.equal(r.code, 'ERR_CONFLICT', r.message)
          await noOverlaps()
          await assert.rejects(fs.stat(dir), { code: 'ENOENT' }, `${kind}: the lock was left behind`)
        }
      }
    } finally {
      zombieParent.kill()
    }
  })

  it('a holder on another machine is waited for while its heartbeat goes on, and broken once it stops', async () => {
    const key = 'foreign'
    const e0 = (await store.put(key, randomBytes(128))).etag
    const dir = lockDir(root, key)
    await fs.mkdir(dir)
    const token = randomBytes(16).toString('hex')
    const owner = join(dir, `owner-${token}`)
    await fs.writeFile(owner, JSON.stringify({ pid: 1, token, host: 'another-machine', boot: 'x', pidNs: 'y' }))
    let done = false
    const put = outcome(store.put(key, randomBytes(128), { ifMatch: e0 })).finally(() => {
      done = true
    })
    await sleep(300)
    assert.equal(done, false, 'a lock with a fresh heartbeat was broken')
    // The heartbeat stopped 11 s ago (LOCK_STALE_MS is 10 s).
    const then = new Date(Date.now() - 11_000)
    await fs.utimes(owner, then, then)
    const t0 = performance.now()
    const r = await put
    assert.ok(performance.now() - t0 < DEADLINE_MS)
    assert.match(r.etag ?? '', /^[0-9a-f]{32}$/, JSON.stringify(r))
    await noOverlaps()
  })
})

describe('a lock wait on a clock set back', () => {
  it('ends at waitMs of elapsed time, however the wall clock moves meanwhile', { timeout: 20_000 }, async (t) => {
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-lock-clock-'))
    try {
      const held = await acquireLock(join(dir, 'lock'), dir, 'the holder')
      // From now on every reading of the wall clock is an hour earlier than the one before.
      const realNow = Date.now.bind(Date)
      let calls = 0
      t.mock.method(Date, 'now', () => realNow() - calls++ * 3_600_000)
      await assert.rejects(acquireLock(join(dir, 'lock'), dir, 'a waiter', 200), (err: unknown) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
        assert.match((err as Error).message, /held for over 200 ms by a live holder/)
        return true
      })
      t.mock.restoreAll()
      await held.release()
    } finally {
      await fs.rm(dir, { recursive: true, force: true })
    }
  })
})

describe("a holder's heartbeat, judged by the file system's clock alone", () => {
  const RealDate = Date
  /** The kernel's clock, which dates this machine's files, whatever `Date` is made to say. */
  const kernelNow = () => performance.timeOrigin + performance.now()

  /** A lock held by a process on another machine (its pid cannot be checked from here). */
  async function foreignLock(dir: string): Promise<string> {
    const lock = join(dir, 'lock')
    await fs.mkdir(lock)
    const token = randomBytes(16).toString('hex')
    const owner = join(lock, `owner-${token}`)
    await fs.writeFile(owner, JSON.stringify({ pid: 1, token, host: 'another-machine', boot: 'x', pidNs: 'y' }))
    return owner
  }

  /** Its heartbeat, as such a holder beats: the owner file written in place, dated by the file system. */
  function beat(owner: string): () => void {
    const timer = setInterval(() => {
      fs.open(owner, 'r+')
        .then((fh) => fh.write(Buffer.from('{'), 0, 1, 0).finally(() => fh.close()))
        .catch(() => {})
    }, 200)
    return () => clearInterval(timer)
  }

  it("a waiter whose clock runs an hour ahead breaks no live holder's lock, and breaks it once the heartbeat stops", async (t) => {
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-lock-ahead-'))
    const stop = beat(await foreignLock(dir))
    try {
      t.mock.method(Date, 'now', () => kernelNow() + 3_600_000)
      let done = false
      const taken = acquireLock(join(dir, 'lock'), dir, 'a waiter', 20_000).finally(() => {
        done = true
      })
      await sleep(1500)
      assert.equal(done, false, 'the lock of a holder whose heartbeat goes on was broken')
      stop()
      const [owner] = (await fs.readdir(join(dir, 'lock'))).filter((n) => n.startsWith('owner-'))
      const stopped = new RealDate(kernelNow() - 11_000) // LOCK_STALE_MS is 10 s
      await fs.utimes(join(dir, 'lock', owner as string), stopped, stopped)
      const t0 = performance.now()
      const lock = await taken
      assert.ok(performance.now() - t0 < DEADLINE_MS, `taken ${performance.now() - t0} ms after the heartbeat stopped`)
      await lock.release()
    } finally {
      stop()
      t.mock.restoreAll()
      await fs.rm(dir, { recursive: true, force: true })
    }
  })

  it('a waiter whose clock runs an hour behind breaks a lock whose heartbeat stopped 11 s ago at once', async (t) => {
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-lock-behind-'))
    try {
      const owner = await foreignLock(dir)
      const stopped = new RealDate(kernelNow() - 11_000)
      await fs.utimes(owner, stopped, stopped)
      t.mock.method(Date, 'now', () => kernelNow() - 3_600_000)
      const t0 = performance.now()
      const lock = await acquireLock(join(dir, 'lock'), dir, 'a waiter', 5_000)
      assert.ok(performance.now() - t0 < DEADLINE_MS, `taken after ${performance.now() - t0} ms`)
      await lock.release()
    } finally {
      t.mock.restoreAll()
      await fs.rm(dir, { recursive: true, force: true })
    }
  })

  it("a holder whose clock runs an hour behind has its heartbeat dated by the file system's clock", async () => {
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-lock-holder-'))
    // `Date.now()` and `new Date()` an hour behind, as on a machine whose clock is.
    globalThis.Date = class extends RealDate {
      constructor(...args: ConstructorParameters<DateConstructor> | []) {
        if (args.length === 0) super(RealDate.now() - 3_600_000)
        else super(...(args as ConstructorParameters<DateConstructor>))
      }

      static override now(): number {
        return RealDate.now() - 3_600_000
      }
    } as DateConstructor
    try {
      const lock = await acquireLock(join(dir, 'lock'), dir, 'the holder')
      const [name] = await fs.readdir(join(dir, 'lock'))
      const owner = join(dir, 'lock', name as string)
      const before = (await fs.stat(owner)).mtimeMs
      await sleep(2300)
      const { mtimeMs } = await fs.stat(owner)
      assert.ok(mtimeMs > before + 900, `the heartbeat moved the owner file's time by ${mtimeMs - before} ms`)
      assert.ok(
        Math.abs(mtimeMs - kernelNow()) < 1500,
        `dated ${mtimeMs - kernelNow()} ms from the file system's clock`,
      )
      assert.ok(parseJsonOwner(await fs.readFile(owner, 'utf8')), 'the heartbeat changed the owner file')
      await lock.release()
    } finally {
      globalThis.Date = RealDate
      await fs.rm(dir, { recursive: true, force: true })
    }
  })
})

function parseJsonOwner(text: string): boolean {
  const o = JSON.parse(text) as { pid?: unknown; token?: unknown }
  return typeof o.pid === 'number' && typeof o.token === 'string'
}
