// The S3 server for `npm test` (scripts/run-tests.mjs) and `npm run bench` (scripts/run-bench.mjs).
//
// ensureS3Server() gives the environment for child processes that use S3:
// - AWS_ENDPOINT_URL_S3 set: that server, used as is (never started or stopped here).
// - otherwise: radosgw from test/rgw/rgw.sh. When it is not installed, `rgw.sh install` installs it
//   (as root, or through sudo when that needs no password; else one line says the command to run
//   and the caller exits non-zero). Then `rgw.sh start` on two free ports of 127.0.0.1 (S3 and
//   monitor) in a private folder (mkdtemp: $TMPDIR/stream-segment-rgw-XXXXXX), beside any other
//   instance; once more on new ports when one was taken in between (rgw.sh exits 3). stop() stops
//   it and removes the folder; so does an exit of this process, and SIGINT / SIGTERM / SIGHUP
//   (forwarded first to the children started through run(), which are waited for).
//
// run() starts a child process that the signal handling knows about.
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { constants, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)))
const RGW_SH = join(ROOT, 'test/rgw/rgw.sh')
const INSTALL_COMMAND = 'bash test/rgw/rgw.sh install'
/** rgw.sh start's exit code when RGW_PORT or RGW_MON_PORT was taken. */
const PORT_IN_USE = 3

/** A failure to set up the server, reported as its message alone (one line). */
export class S3SetupError extends Error {}

const children = new Set()
/** Synchronous clean-ups (stopping servers), each run once: after use, at exit, on a signal. */
const cleanups = new Set()
let signalled

function runCleanups() {
  for (const fn of cleanups) {
    cleanups.delete(fn)
    try {
      fn()
    } catch (err) {
      console.error(`# S3: clean-up failed: ${err?.message ?? err}`)
    }
  }
}

function onSignal(sig) {
  if (signalled) {
    // A second signal: do not wait for the children any longer.
    for (const c of children) c.kill('SIGKILL')
    return
  }
  signalled = sig
  console.error(`# ${sig}: stopping${cleanups.size > 0 ? ' (and the S3 server started for this run)' : ''}`)
  for (const c of children) c.kill(sig)
  const waits = [...children].map((c) => new Promise((res) => c.once('close', res)))
  const giveUp = setTimeout(() => {
    for (const c of children) c.kill('SIGKILL')
  }, 10_000)
  Promise.all(waits).then(() => {
    clearTimeout(giveUp)
    runCleanups()
    process.exit(128 + (constants.signals[sig] ?? 1))
  })
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, onSignal)
process.on('exit', runCleanups)

/** After a signal: park the caller (the handler exits once the children are gone). */
const parked = () => new Promise(() => {})

/**
 * Runs a command; resolves with { code, signal, stdout, stderr } (the output only when
 * captured, i.e. stdio 'pipe', the default). Never resolves once this process got a signal.
 */
export function run(cmd, args, { stdio = 'pipe', env = process.env } = {}) {
  if (signalled) return parked()
  return new Promise((res) => {
    const child = spawn(cmd, args, { stdio, env, cwd: ROOT })
    children.add(child)
    let stdout = ''
    let stderr = ''
    child.stdout?.setEncoding('utf8').on('data', (d) => (stdout += d))
    child.stderr?.setEncoding('utf8').on('data', (d) => (stderr += d))
    child.once('error', (err) => {
      children.delete(child)
      res({ code: 127, signal: null, stdout, stderr: stderr + err.message })
    })
    child.once('close', (code, signal) => {
      children.delete(child)
      // After a signal the handler cleans up and exits: the caller goes no further.
      if (!signalled) res({ code, signal, stdout, stderr })
    })
  })
}

/** n distinct ports that were free on 127.0.0.1 a moment ago (bound to port 0, read, closed). */
export async function freePorts(n) {
  const servers = []
  try {
    for (let i = 0; i < n; i++) {
      const s = createServer()
      servers.push(s)
      await new Promise((res, rej) => {
        s.once('error', rej)
        s.listen(0, '127.0.0.1', res)
      })
    }
    return servers.map((s) => s.address().port)
  } finally {
    await Promise.all(servers.map((s) => new Promise((res) => (s.listening ? s.close(res) : res()))))
  }
}

function sudoWithoutPassword() {
  return spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0
}

/** The programs rgw.sh start needs that are missing ('' when none). */
function missingPrograms() {
  const r = spawnSync('bash', [RGW_SH, 'check'], { encoding: 'utf8', cwd: ROOT })
  if (r.status === 0) return ''
  return (r.stderr ?? '').replace(/^rgw\.sh: missing: /m, '').trim() || `bash ${RGW_SH} check failed`
}

/** Installs radosgw when missing; true when it did. Throws S3SetupError when it cannot. */
async function ensureInstalled() {
  const missing = missingPrograms()
  if (!missing) return false
  const root = process.getuid?.() === 0
  if (!root && !sudoWithoutPassword()) {
    throw new S3SetupError(
      `S3 server: radosgw is not installed (missing: ${missing}) and installing it needs root: run 'sudo ${INSTALL_COMMAND}', then run this again (or set AWS_ENDPOINT_URL_S3 to a running server)`,
    )
  }
  // As root, or non-root with password-less sudo (rgw.sh install then runs apt-get through sudo).
  const r = await run('bash', [RGW_SH, 'install'], { stdio: 'inherit' })
  if (signalled) return parked()
  if (r.code !== 0) throw new S3SetupError(`S3 server: '${INSTALL_COMMAND}' failed (exit ${r.code ?? r.signal})`)
  const still = missingPrograms()
  if (still) throw new S3SetupError(`S3 server: still missing after '${INSTALL_COMMAND}': ${still}`)
  return true
}

/** PIDs of the processes with the argument `dir/ceph.conf` (our daemons and ceph tools). */
function processesUsing(dir) {
  const conf = `${dir}/ceph.conf`
  const pids = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue
    try {
      const args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0')
      if (args.includes(conf)) pids.push(Number(name))
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids
}

/** The process exists and has not exited (a zombie has: it waits for its adopter to reap it). */
function running(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(') ') + 2, stat.lastIndexOf(') ') + 3) !== 'Z'
  } catch {
    return false
  }
}

function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/** Stops the instance in dir (rgw.sh stop, then anything still naming dir), removes dir. */
function stopInstance(dir, env) {
  const r = spawnSync('bash', [RGW_SH, 'stop'], { env, encoding: 'utf8', cwd: ROOT })
  if (r.status !== 0) console.error(`# S3: rgw.sh stop failed (exit ${r.status}): ${(r.stderr ?? '').trim()}`)
  // What stop cannot know: a daemon started by an interrupted rgw.sh start before it recorded
  // the PID, or one of its ceph commands. They are ours: they name the config in our private folder.
  let pids = processesUsing(dir)
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
  for (let i = 0; i < 50 && pids.length > 0; i++) {
    sleepSync(100)
    pids = pids.filter(running)
  }
  rmSync(dir, { recursive: true, force: true })
}

function parseEnvLines(text) {
  const out = {}
  for (const m of text.matchAll(/^export (\w+)=(.*)$/gm)) out[m[1]] = m[2].replace(/^'(.*)'$/, '$1')
  return out
}

/**
 * The S3 server's environment for child processes, and stop() (synchronous; a no-op for a
 * given server). log gets the one '# S3: …' line saying what was done. Throws S3SetupError.
 */
export async function ensureS3Server({ log = console.log } = {}) {
  if (process.env.AWS_ENDPOINT_URL_S3) {
    log(
      `# S3: using the given server AWS_ENDPOINT_URL_S3=${process.env.AWS_ENDPOINT_URL_S3} (not started or stopped here)`,
    )
    return { env: { ...process.env }, stop() {} }
  }
  const installed = await ensureInstalled()
  const notes = []
  for (let attempt = 1; ; attempt++) {
    const [port, monPort] = await freePorts(2)
    const dir = mkdtempSync(join(tmpdir(), 'stream-segment-rgw-'))
    const rgwEnv = { ...process.env, RGW_BASE: dir, RGW_PORT: String(port), RGW_MON_PORT: String(monPort) }
    let stopped = false
    const stop = () => {
      if (stopped) return
      stopped = true
      cleanups.delete(stop)
      stopInstance(dir, rgwEnv)
    }
    cleanups.add(stop)
    const t0 = performance.now()
    const r = await run('bash', [RGW_SH, 'start'], { env: rgwEnv })
    if (signalled) return parked()
    if (r.code === 0) {
      const env = { ...rgwEnv }
      delete env.AWS_SESSION_TOKEN // not for this server's fixed test credentials
      Object.assign(env, parseEnvLines(spawnSync('bash', [RGW_SH, 'env'], { env: rgwEnv, encoding: 'utf8' }).stdout))
      const seconds = ((performance.now() - t0) / 1000).toFixed(1)
      log(
        `# S3: ${installed ? `installed radosgw (${INSTALL_COMMAND}), then ` : ''}started radosgw on 127.0.0.1:${port} ` +
          `in ${dir} (monitor port ${monPort}, up in ${seconds} s${notes.map((n) => `; ${n}`).join('')}); stopped after the run`,
      )
      return { env, stop }
    }
    stop()
    if (r.code === PORT_IN_USE && attempt === 1) {
      notes.push(`retried: port ${port} or ${monPort} was taken`)
      continue
    }
    process.stderr.write(r.stderr)
    throw new S3SetupError(
      `S3 server: 'bash test/rgw/rgw.sh start' failed (exit ${r.code ?? r.signal}) on ports ${port}/${monPort}; its output is above`,
    )
  }
}

/**
 * For the runners: the server when `needed` (its one-line setup failure ends the process
 * with exit code 1), else the environment as it is and a line saying no server was needed.
 */
export async function s3ServerIfNeeded(needed, what) {
  if (!needed) {
    console.log(`# S3: no selected ${what} uses S3; no server needed`)
    return { env: process.env, stop() {} }
  }
  try {
    return await ensureS3Server()
  } catch (err) {
    if (!(err instanceof S3SetupError)) throw err
    console.error(err.message)
    process.exit(1)
  }
}
