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
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { main, progressLine } from '../lib/cli.js'
import type { StreamSegmentError } from '../lib/errors.js'
import { uploadFile } from '../lib/streams/upload-file.js'

const bin = 'bin/stream-segment.cjs'
const quietEnv = () => {
  const env = { ...process.env }
  delete env.DEBUG
  return env
}
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

  // The same settings for a file and for stdin: objects of 1 MiB sent ahead, a dirty limit
  // (32 blocks, 128 KiB) far below them.
  const small = ['--stream-segment-bytes', '1MiB', '--data-cache-dirty-max-bytes-threshold', '64K']

  it('put writes a regular file by reference, then stdin by value; --json gives the FlushTiming', () => {
    const r = run(['put', input, url, ...small])
    assert.equal(r.status, 0, r.stderr)
    assert.match(
      r.text,
      /^committed checkpoint 1 of .*container: 3\.0 MiB by reference in [\d.]+ s \([\d.]+ \w+\/s\), \d+ objects\n/,
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
    const again = JSON.parse(run(['put', input, url, '--json']).text)
    assert.equal(again.by, 'reference')
    assert.equal(again.bytes, data.length)
    assert.equal(again.flushTiming.cno, 3)
  })

  it('get reads to stdout or a file, a range (inclusive), an older checkpoint', () => {
    const r = run(['get', url])
    assert.equal(r.status, 0, r.stderr)
    assert.ok(r.stdout.equals(data))
    const byRef = run(['get', url, '-', '--cno', '1'])
    assert.equal(byRef.status, 0, byRef.stderr)
    assert.ok(byRef.stdout.equals(data), 'the file put by reference with a small dirty limit reads back')
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
      [['put', dir, url], 2, /ERR_INVALID_ARGUMENT: .*: is a directory/],
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

describe('gc and rm', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-gc-'))
  const url = join(dir, 'container')
  const contents = [randomBytes(300 * 1024), randomBytes(200 * 1024), randomBytes(250 * 1024)]
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('gc --dry-run says what would go; gc --keep 2 --grace 0 drops the oldest, the kept ones read back', () => {
    for (const [i, c] of contents.entries()) {
      const input = join(dir, `in${i}.bin`)
      writeFileSync(input, c)
      assert.equal(run(['put', input, url]).status, 0)
    }
    const dry = run(['gc', url, '--keep', '2', '--grace', '0', '--dry-run', '--json'])
    assert.equal(dry.status, 0, dry.stderr)
    const d = JSON.parse(dry.text)
    assert.deepEqual([d.kept, d.dropped, d.dryRun], [[2, 3], [1], true])
    assert.ok(d.deletedObjects > 0 && d.deletedKeys.includes('0000000001.0'), dry.text)
    assert.equal(JSON.parse(run(['ls', url, '--json']).text).checkpoints.length, 3, 'a dry run deletes nothing')
    const wet = run(['gc', url, '--keep', '2', '--grace', '0'])
    assert.equal(wet.status, 0, wet.stderr)
    assert.match(
      wet.text,
      /kept checkpoints 2, 3; dropped 1\ndeleted \d+ objects \(.*\), aborted 0 uploads; .* stored\n$/,
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
      /^stream-segment: ERR_INVALID_ARGUMENT: gc: keep = 0: must be an integer ≥ 1; nothing was deleted\n$/,
    )
    const grace = run(['gc', url, '--grace=-5'])
    assert.equal(grace.status, 2)
    assert.match(grace.stderr, /--grace: "-5" is not a duration/)
    const none = run(['gc', join(dir, 'nothing-here')])
    assert.equal(none.status, 3)
    assert.match(none.stderr, /ERR_NOT_FOUND: .*no container here/)
  })

  it('rm --yes deletes every object, the inode last; the container is gone', () => {
    const r = run(['rm', url, '--yes', '--json'])
    assert.equal(r.status, 0, r.stderr)
    const j = JSON.parse(r.text)
    assert.ok(j.deletedObjects >= 3, r.text)
    const ls = run(['ls', url])
    assert.equal(ls.status, 3)
    assert.match(ls.stderr, /ERR_NOT_FOUND/)
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
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c) => {
      stdout += c
    })
    child.stderr.on('data', (c) => {
      stderr += c
    })
    const closed = once(child, 'close')
    await writeFile(fifo, payload)
    const [code] = await closed
    assert.equal(code, 0, stderr)
    const j = JSON.parse(stdout)
    assert.deepEqual([j.by, j.bytes, j.flushTiming.cno], ['value', payload.length, 1])
    assert.ok(run(['get', url]).stdout.equals(payload))
    const n = run(['put', '/dev/null', url, '--json'])
    assert.equal(n.status, 0, n.stderr)
    assert.deepEqual(
      [JSON.parse(n.text).by, JSON.parse(n.text).bytes, JSON.parse(n.text).flushTiming.cno],
      ['value', 0, 2],
    )
  })

  it('SIGINT aborts a put: one line, ERR_ABORTED, exit 8, nothing published', async () => {
    const url = join(dir, 'interrupted')
    assert.equal(run(['put', '-', url], { input: randomBytes(10000) }).status, 0)
    // stdin stays open, so the put is still running when the signal comes; the debug log
    // says when the container is open (the SIGINT handler is in place by then).
    const env = { ...quietEnv(), DEBUG: 'stream-segment:file' }
    const child = spawn(process.execPath, [bin, 'put', '-', url], { env })
    let stderr = ''
    let killed = false
    child.stderr.on('data', (c) => {
      stderr += c
      if (!killed && /open .* at checkpoint 1/.test(stderr)) killed = child.kill('SIGINT')
    })
    child.stdin.on('error', () => {}) // EPIPE once it has exited
    child.stdin.write(randomBytes(MiB))
    const [code] = await once(child, 'close')
    child.stdin.destroy()
    assert.equal(code, 8, stderr)
    assert.match(stderr, /\nstream-segment: ERR_ABORTED: write to .*interrupted aborted\n/)
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
    const fake = (isTTY: boolean) => {
      const writes: string[] = []
      const stream = {
        isTTY,
        writes,
        write(chunk: string | Uint8Array) {
          writes.push(String(chunk))
          return true
        },
      }
      return stream as typeof stream & NodeJS.WritableStream
    }
    const out = fake(false)
    const err = fake(true)
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
    const quiet = fake(false)
    assert.equal(await main(['put', path, join(dir, 'progress'), '--json'], fake(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])
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
