/**
 * The command at the edges a user reaches by accident: a bad value in an environment
 * variable the package reads as it loads, and a path that is a link to no file (the
 * shell's `/dev/stdout` on a pipe, `>(command)`). Each is one line with its code and the
 * documented exit code, nothing written.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { main } from '../lib/cli.js'
import { collected } from './helpers/child.js'
import { bin, fakeOutput, quietEnv } from './helpers/cli.js'

const dir = mkdtempSync(join(tmpdir(), 'ss-cli-edges-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** The CLI as a process, stdout and stderr pipes. */
function run(args: string[], env = quietEnv()) {
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: 'utf8', timeout: 30_000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

describe('environment variables read as the package loads', () => {
  it('STREAM_SEGMENT_CRC32 naming no implementation: one line, ERR_INVALID_ARGUMENT, exit 2, no stack', () => {
    for (const args of [['ls', join(dir, 'none')], ['--version']]) {
      const r = run(args, quietEnv({ STREAM_SEGMENT_CRC32: 'bogus\x1b[31m' }))
      assert.equal(r.status, 2, r.stderr)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: STREAM_SEGMENT_CRC32="bogus\\(u001b|x1b)\[31m": no such CRC-32 implementation here; present: [^\n]*crc-32\n$/,
      )
      assert.equal(r.stdout, '')
    }
    // With DEBUG set, the stack follows, as for every failure.
    const debug = run(['ls', join(dir, 'none')], quietEnv({ STREAM_SEGMENT_CRC32: 'bogus', DEBUG: 'x' }))
    assert.equal(debug.status, 2)
    assert.match(debug.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: .*\n.*StreamSegmentError/s)
  })
})

describe('environment variables the S3 client reads', () => {
  it('AWS_PROFILE naming no profile, keys set too: ERR_AUTH naming AWS_PROFILE, not "set AWS_ACCESS_KEY_ID"', () => {
    // No server is needed: the SDK finds no credentials before any request.
    const env = quietEnv({
      AWS_ENDPOINT_URL_S3: 'http://127.0.0.1:9',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'a',
      AWS_SECRET_ACCESS_KEY: 'b',
      AWS_PROFILE: 'no-such-profile',
      AWS_CONFIG_FILE: join(dir, 'no-config'),
      AWS_SHARED_CREDENTIALS_FILE: join(dir, 'no-credentials'),
      AWS_EC2_METADATA_DISABLED: 'true',
    })
    const r = run(['ls', 's3://bucket/x'], env)
    assert.equal(r.status, 12, r.stderr)
    assert.match(r.stderr, /^stream-segment: ERR_AUTH: .*AWS_PROFILE is "no-such-profile"/)
    assert.doesNotMatch(r.stderr, /set AWS_ACCESS_KEY_ID/)
    assert.equal(r.stderr.split('\n').length, 2, 'one line')
  })
})

describe('a path that is a link to no file (/dev/stdout on a pipe)', () => {
  const url = join(dir, 'c')
  before(() => {
    writeFileSync(join(dir, 'in.bin'), 'some bytes')
    assert.equal(run(['put', join(dir, 'in.bin'), url]).status, 0)
  })

  it('get and export to /dev/stdout when it is a pipe: not a regular file, exit 2, nothing written', () => {
    const get = run(['get', url, '/dev/stdout'])
    assert.equal(get.status, 2, get.stderr)
    assert.match(get.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: downloadFile to \/dev\/stdout: not a regular file/)
    const exp = run(['export', url, '/dev/stdout'])
    assert.equal(exp.status, 2, exp.stderr)
    assert.match(exp.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: export to \/dev\/stdout: not a regular file/)
    for (const r of [get, exp]) assert.equal(r.stdout, '')
    assert.deepEqual(readdirSync(dir).sort(), ['c', 'in.bin'], 'nothing written beside')
  })
})

describe('get to a file in a folder where no file can be made (/proc/version)', () => {
  const url = join(dir, 'proc-c')
  before(() => {
    writeFileSync(join(dir, 'proc.in'), 'some bytes')
    assert.equal(run(['put', join(dir, 'proc.in'), url]).status, 0)
  })

  it('says the temporary file beside it could not be created, and where: exit 2, not ERR_NOT_FOUND for the file', () => {
    const r = run(['get', url, '/proc/version'])
    assert.equal(r.status, 2, r.stderr)
    assert.match(
      r.stderr,
      /^stream-segment: ERR_INVALID_ARGUMENT: downloadFile to \/proc\/version: the temporary file \/proc\/\.ss-download-\d+-[0-9a-f]+\.tmp cannot be created beside it \(ENOENT[^\n]*\)\n$/,
    )
    assert.equal(r.stdout, '')
  })
})

/** The CLI as a process writing `data` into the FIFO `fifo` once it runs; killed if it has not ended in 20 s. */
async function putFromFifo(fifo: string, args: string[], data: string) {
  execFileSync('mkfifo', [fifo])
  const child = spawn(process.execPath, [bin, 'put', fifo, ...args], { env: quietEnv() })
  const output = collected(child)
  const closed = once(child, 'close')
  let killed = false
  const timer = setTimeout(() => {
    killed = true
    child.kill('SIGKILL')
  }, 20_000)
  // Should the put end without opening the FIFO, a reader of our own lets the write end too.
  closed.then(() => closeSync(openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)))
  // Opens (once the put has), writes and closes: done before the put has read a byte.
  await writeFile(fifo, data)
  const [code] = await closed
  clearTimeout(timer)
  return { code, killed, stderr: output.stderr() }
}

describe('put from a FIFO', () => {
  it('a writer that writes a few bytes and closes before the put reads: published, not waited on for ever', async () => {
    const url = join(dir, 'short-fifo')
    const r = await putFromFifo(join(dir, 'short-fifo-in'), [url], 'abc')
    assert.ok(!r.killed, 'the put ended by itself')
    assert.equal(r.code, 0, r.stderr)
    assert.equal(run(['get', url, '-']).stdout, 'abc')
  })
})

describe('put --size from a FIFO or a device: by value, as stdin', () => {
  it('a device past --size is refused (exit 8), a FIFO of exactly --size bytes published; a regular file still refused', async () => {
    const url = join(dir, 'sized')
    const zero = run(['put', '/dev/zero', url, '--size', '1M'])
    assert.equal(zero.status, 8, zero.stderr)
    assert.match(
      zero.stderr,
      /^stream-segment: ERR_ABORTED: more than --size 1048576 bytes came: nothing was published\n$/,
    )
    assert.equal(run(['ls', url]).status, 3, 'nothing published')
    const r = await putFromFifo(join(dir, 'sized-fifo'), [url, '--size', '3'], 'abc')
    assert.equal(r.code, 0, r.stderr)
    assert.equal(run(['get', url, '-']).stdout, 'abc')
    writeFileSync(join(dir, 'regular'), 'abc')
    const file = run(['put', join(dir, 'regular'), url, '--size', '3'])
    assert.equal(file.status, 2, file.stderr)
    assert.match(file.stderr, /option --size is for stdin, a command, a FIFO or a device, not a regular file/)
  })
})

describe('an option given an empty value (--output=, --wal "")', () => {
  it('is refused naming the option as typed, before anything is done', async () => {
    const cases = [
      ['get', join(dir, 'c'), '--output='],
      ['get', join(dir, 'c'), '-o', ''],
      ['put', '-', join(dir, 'walled'), '--wal', ''],
      ['inspect', '--wal='],
      ['export', join(dir, 'c'), 's3://bucket/key', '--content-type='],
    ]
    for (const args of cases) {
      const err = fakeOutput()
      assert.equal(await main(args, fakeOutput(), err), 2, args.join(' '))
      const typed = args.find((a) => a.startsWith('-') && a !== '-')?.replace(/=$/, '')
      assert.equal(
        err.writes.join(''),
        `stream-segment: ERR_INVALID_ARGUMENT: option ${typed} needs a value (got an empty one)\n`,
        args.join(' '),
      )
    }
  })
})

describe('get to a file reports its requests', () => {
  it('one request is "1 request"', async () => {
    const url = join(dir, 'empty')
    writeFileSync(join(dir, 'empty.in'), '')
    assert.equal(await main(['put', join(dir, 'empty.in'), url], fakeOutput(), fakeOutput()), 0)
    const out = fakeOutput()
    assert.equal(await main(['get', url, join(dir, 'empty.out')], out, fakeOutput()), 0)
    assert.match(out.writes.join(''), /^got 0 B of checkpoint 1 into .*empty\.out in [\d.]+ s \(0 B\/s, 1 request\)\n$/)
  })
})

describe('a container with checkpoints and nothing published (no inode object)', () => {
  it("inspect, verify, export and get say so in the words of the command line: --cno N, not the API's cno", async () => {
    const url = join(dir, 'unpublished')
    writeFileSync(join(dir, 'unpublished.in'), 'some bytes')
    assert.equal(run(['put', join(dir, 'unpublished.in'), url]).status, 0)
    rmSync(join(url, 'inode'))
    for (const args of [
      ['inspect', url],
      ['verify', url],
      ['export', url, join(dir, 'unpublished.out')],
      ['get', url, join(dir, 'unpublished.out')],
    ]) {
      const r = run(args)
      assert.equal(r.status, 3, r.stderr)
      assert.equal(
        r.stderr,
        `stream-segment: ERR_NOT_FOUND: ${url}: nothing is published yet (no inode object): ` +
          `give --cno N to look at one of its checkpoints (stream-segment ls ${url} lists them)\n`,
        args[0],
      )
      assert.equal(r.stdout, '')
    }
    assert.ok(!existsSync(join(dir, 'unpublished.out')), 'export and get wrote nothing')
    // With --cno the checkpoint is there to read, as the message says.
    assert.equal(run(['export', url, join(dir, 'unpublished.out'), '--cno', '1']).status, 0)
    assert.equal(readFileSync(join(dir, 'unpublished.out'), 'utf8'), 'some bytes')
  })
})

describe('put --wal: the log folder and the container folder apart', () => {
  /** put - URL --wal DIR with a few bytes on stdin, run in `cwd`. */
  const putWal = (url: string, wal: string, cwd = dir) => {
    const r = spawnSync(process.execPath, [bin, 'put', '-', url, '--wal', wal], {
      env: quietEnv(),
      encoding: 'utf8',
      input: 'abc',
      cwd,
      timeout: 30_000,
    })
    return { status: r.status, stdout: r.stdout, stderr: r.stderr }
  }

  it('a log folder in the container folder (also through a link, relative, file://) or holding it is refused, exit 2, nothing made', () => {
    const base = join(dir, 'nest')
    mkdirSync(join(base, 'links'), { recursive: true })
    const c = join(base, 'c')
    symlinkSync(c, join(base, 'links', 'to-c'))
    symlinkSync(join(base, 'w'), join(base, 'links', 'to-w'))
    const inside = /^stream-segment: ERR_INVALID_ARGUMENT: option --wal: .* is (inside )?the container's folder /
    const holds = /^stream-segment: ERR_INVALID_ARGUMENT: option --wal: .* holds the container's folder /
    const cases: Array<[string, string, RegExp, string?]> = [
      [c, c, inside],
      [c, join(c, 'wal'), inside],
      [c, join(c, '.wal'), inside],
      [`file://${c}`, join(c, 'wal'), inside],
      [c, join(base, 'links', 'to-c', 'wal'), inside],
      [join(base, 'links', 'to-c'), join(c, 'wal'), inside],
      [c, join('..', 'c', 'wal'), inside, join(base, 'links')],
      [c, join('links', '..', 'c', 'wal'), inside, base],
      [join(base, 'w', 'c'), join(base, 'w'), holds],
      [join(base, 'links', 'to-w', 'c'), join(base, 'w'), holds],
      [join(base, 'w', 'c'), join(base, 'links', 'to-w'), holds],
    ]
    for (const [url, wal, message, cwd] of cases) {
      const r = putWal(url, wal, cwd)
      const what = `put - ${url} --wal ${wal} in ${cwd ?? dir}`
      assert.equal(r.status, 2, `${what}: ${r.stderr}`)
      assert.match(r.stderr, message, what)
      // Both folders named, as resolved: the user sees why they are one.
      const real = realpathSync(base)
      assert.ok(r.stderr.includes(join(real, message === inside ? 'c' : 'w')), what)
      assert.equal(r.stderr.split('\n').length, 2, `one line: ${what}`)
      assert.equal(r.stdout, '')
      assert.deepEqual(readdirSync(base).sort(), ['links'], `nothing made: ${what}`)
    }
    // Beside each other, even with a name that starts like the other's, they are fine.
    assert.equal(putWal(c, `${c}-wal`).status, 0)
    assert.equal(putWal(join(base, 'w2', 'c'), join(base, 'w'), base).status, 0)
    assert.equal(run(['get', c, '-']).stdout, 'abc')
  })
})

describe("put to mem:// (the command's own memory, gone when it ends)", () => {
  it('is refused, exit 2, before any input is read or command run: a "committed" there would keep nothing', () => {
    const marker = join(dir, 'producer-ran')
    writeFileSync(join(dir, 'mem.in'), 'abc')
    const cases = [
      ['put', '-', 'mem://x'],
      ['put', join(dir, 'mem.in'), 'MEM://x'],
      ['put', 'mem://x', '--', process.execPath, '-e', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`],
    ]
    for (const args of cases) {
      const r = spawnSync(process.execPath, [bin, ...args], { env: quietEnv(), encoding: 'utf8', input: 'abc' })
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: put: mem:\/\/x is this command's own memory, gone when it ends: nothing put there would be kept; give a directory, file:\/\/\/dir or s3:\/\/bucket\/prefix\n$/,
      )
      assert.equal(r.stdout, '')
    }
    assert.ok(!existsSync(marker), 'the command after -- was not run')
  })
})

describe('options named as typed in camel case too', () => {
  it('--noResume and --contentType are named so in their errors', async () => {
    const cases: Array<[string[], string]> = [
      [['put', '-', join(dir, 'c'), '--noResume'], 'option --noResume is for a file: stdin or a command never resumes'],
      [
        ['export', join(dir, 'c'), join(dir, 'typed.out'), '--contentType', 'x/y'],
        'export: --contentType applies to an S3 object only',
      ],
    ]
    for (const [args, message] of cases) {
      const err = fakeOutput()
      assert.equal(await main(args, fakeOutput(), err), 2, args.join(' '))
      assert.equal(err.writes.join(''), `stream-segment: ERR_INVALID_ARGUMENT: ${message}\n`)
    }
  })
})
