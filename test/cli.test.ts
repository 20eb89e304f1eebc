/**
 * The `stream-segment` command end to end: every command run as a process
 * (`node bin/stream-segment.cjs …`) against a directory store in a temp dir, and every
 * failure a one-line error with its code and exit code, no stack unless DEBUG is set.
 */
import assert from 'node:assert/strict'
import { type SpawnSyncOptions, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'

const bin = 'bin/stream-segment.cjs'
const run = (args: string[], options: SpawnSyncOptions = {}) => {
  const env = { ...process.env }
  delete env.DEBUG
  const r = spawnSync(process.execPath, [bin, ...args], { env, maxBuffer: 64 << 20, ...options })
  return {
    status: r.status,
    stdout: r.stdout as unknown as Buffer,
    text: String(r.stdout),
    stderr: String(r.stderr),
  }
}
const MiB = 1024 * 1024

it('--version prints the package version', () => {
  const r = run(['--version'])
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.text.trim(), JSON.parse(readFileSync('package.json', 'utf8')).version)
})

it('--help prints usage and exits 0; no arguments exits 2', () => {
  const r = run(['--help'])
  assert.equal(r.status, 0)
  assert.match(r.text, /^Usage: stream-segment <command>/)
  for (const c of ['put', 'get', 'ls', 'inspect', 'verify']) assert.match(r.text, new RegExp(`\\n  ${c} `))
  assert.equal(run([]).status, 2)
})

it('an unknown command is a one-line error with its code, no stack', () => {
  const r = run(['frobnicate'])
  assert.equal(r.status, 2)
  assert.equal(
    r.stderr,
    'stream-segment: ERR_INVALID_ARGUMENT: unknown command "frobnicate" (see stream-segment --help)\n',
  )
})

describe('commands on a directory store', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-'))
  const url = join(dir, 'container')
  const input = join(dir, 'in.bin')
  const data = randomBytes(3 * MiB + 1234)
  const second = randomBytes(MiB)
  writeFileSync(input, data)
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('put writes a file, then stdin, with settings; --json gives the FlushTiming', () => {
    const r = run(['put', input, url, '--data-cache-dirty-max-bytes-threshold', '1MiB'])
    assert.equal(r.status, 0, r.stderr)
    assert.match(
      r.text,
      /^committed checkpoint 1 of .*container: 3\.0 MiB in [\d.]+ s \([\d.]+ \w+\/s\), \d+ objects\n/,
    )
    assert.match(r.text, /\nflush: [\d.]+ ms \(data [\d.]+, part 0 [\d.]+, inode [\d.]+\), 0 conflicts\n/)
    const j = run(['put', '-', `file://${url}`, '--json', '--dataCacheDirtyMaxBytesThreshold=256K'], { input: second })
    assert.equal(j.status, 0, j.stderr)
    const out = JSON.parse(j.text)
    assert.equal(out.bytes, second.length)
    assert.equal(out.flushTiming.cno, 2)
    assert.ok(out.flushTiming.objects > 1, `${out.flushTiming.objects} objects`)
    assert.ok(typeof out.flushTiming.streamSentBytes === 'number')
    const again = run(['put', input, url])
    assert.equal(again.status, 0, again.stderr)
  })

  it('get reads to stdout or a file, a range (inclusive), an older checkpoint', () => {
    const r = run(['get', url])
    assert.equal(r.status, 0, r.stderr)
    assert.ok(r.stdout.equals(data))
    const out = join(dir, 'out.bin')
    const f = run(['get', url, out, '--cno', '2'])
    assert.equal(f.status, 0, f.stderr)
    assert.match(f.text, /^got 1\.0 MiB of checkpoint 2 into .*out\.bin/)
    assert.ok(readFileSync(out).equals(second))
    const range = run(['get', url, '-', '--range', '4000-9000', '--cno', '1'])
    assert.equal(range.status, 0, range.stderr)
    assert.ok(range.stdout.equals(data.subarray(4000, 9001)))
    const tail = run(['get', url, '-', '--range', `${data.length - 10}-`])
    assert.ok(tail.stdout.equals(data.subarray(data.length - 10)))
    const past = run(['get', url, '-', '--range', `${data.length + 10}-${data.length + 20}`])
    assert.equal(past.status, 0)
    assert.equal(past.stdout.length, 0)
  })

  it('ls lists the checkpoints; --json too', () => {
    const r = run(['ls', url])
    assert.equal(r.status, 0, r.stderr)
    const lines = r.text.trim().split('\n')
    assert.match(lines[0] as string, /^cno +size +objects +bytes +time +state$/)
    assert.match(
      lines[1] as string,
      new RegExp(`^ *1 +${data.length} +\\d+ +\\d+ +\\d{4}-\\d\\d-\\d\\dT\\S+ +complete$`),
    )
    assert.match(lines[2] as string, new RegExp(`^ *2 +${second.length} .* complete$`))
    assert.match(lines[3] as string, /^ *3 .* published$/)
    const j = JSON.parse(run(['ls', url, '--json']).text)
    assert.equal(j.published, 3)
    assert.equal(j.checkpoints.length, 3)
  })

  it('inspect shows every object with its header fields; --json too', () => {
    const r = run(['inspect', url, '--cno', '1'])
    assert.equal(r.status, 0, r.stderr)
    assert.match(r.text, new RegExp(`^checkpoint 1 of .*: ${data.length} bytes, blocks 4096, meta blocks 4096`))
    assert.match(r.text, /\nobject +size +flags +data +meta +summary +dead/)
    assert.match(r.text, /\n0000000001\.0 +\d+ +CHECKPOINT /)
    assert.match(r.text, /\n0000000001\.1 +\d+ +PARTIAL /)
    const j = JSON.parse(run(['inspect', url, '--json']).text)
    assert.equal(j.cno, 3)
    assert.ok(j.objects.every((o: { header?: unknown }) => o.header !== undefined))
  })

  it('verify passes a clean checkpoint, and names what and where when a byte flips (exit 4)', () => {
    for (const cno of ['1', '2', '3']) {
      const r = run(['verify', url, '--cno', cno])
      assert.equal(r.status, 0, r.stderr + r.text)
      assert.match(r.text, new RegExp(`^checkpoint ${cno} of .*: \\d+ objects, .* data slots checked, .*: ok\\n$`))
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
    assert.match(v.text, /: 1 problems\n$/)
    assert.equal(v.stderr, `stream-segment: ERR_CORRUPT: verify found 1 problems in checkpoint 1 of ${url}\n`)
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
  })

  it('failures: one line with the code, distinct exit codes, a stack only with DEBUG', () => {
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
        /ERR_INVALID_ARGUMENT: setting segmentMpuMaxConcurrency = 1000/,
      ],
      [
        ['put', input, url, '--segmentMpuChunkSize', 'lots'],
        2,
        /ERR_INVALID_ARGUMENT: option --segmentMpuChunkSize: "lots" is not a size/,
      ],
      [['put', join(dir, 'missing.bin'), url], 3, /ERR_NOT_FOUND: .*missing\.bin: no such file/],
      [['put', input], 2, /ERR_INVALID_ARGUMENT: usage: stream-segment put/],
      [['verify'], 2, /ERR_INVALID_ARGUMENT: usage: stream-segment verify/],
      [['get', url, join(dir, 'no', 'such', 'dir', 'out')], 3, /ERR_NOT_FOUND: .*no such file or directory/],
    ]
    for (const [args, status, re] of cases) {
      const r = run(args)
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
