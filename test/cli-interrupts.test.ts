/**
 * The CLI interrupted (Ctrl-C, SIGTERM, SIGHUP), and its output failing: every command
 * stops with ERR_ABORTED (exit 8) and leaves no temporary file; a stdout or stderr that
 * cannot be written keeps the exit code; one line per failure.
 */
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, rmSync, watch } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { after, before, describe, it } from 'node:test'
import { parseSize } from '../lib/cli/args.js'
import { main } from '../lib/cli.js'
import { collected } from './helpers/child.js'
import { bin, fakeOutput, quietEnv } from './helpers/cli.js'
import { startFakeS3 } from './helpers/fake-s3.js'
import { writePatternFile } from './helpers/resume.js'

const MiB = 1024 * 1024
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const
const dir = mkdtempSync(join(tmpdir(), 'ss-cli-interrupts-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** The CLI as a process, its stdio as given (`/dev/full` for a failing one). */
function run(args: string[], stdio: { out?: string; err?: string } = {}, env = quietEnv()) {
  const fds: number[] = []
  const fd = (path: string | undefined) => {
    if (path === undefined) return 'pipe'
    const f = openSync(path, 'w')
    fds.push(f)
    return f
  }
  try {
    const r = spawnSync(process.execPath, [bin, ...args], {
      env,
      stdio: ['ignore', fd(stdio.out), fd(stdio.err)],
      timeout: 30_000,
    })
    return { status: r.status, stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? '') }
  } finally {
    for (const f of fds) closeSync(f)
  }
}

/** The handlers `main` added for each interrupting signal since `before` was taken. */
function handlersSince(before: Map<string, Set<unknown>>): Record<string, Array<(sig: string) => void>> {
  return Object.fromEntries(
    INTERRUPTS.map((s) => [
      s,
      process.listeners(s).filter((l) => !before.get(s)?.has(l)) as Array<(sig: string) => void>,
    ]),
  )
}

const listenersNow = () => new Map(INTERRUPTS.map((s) => [s, new Set<unknown>(process.listeners(s))]))

/** The temporary files of a download or an export left in `d`. */
const leftovers = (d: string) => readdirSync(d).filter((n) => n.startsWith('.ss-'))

describe('interrupts', () => {
  const file = join(dir, 'data.bin')
  const url = join(dir, 'c')
  before(async () => {
    writePatternFile(file, 3 * MiB)
    assert.equal(await main(['put', file, url], fakeOutput(), fakeOutput()), 0)
  })

  it('SIGTERM or SIGHUP stops every command: ERR_ABORTED, exit 8, one line; the handlers are removed after', async () => {
    const commands = [
      ['ls', url],
      ['inspect', url],
      ['verify', url],
      ['gc', url, '--grace', '0'],
      ['rm', url, '--yes'],
      ['export', url, join(dir, 'exported.bin')],
      ['get', url, join(dir, 'got.bin')],
      ['bench', 'mem://interrupted', '--size', '1M', '--rounds', '1'],
      ['put', file, url],
    ]
    for (const [i, args] of commands.entries()) {
      const sig = i % 2 === 0 ? 'SIGTERM' : 'SIGHUP'
      const before = listenersNow()
      const err = fakeOutput()
      const code = main(args, fakeOutput(), err)
      // Called as the process would on the signal (emitting it would reach the test runner's too).
      const added = handlersSince(before)
      assert.deepEqual(
        INTERRUPTS.map((s) => added[s]?.length),
        [1, 1, 1],
        `${args[0]}: one handler for each signal`,
      )
      added[sig]?.[0]?.(sig)
      assert.equal(await code, 8, `${args.join(' ')}: ${err.writes.join('')}`)
      const text = err.writes.join('')
      assert.match(text, /^stream-segment: ERR_ABORTED: [^\n]+\n$/, args.join(' '))
      assert.deepEqual(
        INTERRUPTS.map((s) => handlersSince(before)[s]?.length),
        [0, 0, 0],
        `${args[0]}: its handlers removed`,
      )
    }
    assert.deepEqual(leftovers(dir), [], 'no temporary file left')
    assert.ok(!existsSync(join(dir, 'exported.bin')) && !existsSync(join(dir, 'got.bin')))
    // rm and gc stopped before deleting anything: the checkpoint reads back.
    const out = fakeOutput()
    assert.equal(await main(['ls', url, '--json'], out, fakeOutput()), 0)
    assert.equal(JSON.parse(out.writes.join('')).published, 1)
    assert.equal(await main(['get', url, join(dir, 'back.bin')], fakeOutput(), fakeOutput()), 0)
  })

  it('an interrupt once a put has committed changes nothing: the handlers stay until it has reported, exit 0', async () => {
    const before = listenersNow()
    const counts: number[][] = []
    const out = fakeOutput()
    const write = out.write.bind(out)
    out.write = (chunk: string | Uint8Array) => {
      const added = handlersSince(before)
      counts.push(INTERRUPTS.map((s) => added[s]?.length ?? 0))
      added.SIGTERM?.[0]?.('SIGTERM')
      return write(chunk)
    }
    const err = fakeOutput()
    assert.equal(await main(['put', file, join(dir, 'committed'), '--json'], out, err), 0, err.writes.join(''))
    assert.deepEqual(counts, [[1, 1, 1]], 'the report written with the handlers in place')
    assert.equal(JSON.parse(out.writes.join('')).flushTiming.cno, 1)
  })

  /**
   * The CLI doing `args` in `cwd`, stopped (SIGSTOP) the moment a temporary file appears
   * there, sent `sig` and continued: the signal lands while the file is being written.
   */
  async function signalledWhileWriting(args: string[], cwd: string, sig: NodeJS.Signals) {
    const child = spawn(process.execPath, [bin, ...args], { cwd, env: quietEnv(), stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const exited = once(child, 'close')
    const watcher = watch(cwd)
    const appeared = new Promise<void>((r) => {
      watcher.on('change', () => {
        if (leftovers(cwd).length > 0) r()
      })
      exited.then(() => r())
    })
    await appeared
    watcher.close()
    child.kill('SIGSTOP')
    const during = leftovers(cwd)
    child.kill(sig)
    child.kill('SIGCONT')
    const [status, signal] = await exited
    return { status, signal, stderr, during }
  }

  it('a real SIGTERM during get to a file: exit 8, the temporary file removed', async () => {
    const big = join(dir, 'big')
    mkdirSync(big)
    writePatternFile(join(big, 'big.bin'), 16 * MiB, 2)
    assert.equal(await main(['put', join(big, 'big.bin'), join(big, 'c')], fakeOutput(), fakeOutput()), 0)
    // 4096 GETs one at a time: seconds, far more than it takes to stop it once it has begun.
    const g = await signalledWhileWriting(
      ['get', 'c', 'out.bin', '--read-max-concurrency', '1', '--read-get-max-bytes', '4K'],
      big,
      'SIGTERM',
    )
    assert.equal(g.during.length, 1, 'stopped while its temporary file was there')
    assert.deepEqual([g.status, g.signal], [8, null], g.stderr)
    assert.match(g.stderr, /^stream-segment: ERR_ABORTED: [^\n]+\n$/)
    assert.deepEqual(readdirSync(big).sort(), ['big.bin', 'c'], 'no temporary file, no target')
  })

  it('Ctrl-C during export to a file: exit 8, the temporary file removed', async () => {
    const big = join(dir, 'big-export')
    mkdirSync(big)
    writePatternFile(join(big, 'big.bin'), 64 * MiB, 5)
    assert.equal(await main(['put', join(big, 'big.bin'), join(big, 'c')], fakeOutput(), fakeOutput()), 0)
    // In this process, so that the interrupt comes the moment the temporary file appears.
    const before = listenersNow()
    const err = fakeOutput()
    let during: string[] = []
    const watcher = watch(big, () => {
      if (during.length > 0 || leftovers(big).length === 0) return
      during = leftovers(big)
      handlersSince(before).SIGINT?.[0]?.('SIGINT')
    })
    const code = await main(['export', join(big, 'c'), join(big, 'exported.bin')], fakeOutput(), err)
    watcher.close()
    assert.equal(during.length, 1, 'interrupted while its temporary file was there')
    assert.equal(code, 8, err.writes.join(''))
    assert.match(err.writes.join(''), /^stream-segment: ERR_ABORTED: [^\n]+\n$/)
    assert.deepEqual(readdirSync(big).sort(), ['big.bin', 'c'], 'no temporary file, no target')
  })

  it('a real Ctrl-C once export has sent the completion that makes the object: its answer waited for, exit 0, the export reported', async () => {
    const big = join(dir, 'export-s3')
    mkdirSync(big)
    const data = writePatternFile(join(big, 'big.bin'), 20 * MiB, 6)
    assert.equal(await main(['put', join(big, 'big.bin'), join(big, 'c')], fakeOutput(), fakeOutput()), 0)
    const s3 = await startFakeS3()
    try {
      const child = spawn(process.execPath, [bin, 'export', join(big, 'c'), 's3://bucket/x.bin'], {
        env: quietEnv({
          AWS_ENDPOINT_URL_S3: s3.url,
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'test',
          AWS_SECRET_ACCESS_KEY: 'test',
        }),
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      const output = collected(child)
      const exited = once(child, 'close')
      s3.hook = (r, res) => {
        if (r.op !== 'CompleteMultipartUpload') return false
        child.kill('SIGINT')
        // The object lands now; its answer goes out once the client has given the request
        // up (its socket closed), or 2 s on, long after the signal reached the process.
        const socket = r.req.socket
        const given = new Promise<void>((resolve) => {
          socket.once('close', () => resolve())
          setTimeout(resolve, 2000)
        })
        const writeHead = res.writeHead.bind(res) as (...a: unknown[]) => unknown
        const end = res.end.bind(res) as (...a: unknown[]) => unknown
        res.writeHead = ((...a: unknown[]) => {
          given.then(() => writeHead(...a))
          return res
        }) as typeof res.writeHead
        res.end = ((...a: unknown[]) => {
          given.then(() => !socket.destroyed && end(...a))
          return res
        }) as typeof res.end
        return false
      }
      const [status] = await exited
      assert.ok(s3.objects.get('x.bin')?.body.equals(data), 'the object is the checkpoint')
      assert.equal(status, 0, output.stderr())
      assert.match(output.stdout(), /^exported checkpoint 1 of .* to s3:\/\/bucket\/x\.bin: 20\.0 MiB/)
      assert.equal(s3.uploads.size, 0, 'no upload left open')
    } finally {
      await s3.close()
    }
  })

  it('a real SIGTERM during get to a stdout no one reads any more: exit 8 at once, not when the reader reads', async () => {
    const child = spawn(process.execPath, [bin, 'get', url, '-'], {
      env: quietEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stderr = ''
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const exited = once(child, 'exit')
    // The first bytes came; then nothing is read, so that the pipe fills and its writes wait.
    await once(child.stdout, 'readable')
    child.stdout.pause()
    await new Promise((r) => setTimeout(r, 500))
    child.kill('SIGTERM')
    let readAgain = false
    const late = setTimeout(() => {
      readAgain = true
      child.stdout.resume()
    }, 5000)
    const [status, signal] = await exited
    clearTimeout(late)
    child.stdout.destroy()
    await finished(child.stderr) // what it wrote last may still be unread at its exit
    assert.deepEqual([status, signal], [8, null], stderr)
    assert.match(stderr, /^stream-segment: ERR_ABORTED: [^\n]+\n$/)
    assert.ok(!readAgain, 'exited before its stdout was read again')
  })

  it('a producer that ignores SIGTERM is killed after a grace period: a failed put ends in seconds', async () => {
    const errFile = join(dir, 'producer.err')
    const fd = openSync(errFile, 'w')
    const t0 = performance.now()
    // Its `sleep` keeps running (orphaned) with the descriptors it inherited: none is a pipe of ours.
    const child = spawn(
      process.execPath,
      [
        bin,
        'put',
        join(dir, 'producer'),
        '--size',
        '10',
        '--',
        'sh',
        '-c',
        `trap "" TERM; head -c 100 ${file}; sleep 7`,
      ],
      { env: quietEnv(), stdio: ['ignore', 'ignore', fd] },
    )
    closeSync(fd)
    const [status] = await once(child, 'exit')
    const seconds = (performance.now() - t0) / 1000
    assert.equal(status, 8)
    assert.ok(seconds < 5, `exited after ${seconds.toFixed(1)} s, not when the producer did (7 s)`)
    assert.ok(!existsSync(join(dir, 'producer')), 'nothing published')
  })
})

describe('output that cannot be written', () => {
  const file = join(dir, 'out-data.bin')
  const url = join(dir, 'out-c')
  before(async () => {
    writePatternFile(file, 3 * MiB, 3)
    assert.equal(await main(['put', file, url], fakeOutput(), fakeOutput()), 0)
  })

  it('get to a full stdout: one line ERR_STORE stdout: …, exit 7; --help and --version too', () => {
    const r = run(['get', url], { out: '/dev/full' })
    assert.equal(r.status, 7, r.stderr)
    assert.match(r.stderr, /^stream-segment: ERR_STORE: stdout: ENOSPC[^\n]*\n$/)
    for (const args of [['--help'], ['--version'], ['ls', url]]) {
      const h = run(args, { out: '/dev/full' })
      assert.equal(h.status, 7, `${args.join(' ')}: ${h.stderr}`)
      assert.match(h.stderr, /^stream-segment: ERR_STORE: stdout: ENOSPC[^\n]*\n$/)
    }
  })

  it('get to a stdout stream that fails: ERR_STORE naming stdout, not ERR_INTERNAL', async () => {
    const failing = new Writable({
      write(_chunk, _encoding, cb) {
        cb(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }))
      },
    })
    const err = fakeOutput()
    assert.equal(await main(['get', url, '-'], failing as unknown as NodeJS.WritableStream, err), 7)
    assert.deepEqual(err.writes, ['stream-segment: ERR_STORE: stdout: ENOSPC: no space left on device, write\n'])
  })

  it('a stderr that cannot be written keeps the exit code', () => {
    assert.equal(run(['ls', join(dir, 'missing')], { err: '/dev/full' }).status, 3)
    assert.equal(run(['get', '--cno', 'x', url, join(dir, 'x.bin')], { err: '/dev/full' }).status, 2)
  })
})

describe('bad input', () => {
  const file = join(dir, 'in-data.bin')
  const url = join(dir, 'in-c')
  before(async () => {
    writePatternFile(file, MiB, 4)
    assert.equal(await main(['put', file, url], fakeOutput(), fakeOutput()), 0)
  })

  it('a range starting past any file is ERR_RANGE (exit 9), as one past this file', async () => {
    const err = fakeOutput()
    assert.equal(
      await main(['get', url, join(dir, 'r.bin'), '--range', '1180591620717411303424-'], fakeOutput(), err),
      9,
    )
    assert.match(err.writes.join(''), /^stream-segment: ERR_RANGE: option --range: .*past the end of any file\n$/)
  })

  it('a malformed AWS_ENDPOINT_URL_S3 is ERR_INVALID_ARGUMENT at once, naming it', () => {
    const keys = { AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'x', AWS_SECRET_ACCESS_KEY: 'y' }
    for (const endpoint of ['127.0.0.1:9', 'ftp://127.0.0.1:9', 'localhost:9000']) {
      const t0 = performance.now()
      const r = run(['ls', 's3://bucket/x'], {}, quietEnv({ ...keys, AWS_ENDPOINT_URL_S3: endpoint }))
      assert.equal(r.status, 2, r.stderr)
      assert.match(r.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: .*AWS_ENDPOINT_URL_S3 is "[^"]+": not an http/)
      assert.ok(performance.now() - t0 < 3000, 'no retries')
    }
    const env = quietEnv({ ...keys, AWS_ENDPOINT_URL: 'nonsense' })
    delete env.AWS_ENDPOINT_URL_S3
    const e = run(['export', url, 's3://bucket/key'], {}, env)
    assert.equal(e.status, 2, e.stderr)
    assert.match(e.stderr, /AWS_ENDPOINT_URL is "nonsense"/)
  })

  it('settings in milliseconds take durations; sizes take only K, KiB, M, MiB, G, GiB', async () => {
    const put = async (...args: string[]) => {
      const err = fakeOutput()
      const code = await main(['put', file, url, ...args], fakeOutput(), err)
      return { code, err: err.writes.join('') }
    }
    assert.equal((await put('--retain-grace-ms', '1h', '--roll-forward-after-ms', '90s')).code, 0)
    assert.equal((await put('--retain-grace-ms', '250')).code, 0)
    const minute = await put('--roll-forward-after-ms', '1M')
    assert.equal(minute.code, 2)
    assert.match(minute.err, /--roll-forward-after-ms: "1M" is not a duration/)
    for (const junk of ['5mb', '16 KiBb', '1Ki', '2 M', '3KB', '1.5M']) {
      assert.throws(() => parseSize('--x', junk), /is not a size/, junk)
    }
    const sizes = { '7': 7, '16K': 16384, '16kib': 16384, '1M': MiB, '1MiB': MiB, '2g': 2048 * MiB, '1GiB': 1024 * MiB }
    for (const [text, n] of Object.entries(sizes)) assert.equal(parseSize('--x', text), n, text)
    const junk = await put('--stream-segment-bytes', '16 KiBb')
    assert.equal(junk.code, 2)
  })

  it('a size or duration past the exact integers is "too large", not "not a size" or "not a duration"', async () => {
    const cases = [
      ['put', file, url, '--stream-segment-bytes', '9007199254740993'],
      ['put', '-', url, '--size', '8388608G'],
      ['put', file, url, '--retain-grace-ms', '9007199254740993'],
      ['get', url, '-', '--read-get-max-bytes', '9007199254740993'],
      ['gc', url, '--grace', '999999999999d'],
      ['gc', url, '--keep-newer-than', '9007199254740993'],
      ['bench', 'mem://too-large', '--size', '9007199254740993'],
    ]
    for (const args of cases) {
      const err = fakeOutput()
      assert.equal(await main(args, fakeOutput(), err), 2, args.join(' '))
      assert.match(
        err.writes.join(''),
        /^stream-segment: ERR_INVALID_ARGUMENT: option --[a-z-]+: "\w+" is too large \(at most 9007199254740991( ms)?\)\n$/,
        args.join(' '),
      )
    }
  })

  it('file:// with no path is refused, not the root; a newline in a path is shown, not a cut message', async () => {
    let err = fakeOutput()
    assert.equal(await main(['ls', 'file://'], fakeOutput(), err), 2)
    assert.match(err.writes.join(''), /^stream-segment: ERR_INVALID_ARGUMENT: openStore: file:\/\/: no path/)
    err = fakeOutput()
    assert.equal(await main(['export', url, 'file://'], fakeOutput(), err), 2)
    assert.match(err.writes.join(''), /ERR_INVALID_ARGUMENT: export: file:\/\/: no path/)
    err = fakeOutput()
    const odd = join(dir, 'two\nlines')
    assert.equal(await main(['ls', odd], fakeOutput(), err), 3)
    const text = err.writes.join('')
    assert.ok(text.endsWith('\n') && text.indexOf('\n') === text.length - 1, JSON.stringify(text))
    assert.ok(text.includes('two\\nlines'), JSON.stringify(text))
  })
})
