/**
 * Every benchmark program under test/bench runs to its end on a few MiB and prints its
 * tables, the radosgw rows included (the test runner starts radosgw and the programs
 * inherit AWS_ENDPOINT_URL_S3). The figures are not checked: they are measurements, made
 * at full size by hand (docs/benchmarks.md). What this pins is that the commands the docs
 * give still run, that they print no process warning, and that they leave nothing on the
 * server (radosgw keeps objects in memory: what one program leaves slows the next).
 * Fails, never skips, without the server.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, it } from 'node:test'
import { ListBucketsCommand, ListObjectsV2Command } from '@aws-sdk/client-s3'
import { s3TestBucket, s3TestClient } from './helpers/s3-env.js'

interface Case {
  program: string
  args?: string[]
  env?: Record<string, string>
  /** Lines stdout must have (each a regular expression over one line). */
  lines: RegExp[]
}

const MIB = '16'
const cases: Case[] = [
  {
    program: 'crc32',
    lines: [/^# CRC-32 throughput, GB\/s/, /^\| crc-32 \| [\d.]+ \|/, /^# Per-block CRC-32s of 1 MiB runs/],
  },
  {
    program: 'dir-put',
    args: ['--mib', MIB, '--rounds', '1'],
    lines: [
      /^\| copy: fs\.createReadStream → fs\.createWriteStream, one fsync \(baseline\) \| [\d.]+/,
      /^\| uploadFile, pieces written in place \(partBytes\) \| [\d.]+ .* \| [\d.]+ \(/,
      /^\| uploadFile, pieces in files of their own, joined at completion \| [\d.]+/,
    ],
  },
  {
    program: 'first-read',
    args: ['--mib', MIB, '--rounds', '1'],
    lines: [
      /^# first read of a process: 16 MiB/,
      /^\| directory store \| 4 KiB pages \| [\d.]+/,
      /^\| directory store \| memory addon \| [\d.]+/,
      /^\| radosgw, http GETs \| 4 KiB pages \| [\d.]+/,
      /^\| radosgw, http GETs \| memory addon \| [\d.]+/,
    ],
  },
  {
    program: 'gc-memory',
    env: { BENCH_MIB: MIB },
    lines: [
      /^\| 16 \| \d+ \| \d+ \| gc \| [\d.]+ \| -?\d+ \| -?[\d.]+ \| -?[\d.]+ \|$/,
      /^\| 16 \| \d+ \| \d+ \| verify \| [\d.]+ \|/,
      /^\| 16 \| \d+ \| \d+ \| ls \| [\d.]+ \| -?\d+ \| -?[\d.]+ \| -?[\d.]+ \|$/,
    ],
  },
  {
    program: 'read',
    args: ['--mib', MIB, '--object-mib', '4', '--random', '5', '--rounds', '1'],
    lines: [
      /^Cold open \+ sequential read/,
      /^\| throttled directory \| 1 \| \d+ \|/,
      /^\| throttled general purpose \| 1 \| \d+ \|/,
      /^\| directory store \| 1 \| \d+ \|/,
      /^\| radosgw, http GETs \| 1 \| \d+ \| \d+ \|/,
      /^\| radosgw, sdk GETs \| 1 \| \d+ \| \d+ \|/,
      /^Memory work per GiB read/,
      /^\| radosgw, http GETs \| 1 \| [\d.]+ \| \d+ \| [\d.]+ \| \d+ \| [\d.]+ \| \d+ \|/,
      /^Into the caller's memory: SegmentFile.readInto/,
      /^\| directory store \| 1 \| \d+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \|/,
      /^\| radosgw, http GETs \| median \(min–max\) \| \d+ \(\d+–\d+\) \|/,
      /^To a local file \(the temporary directory\): downloadFile/,
      /^\| radosgw, http GETs \| 1 \| \d+ \| [\d.]+ \| \d+ \| [\d.]+ \| [\d.]+ \| \d+ \| [\d.]+ \| \d+ \|/,
      /^Random 4 KiB reads/,
      /^\| radosgw, http GETs \| \d+ \| [\d.]+ \|/,
    ],
  },
  {
    program: 'export',
    args: ['--mib', MIB, '--rounds', '1'],
    lines: [
      /^\| exportObject +\| [\d.]+/,
      /^\| sdk-copy \(GetObject \+ Upload\) \| [\d.]+/,
      /^SHA-256 of GetObject of every export equals/,
    ],
  },
  {
    program: 'resume',
    args: ['--mib', MIB, '--rounds', '1'],
    lines: [
      /^\| full \(resume: false\) +\| [\d.]+/,
      /^\| resumed +\| [\d.]+/,
      /^SHA-256 of every checkpoint equals the file's/,
    ],
  },
  {
    program: 's3-upload',
    args: ['--mib', MIB, '--part-mib', '8', '--rounds', '1'],
    lines: [/^s3store +[\d.]+/, /^s3store-md5 +[\d.]+/, /^s3store-unchecked +[\d.]+/, /^lib-storage +[\d.]+/],
  },
  {
    program: 'startup',
    args: ['--runs', '1'],
    lines: [
      /^# start-up: each row a fresh process, 1 runs/,
      /^\| node -e 0 \(Node alone\) \| \d+ \(\d+–\d+\) \| (\d+ \(\d+–\d+\)|-) \|$/,
      /^\| stream-segment put \(1 MiB file, directory store\) \| \d+ /,
      /^\| stream-segment get \(to a file, directory store\) \| \d+ /,
      /^\| node, require\('@aws-sdk\/client-s3'\) \| \d+ /,
      /^\| the library imported \(ESM build\) \| \d+ /,
      /^\| the library required \(CommonJS build\) \| \d+ /,
      /^\| stream-segment --help \| \d+ /,
      /^\| stream-segment ls \(directory store\) \| \d+ /,
    ],
  },
  {
    program: 'stream-flush',
    env: { BENCH_MIB: MIB, BENCH_HOT_MIB: '4' },
    lines: [
      /^## 1\. Flush seconds/,
      /^## 2\. Write amplification/,
      /^## 3\. The spec's default limits/,
      /^## 4\. Writer CPU by value/,
      /^## 5\. radosgw/,
      // A variant whose child failed prints 'failed: …' in its row and the program still exits 0.
      /^\| stream-segment \(streaming profile\) \| [\d.]+ \|/,
      /^\| stream-segment \(spec defaults\) \| [\d.]+ \|/,
      /^\| stream-segment \(1 GiB target, limits raised\) \| [\d.]+ \|/,
      /^\| lib-storage Upload \(16 MiB parts, queue 4\) \| [\d.]+ \|/,
      /^## 6\. By reference/,
      /^Writer CPU by reference, StreamSegment/,
    ],
  },
  {
    program: 'wal',
    env: { BENCH_MIB: MIB },
    lines: [
      /^\| none \(no WAL\) \| [\d.]+ \|/,
      /^\| sync 'none' \| [\d.]+ \|/,
      /^\| sync 'interval', 100 ms \| [\d.]+ \|/,
      /^\| sync 'always' \| [\d.]+ \|/,
      /^\| sync 'always', publish\(\) every 64 MiB \| [\d.]+ \|/,
    ],
  },
  {
    program: 'write-cpu',
    env: { BENCH_MIB: MIB, BENCH_STREAM_MIB: MIB, BENCH_ROUNDS: '1' },
    lines: [
      // Table 1 (BENCH_TABLES unset runs both).
      /^# write-cpu: 16 MiB in 16 MiB writes/,
      /^\| spec defaults \(8 MiB dirty limit: partials while writing\) \| [\d.]+ \|/,
      /^\| limits raised, 1 GiB target \(objects filled a piece at a time while writing\) \| [\d.]+ \|/,
      /^# write-cpu, streams:/,
      // CPU, then the part of it on other threads (read from /proc on Linux, as here).
      /^\| write stream, discarding store \(beyond the source\) \| [\d.]+ \| [\d.]+ \| /,
      /^\| write stream, directory store \| [\d.]+/,
      /^\| write stream, S3Store, default body check: (signed SHA-256|Content-MD5) \(radosgw\) \| [\d.]+/,
      /^\| write stream, S3Store with no body check \(radosgw\) \| [\d.]+/,
      /^\| by reference: SegmentFile\.writeRef in 1 MiB calls/,
      /^\| lib-storage's Upload, 16 MiB parts, queue 4 \(radosgw\) \| [\d.]+/,
      /uploadFile of that file, spec defaults \(radosgw\)/,
      /^\| write stream, S3Store on an S3Client with the SDK's defaults, default body check: .* \(radosgw\) \| [\d.]+/,
      /^\| write stream, directory store, slabs in 4 KiB pages \| [\d.]+/,
      /^\| write stream, S3Store, default body check: .* \(radosgw\), slabs in 4 KiB pages \| [\d.]+/,
    ],
  },
  {
    program: 'write-stream',
    env: { BENCH_MIB: MIB, BENCH_ROUNDS: '1' },
    lines: [
      /^\| 64 KiB \| SegmentFile\.write loop \(floor\) \| [\d.]+ \|/,
      /^\| 64 KiB \| streamx Writable \(baseline\) \| [\d.]+ \|/,
      /^\| 64 KiB \| node:stream Writable \(ours\) \| [\d.]+ \|/,
      /^\| 1024 KiB \| node:stream Writable \(ours\) \| [\d.]+ \|/,
    ],
  },
]

/** Runs a compiled benchmark program; resolves with its exit code and output. */
function runBench(c: Case): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const file = resolve(`dist/esm/test/bench/${c.program}.js`)
  const env = { ...process.env, ...c.env }
  delete env.DEBUG
  // As a user runs them: the programs themselves keep the SDK's Node-version warning out.
  delete env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [file, ...(c.args ?? [])], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (s: string) => {
      stdout += s
    })
    child.stderr.setEncoding('utf8').on('data', (s: string) => {
      stderr += s
    })
    const timer = setTimeout(() => child.kill('SIGKILL'), 240_000)
    child.on('error', fail)
    child.on('close', (code) => {
      clearTimeout(timer)
      done({ code, stdout, stderr })
    })
  })
}

/** The bucket the programs share (test/bench/*.ts). */
const BENCH_BUCKET = 'stream-segment-bench'

/**
 * What the benchmark programs left on the server: the objects of the bucket they share and
 * the buckets of their own (`bench-<pid>`). The cases run one at a time, and no test uses
 * these names.
 */
async function leftOnServer(): Promise<string[]> {
  const client = s3TestClient()
  const { Buckets = [] } = await client.send(new ListBucketsCommand({}))
  const left = Buckets.map((b) => b.Name ?? '').filter((name) => /^bench-\d+$/.test(name))
  if (Buckets.some((b) => b.Name === BENCH_BUCKET)) {
    const { Contents = [] } = await client.send(new ListObjectsV2Command({ Bucket: BENCH_BUCKET }))
    left.push(...Contents.map((o) => `${BENCH_BUCKET}/${o.Key}`))
  }
  return left
}

describe('the benchmark programs run on a few MiB', () => {
  for (const c of cases) {
    it(`${c.program}${c.args ? ` ${c.args.join(' ')}` : ''}`, { timeout: 300_000 }, async () => {
      await s3TestBucket() // the server answers (else this fails with how to start one)
      const r = await runBench(c)
      assert.equal(r.code, 0, `exit code ${r.code}; stderr:\n${r.stderr.slice(-4000)}`)
      // No process warning (the SDK's, a listener leak…) amid the tables.
      assert.doesNotMatch(r.stderr, /\(node:\d+\) \S*Warning/, r.stderr.slice(-4000))
      const lines = r.stdout.split('\n')
      for (const want of c.lines) {
        assert.ok(
          lines.some((l) => want.test(l)),
          `no line matches ${want}; output:\n${r.stdout.slice(-6000)}`,
        )
      }
      assert.deepEqual(await leftOnServer(), [], `${c.program} left these on the server`)
    })
  }
})

describe('the benchmark programs refuse an option value they do not know (no empty table)', () => {
  const refused: Array<Case & { says: RegExp }> = [
    {
      program: 's3-upload',
      args: ['--only', 's3store,nosuch'],
      lines: [],
      says: /--only s3store,nosuch: no variant nosuch/,
    },
    { program: 'read', args: ['--only', 'disk'], lines: [], says: /--only disk: no such store \(memory, dir, s3\)/ },
    {
      program: 'write-cpu',
      env: { BENCH_TABLES: '2', BENCH_STREAM_MIB: '16', BENCH_ROUNDS: '1', BENCH_VARIANTS: '3,99' },
      lines: [],
      says: /BENCH_VARIANTS=3,99: no row 99 here \(rows 0 to \d+\)/,
    },
    {
      // The one-row child the docs quote (BENCH_CHILD=N) names the row it lacks, as BENCH_VARIANTS does.
      program: 'write-cpu',
      env: { BENCH_TABLES: '2', BENCH_STREAM_MIB: '16', BENCH_CHILD: '99' },
      lines: [],
      says: /BENCH_CHILD=99: no row 99 here \(rows 0 to \d+/,
    },
    {
      program: 'write-cpu',
      env: { BENCH_TABLES: '3', BENCH_MIB: '16' },
      lines: [],
      says: /BENCH_TABLES=3: no table 3 \(tables 1, 2\)/,
    },
    {
      program: 'stream-flush',
      env: { BENCH_SECTIONS: '4,7', BENCH_MIB: '16' },
      lines: [],
      says: /BENCH_SECTIONS=4,7: no section 7 \(sections 1 to 6\)/,
    },
    {
      // Section 5 asked for by name, with no server to run it on, prints no empty section.
      program: 'stream-flush',
      env: { BENCH_SECTIONS: '5', BENCH_MIB: '1', AWS_ENDPOINT_URL_S3: '' },
      lines: [],
      says: /BENCH_SECTIONS=5: section 5 needs radosgw: bash test\/rgw\/rgw\.sh start/,
    },
    {
      // Not an option value but the same promise: a radosgw row whose child failed fails the run.
      program: 'stream-flush',
      env: { BENCH_SECTIONS: '5', BENCH_MIB: '1', AWS_ENDPOINT_URL_S3: 'http://127.0.0.1:1' },
      lines: [],
      says: /stream-segment \(streaming profile\) failed: .*ECONNREFUSED/,
    },
  ]
  for (const c of refused) {
    const given =
      c.args?.join(' ') ??
      Object.entries(c.env ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(' ')
    it(`${c.program} ${given}`, { timeout: 60_000 }, async () => {
      const r = await runBench(c)
      assert.notEqual(r.code, 0, `exit code 0; stdout:\n${r.stdout.slice(-2000)}`)
      assert.match(r.stderr, c.says)
    })
  }
})

/**
 * Each code span (inline, or a line of a fenced block) of README.md and docs/*.md that runs
 * a benchmark program (`… dist/esm/test/bench/NAME.js …`; an inline span may wrap across
 * lines), split into the
 * program, the options after it and the environment variables it sets.
 */
function quotedBenchCommands(): Array<{ doc: string; span: string; program: string; flags: string[]; vars: string[] }> {
  const docs = [
    'README.md',
    ...readdirSync('docs')
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ]
  const found = []
  for (const doc of docs) {
    // Each line of a fenced block is a span; the fences out first, or their backticks would
    // pair with the inline spans' and shift them all.
    const fenced: string[] = []
    const text = readFileSync(doc, 'utf8').replace(/^```.*\n([\s\S]*?)^```$/gm, (_, body: string) => {
      fenced.push(...body.split('\n'))
      return ''
    })
    const spans = [...fenced, ...[...text.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string)]
    for (const code of spans) {
      const span = code.replace(/\s+/g, ' ')
      const m = /dist\/esm\/test\/bench\/([\w-]+)\.js(.*)$/.exec(span)
      if (m === null || m[1] === 'NAME') continue // NAME: the docs' placeholder for any program
      found.push({
        doc,
        span,
        program: m[1] as string,
        flags: [...(m[2] as string).matchAll(/(?:^|\s)--([a-z][\w-]*)/g)].map((f) => f[1] as string),
        vars: [...span.matchAll(/\b(BENCH_[A-Z_]+)=/g)].map((v) => v[1] as string),
      })
    }
  }
  return found
}

describe('the benchmark commands the docs quote name what the programs have', () => {
  const commands = quotedBenchCommands()
  it('finds the quoted commands', () => {
    // The docs quote most programs by name; a pattern that matched nothing would pass below.
    assert.ok(commands.length >= 20, `only ${commands.length} commands found`)
  })
  it('each names a program, options it parses and variables it reads', () => {
    const wrong: string[] = []
    for (const c of commands) {
      const path = `test/bench/${c.program}.ts`
      if (!existsSync(path)) {
        wrong.push(`${c.doc}: \`${c.span}\`: no ${path}`)
        continue
      }
      const source = readFileSync(path, 'utf8')
      for (const f of c.flags) {
        // parseArgs options: `mib: { type: …` or `'object-mib': { type: …`.
        if (!new RegExp(`[\\s{,]'?${f}'?: \\{ type`).test(source))
          wrong.push(`${c.doc}: \`${c.span}\`: no option --${f}`)
      }
      for (const v of c.vars) {
        if (!source.includes(`process.env.${v}`)) wrong.push(`${c.doc}: \`${c.span}\`: ${c.program} does not read ${v}`)
      }
    }
    assert.deepEqual(wrong, [])
  })
  it('each BENCH_ variable the docs name is read by a benchmark program', () => {
    const sources = readdirSync('test/bench')
      .filter((f) => f.endsWith('.ts'))
      .map((f) => readFileSync(`test/bench/${f}`, 'utf8'))
      .join('\n')
    const docs = [
      'README.md',
      ...readdirSync('docs')
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
    ]
    const named = new Set(
      docs.flatMap((d) => [...readFileSync(d, 'utf8').matchAll(/\bBENCH_[A-Z_]+\b/g)].map((m) => m[0])),
    )
    assert.ok(named.size >= 5, `only ${[...named].join(', ')} named`)
    assert.deepEqual(
      [...named].filter((v) => !sources.includes(`process.env.${v}`)),
      [],
    )
  })
})
