/**
 * The `stream-segment` command end to end: every command run as a process
 * (`node bin/stream-segment.cjs …`) against a directory store in a temp dir, and every
 * failure a one-line error with its code and exit code, no stack unless DEBUG is set.
 * The progress line, drawn only on a TTY, is tested in-process with a fake one.
 */
import assert from 'node:assert/strict'
import { execFileSync, type SpawnSyncOptions, spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import {
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from 'node:fs'
import { open, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { after, before, describe, it } from 'node:test'
import { kebab, READ_OPTIONS } from '../lib/cli/args.js'
import { commandOptions, EXIT_CODES, main, progressLine } from '../lib/cli.js'
import { ERROR_CODES, type ErrorCode, type StreamSegmentError } from '../lib/errors.js'
import { decodeHeader, encodeHeader, HEADER_BYTES } from '../lib/format/header.js'
import { decodeInodeObject, encodeInodeObject, FORMAT_STREAM, INODE_KEY, segmentKey } from '../lib/format/index.js'
import { SegmentFile } from '../lib/segment-file.js'
import { SPEC_DEFAULTS } from '../lib/settings.js'
import { DirectoryStore } from '../lib/store/directory.js'
import { uploadFile } from '../lib/streams/upload-file.js'
import { collected } from './helpers/child.js'
import { bin, fakeOutput, quietEnv } from './helpers/cli.js'
import { type CliRun, runAll, runBatch, runNamed } from './helpers/cli-runs.js'
import { resealInodeObject } from './helpers/format.js'

const run = (args: string[], options: SpawnSyncOptions = {}) => {
  const env = quietEnv()
  const r = spawnSync(process.execPath, [bin, ...args], { env, maxBuffer: 64 << 20, ...options })
  return {
    status: r.status,
    stdout: r.stdout as unknown as Buffer,
    text: String(r.stdout),
    stderr: String(r.stderr),
  }
}
const MiB = 1024 * 1024

/** Whether util-linux `script` is here to run a command under a pseudo-terminal. */

/** A child process's exit code and output, once it has closed. */
interface Outcome {
  status: number | null
  stderr: string
}

/** Spawns the CLI with the debug log of file opens on stderr, resolving once the container is open. */
function spawnOpened(args: string[]) {
  const child = spawn(process.execPath, [bin, ...args], { env: { ...quietEnv(), DEBUG: 'stream-segment:file' } })
  let stderr = ''
  child.stdin.on('error', () => {}) // EPIPE once it has exited
  const closed = once(child, 'close').then(([status]): Outcome => ({ status: status as number | null, stderr }))
  // Or closed without opening: the caller then sees why, rather than waiting for ever.
  const opened = new Promise<void>((resolve) => {
    child.stderr.on('data', (c) => {
      stderr += c
      if (/open .* at checkpoint \d+/.test(stderr)) resolve()
    })
    closed.then(() => resolve())
  })
  return { child, opened, closed }
}

/**
 * `put - URL` interrupted by SIGINT: stdin stays open, so the put is still running when the
 * signal comes; the debug log says when the container is open (the SIGINT handler is in
 * place by then).
 */
async function interruptedPut(url: string): Promise<Outcome> {
  const p = spawnOpened(['put', '-', url])
  p.child.stdin.write(randomBytes(MiB))
  await p.opened
  p.child.kill('SIGINT')
  const r = await p.closed
  p.child.stdin.destroy()
  return r
}

/**
 * Two `put - URL --conflict-policy fail` open the same checkpoint; the first publishes, so
 * the second's publication fails its condition: ERR_CONFLICT.
 */
async function conflictingPuts(url: string): Promise<[Outcome, Outcome]> {
  const args = ['put', '-', url, '--conflict-policy', 'fail']
  const [a, b] = [spawnOpened(args), spawnOpened(args)]
  a.child.stdin.write('first ')
  b.child.stdin.write('second ')
  await Promise.all([a.opened, b.opened])
  a.child.stdin.end('writer')
  const first = await a.closed
  b.child.stdin.end('writer')
  return [first, await b.closed]
}

it('--version prints the package version', () => {
  const r = run(['--version'])
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.text.trim(), JSON.parse(readFileSync('package.json', 'utf8')).version)
})

it('--help prints usage and exits 0; no arguments exits 2', () => {
  const r = run(['--help'])
  assert.equal(r.status, 0)
  assert.match(r.text, /^Usage: stream-segment <command>/)
  for (const c of ['put', 'get', 'ls', 'inspect', 'verify', 'gc', 'rm']) assert.match(r.text, new RegExp(`\\n  ${c} `))
  // No command is a usage mistake: the usage goes to stderr, nothing to stdout.
  const none = run([])
  assert.equal(none.status, 2)
  assert.equal(none.text, '')
  assert.match(none.stderr, /^Usage: stream-segment <command>/)
})

it('every first argument that is no command (help, -h, --help, -v, --version) works and is in --help and docs/cli.md', () => {
  const help = run(['--help']).text
  const synopsis = readFileSync('docs/cli.md', 'utf8').split('## Commands')[0] as string
  for (const [args, out] of [
    [['help'], help],
    [['help', 'ls'], help],
    [['-h'], help],
    [['--help'], help],
    [['-v'], run(['--version']).text],
  ] as const) {
    const r = run([...args])
    assert.deepEqual([r.status, r.text, r.stderr], [0, out, ''], args.join(' '))
  }
  // As each is written in the help's Options (`-h, --help`, `help [command]`) and the synopsis.
  for (const word of ['-h', '--help', 'help [command]', '-v', '--version']) {
    assert.ok(help.includes(` ${word}`), `--help names ${word}`)
    assert.ok(synopsis.includes(` ${word}`), `docs/cli.md names ${word}`)
  }
})

it("--help and docs/cli.md's table give every command with every option it takes", () => {
  const help = run(['--help']).text
  const table = section(readFileSync('docs/cli.md', 'utf8'), '## Commands')
  const commands = commandOptions()
  assert.ok((commands.gc ?? []).includes('keep-newer-than'), 'the options are found')
  const missing: string[] = []
  for (const [command, options] of Object.entries(commands)) {
    // The help's entries run from "  command " to the next command's; the table's row is one line.
    const entries = [...help.matchAll(new RegExp(`\\n  ${command} [\\s\\S]*?(?=\\n  [a-z]+ [<-]|\\n\\n)`, 'g'))]
    const entry = entries.length === 0 ? undefined : entries.map((m) => m[0]).join('')
    const row = table.split('\n').find((l) => l.startsWith(`| \`${command}\``))
    if (entry === undefined) missing.push(`--help: ${command}`)
    if (row === undefined) missing.push(`docs/cli.md: ${command}`)
    for (const o of options) {
      if (entry !== undefined && !entry.includes(`--${o}`)) missing.push(`--help: ${command} --${o}`)
      if (row !== undefined && !row.includes(`--${o}`)) missing.push(`docs/cli.md: ${command} --${o}`)
    }
  }
  for (const o of READ_OPTIONS.map(kebab)) if (!help.includes(`--${o}`)) missing.push(`--help: --${o}`)
  assert.deepEqual(missing, [])
})

it('every stream-segment command line in README.md and docs/ names a command and options it takes', () => {
  const own = commandOptions()
  const settings = Object.keys(SPEC_DEFAULTS).map(kebab)
  const reads = READ_OPTIONS.map(kebab)
  const known = (command: string) =>
    new Set([...(own[command] ?? []), ...(command === 'put' ? settings : command === 'get' ? reads : []), 'help'])
  const docs = ['README.md', ...readdirSync('docs').map((f) => `docs/${f}`)].filter((f) => f.endsWith('.md'))
  const wrong: string[] = []
  let lines = 0
  for (const doc of docs) {
    const text = readFileSync(doc, 'utf8')
    // Command lines of the ```sh blocks, and inline code spans on one line.
    const code = [
      ...[...text.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].flatMap((m) => (m[1] as string).split('\n')),
      ...[...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1] as string),
    ]
    for (const line of code) {
      for (const m of line.matchAll(/(?:^|[\s|(])stream-segment ([^#|;&]*)/g)) {
        lines++
        const tokens = (m[1] as string).trim().split(/\s+/)
        const command = tokens[0] as string
        if (command === '--help' || command === '--version') continue
        if (own[command] === undefined) {
          wrong.push(`${doc}: unknown command in "stream-segment ${m[1]}"`)
          continue
        }
        for (const t of tokens.slice(1)) {
          if (t === '--') break // the command's own arguments follow
          const name = /^--([a-z][a-z-]*)/.exec(t)?.[1]
          if (name !== undefined && !known(command).has(name)) wrong.push(`${doc}: ${command} does not take --${name}`)
        }
      }
    }
  }
  assert.ok(lines >= 20, `only ${lines} command lines found`)
  assert.deepEqual(wrong, [])
})

it('an S3 client with no region or no credentials fails at once with a code that says so, not ERR_STORE', () => {
  // No server is needed: the SDK finds the configuration wanting before any request.
  const env: NodeJS.ProcessEnv = { ...quietEnv(), AWS_ENDPOINT_URL_S3: 'http://127.0.0.1:9', HOME: '/nonexistent' }
  for (const name of [
    'AWS_REGION',
    'AWS_DEFAULT_REGION',
    'AWS_PROFILE',
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
  ]) {
    delete env[name]
  }
  Object.assign(env, {
    AWS_CONFIG_FILE: '/nonexistent',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent',
    AWS_EC2_METADATA_DISABLED: 'true',
  })
  const t0 = performance.now()
  // A custom endpoint signs with us-east-1 when none is set; AWS itself needs one.
  const aws: NodeJS.ProcessEnv = { ...env, AWS_ACCESS_KEY_ID: 'a', AWS_SECRET_ACCESS_KEY: 'b' }
  delete aws.AWS_ENDPOINT_URL_S3
  delete aws.AWS_ENDPOINT_URL
  const noRegion = run(['ls', 's3://bucket/x'], { env: aws })
  assert.equal(noRegion.status, 2, noRegion.stderr)
  assert.match(noRegion.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: .*no region is configured \(set AWS_REGION/)
  const noKeys = run(['ls', 's3://bucket/x'], { env: { ...env, AWS_REGION: 'us-east-1' } })
  assert.equal(noKeys.status, 12, noKeys.stderr)
  assert.match(noKeys.stderr, /^stream-segment: ERR_AUTH: .*no credentials found/)
  // Not retried: the library's retries back off for seconds in all.
  assert.ok(performance.now() - t0 < 20_000, `${performance.now() - t0} ms`)
})

it('an unknown command is a one-line error with its code, no stack', () => {
  const r = run(['frobnicate'])
  assert.equal(r.status, 2)
  assert.equal(
    r.stderr,
    'stream-segment: ERR_INVALID_ARGUMENT: unknown command "frobnicate" (see stream-segment --help)\n',
  )
})

it('a misspelt command, or option where the command goes, names the one it is a slip away from', async () => {
  const cases: Array<[string, string]> = [
    ['lss', 'unknown command "lss" (did you mean ls? see stream-segment --help)'],
    ['exprot', 'unknown command "exprot" (did you mean export? see stream-segment --help)'],
    ['--hlep', 'unknown option "--hlep" (did you mean --help? see stream-segment --help)'],
    ['--verison', 'unknown option "--verison" (did you mean --version? see stream-segment --help)'],
    ['-x', 'unknown option "-x" (see stream-segment --help)'],
  ]
  for (const [first, message] of cases) {
    const out = fakeOutput(false)
    const err = fakeOutput(false)
    assert.equal(await main([first, 'c'], out, err), 2, first)
    assert.equal(err.writes.join(''), `stream-segment: ERR_INVALID_ARGUMENT: ${message}\n`, first)
    assert.equal(out.writes.join(''), '', first)
  }
})

describe('commands on a directory store', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-'))
  const url = join(dir, 'container')
  const input = join(dir, 'in.bin')
  const data = randomBytes(3 * MiB + 1234)
  const second = randomBytes(MiB)
  writeFileSync(input, data)
  after(() => rmSync(dir, { recursive: true, force: true }))

  // The same settings for a file and for stdin: objects of 1 MiB sent ahead, a dirty limit
  // (32 blocks, 128 KiB) far below them.
  const small = ['--stream-segment-bytes', '1MiB', '--data-cache-dirty-max-bytes-threshold', '64K']

  it('put writes a regular file by reference, then stdin by value; --json gives the FlushTiming', () => {
    const r = run(['put', input, url, ...small])
    assert.equal(r.status, 0, r.stderr)
    assert.match(
      r.text,
      /^committed checkpoint 1 of .*container: 3\.0 MiB by reference in [\d.]+ s \([\d.]+ \w+\/s\), \d+ objects?\n/,
    )
    assert.match(r.text, /\nflush: [\d.]+ ms \(data [\d.]+, part 0 [\d.]+, inode [\d.]+\), 0 conflicts\n/)
    // By reference the dirty limit does not apply: whole 1 MiB objects went ahead.
    const sent = /\nsent ahead ([\d.]+) MiB, /.exec(r.text)
    assert.ok(sent && Number(sent[1]) >= 2, r.text)
    assert.equal(r.stderr, '', 'no progress line without a TTY')
    const j = run(
      ['put', '-', `file://${url}`, '--json', '--streamSegmentBytes=1M', '--dataCacheDirtyMaxBytesThreshold=64K'],
      {
        input: second,
      },
    )
    assert.equal(j.status, 0, j.stderr)
    assert.equal(j.stderr, '')
    const out = JSON.parse(j.text)
    assert.equal(out.by, 'value')
    assert.equal(out.bytes, second.length)
    assert.equal(out.flushTiming.cno, 2)
    assert.ok(out.flushTiming.objects > 1, `${out.flushTiming.objects} objects`)
    assert.ok(typeof out.flushTiming.streamSentBytes === 'number')
    // An empty stdin into a container that holds nothing: the second put changes nothing and says so.
    const empty = join(dir, 'empty')
    assert.match(run(['put', '-', empty], { input: '' }).text, /^committed checkpoint 1 of /)
    const same = run(['put', '-', empty], { input: '' })
    assert.equal(same.status, 0, same.stderr)
    assert.match(same.text, /^checkpoint 1 of .*empty unchanged: 0 B by value in [\d.]+ s .*, 0 objects\n/)
    const again = JSON.parse(run(['put', input, url, '--json']).text)
    assert.equal(again.by, 'reference')
    assert.equal(again.bytes, data.length)
    assert.equal(again.flushTiming.cno, 3)
  })

  it('get reads to stdout or a file, a range (inclusive), an older checkpoint', async () => {
    // Every get only reads the container (each to its own file): they run together.
    const out = join(dir, 'out.bin')
    const pastFile = join(dir, 'past.bin')
    const pastRanges = [`${data.length + 10}-${data.length + 20}`, `${data.length}-`]
    const got = await runNamed({
      r: { args: ['get', url] },
      byRef: { args: ['get', url, '-', '--cno', '1'] },
      f: { args: ['get', url, out, '--cno', '2'] },
      // The read options: small GETs, one at a time, no summary cache, a small read-ahead.
      tuned: {
        args: ['get', url, '-', '--cno', '1', '--read-get-max-bytes', '8k', '--read-max-concurrency', '1'].concat([
          '--read-summary-cache-bytes',
          '0',
          '--read-ahead-bytes',
          '64k',
        ]),
      },
      badRead: { args: ['get', url, '-', '--read-max-concurrency', '0'] },
      range: { args: ['get', url, '-', '--range', '4000-9000', '--cno', '1'] },
      // An end however far past the file is clipped too (it is past any safe integer here).
      far: { args: ['get', url, '-', '--range', `${data.length - 10}-99999999999999999999`] },
      tail: { args: ['get', url, '-', '--range', `${data.length - 10}-`] },
      // Starting inside and ending past the end: clipped to the end.
      clipped: { args: ['get', url, '-', '--range', `${data.length - 10}-${data.length + 1000}`] },
      past0: { args: ['get', url, '-', '--range', pastRanges[0] as string] },
      past1: { args: ['get', url, '-', '--range', pastRanges[1] as string] },
      pf: { args: ['get', url, pastFile, '--range', `${data.length}-`] },
    })
    const { r, byRef, f, tuned, badRead, range, far, tail, clipped, pf } = got
    assert.equal(r.status, 0, r.stderr)
    assert.ok(r.stdout.equals(data))
    assert.equal(byRef.status, 0, byRef.stderr)
    assert.ok(byRef.stdout.equals(data), 'the file put by reference with a small dirty limit reads back')
    assert.equal(f.status, 0, f.stderr)
    assert.match(f.text, /^got 1\.0 MiB of checkpoint 2 into .*out\.bin/)
    assert.ok(readFileSync(out).equals(second))
    assert.equal(tuned.status, 0, tuned.stderr)
    assert.ok(tuned.stdout.equals(data))
    assert.equal(badRead.status, 2)
    assert.match(badRead.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: option --read-max-concurrency = 0: .*\n$/)
    assert.equal(range.status, 0, range.stderr)
    assert.ok(range.stdout.equals(data.subarray(4000, 9001)))
    assert.equal(far.status, 0, far.stderr)
    assert.ok(far.stdout.equals(data.subarray(data.length - 10)))
    assert.ok(tail.stdout.equals(data.subarray(data.length - 10)))
    assert.equal(clipped.status, 0, clipped.stderr)
    assert.ok(clipped.stdout.equals(data.subarray(data.length - 10)))
    // Starting at or past the end: ERR_RANGE, naming the range and the size; no data.
    for (const [i, range] of pastRanges.entries()) {
      const past = i === 0 ? got.past0 : got.past1
      assert.equal(past.status, 9, past.stderr)
      assert.equal(past.stdout.length, 0)
      assert.match(
        past.stderr,
        new RegExp(
          `^stream-segment: ERR_RANGE: option --range ${range}: starts at byte \\d+, at or past the end of checkpoint 3 of .*container \\(${data.length} bytes, bytes 0-${data.length - 1}\\)\n$`,
        ),
      )
    }
    assert.equal(pf.status, 9, pf.stderr)
    assert.equal(existsSync(pastFile), false, 'no file, and no temporary one, is left')
    assert.deepEqual(
      readdirSync(dir).filter((n) => n.includes('.tmp')),
      [],
    )
  })

  it('get: -o/--output name the file, --json reports on it, - is stdout, -- ends the options', async () => {
    const o = join(dir, 'o.bin')
    const r = run(['get', url, '-o', o, '--cno', '2'])
    assert.equal(r.status, 0, r.stderr)
    assert.ok(readFileSync(o).equals(second))
    const j = run(['get', url, `--output=${o}`, '--json', '--range', '0-99'])
    assert.equal(j.status, 0, j.stderr)
    const out = JSON.parse(j.text)
    assert.deepEqual([out.cno, out.size, out.bytes, out.file], [3, data.length, 100, o])
    assert.ok(out.timing.requests.data >= 1, j.text)
    assert.ok(readFileSync(o).equals(data.subarray(0, 100)))
    const flagLast = run(['get', url, o, '--json'])
    assert.equal(flagLast.status, 0, flagLast.stderr)
    assert.equal(JSON.parse(flagLast.text).bytes, data.length, '--json last is a flag, not an option needing a value')
    const dash = run(['get', url, '-o', '-', '--range', '0-9'])
    assert.equal(dash.status, 0, dash.stderr)
    assert.ok(dash.stdout.equals(data.subarray(0, 10)))
    // After --, an argument starting with - is a file name (here relative to the working directory).
    const dd = run(['get', url, '--range=0-9', '--', '--odd'], { cwd: dir })
    assert.equal(dd.status, 0, dd.stderr)
    assert.ok(readFileSync(join(dir, '--odd')).equals(data.subarray(0, 10)))
    const cases: Array<[string[], RegExp]> = [
      [['get', url, '--json'], /--json reports on stdout, where the data would go: give a file/],
      [['get', url, '-', '--json'], /--json reports on stdout/],
      [['get', url, o, '-o', o], /get: two targets, .* and -o .*: give one/],
      [['get', url, '--cno'], /^stream-segment: ERR_INVALID_ARGUMENT: option --cno needs a value\n$/],
      [
        ['get', url, '--cno', '--json'],
        /option --cno needs a value \(got --json; if that is the value, write --cno=--json\)/,
      ],
      [['get', url, '--json=yes', o], /option --json takes no value/],
      [['get', url, '-x'], /unknown option -x/],
      [['ls', url, '--cno', '1'], /unknown option --cno/],
      [['rm', url, '--frob=1'], /unknown option --frob/],
      [['gc', url, '--keep-cnos', '1,x'], /option --keep-cnos: "x" is not a checkpoint number \(1\.\.1073741823\)/],
      [['gc', url, '--keepCnos=1,x'], /option --keepCnos: "x" is not a checkpoint number/],
      // Past the last number a key can carry: a mistake, not a checkpoint that is missing (exit 3).
      [['gc', url, '--keep-cnos', '99999999999'], /option --keep-cnos: "99999999999" is not a checkpoint number/],
      [['gc', url, '--keep-cnos', '1073741824'], /option --keep-cnos: "1073741824" is not a checkpoint number/],
      [['gc', url, '--keep-cnos', '0'], /option --keep-cnos: "0" is not a checkpoint number/],
      [['gc', url, '--keep-cnos', '1,,2'], /option --keep-cnos: "" is not a checkpoint number/],
      [['gc', url, '--keep-cnos=-1'], /option --keep-cnos: "-1" is not a checkpoint number/],
      [['put', '-', url, '--stream-segment-bytes', 'many'], /option --stream-segment-bytes: "many" is not a size/],
      [['put', '-', url, '--format', 'fancy'], /option --format = "fancy": must be 'stream' or 'parted'/],
      [['put', '-', url, '--format', 'parted'], /option --format = parted: the container at .* has stream/],
      [
        ['get', url, '-', '--cno', '10000000000'],
        /option --cno: "10000000000" is not a checkpoint number \(1\.\.1073741823\)/,
      ],
      [['inspect', '--wal', dir, '--cno', '3'], /option --cno is for a container's checkpoint, not with --wal/],
      [['put', '-', url, '--wal', input], /WAL .*in\.bin: the folder cannot be made \(EEXIST\)/],
      // Not taken and dropped: a file is written as its blocks come, with no read-ahead.
      [
        ['get', url, join(dir, 'ahead.bin'), '--read-ahead-bytes', '1M'],
        /option --read-ahead-bytes is for stdout \(get URL -\), not a file/,
      ],
    ]
    // Each is refused before it reads or writes anything: all in one process.
    const refused = await runBatch(cases.map(([args]) => ({ args })))
    for (const [i, [args, re]] of cases.entries()) {
      const f = refused[i] as CliRun
      assert.equal(f.status, 2, `${args.join(' ')}: ${f.stderr}`)
      assert.match(f.stderr, re, args.join(' '))
      assert.match(f.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: [^\n]*\n$/, `${args.join(' ')}: one line`)
    }
    assert.ok(!existsSync(join(dir, 'ahead.bin')), 'a refused get writes no file')
    // -h or --help anywhere after a command prints the usage, unless after --.
    const helps = [
      ['put', '-h'],
      ['get', url, '--help'],
      ['gc', '--frob', '-h'],
    ]
    const helped = await runBatch(helps.map((args) => ({ args })))
    for (const [i, args] of helps.entries()) {
      const h = helped[i] as CliRun
      assert.equal(h.status, 0, `${args.join(' ')}: ${h.stderr}`)
      assert.match(h.text, /^Usage: stream-segment/)
    }
    const notHelp = run(['get', url, '--range', '0-0', '--', '--help'], { cwd: dir })
    assert.equal(notHelp.status, 0, notHelp.stderr)
    assert.ok(readFileSync(join(dir, '--help')).equals(data.subarray(0, 1)))
  })

  it('ls lists the checkpoints; --json too', () => {
    const r = run(['ls', url])
    assert.equal(r.status, 0, r.stderr)
    const lines = r.text.trim().split('\n')
    assert.match(lines[0] as string, /^cno +size +objects +bytes +only +time +state$/)
    assert.match(
      lines[1] as string,
      new RegExp(`^ *1 +${data.length} +\\d+ +\\d+ +\\d+ +\\d{4}-\\d\\d-\\d\\dT\\S+ +complete$`),
    )
    assert.match(lines[2] as string, new RegExp(`^ *2 +${second.length} .* complete$`))
    assert.match(lines[3] as string, /^ *3 .* published$/)
    assert.match(lines[4] as string, /^stored: \d+ bytes;/)
    const j = JSON.parse(run(['ls', url, '--json']).text)
    assert.equal(j.published, 3)
    assert.equal(j.checkpoints.length, 3)
    // Each checkpoint's part 0 is its own; the stored bytes are every object's.
    let stored = 0
    for (const c of j.checkpoints) {
      assert.ok(c.uniqueBytes > 0 && c.uniqueBytes <= c.bytes, `${c.cno}: ${c.uniqueBytes} of ${c.bytes}`)
      stored += c.bytes
    }
    assert.equal(j.storedBytes, stored)
  })

  it('ls says of an unpublished checkpoint what it was built on, and whether the next writer publishes it', async () => {
    const where = join(dir, 'ls-unpublished')
    const store = new DirectoryStore(where)
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(4096, 1))
    await f.flush() // 1
    const first = await store.get('inode')
    await f.write(0, Buffer.alloc(4096, 2))
    await f.flush() // 2, on 1
    await f.close()
    await store.put('inode', first) // as if 2's publication had been interrupted
    const loser = await SegmentFile.open(store, { conflictPolicy: 'fail', rollForwardAfterMs: 3_600_000 })
    await loser.write(0, Buffer.alloc(4096, 3))
    const winner = await SegmentFile.open(store, { rollForwardAfterMs: 3_600_000 })
    await winner.write(0, Buffer.alloc(4096, 4))
    await winner.flush() // 3, on 1
    await winner.close()
    await assert.rejects(loser.flush()) // its part 0 (4, on 1) stays
    await loser.close()
    const out = fakeOutput()
    assert.equal(await main(['ls', where], out, fakeOutput()), 0)
    const lines = out.writes.join('').split('\n')
    // 2 is not in the published history (3 was built on 1): never published, as 4.
    assert.match(lines[2] as string, /^ *2 .* unpublished, built on 1: never published$/)
    assert.match(lines[3] as string, /^ *3 .* published$/)
    assert.match(lines[4] as string, /^ *4 .* unpublished, built on 1: never published$/)
    await store.put('inode', first)
    const again = fakeOutput()
    assert.equal(await main(['ls', where], again, fakeOutput()), 0)
    // 2, 3 and 4 are all built on 1 now: a writer publishes the first old enough that
    // checks out, whichever it is, and never the others.
    for (const cno of [2, 3, 4]) {
      assert.match(
        again.writes.join(''),
        new RegExp(
          `\\n *${cno} .* unpublished, built on 1: may be rolled forward \\(a writer publishes at most one of 2, 3, 4, each built on 1\\)\\n`,
        ),
      )
    }
  })

  it('inspect shows every object with its header fields; --json too', () => {
    const r = run(['inspect', url, '--cno', '1'])
    assert.equal(r.status, 0, r.stderr)
    assert.match(
      r.text,
      new RegExp(`^checkpoint 1 of .*: StreamSegment, ${data.length} bytes, blocks 4096, meta blocks 4096`),
    )
    assert.match(r.text, /\nobject +size +flags +data +meta +summary +dead/)
    assert.match(r.text, /\n0000000001\.0 +\d+ +CHECKPOINT /)
    // By reference: objects sent ahead whole though the file is 24 times the dirty limit.
    assert.match(r.text, /\n0000000001\.1 +\d+ +SENT_AHEAD +340 +1 +340 +0 /)
    assert.match(r.text, /\n0000000001\.2 +\d+ +SENT_AHEAD /)
    assert.doesNotMatch(r.text, /PARTIAL/)
    // By value (stdin), the same settings: partial segments written under the dirty limit.
    const v = run(['inspect', url, '--cno', '2'])
    assert.equal(v.status, 0, v.stderr)
    assert.match(v.text, /\n0000000002\.1 +\d+ +PARTIAL /)
    assert.doesNotMatch(v.text, /SENT_AHEAD/)
    const j = JSON.parse(run(['inspect', url, '--json']).text)
    assert.equal(j.cno, 3)
    assert.ok(j.objects.every((o: { header?: unknown }) => o.header !== undefined))
  })

  it('a reader of stdout that goes away ends the output quietly (exit 0, no stack)', async () => {
    for (const args of [
      ['ls', url],
      ['inspect', url],
    ]) {
      const child = spawn(process.execPath, [bin, ...args], { env: quietEnv(), stdio: ['ignore', 'pipe', 'pipe'] })
      child.stdout.destroy() // before the command writes anything: its writes meet EPIPE
      let stderr = ''
      child.stderr.on('data', (d) => {
        stderr += d
      })
      const [status] = await once(child, 'close')
      assert.equal(status, 0, stderr)
      assert.equal(stderr, '')
    }
  })

  it('put - refuses a directory as stdin (it reads as an empty file) and publishes nothing', () => {
    const before = run(['ls', url, '--json']).text
    const fd = openSync(dir, 'r')
    try {
      const r = run(['put', '-', url], { stdio: [fd, 'pipe', 'pipe'] })
      assert.equal(r.status, 2, r.stderr)
      assert.equal(r.stderr, 'stream-segment: ERR_INVALID_ARGUMENT: -: stdin is a directory\n')
    } finally {
      closeSync(fd)
    }
    assert.equal(run(['ls', url, '--json']).text, before)
  })

  it('put - refuses /dev/null as stdin, given or closed (it reads as an empty file), unless --size 0 says so', () => {
    const before = run(['ls', url, '--json']).text
    const refused =
      'stream-segment: ERR_INVALID_ARGUMENT: -: stdin is /dev/null (given so, or closed): no content; --size 0 publishes an empty file\n'
    const given = run(['put', '-', url], { stdio: ['ignore', 'pipe', 'pipe'] }) // Node gives /dev/null
    assert.equal(given.status, 2, given.stderr)
    assert.equal(given.stderr, refused)
    const closed = spawnSync('sh', ['-c', 'exec "$0" "$1" put - "$2" <&-', process.execPath, bin, url], {
      env: quietEnv(),
    })
    assert.equal(closed.status, 2, String(closed.stderr))
    assert.equal(String(closed.stderr), refused)
    assert.equal(run(['ls', url, '--json']).text, before, 'nothing published')
    const empty = join(dir, 'emptied')
    assert.equal(run(['put', '-', empty, '--json'], { input: 'x' }).status, 0)
    const r = run(['put', '-', empty, '--size', '0', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] })
    assert.equal(r.status, 0, r.stderr)
    assert.equal(JSON.parse(r.text).bytes, 0)
    assert.equal(JSON.parse(run(['ls', empty, '--json']).text).checkpoints.at(-1).size, 0)
  })

  it('verify passes a clean checkpoint, and names what and where when a byte flips (exit 4)', async () => {
    const cnos = ['1', '2', '3']
    const clean = await runAll(cnos.map((cno) => ({ args: ['verify', url, '--cno', cno] })))
    for (const [i, cno] of cnos.entries()) {
      const r = clean[i] as CliRun
      assert.equal(r.status, 0, r.stderr + r.text)
      assert.match(
        r.text,
        new RegExp(`^checkpoint ${cno} of .*: (1 object|\\d+ objects), .* data slots checked, .*: ok\\n$`),
      )
    }
    const victim = join(url, '0000000001.1')
    const b = readFileSync(victim)
    b[5000] = (b[5000] as number) ^ 0x10
    writeFileSync(victim, b)
    const v = run(['verify', url, '--cno', '1'])
    assert.equal(v.status, 4, v.stderr)
    assert.match(
      v.text,
      /^ERR_CORRUPT block 0000000001\.1 byte 4096: .*data slot 1 \(block 1, live\) at byte 4096: CRC-32 0x[0-9a-f]{8} computed, the summary says 0x[0-9a-f]{8}\n/,
    )
    assert.match(v.text, /: 1 problem\n$/)
    assert.equal(v.stderr, `stream-segment: ERR_CORRUPT: verify found 1 problem in checkpoint 1 of ${url}\n`)
    const j = JSON.parse(run(['verify', url, '--cno', '1', '--json']).text)
    assert.equal(j.problems[0].what, 'block')
    const g = run(['get', url, '-', '--cno', '1'])
    assert.equal(g.status, 4)
    assert.match(
      g.stderr,
      /^stream-segment: ERR_CORRUPT: .*0000000001\.1: block 1 at offset 4096 has CRC-32 0x[0-9a-f]{8}, the summary says 0x[0-9a-f]{8}\n$/,
    )
    b[5000] = (b[5000] as number) ^ 0x10
    writeFileSync(victim, b)
    // inspect reads headers, summaries and nodes, not data: a flipped header byte is its problem.
    const h = readFileSync(victim)
    h[h.length - 100] = (h[h.length - 100] as number) ^ 0x10
    writeFileSync(victim, h)
    const i = run(['inspect', url, '--cno', '1'])
    assert.equal(i.status, 4, i.stderr)
    assert.match(i.text, /\nERR_CORRUPT header 0000000001\.1[ :]/)
    assert.match(i.stderr, /^stream-segment: ERR_CORRUPT: inspect found (1 problem|\d+ problems) in checkpoint 1 of /)
    assert.ok(i.stderr.endsWith(` of ${url}\n`) && i.stderr.split('\n').length === 2, i.stderr)
    h[h.length - 100] = (h[h.length - 100] as number) ^ 0x10
    writeFileSync(victim, h)
  })

  it('failures: one line with the code, distinct exit codes, a stack only with DEBUG', async () => {
    const cases: Array<[string[], number, RegExp]> = [
      [['ls', 'ftp://host/x'], 2, /ERR_INVALID_ARGUMENT: openStore: ftp:\/\/host\/x: unsupported scheme/],
      [['ls', 's3://Bad_Bucket/x'], 2, /ERR_INVALID_ARGUMENT: .*valid bucket name/],
      [['ls', join(dir, 'nothing')], 3, /ERR_NOT_FOUND: .*no container here/],
      [['get', join(dir, 'nothing')], 3, /ERR_NOT_FOUND: .*no container here/],
      [['get', url, '-', '--cno', '9'], 3, /ERR_NOT_FOUND: .*checkpoint 9/],
      [['inspect', url, '--cno', '9'], 3, /ERR_NOT_FOUND: .*no checkpoint 9/],
      [['get', url, '-', '--range', '9-3'], 2, /ERR_INVALID_ARGUMENT: option --range: 9-3 ends before it starts/],
      [['get', url, '-', '--range', 'x'], 2, /ERR_INVALID_ARGUMENT: option --range/],
      [['get', url, '-', '--cno', '0'], 2, /ERR_INVALID_ARGUMENT: option --cno/],
      [['get', url, '-', '--frob', '1'], 2, /ERR_INVALID_ARGUMENT: unknown option --frob/],
      [['put', input, url, '--frob', '1'], 2, /ERR_INVALID_ARGUMENT: unknown option --frob/],
      [
        ['put', input, url, '--segmentMpuMaxConcurrency', '1000'],
        2,
        /ERR_INVALID_ARGUMENT: option --segmentMpuMaxConcurrency = 1000/,
      ],
      [
        ['put', input, url, '--segmentMpuChunkSize', 'lots'],
        2,
        /ERR_INVALID_ARGUMENT: option --segmentMpuChunkSize: "lots" is not a size/,
      ],
      [['put', join(dir, 'missing.bin'), url], 3, /ERR_NOT_FOUND: .*missing\.bin: no such file/],
      [['put', dir, url], 2, /ERR_INVALID_ARGUMENT: .*: is a directory/],
      // The arguments swapped: a container given first, the file second.
      [
        ['put', 's3://no-bucket/c', input],
        3,
        /ERR_NOT_FOUND: s3:\/\/no-bucket\/c: no such file \(a URL: put takes the file first, then the container: put .*in\.bin s3:\/\/no-bucket\/c\)$/m,
      ],
      [
        ['put', dir, input],
        2,
        /ERR_INVALID_ARGUMENT: .*: is a directory \(put takes the file first, then the container: put .*in\.bin .*\)$/m,
      ],
      [
        ['put', input],
        2,
        /ERR_INVALID_ARGUMENT: usage: stream-segment put .*\(2 arguments, got 1: ".*in\.bin"; give the container after the file: put .*in\.bin <url>\)$/m,
      ],
      [
        ['put', url],
        2,
        /ERR_INVALID_ARGUMENT: usage: stream-segment put .*\(2 arguments, got 1: ".*container"; to write stdin, give - as the file: put - .*container\)$/m,
      ],
      [
        ['put', '-'],
        2,
        /ERR_INVALID_ARGUMENT: usage: stream-segment put .*\(2 arguments, got 1: "-"; give the container after it: put - <url>\)$/m,
      ],
      [
        ['put', url, '--'],
        2,
        /ERR_INVALID_ARGUMENT: usage: stream-segment put .*\(2 arguments, got 1: ".*container"; no command after --: put .*container -- <command> \[args…\]\)$/m,
      ],
      [['verify'], 2, /ERR_INVALID_ARGUMENT: usage: stream-segment verify <url> .*\(1 argument, got none\)$/m],
      [
        ['ls', url, url],
        2,
        /ERR_INVALID_ARGUMENT: usage: stream-segment ls <url> .*\(1 argument, got 2: ".*" ".*"\)$/m,
      ],
      [['get'], 2, /ERR_INVALID_ARGUMENT: usage: stream-segment get <url> .*\(1 or 2 arguments, got none\)$/m],
      [['get', url, join(dir, 'no', 'such', 'dir', 'out')], 3, /ERR_NOT_FOUND: .*no such file or directory/],
    ]
    // Each fails before any data moves: all in one process.
    const failed = await runBatch(cases.map(([args]) => ({ args })))
    for (const [i, [args, status, re]] of cases.entries()) {
      const r = failed[i] as CliRun
      assert.equal(r.status, status, `${args.join(' ')}: ${r.stderr}`)
      assert.match(r.stderr, re, args.join(' '))
      assert.match(r.stderr, /^stream-segment: ERR_[A-Z_]+: [^\n]*\n$/, `${args.join(' ')}: one line`)
    }
    const env = { ...process.env, DEBUG: 'x' }
    const d = spawnSync(process.execPath, [bin, 'ls', join(dir, 'nothing')], { env, encoding: 'utf8' })
    assert.equal(d.status, 3)
    assert.match(d.stderr, /^stream-segment: ERR_NOT_FOUND: .*\n\S*Error.*\n\s+at /)
  })
})

describe('gc and rm', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-gc-'))
  const url = join(dir, 'container')
  const contents = [randomBytes(300 * 1024), randomBytes(200 * 1024), randomBytes(250 * 1024)]
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('gc within the grace period keeps and reports the garbage; --dry-run says what would go; --keep 2 --grace 0 drops the oldest, the kept ones read back', () => {
    for (const [i, c] of contents.entries()) {
      const input = join(dir, `in${i}.bin`)
      writeFileSync(input, c)
      assert.equal(run(['put', input, url]).status, 0)
    }
    // Checkpoint 1, superseded less than the grace period ago, is kept: a writer opened on
    // it may still publish on it (test/admin/gc.test.ts).
    assert.match(run(['gc', url, '--keep', '2', '--dry-run']).text, /kept checkpoints 1, 2, 3; dropped none\n/)
    // Superseded 2 h ago (checkpoint 2's part 0 aged so), it is dropped; its own objects
    // are younger than the grace period (default 1h): they stay, and gc says why.
    const aged = new Date(Date.now() - 2 * 3_600_000)
    utimesSync(join(url, '0000000002.0'), aged, aged)
    const young = run(['gc', url, '--keep', '2'])
    assert.equal(young.status, 0, young.stderr)
    assert.match(
      young.text,
      /dropped 1\ndeleted 0 objects \(0 B\), aborted 0 uploads; .* stored\nleft (1 unreached object|[2-9]\d* unreached objects|\d{2,} unreached objects) \(\d+\.\d KiB\) and 0 uploads younger than the grace period \(1h\): a later gc deletes them \(--grace 0 only when no writer is running\)\n$/,
    )
    const youngJson = JSON.parse(run(['gc', url, '--keep', '2', '--grace', '90s', '--json']).text)
    assert.equal(youngJson.graceMs, 90_000)
    assert.ok(youngJson.youngObjects > 0 && youngJson.youngBytes >= 300 * 1024, JSON.stringify(youngJson))
    const dry = run(['gc', url, '--keep', '2', '--grace', '0', '--dry-run', '--json'])
    assert.equal(dry.status, 0, dry.stderr)
    const d = JSON.parse(dry.text)
    assert.deepEqual([d.kept, d.dropped, d.dryRun], [[2, 3], [1], true])
    assert.ok(d.deletedObjects > 0 && d.deletedKeys.includes('0000000001.0'), dry.text)
    assert.deepEqual([d.youngObjects, d.youngBytes, d.graceMs], [0, 0, 0])
    assert.equal(JSON.parse(run(['ls', url, '--json']).text).checkpoints.length, 3, 'a dry run deletes nothing')
    const wet = run(['gc', url, '--keep', '2', '--grace', '0'])
    assert.equal(wet.status, 0, wet.stderr)
    assert.match(
      wet.text,
      /kept checkpoints 2, 3; dropped 1\ndeleted (1 object|\d+ objects) \(.*\), aborted 0 uploads; .* stored\n$/,
    )
    const ls = JSON.parse(run(['ls', url, '--json']).text)
    assert.deepEqual(
      ls.checkpoints.map((c: { cno: number }) => c.cno),
      [2, 3],
    )
    for (const cno of [2, 3]) {
      assert.ok(run(['get', url, '-', '--cno', String(cno)]).stdout.equals(contents[cno - 1] as Buffer))
      assert.equal(run(['verify', url, '--cno', String(cno)]).status, 0)
    }
  })

  it("gc refuses bad values and a place with no container, with the code's exit status", () => {
    const keep0 = run(['gc', url, '--keep', '0'])
    assert.equal(keep0.status, 2)
    assert.match(
      keep0.stderr,
      /^stream-segment: ERR_INVALID_ARGUMENT: option --keep: "0" keeps no checkpoint: at least 1 \(the published one\); nothing was deleted\n$/,
    )
    const keepEq = run(['gc', url, '--keep=00'])
    assert.equal(keepEq.status, 2)
    assert.match(keepEq.stderr, /option --keep: "00" keeps no checkpoint/)
    const grace = run(['gc', url, '--grace=-5'])
    assert.equal(grace.status, 2)
    assert.match(grace.stderr, /--grace: "-5" is not a duration/)
    const none = run(['gc', join(dir, 'nothing-here')])
    assert.equal(none.status, 3)
    assert.match(none.stderr, /ERR_NOT_FOUND: .*no container here/)
  })

  it('rm --yes deletes every object, the inode last; the container is gone, its folder too', () => {
    const r = run(['rm', url, '--yes', '--json'])
    assert.equal(r.status, 0, r.stderr)
    const j = JSON.parse(r.text)
    assert.ok(j.deletedObjects >= 3, r.text)
    // Nothing else was in it: no empty store folder (.ss-tmp and the like) is left, nor the folder.
    assert.equal(existsSync(url), false, `left: ${existsSync(url) ? readdirSync(url).join(' ') : ''}`)
    const ls = run(['ls', url])
    assert.equal(ls.status, 3)
    assert.match(ls.stderr, /ERR_NOT_FOUND/)
    // A user's file beside a container's objects stays, and so does the folder holding it.
    assert.equal(run(['put', join(dir, 'in0.bin'), url]).status, 0)
    writeFileSync(join(url, 'notes.txt'), 'mine')
    const beside = run(['rm', url, '--yes'])
    assert.equal(beside.status, 0, beside.stderr)
    assert.deepEqual(readdirSync(url), ['notes.txt'])
    assert.equal(readFileSync(join(url, 'notes.txt'), 'utf8'), 'mine')
  })
})

/**
 * For the suite it is called in: a temporary folder, removed after it, holding a container
 * of 100 random KiB put `times` times (checkpoints 1 … times, the last one published).
 */
function putContainer(prefix: string, times: number): { dir: string; url: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  const url = join(dir, 'container')
  after(() => rmSync(dir, { recursive: true, force: true }))
  before(() => {
    const input = join(dir, 'in.bin')
    writeFileSync(input, randomBytes(100 * 1024))
    for (let i = 0; i < times; i++) assert.equal(run(['put', input, url]).status, 0)
  })
  return { dir, url }
}

describe('unusual input: said in one line, nothing done', () => {
  const { dir, url } = putContainer('ss-cli-input-', 1)

  it('rm without --yes refuses when any of stdin, stdout or stderr is a terminal (stdin redirected, say)', async () => {
    const err = fakeOutput(true)
    assert.equal(await main(['rm', url], fakeOutput(false), err), 2)
    assert.match(err.writes.join(''), /rm deletes every object of .*: add --yes to confirm/)
    assert.equal(run(['ls', url]).status, 0, 'the container is still there')
  })

  it('an option given twice (-o and --output too) is refused, not the last one taken', () => {
    const a = join(dir, 'a.bin')
    const b = join(dir, 'b.bin')
    const twice = run(['get', url, '-o', a, '--output', b])
    assert.equal(twice.status, 2)
    assert.match(
      twice.stderr,
      /^stream-segment: ERR_INVALID_ARGUMENT: option --output is given more than once: give it once\n$/,
    )
    assert.ok(!existsSync(a) && !existsSync(b), 'nothing written')
    assert.match(run(['ls', url, '--json', '--json']).text, /"checkpoints"/, 'a flag given twice is the same flag')
  })

  it('a file named like options (-model.pt) is refused naming the argument as typed, not only the letter read', () => {
    writeFileSync(join(dir, '-model.pt'), 'x')
    const to = join(dir, 'dashed')
    const r = run(['put', '-model.pt', to], { cwd: dir })
    assert.equal(r.status, 2, r.stderr)
    assert.equal(
      r.stderr,
      'stream-segment: ERR_INVALID_ARGUMENT: unknown option -m in -model.pt (see stream-segment --help; ' +
        'an argument starting with - that is no option goes after --)\n',
    )
    // As said: after --, it is the file.
    assert.equal(run(['put', '--', '-model.pt', to], { cwd: dir }).status, 0)
    assert.equal(run(['get', to, '-']).text, 'x')
    // One letter, or a long name, is the option as typed: nothing more to say.
    assert.match(run(['ls', url, '-x']).stderr, /: unknown option -x \(see stream-segment --help\)\n$/)
    assert.match(run(['ls', url, '--xy=1']).stderr, /: unknown option --xy \(see stream-segment --help\)\n$/)
  })

  it('export to "-" is refused (get URL - writes to stdout), no file named "-"', () => {
    const r = run(['export', url, '-'], { cwd: dir })
    assert.equal(r.status, 2)
    assert.match(r.stderr, /export: "-" is not a place to export to/)
    assert.ok(!existsSync(join(dir, '-')))
  })

  it('put --wal in a folder where none can be made (/proc/x) fails at once, exit 2, naming the folder', () => {
    // Node's recursive mkdir retries without end when making the folder fails with ENOENT
    // though its parent exists (as /proc answers): the child is killed if it does not end.
    const r = spawnSync(process.execPath, [bin, 'put', '-', join(dir, 'walled'), '--wal', '/proc/x'], {
      env: quietEnv(),
      input: 'some bytes',
      encoding: 'utf8',
      timeout: 60_000,
      killSignal: 'SIGKILL',
    })
    assert.equal(r.signal, null, 'the put ended on its own, not killed by the timer')
    assert.equal(r.status, 2, r.stderr)
    assert.match(r.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: WAL \/proc\/x: the folder cannot be made/)
    assert.equal(run(['ls', join(dir, 'walled')]).status, 3, 'no container was made')
  })

  it('a symlink loop as the output path is a bad path (exit 2), not a store failure', () => {
    symlinkSync('loop-b', join(dir, 'loop-a'))
    symlinkSync('loop-a', join(dir, 'loop-b'))
    const r = run(['get', url, join(dir, 'loop-a')])
    assert.equal(r.status, 2, r.stderr)
    assert.match(r.stderr, /ERR_INVALID_ARGUMENT: .*loop-a: cannot be written as a file/)
  })

  it('gc --keep past the largest exact integer says it is too large', () => {
    const r = run(['gc', url, '--keep', '9007199254740993'])
    assert.equal(r.status, 2)
    assert.match(r.stderr, /option --keep: "9007199254740993" is too large \(at most 9007199254740991\)/)
  })

  it('verify and inspect exit with the worst problem, whatever the order of the keys: a missing object over a newer layout', () => {
    const input = join(dir, 'parts.bin')
    writeFileSync(input, randomBytes(12 * MiB))
    const c = join(dir, 'parts')
    assert.equal(run(['put', input, c, '--segment-max-object-bytes', '3M']).status, 0)
    const parts = readdirSync(c)
      .filter((n) => /^\d{10}\.[1-9]\d*$/.test(n))
      .sort()
    assert.ok(parts.length >= 3, parts.join())
    // The first part in key order from a newer build (ERR_UNSUPPORTED), a later one gone (ERR_NOT_FOUND).
    const newer = readFileSync(join(c, parts[0] as string))
    newer.writeUInt16LE(2, newer.length - 256 + 8)
    writeFileSync(join(c, parts[0] as string), newer)
    rmSync(join(c, parts[2] as string))
    for (const command of ['verify', 'inspect']) {
      const r = run([command, c])
      assert.match(r.text, /ERR_UNSUPPORTED/, r.text)
      assert.match(r.text, /ERR_NOT_FOUND/, r.text)
      assert.equal(r.status, 3, `${command}: ${r.stderr}`)
      assert.match(r.stderr, /^stream-segment: ERR_NOT_FOUND: /)
    }
  })

  it('ls shows an unreadable checkpoint\'s unknown size as "?", not -1', () => {
    const copy = join(dir, 'damaged')
    cpSync(url, copy, { recursive: true })
    const part0 = readdirSync(copy).find((n) => /^\d{10}\.0$/.test(n)) as string
    truncateSync(join(copy, part0), 1000)
    const r = run(['ls', copy])
    assert.equal(r.status, 0, r.stderr)
    const row = r.text.split('\n').find((l) => /unreadable/.test(l)) as string
    assert.ok(row, r.text)
    assert.deepEqual(row.trim().split(/\s+/).slice(0, 2), ['1', '?'], row)
  })
})

describe('numbers on the command line: one form for every option', () => {
  const { dir, url } = putContainer('ss-cli-numbers-', 2)
  /** The exit code and stderr of a command run in this process. */
  async function runMain(args: string[]): Promise<{ code: number; stderr: string }> {
    const err = fakeOutput()
    const code = await main(args, fakeOutput(), err)
    return { code, stderr: err.writes.join('') }
  }

  it('spaces around a number are dropped for every numeric option, as for sizes and times; none inside', async () => {
    const file = join(dir, 'spaced.bin')
    const taken: string[][] = [
      ['get', url, file, '--cno', ' 1'],
      ['get', url, file, '--read-get-max-bytes', ' 1M '],
      ['get', url, file, '--cno=1 ', '--range', ' 0-9 '],
      ['gc', url, '--dry-run', '--keep', ' 2'],
      ['gc', url, '--dry-run', '--keep-cnos', '1, 2', '--grace', ' 1h'],
      ['inspect', url, '--cno', '2 '],
      ['bench', 'mem://numbers', '--size', ' 1M', '--rounds', ' 1 '],
    ]
    // The get with --range goes last: its 10 bytes are what the file holds.
    for (const args of taken) {
      const r = await runMain(args)
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`)
    }
    assert.equal(readFileSync(file).length, 10, 'the last get took --range " 0-9 "')
    const refused: string[][] = [
      ['get', url, file, '--cno', '1 0'],
      ['get', url, file, '--range', '0 - 9'],
      ['get', url, file, '--read-get-max-bytes', '1 M'],
      ['gc', url, '--dry-run', '--keep', '1 0'],
      ['gc', url, '--dry-run', '--grace', '1 h'],
      ['bench', 'mem://numbers', '--rounds', '1 0'],
    ]
    for (const args of refused) {
      const r = await runMain(args)
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
      assert.match(r.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: option --[a-z-]+: "[^"]+" is not /, args.join(' '))
    }
  })

  it('gc --keep-cnos takes checkpoint numbers as --cno does: one past the largest is a usage error (2), not 3', async () => {
    for (const cno of ['99999999999', '1073741824', '9007199254740993', '0', '-1']) {
      for (const args of [
        ['gc', url, '--dry-run', '--keep-cnos', `1,${cno}`],
        ['get', url, join(dir, 'cno.bin'), '--cno', cno],
      ]) {
        const r = await runMain(args)
        assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
        assert.match(
          r.stderr,
          new RegExp(
            `^stream-segment: ERR_INVALID_ARGUMENT: option --[a-z-]+: "${cno}" is not a checkpoint number \\(1\\.\\.1073741823\\)\n$`,
          ),
          args.join(' '),
        )
      }
    }
  })

  it("--range -5 (curl's range of the last bytes), with a space or =, says which forms get takes", async () => {
    for (const args of [['--range', '-5'], ['--range=-5']]) {
      const r = await runMain(['get', url, join(dir, 'suffix.bin'), ...args])
      assert.equal(r.code, 2, r.stderr)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: option --range: "-5" asks for the last bytes \(curl's -r -5\), which get does not take: give a-b \(bytes a to b, both included, from 0\) or a- \(from byte a to the end\)\n$/,
      )
    }
    const several = await runMain(['get', url, join(dir, 'suffix.bin'), '--range', '0-1,5-9'])
    assert.match(several.stderr, /"0-1,5-9" is several ranges, which get does not take \(one per get\): give a-b/)
    assert.equal(existsSync(join(dir, 'suffix.bin')), false)
  })
})

describe('hostile objects: ls, inspect and verify print no control character and no crash', () => {
  const { url } = putContainer('ss-cli-hostile-', 1)
  /** Exit code, and stdout and stderr together, of a command run in this process. */
  async function runMain(args: string[]): Promise<{ code: number; text: string }> {
    const both = fakeOutput()
    const code = await main(args, both, both)
    return { code, text: both.writes.join('') }
  }
  /** A C0 or C1 control character or DEL, but the newlines ending the lines. */
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is looked for
  const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/

  it('times past what a Date holds (2^53 - 1 ms in the inode and a header) are printed as numbers, not ERR_INTERNAL', async () => {
    const store = new DirectoryStore(url)
    const part0 = Buffer.from(await store.get(segmentKey(1, 0)))
    const at = part0.length - HEADER_BYTES
    const h = decodeHeader(part0.subarray(at), part0.length, { cno: 1, part: 0, format: FORMAT_STREAM })
    h.createdMs = Number.MAX_SAFE_INTEGER
    h.inode.mtimeMs = Number.MAX_SAFE_INTEGER
    encodeHeader(h, part0, at)
    await store.put(segmentKey(1, 0), part0)
    await store.put(INODE_KEY, encodeInodeObject(h.inode))
    for (const command of ['ls', 'inspect', 'verify']) {
      const r = await runMain([command, url])
      assert.equal(r.code, 0, `${command}: ${r.text}`)
      if (command !== 'verify') assert.match(r.text, /9007199254740991 ms \(not a date\)/, command)
    }
  })

  it('bytes of a damaged inode quoted in a message (ESC, the one-byte CSI 0x9b, DEL) reach no terminal raw', async () => {
    const store = new DirectoryStore(url)
    const inode = Buffer.from(await store.get(INODE_KEY))
    assert.equal(decodeInodeObject(inode).cno, 1)
    inode.set([0x1b, 0x5b, 0x32, 0x4a, 0x9b, 0x32, 0x4a, 0x7f], 0) // its magic: "ESC[2J", CSI "2J", DEL
    await store.put(INODE_KEY, inode)
    for (const command of ['ls', 'inspect', 'verify', 'get']) {
      const r = await runMain([command, url, ...(command === 'get' ? [join(tmpdir(), 'ss-never-written')] : [])])
      assert.match(r.text, /bad magic/, command)
      assert.doesNotMatch(r.text, CONTROL, `${command}: ${JSON.stringify(r.text)}`)
      assert.match(r.text, /\\x9b2J\\x7f/, command)
    }
    // As JSON: still JSON, and still no control character; the message, escaped by the
    // library (errors.ts), says the bytes as the text line does.
    for (const command of ['ls', 'inspect', 'verify']) {
      const r = await runMain([command, url, '--json'])
      assert.doesNotMatch(r.text, CONTROL, `${command} --json: ${JSON.stringify(r.text)}`)
      const lines = r.text.split('\n').filter((l) => l.startsWith('{'))
      for (const line of lines) JSON.parse(line)
      if (command === 'ls') {
        const { inodeError } = JSON.parse(lines[0] as string) as { inodeError?: string }
        assert.match(inodeError ?? '', /bad magic .*\\x9b2J\\x7f/, command)
      }
    }
  })

  it('a container and files whose paths hold an escape sequence: put, get, export, gc and rm print them escaped', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-cli-esc-'))
    try {
      const input = join(dir, 'in.bin')
      writeFileSync(input, randomBytes(50 * 1024))
      const esc = join(dir, 'c\x1b[2J\x9b')
      for (const args of [
        ['put', input, esc],
        ['get', esc, `${esc}.out`],
        ['export', esc, `${esc}.export`],
        ['gc', esc, '--grace', '0'],
        ['rm', esc, '--yes'],
      ]) {
        const r = await runMain(args)
        assert.equal(r.code, 0, `${args[0]}: ${r.text}`)
        assert.doesNotMatch(r.text, CONTROL, `${args[0]}: ${JSON.stringify(r.text)}`)
        assert.match(r.text, /c\\x1b\[2J\\x9b/, args[0])
      }
      assert.ok(readFileSync(`${esc}.out`).equals(readFileSync(input)), 'the paths themselves are the ones typed')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('a damaged entry: ls, inspect and verify report it', () => {
  const { dir, url } = putContainer('ss-cli-entry-', 2) // checkpoint 2 published
  /** A copy of the container with `name`'s bytes changed by `edit`. */
  const damaged = (name: string, edit: (b: Buffer) => void): string => {
    const copy = mkdtempSync(join(dir, 'copy-'))
    cpSync(url, copy, { recursive: true })
    const b = readFileSync(join(copy, name))
    edit(b)
    writeFileSync(join(copy, name), b)
    return copy
  }

  it('inspect --cno N with its part 0 damaged or of a newer layout: the problem and its exit code, no stack', () => {
    for (const [edit, code, status] of [
      [(b: Buffer) => b.writeUInt8((b[b.length - 100] as number) ^ 0x10, b.length - 100), 'ERR_CORRUPT', 4],
      [(b: Buffer) => b.writeUInt16LE(2, b.length - 256 + 8), 'ERR_UNSUPPORTED', 5],
    ] as const) {
      const c = damaged('0000000001.0', edit)
      const v = run(['verify', c, '--cno', '1'])
      const i = run(['inspect', c, '--cno', '1'])
      for (const [command, r] of [
        ['verify', v],
        ['inspect', i],
      ] as const) {
        assert.equal(r.status, status, `${command}: ${r.stderr}`)
        assert.match(r.text, new RegExp(`(^|\\n)${code} header 0000000001\\.0: `), `${command}: ${r.text}`)
        assert.equal(
          r.stderr,
          `stream-segment: ${code}: ${command} found 1 problem in checkpoint 1 of ${c}\n`,
          `${command}: one line, no stack`,
        )
      }
      assert.match(i.text, /^checkpoint 1 of .*: unreadable: /)
      const j = JSON.parse(run(['inspect', c, '--cno', '1', '--json']).text)
      assert.deepEqual([j.cno, j.objects, j.problems.length, typeof j.error], [1, [], 1, 'string'])
      // The published checkpoint is untouched.
      assert.equal(run(['inspect', c]).status, 0)
    }
  })

  it('verify of 25 bad blocks in one object: 20 listed, one counting the rest, its count in --json too', () => {
    // 100 KiB: one object, its 25 data slots first; a byte of each flipped.
    const c = damaged('0000000001.0', (b) => {
      for (let slot = 0; slot < 25; slot++) b.writeUInt8((b[slot * 4096 + 100] as number) ^ 0x10, slot * 4096 + 100)
    })
    const v = run(['verify', c, '--cno', '1'])
    assert.equal(v.status, 4, v.stderr)
    // In the object's order: slots 0 to 19, then the count of the rest; the summary line counts all.
    const lines = v.text.trimEnd().split('\n')
    assert.deepEqual(
      lines.slice(0, 20).map((l) => /^ERR_CORRUPT block 0000000001\.0 byte (\d+): /.exec(l)?.[1]),
      Array.from({ length: 20 }, (_, slot) => String(slot * 4096)),
    )
    assert.match(lines[20] as string, /^ERR_CORRUPT block 0000000001\.0: .*0000000001\.0: and 5 more problems$/)
    assert.match(lines[21] as string, /^checkpoint 1 of .*: 25 problems$/)
    assert.equal(v.stderr, `stream-segment: ERR_CORRUPT: verify found 25 problems in checkpoint 1 of ${c}\n`)
    const j = JSON.parse(run(['verify', c, '--cno', '1', '--json']).text)
    const listed = j.problems.filter((p: { more?: number }) => p.more === undefined)
    const rest = j.problems.filter((p: { more?: number }) => p.more !== undefined)
    assert.equal(listed.length, 20)
    assert.deepEqual(
      rest.map((p: { what: string; where: string; more: number }) => [p.what, p.where, p.more]),
      [['block', '0000000001.0', 5]],
    )
  })

  it('inspect with the inode damaged: the problem and exit 4, as verify', () => {
    const c = damaged('inode', (b) => b.writeUInt8((b[40] as number) ^ 0x10, 40))
    for (const command of ['verify', 'inspect']) {
      const r = run([command, c])
      assert.equal(r.status, 4, `${command}: ${r.stderr}`)
      assert.match(r.text, /(^|\n)ERR_CORRUPT inode inode: /, `${command}: ${r.text}`)
      assert.match(r.text, /(^|\n)the published checkpoint of .*: (unreadable: .*CRC .*|0 objects, .*: 1 problem)\n/)
      assert.equal(
        r.stderr,
        `stream-segment: ERR_CORRUPT: ${command} found 1 problem in the published checkpoint of ${c}\n`,
      )
    }
  })

  it('ls with the inode unreadable says publication is unknown, never "never published"', () => {
    const c = damaged('inode', (b) => b.writeUInt8((b[40] as number) ^ 0x10, 40))
    const r = run(['ls', c])
    assert.equal(r.status, 0, r.stderr)
    const lines = r.text.trim().split('\n')
    assert.match(lines[1] as string, /^ *1 .* unknown \(inode unreadable\)$/)
    assert.match(lines[2] as string, /^ *2 .* unknown \(inode unreadable\)$/)
    assert.doesNotMatch(r.text, /never published|unpublished|complete/)
    assert.match(r.text, /\ninode object unreadable: .*CRC/)
    const j = JSON.parse(run(['ls', c, '--json']).text)
    assert.deepEqual(
      j.checkpoints.map((x: { state: string }) => x.state),
      ['unknown', 'unknown'],
    )
  })
})

describe('put: all or nothing from a pipe or a command', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-all-'))
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('put URL -- cmd publishes the output only when the command exits 0', () => {
    const failing = join(dir, 'failing')
    const r = run(['put', failing, '--', 'sh', '-c', 'head -c 50000000 /dev/urandom; exit 3'])
    assert.equal(r.status, 8, r.stderr)
    assert.match(r.stderr, /^stream-segment: ERR_ABORTED: sh -c .* exited with code 3: nothing was published\n$/)
    // What was sent ahead stays as an abandoned attempt (for gc); nothing is published.
    const ls = run(['ls', failing, '--json'])
    assert.ok(ls.status === 3 || JSON.parse(ls.text).checkpoints.length === 0, ls.text + ls.stderr)
    assert.equal(run(['get', failing, '-']).status, 3, 'no checkpoint to read')
    const ok = join(dir, 'ok')
    const good = run(['put', ok, '--json', '--', 'sh', '-c', 'head -c 50000000 /dev/zero; exit 0'])
    assert.equal(good.status, 0, good.stderr)
    assert.equal(JSON.parse(good.text).bytes, 50_000_000)
    const back = run(['get', ok, '-'])
    assert.equal(back.stdout.length, 50_000_000)
    assert.ok(back.stdout.every((b) => b === 0))
    const missing = run(['put', join(dir, 'none'), '--', join(dir, 'no-such-command')])
    assert.equal(missing.status, 8)
    assert.match(missing.stderr, /could not start/)
  })

  it('put URL -- "" (an empty command name) is a usage mistake, exit 2, not a bug; nothing is made', () => {
    const url = join(dir, 'empty-command')
    const r = run(['put', url, '--', '', 'arg'])
    assert.equal(r.status, 2, r.stderr)
    assert.equal(
      r.stderr,
      'stream-segment: ERR_INVALID_ARGUMENT: put: the command after -- is an empty string: ' +
        'name the program to run (put <url> -- <command> [args…])\n',
    )
    assert.equal(r.text, '')
    assert.ok(!existsSync(url), 'no container made')
  })

  it('put - --size N publishes only when exactly N bytes came', () => {
    const url = join(dir, 'sized')
    const data = randomBytes(10_000)
    const short = run(['put', '-', url, '--size', '10001'], { input: data })
    assert.equal(short.status, 8, short.stderr)
    assert.match(short.stderr, /10000 bytes came, --size says 10001: nothing was published/)
    const long = run(['put', '-', url, '--size', '9999'], { input: data })
    assert.equal(long.status, 8)
    assert.match(long.stderr, /more than --size 9999 bytes came/)
    assert.equal(run(['ls', url]).status, 3, 'nothing published')
    assert.equal(run(['put', '-', url, '--size', '10000'], { input: data }).status, 0)
    assert.ok(run(['get', url, '-']).stdout.equals(data))
    const file = join(dir, 'f.bin')
    writeFileSync(file, data)
    assert.equal(run(['put', file, url, '--size', '10000']).status, 2, '--size is not for a regular file')
  })
})

describe('put: by reference or by value, over an existing container, progress', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-put-'))
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('put of a file over a larger container leaves exactly the file', () => {
    const url = join(dir, 'shrink')
    const big = join(dir, 'big.bin')
    const smaller = join(dir, 'smaller.bin')
    const bigData = randomBytes(5 * MiB + 99)
    const smallData = randomBytes(MiB + 7) // not a whole number of blocks
    writeFileSync(big, bigData)
    writeFileSync(smaller, smallData)
    assert.equal(run(['put', big, url]).status, 0)
    const r = JSON.parse(run(['put', smaller, url, '--json']).text)
    assert.deepEqual([r.by, r.bytes, r.flushTiming.cno], ['reference', smallData.length, 2])
    const g = run(['get', url])
    assert.equal(g.status, 0, g.stderr)
    assert.ok(g.stdout.equals(smallData), `read ${g.stdout.length} bytes, want ${smallData.length}`)
    assert.equal(JSON.parse(run(['inspect', url, '--json']).text).size, smallData.length)
    assert.equal(run(['verify', url]).status, 0)
    // And from stdin over it, by value, shorter still.
    const tiny = randomBytes(5000)
    assert.equal(run(['put', '-', url], { input: tiny }).status, 0)
    assert.ok(run(['get', url]).stdout.equals(tiny))
  })

  it('put of a FIFO or a character device goes by value', async () => {
    const url = join(dir, 'fifo-container')
    const fifo = join(dir, 'fifo')
    execFileSync('mkfifo', [fifo])
    const payload = randomBytes(2 * MiB + 3)
    const child = spawn(process.execPath, [bin, 'put', fifo, url, '--json'], { env: quietEnv() })
    const output = collected(child)
    const closed = once(child, 'close')
    await writeFile(fifo, payload)
    const [code] = await closed
    assert.equal(code, 0, output.stderr())
    const j = JSON.parse(output.stdout())
    assert.deepEqual([j.by, j.bytes, j.flushTiming.cno], ['value', payload.length, 1])
    assert.ok(run(['get', url]).stdout.equals(payload))
    const n = run(['put', '/dev/null', url, '--json'])
    assert.equal(n.status, 0, n.stderr)
    assert.deepEqual(
      [JSON.parse(n.text).by, JSON.parse(n.text).bytes, JSON.parse(n.text).flushTiming.cno],
      ['value', 0, 2],
    )
  })

  it('SIGINT while put waits for a writer to open its FIFO: ERR_ABORTED, exit 8, nothing made', async () => {
    const url = join(dir, 'fifo-interrupted')
    const fifo = join(dir, 'fifo-never-written')
    execFileSync('mkfifo', [fifo])
    const child = spawn(process.execPath, [bin, 'put', fifo, url], { env: quietEnv() })
    let stderr = ''
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const closed = once(child, 'close')
    // The put has the FIFO open (Linux lists a process's descriptors), and no writer has come.
    const waiting = () => {
      try {
        return readdirSync(`/proc/${child.pid}/fd`).some((fd) => readlinkSync(`/proc/${child.pid}/fd/${fd}`) === fifo)
      } catch {
        return false
      }
    }
    for (let i = 0; i < 500 && !waiting(); i++) await new Promise((r) => setTimeout(r, 20))
    assert.ok(waiting(), `the put has the FIFO open (stderr: ${stderr})`)
    child.kill('SIGINT')
    const [code] = await closed
    assert.equal(code, 8, stderr)
    assert.match(stderr, /ERR_ABORTED: .*fifo-never-written: interrupted while waiting for a writer/)
    assert.ok(!existsSync(url), 'no container made')
  })

  it('SIGTERM while put reads a FIFO its writer keeps open and silent: exit 8 without waiting for the writer', async () => {
    const url = join(dir, 'fifo-stalled')
    const fifo = join(dir, 'fifo-stalled-writer')
    execFileSync('mkfifo', [fifo])
    const child = spawn(process.execPath, [bin, 'put', fifo, url], { env: quietEnv() })
    let stderr = ''
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const exited = once(child, 'exit')
    // A writer (as `put <(producer) URL` has) that sends a first MiB, then neither writes nor closes.
    const writer = await open(fifo, 'w')
    await writer.write(randomBytes(MiB))
    // The put has taken those bytes and waits for more.
    await new Promise((r) => setTimeout(r, 500))
    child.kill('SIGTERM')
    let closedByTest = false
    const late = setTimeout(() => {
      closedByTest = true
      writer.close()
    }, 10_000)
    const [code, signal] = await exited
    clearTimeout(late)
    await writer.close().catch(() => {})
    await finished(child.stderr) // what it wrote last may still be unread at its exit
    assert.ok(!closedByTest, 'exited while the writer still held the FIFO open')
    assert.deepEqual([code, signal], [8, null], stderr)
    assert.match(stderr, /^stream-segment: ERR_ABORTED: [^\n]+\n$/)
    assert.ok(!existsSync(join(url, INODE_KEY)), 'nothing published')
  })

  it('SIGINT aborts a put: one line, ERR_ABORTED, exit 8, nothing published', async () => {
    const url = join(dir, 'interrupted')
    assert.equal(run(['put', '-', url], { input: randomBytes(10000) }).status, 0)
    const { status, stderr } = await interruptedPut(url)
    assert.equal(status, 8, stderr)
    // Which signal stopped it is said: an abort of the library's own reads as a failure of the store.
    assert.match(stderr, /\nstream-segment: ERR_ABORTED: write to .*interrupted aborted: interrupted \(SIGINT\)\n/)
    assert.equal(JSON.parse(run(['ls', url, '--json']).text).published, 1)
  })

  it("uploadFile's signal aborts the upload: ERR_ABORTED, nothing published", async () => {
    const path = join(dir, 'abort.bin')
    writeFileSync(path, randomBytes(MiB))
    const url = join(dir, 'aborted')
    const ac = new AbortController()
    await assert.rejects(
      uploadFile(path, url, {}, { signal: ac.signal, onStart: () => ac.abort(new Error('stop')) }),
      (e: StreamSegmentError) => e.code === 'ERR_ABORTED' && /upload of .*abort\.bin to .*aborted/.test(e.message),
    )
    assert.equal(run(['ls', url]).status, 3, 'no container')
  })

  it('on a TTY, put draws a progress line on stderr with the requests in flight, and clears it', async () => {
    const path = join(dir, 'progress.bin')
    const bytes = randomBytes(3 * MiB)
    writeFileSync(path, bytes)
    const out = fakeOutput(false)
    const err = fakeOutput(true)
    const code = await main(['put', path, join(dir, 'progress'), '--json', '--stream-segment-bytes', '1M'], out, err)
    assert.equal(code, 0, err.writes.join(''))
    const lines = err.writes.filter((w) => w !== '\r\x1b[K')
    assert.ok(lines.length >= 1, 'drawn at least once')
    for (const l of lines) {
      assert.ok(l.startsWith('\r\x1b[K'), JSON.stringify(l))
      assert.match(
        l.slice(4),
        /^put: [\d.]+ \w?i?B of 3\.0 MiB \(\d+%\) {2}(-|[\d.]+ \w?i?B\/s) {2}\d+ requests? in flight$/,
      )
    }
    assert.equal(err.writes.at(-1), '\r\x1b[K', 'cleared at the end')
    const j = JSON.parse(out.writes.join(''))
    assert.deepEqual([j.by, j.bytes], ['reference', bytes.length])
    // Not a TTY: nothing on stderr.
    const quiet = fakeOutput(false)
    assert.equal(await main(['put', path, join(dir, 'progress'), '--json'], fakeOutput(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])
  })

  it('on a TTY, get to a file draws a progress line on stderr, ends it at 100 % and clears it before the report', async () => {
    const path = join(dir, 'get-progress.bin')
    const bytes = randomBytes(3 * MiB)
    writeFileSync(path, bytes)
    assert.equal(await main(['put', path, join(dir, 'get-progress')], fakeOutput(false), fakeOutput(false)), 0)
    const out = fakeOutput(false)
    const err = fakeOutput(true)
    const target = join(dir, 'got.bin')
    const code = await main(['get', join(dir, 'get-progress'), target, '--read-get-max-bytes', '256K'], out, err)
    assert.equal(code, 0, err.writes.join(''))
    assert.ok(readFileSync(target).equals(bytes))
    const lines = err.writes.filter((w) => w !== '\r\x1b[K')
    assert.ok(lines.length >= 1, 'drawn at least once')
    for (const l of lines) {
      assert.ok(l.startsWith('\r\x1b[K'), JSON.stringify(l))
      assert.match(l.slice(4), /^get: [\d.]+ \w?i?B of 3\.0 MiB \(\d+%\)$/)
    }
    assert.match(lines.at(-1) as string, /of 3\.0 MiB \(100%\)$/)
    assert.equal(err.writes.at(-1), '\r\x1b[K', 'cleared at the end')
    assert.match(out.writes.join(''), /^got 3\.0 MiB of checkpoint 1 into /)
    // Not a TTY: nothing on stderr.
    const quiet = fakeOutput(false)
    assert.equal(await main(['get', join(dir, 'get-progress'), target], fakeOutput(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])
  })

  it('on a TTY, verify, export, gc and rm draw their progress lines on stderr, end them with the total and clear them', async () => {
    const path = join(dir, 'admin-progress.bin')
    writeFileSync(path, randomBytes(3 * MiB))
    const container = join(dir, 'admin-progress')
    // In a dozen objects: verify reads each one's header, summary, nodes and data.
    assert.equal(
      await main(['put', path, container, '--stream-segment-bytes', '256K'], fakeOutput(false), fakeOutput(false)),
      0,
    )
    /** The lines drawn (each starting with the terminal's erase), once checked to end with a clear. */
    const drawn = (err: ReturnType<typeof fakeOutput>) => {
      assert.equal(err.writes.at(-1), '\r\x1b[K', 'cleared at the end')
      const lines = err.writes.filter((w) => w !== '\r\x1b[K')
      assert.ok(lines.length >= 1, 'drawn at least once')
      for (const l of lines) assert.ok(l.startsWith('\r\x1b[K'), JSON.stringify(l))
      return lines.map((l) => l.slice(4))
    }

    const vOut = fakeOutput(false)
    const vErr = fakeOutput(true)
    const t0 = performance.now()
    assert.equal(await main(['verify', container, '--json'], vOut, vErr), 0, vErr.writes.join(''))
    const seconds = (performance.now() - t0) / 1000
    const report = JSON.parse(vOut.writes.join('')) as { bytesRead: number; problems: unknown[] }
    assert.deepEqual(report.problems, [])
    const vLines = drawn(vErr)
    for (const l of vLines) assert.match(l, /^verify: [\d.]+ \w?i?B$/)
    // A few times a second, not once per read: at the start, every 250 ms, at the end.
    assert.ok(vLines.length <= 2 + Math.ceil(seconds * 4), `${vLines.length} lines in ${seconds.toFixed(2)} s`)
    // The last line is drawn as verify ends: every byte it read (3 MiB of data and more).
    assert.ok(report.bytesRead >= 3 * MiB && report.bytesRead < 1024 * MiB, `verify read ${report.bytesRead} bytes`)
    assert.equal(vLines.at(-1), `verify: ${(report.bytesRead / MiB).toFixed(1)} MiB`)

    const eErr = fakeOutput(true)
    const exported = join(dir, 'admin-progress.out')
    assert.equal(await main(['export', container, exported], fakeOutput(false), eErr), 0, eErr.writes.join(''))
    assert.ok(readFileSync(exported).equals(readFileSync(path)))
    const eLines = drawn(eErr)
    for (const l of eLines) assert.match(l, /^export: [\d.]+ \w?i?B of 3\.0 MiB \(\d+%\)$/)
    assert.match(eLines.at(-1) as string, /^export: 3\.0 MiB of 3\.0 MiB \(100%\)$/)

    // Not a TTY: nothing on stderr.
    const quiet = fakeOutput(false)
    assert.equal(await main(['verify', container], fakeOutput(false), quiet), 0)
    assert.equal(await main(['export', container, `${exported}.2`], fakeOutput(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])

    // gc: the kept maps walked, then the deletions, counted to the end.
    assert.equal(await main(['put', path, container, '--no-resume'], fakeOutput(false), fakeOutput(false)), 0)
    const gOut = fakeOutput(false)
    const gErr = fakeOutput(true)
    assert.equal(await main(['gc', container, '--grace', '0', '--json'], gOut, gErr), 0, gErr.writes.join(''))
    const { deletedObjects } = JSON.parse(gOut.writes.join('')) as { deletedObjects: number }
    assert.ok(deletedObjects > 0)
    const gLines = drawn(gErr)
    for (const l of gLines) {
      assert.match(
        l,
        /^gc: (walking the kept checkpoints' block maps: [01] of 1 done, \d+ nodes? walked|deleting: \d+ of \d+ objects? done)$/,
      )
    }
    assert.equal(gLines.at(-1), `gc: deleting: ${deletedObjects} of ${deletedObjects} objects done`)
    assert.equal(await main(['gc', container, '--grace', '0'], fakeOutput(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])

    // rm: the objects deleted, the inode last.
    const rOut = fakeOutput(false)
    const rErr = fakeOutput(true)
    assert.equal(await main(['rm', container, '--yes', '--json'], rOut, rErr), 0, rErr.writes.join(''))
    const removed = (JSON.parse(rOut.writes.join('')) as { deletedObjects: number }).deletedObjects
    const rLines = drawn(rErr)
    for (const l of rLines) assert.match(l, /^rm: deleting: \d+ of \d+ objects? done$/)
    assert.equal(rLines.at(-1), `rm: deleting: ${removed} of ${removed} objects done`)
  })

  it('progressLine: done of the total (capped) with a percentage, or bytes alone; the rate; requests in flight', () => {
    assert.equal(
      progressLine({ done: MiB, total: 4 * MiB, requestsInFlight: 3 }, 2),
      'put: 1.0 MiB of 4.0 MiB (25%)  512.0 KiB/s  3 requests in flight',
    )
    // Uploaded bytes count nodes, summaries and headers too: never past the file's size.
    assert.equal(
      progressLine({ done: 5 * MiB, total: 4 * MiB, requestsInFlight: 0 }, 1),
      'put: 4.0 MiB of 4.0 MiB (100%)  4.0 MiB/s  0 requests in flight',
    )
    assert.equal(
      progressLine({ done: 0, total: 0, requestsInFlight: 0 }, 0),
      'put: 0 B of 0 B (100%)  -  0 requests in flight',
    )
    assert.equal(progressLine({ done: 1536, requestsInFlight: 1 }, 3), 'put: 1.5 KiB  512 B/s  1 request in flight')
  })
})

describe('get and terminals', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-tty-'))
  const url = join(dir, 'container')
  const data = randomBytes(10000)
  after(() => rmSync(dir, { recursive: true, force: true }))
  const refusal =
    /^stream-segment: ERR_INVALID_ARGUMENT: get: not writing binary data to a terminal: give a file \(get URL FILE, or -o FILE\), redirect stdout, or give - to write to the terminal anyway\n$/

  /** A terminal as stdout: a real Writable (the data is piped to it), with isTTY. */
  const terminal = () => {
    const chunks: Buffer[] = []
    const stream = new Writable({
      write(c, _e, cb) {
        chunks.push(c)
        cb()
      },
    })
    return Object.assign(stream, { isTTY: true, chunks })
  }

  it('get with no file refuses a terminal; - writes to it anyway; a file or -o is fine', async () => {
    assert.equal(run(['put', '-', url], { input: data }).status, 0)
    const out = terminal()
    const err = fakeOutput(false)
    assert.equal(await main(['get', url], out, err), 2)
    assert.deepEqual(out.chunks, [], 'nothing written to the terminal')
    assert.match(err.writes.join(''), refusal)
    // `-` (or `-o -`) asks for stdout explicitly.
    for (const target of [['-'], ['-o', '-']]) {
      const tty = terminal()
      const e = fakeOutput(false)
      assert.equal(await main(['get', url, ...target, '--range', '0-99'], tty, e), 0, e.writes.join(''))
      assert.ok(Buffer.concat(tty.chunks).equals(data.subarray(0, 100)))
    }
    const o = join(dir, 'o.bin')
    const summary = fakeOutput(true)
    assert.equal(await main(['get', url, '-o', o], summary, fakeOutput(false)), 0)
    assert.match(summary.writes.join(''), /^got 9\.8 KiB of checkpoint 1 into .*o\.bin/)
    assert.ok(readFileSync(o).equals(data))
  })

  // `script` is util-linux's (Debian's essential bsdutils): the test fails, not skips, without it.
  it('under a real pseudo-terminal (util-linux script)', () => {
    const q = (a: string) => `'${a.replaceAll("'", "'\\''")}'`
    const underTty = (args: string[]) =>
      spawnSync('script', ['-qec', [process.execPath, bin, ...args].map(q).join(' '), '/dev/null'], {
        env: quietEnv(),
        encoding: 'utf8',
      })
    const r = underTty(['get', url])
    assert.equal(r.status, 2, r.stdout + r.stderr)
    assert.match(r.stdout.replaceAll('\r', ''), refusal)
    const dash = underTty(['get', url, '-', '--range', '0-99'])
    assert.equal(dash.status, 0, dash.stdout + dash.stderr)
    assert.doesNotMatch(dash.stdout, /stream-segment:/)
  })
})

describe('container URLs', () => {
  const cwd = mkdtempSync(join(tmpdir(), 'ss-cli-url-'))
  after(() => rmSync(cwd, { recursive: true, force: true }))
  const data = randomBytes(5000)

  it('a misspelt or unknown scheme is ERR_INVALID_ARGUMENT with the fix, never a local directory', async () => {
    const cases: Array<[string, RegExp]> = [
      [
        's3:/bucket/x',
        /: openStore: s3:\/bucket\/x: did you mean s3:\/\/bucket\/x\? \(a local directory by that name: \.\/s3:\/bucket\/x\)$/,
      ],
      ['s3:bucket/x', /: s3:bucket\/x: did you mean s3:\/\/bucket\/x\?/],
      ['s3//bucket/x', /: s3\/\/bucket\/x: did you mean s3:\/\/bucket\/x\?/],
      ['s3:///bucket/x', /expected s3:\/\/bucket\/prefix with a valid bucket name: did you mean s3:\/\/bucket\/x\?/],
      ['S3://Bucket/x', /S3:\/\/Bucket\/x: expected s3:\/\/bucket\/prefix with a valid bucket name$/],
      ['file:/x/y', /: file:\/x\/y: did you mean file:\/\/\/x\/y\?/],
      ['file:x', /: file:x: did you mean file:\/\/\/x\?/],
      [
        'file://dir/x',
        /: file:\/\/dir\/x: a file URL has an empty host: did you mean file:\/\/\/dir\/x, or the path dir\/x\?$/,
      ],
      ['mem:x', /: mem:x: did you mean mem:\/\/x\?/],
      [
        'gs://bucket/x',
        /: gs:\/\/bucket\/x: unsupported scheme gs:\/\/ .*AWS_ENDPOINT_URL_S3=https:\/\/storage\.googleapis\.com/,
      ],
      ['https://host/bucket/x', /: https:\/\/host\/bucket\/x: unsupported scheme https:\/\/ .*set AWS_ENDPOINT_URL_S3/],
      ['HTTP://host/x', /unsupported scheme http:\/\//],
      ['ftp://host/x', /unsupported scheme ftp:\/\/ \(use s3:\/\/bucket\/prefix, file:\/\/\/dir or mem:\/\/name/],
      ['a:b', /: a:b: not a URL this reads .*; for a local directory named so, write \.\/a:b$/],
    ]
    const calls = cases.flatMap(([where, re]) =>
      [
        ['ls', where],
        ['put', '-', where],
        ['get', where, join(cwd, 'out')],
      ].map((args) => ({ args, re })),
    )
    // Each is refused before it reads stdin: all in one process.
    const results = await runBatch(calls.map(({ args }) => ({ args, cwd })))
    for (const [i, { args, re }] of calls.entries()) {
      const r = results[i] as CliRun
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`)
      assert.match(r.stderr.trimEnd(), re, args.join(' '))
      assert.match(r.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: openStore: [^\n]*\n$/, args.join(' '))
    }
    assert.deepEqual(readdirSync(cwd), [], 'no local directory was made')
  })

  it('a relative path, ./name:with-colon, file:// (any case) are local directories', async () => {
    // Each container is its own: the three puts run together, then every get of them.
    const places = ['dir', './a:b', 'nested/dir']
    const puts = await runAll(places.map((where) => ({ args: ['put', '-', where], cwd, input: data })))
    for (const [i, where] of places.entries()) {
      const put = puts[i] as CliRun
      assert.equal(put.status, 0, `${where}: ${put.stderr}`)
      assert.ok(existsSync(join(cwd, where, 'inode')), where)
    }
    const agains = places.flatMap((where) => [
      where,
      join(cwd, where),
      `file://${join(cwd, where)}`,
      `FILE://${join(cwd, where)}`,
    ])
    const gets = await runAll(agains.map((again) => ({ args: ['get', again, '-'], cwd })))
    for (const [i, again] of agains.entries()) {
      const g = gets[i] as CliRun
      assert.equal(g.status, 0, `${again}: ${g.stderr}`)
      assert.ok(g.stdout.equals(data), again)
    }
  })

  it('"-" as the container (stdin or stdout here) is refused by every command, no folder "-" made; ./- is one', async () => {
    const file = join(cwd, 'dash-in.bin')
    writeFileSync(file, data)
    // All in one process, each in a working directory of its own (its output file there
    // too), so that what one left is its own.
    const out = join(cwd, 'dash-out.bin')
    const calls = [
      ['put', file, '-'],
      ['put', '-', '-'],
      ['put', '-', '--', 'echo', 'x'],
      ['get', '-', out],
      ['ls', '-'],
      ['inspect', '-'],
      ['verify', '-'],
      ['gc', '-'],
      ['rm', '-', '--yes'],
      ['export', '-', out],
      ['bench', '-'],
    ].map((args, i) => {
      const at = join(cwd, `dash-${i}`)
      mkdirSync(at)
      return { args: args.map((a) => (a === out ? join(at, 'dash-out.bin') : a)), cwd: at }
    })
    const results = await runBatch(calls)
    for (const [i, { args, cwd: at }] of calls.entries()) {
      const r = results[i] as CliRun
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`)
      assert.equal(
        r.stderr,
        'stream-segment: ERR_INVALID_ARGUMENT: "-" (stdin or stdout) is not a container: ' +
          'give its URL or path (a directory named - is ./-)\n',
        args.join(' '),
      )
      assert.deepEqual(readdirSync(at), [], `${args.join(' ')}: no folder "-", no file`)
    }
    assert.equal(run(['put', file, './-'], { cwd }).status, 0)
    assert.ok(run(['get', './-', '-'], { cwd }).stdout.equals(data))
  })
})

/** The text of a markdown section, from its heading to the next heading of that level or higher. */
function section(markdown: string, heading: string): string {
  const at = markdown.indexOf(`\n${heading}\n`)
  assert.ok(at >= 0, `no section ${heading}`)
  const level = heading.split(' ')[0] as string
  const rest = markdown.slice(at + heading.length + 2)
  const next = rest.search(new RegExp(`^#{1,${level.length}} `, 'm'))
  return next < 0 ? rest : rest.slice(0, next)
}

describe('exit codes', () => {
  const codes = Object.keys(ERROR_CODES) as ErrorCode[]

  it('docs/cli.md, --help and EXIT_CODES give every ErrorCode the same exit code', () => {
    assert.deepEqual(
      Object.keys(EXIT_CODES)
        .filter((k) => k !== 'usage')
        .sort(),
      [...codes].sort(),
      'EXIT_CODES has every ErrorCode, and nothing else but usage',
    )
    assert.equal(EXIT_CODES.usage, EXIT_CODES.ERR_INVALID_ARGUMENT)
    const exits = codes.map((c) => EXIT_CODES[c])
    assert.equal(new Set(exits).size, codes.length, 'one exit code per error code')
    assert.ok(
      exits.every((e) => e !== 0 && e !== 1 && e < 128),
      'none is success, 1 (node itself) or a signal',
    )
    const tables: Array<[string, Map<string, number>]> = [
      [
        'docs/cli.md, Failures and exit codes',
        new Map(
          [
            ...section(readFileSync('docs/cli.md', 'utf8'), '## Failures and exit codes').matchAll(
              /^\| +(\d+) +\| [^|]*`(ERR_[A-Z_]+)`/gm,
            ),
          ].map((m) => [m[2] as string, Number(m[1])]),
        ),
      ],
      [
        '--help',
        new Map(
          [...run(['--help']).text.matchAll(/^ +(\d+) {2}(ERR_[A-Z_]+) /gm)].map((m) => [m[2] as string, Number(m[1])]),
        ),
      ],
    ]
    for (const [where, table] of tables) {
      for (const code of codes) assert.equal(table.get(code), EXIT_CODES[code], `${where}: ${code}`)
      assert.equal(table.size, codes.length, `${where}: ${[...table.keys()].join(', ')}`)
    }
  })

  describe('each code a local invocation can produce, produced by one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-cli-exit-'))
    const base = join(dir, 'base')
    const size = 300 * 1024
    const input = join(dir, 'in.bin')
    writeFileSync(input, randomBytes(size))
    after(() => rmSync(dir, { recursive: true, force: true }))
    const copy = (name: string) => {
      const to = join(dir, name)
      cpSync(base, to, { recursive: true })
      return to
    }
    /** A file that says it holds 4096 bytes and holds a few (sysfs): it "changes" while uploaded. */
    const shrinking = '/sys/devices/system/cpu/online'
    const producers: Record<ErrorCode, (() => Outcome | Promise<Outcome>) | string> = {
      ERR_INVALID_ARGUMENT: () => run(['get', base, '-', '--range', 'x']),
      ERR_NOT_FOUND: () => run(['get', base, '-', '--cno', '99']),
      ERR_CORRUPT: () => {
        const c = copy('corrupt')
        const victim = join(c, '0000000001.0')
        const b = readFileSync(victim)
        b[5000] = (b[5000] as number) ^ 0x10 // data block 1
        writeFileSync(victim, b)
        return run(['get', c, '-'])
      },
      ERR_UNSUPPORTED: () => {
        // The inode object of a newer layout version (byte 8, u16), its CRC resealed.
        const c = copy('newer')
        const b = readFileSync(join(c, 'inode'))
        b.writeUInt16LE(b.readUInt16LE(8) + 1, 8)
        writeFileSync(join(c, 'inode'), resealInodeObject(b))
        return run(['get', c, '-'])
      },
      ERR_CONFLICT: async () => {
        const [first, second] = await conflictingPuts(copy('conflict'))
        assert.equal(first.status, 0, first.stderr)
        return second
      },
      ERR_STORE: 'a store failing after its retries: not with a local directory (the stores map it: test/store)',
      ERR_ABORTED: () => interruptedPut(copy('aborted')),
      ERR_RANGE: () => run(['get', base, '-', '--range', `${size}-`]),
      ERR_STATE: () => run(['put', shrinking, join(dir, 'state')]),
      ERR_TIMEOUT: 'a request running past its time limit: a remote store only',
      ERR_AUTH: 'a store refusing the credentials: S3 only',
      ERR_INTERNAL: 'a bug: never on purpose',
    }

    before(() => {
      const r = run(['put', input, base, '--stream-segment-bytes', '64K'])
      assert.equal(r.status, 0, r.stderr)
    })
    /** The producers that follow the child's debug log (to know when it has opened the container). */
    const followed: ErrorCode[] = ['ERR_CONFLICT', 'ERR_ABORTED']

    for (const code of codes) {
      const produce = producers[code]
      if (typeof produce === 'string') continue // the table check above is all there is for it
      it(`${code}: exit ${EXIT_CODES[code]}`, async () => {
        const r = await produce()
        assert.equal(r.status, EXIT_CODES[code], r.stderr)
        const line = new RegExp(`^stream-segment: ${code}: [^\\n]+\\n`, 'm')
        if (followed.includes(code)) assert.match(r.stderr, line)
        else assert.match(r.stderr, new RegExp(`${line.source}$`), 'one line, nothing else')
        // The file named once, by its path: not also as the library's "the file" for a handle.
        if (code === 'ERR_STATE')
          assert.match(r.stderr, /: ERR_STATE: \/sys\/devices\/system\/cpu\/online: ended at byte /)
      })
    }
  })
})

describe('a setting given on the command line is named as typed in its error', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-settings-'))
  after(() => rmSync(dir, { recursive: true, force: true }))
  const input = join(dir, 'in.bin')
  const url = join(dir, 'c')

  it('the option as the user typed it, kebab or camel case, also where a message names another one given', async () => {
    writeFileSync(input, randomBytes(5000))
    const cases: Array<[string[], string]> = [
      [
        ['put', input, url, '--segment-mpu-max-concurrency', '100'],
        'option --segment-mpu-max-concurrency = 100: must be an integer in 1..64',
      ],
      [
        ['put', input, url, '--segmentMpuMaxConcurrency=100'],
        'option --segmentMpuMaxConcurrency = 100: must be an integer in 1..64',
      ],
      [['put', input, url, '--format', 'fancy'], `option --format = "fancy": must be 'stream' or 'parted'`],
      [
        ['put', input, url, '--segment-buffer-size', '1K'],
        'option --segment-buffer-size = 1024: the dirty limit (1024 bytes) must hold at least one data block (4096)',
      ],
      [
        ['put', input, url, '--segment-mpu-chunk-size', '12K', '--data-block-size', '8K'],
        'option --segment-mpu-chunk-size = 12288: must be a multiple of --data-block-size (8192)',
      ],
    ]
    for (const [args, message] of cases) {
      const out = fakeOutput(false)
      const err = fakeOutput(false)
      assert.equal(await main(args, out, err), 2, err.writes.join(''))
      assert.equal(err.writes.join(''), `stream-segment: ERR_INVALID_ARGUMENT: ${message}\n`, args.join(' '))
    }
    // A read option of get too.
    assert.equal(await main(['put', input, url], fakeOutput(false), fakeOutput(false)), 0)
    const err = fakeOutput(false)
    assert.equal(await main(['get', url, join(dir, 'out'), '--read-max-concurrency', '0'], fakeOutput(false), err), 2)
    assert.equal(
      err.writes.join(''),
      'stream-segment: ERR_INVALID_ARGUMENT: option --read-max-concurrency = 0: must be an integer in 1..256\n',
    )
  })

  it('a format or block size the existing container does not have is named as typed, and what to do', async () => {
    const c = join(dir, 'own')
    assert.equal(await main(['put', input, c], fakeOutput(false), fakeOutput(false)), 0)
    const cases: Array<[string[], string]> = [
      [['--format', 'parted'], 'option --format = parted: the container at'],
      [['--dataBlockSize', '8K'], 'option --dataBlockSize = 8192: the container at'],
      [['--meta-block-size=8K'], 'option --meta-block-size = 8192: the container at'],
    ]
    for (const [options, start] of cases) {
      const err = fakeOutput(false)
      assert.equal(await main(['put', input, c, ...options], fakeOutput(false), err), 2, err.writes.join(''))
      const line = err.writes.join('')
      assert.ok(line.startsWith(`stream-segment: ERR_INVALID_ARGUMENT: ${start} ${c} has `), line)
      assert.match(line, /: a container keeps the .* it was made with: leave the option out\n$/, line)
    }
  })
})

describe('put - on a terminal', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-ttyin-'))
  after(() => rmSync(dir, { recursive: true, force: true }))
  const hint =
    /^stream-segment: reading stdin \(a terminal\) until end of input: Ctrl-D on a line of its own ends it, Ctrl-C cancels$/m

  /**
   * `put - url` with stdin, stdout and stderr all one terminal (`script`, util-linux's, in
   * Debian's essential bsdutils: the tests fail, not skip, without it). script's own stdin
   * at its end: it sends the terminal's end of input (Ctrl-D) to the command.
   */
  function putOnTerminal(url: string) {
    const q = (a: string) => `'${a.replaceAll("'", "'\\''")}'`
    return spawnSync('script', ['-qec', [process.execPath, bin, 'put', '-', url].map(q).join(' '), '/dev/null'], {
      env: quietEnv(),
      encoding: 'utf8',
      input: '',
      timeout: 60_000,
    })
  }

  it('says on stderr that it reads stdin until EOF; not when stdin is a pipe', () => {
    const r = putOnTerminal(join(dir, 'c'))
    const shown = r.stdout.replaceAll('\r', '')
    assert.equal(r.status, 0, shown + r.stderr)
    assert.match(shown, hint)
    const piped = run(['put', '-', join(dir, 'p')], { input: 'abc' })
    assert.equal(piped.status, 0, piped.stderr)
    assert.equal(piped.stderr, '', 'nothing said when stdin is not a terminal')
  })

  it('draws no progress line on that terminal, where it would erase the line being typed', () => {
    const r = putOnTerminal(join(dir, 'typed'))
    assert.equal(r.status, 0, r.stdout + r.stderr)
    assert.match(r.stdout.replaceAll('\r', ''), /committed checkpoint 1 of /, r.stdout)
    assert.doesNotMatch(r.stdout, /put: \d/, 'no progress line')
    assert.ok(!r.stdout.includes('\u001b[K'), 'nothing redrawn')
  })
})
