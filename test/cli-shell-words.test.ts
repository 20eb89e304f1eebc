/**
 * A command the CLI prints for the user to run (`stream-segment ls URL lists them`, the
 * hints of a put missing an argument, `write --output=VALUE`) quotes each word taken from
 * the user's arguments as a shell needs it, and only when it needs it: pasted, it runs
 * on that very path.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { type Logger, printableLog, shellWord } from '../lib/util/shell-words.js'
import { assertPrintable } from './helpers/assert.js'
import { bin, quietEnv } from './helpers/cli.js'

const dir = mkdtempSync(join(tmpdir(), 'ss-cli-shell-words-'))
after(() => rmSync(dir, { recursive: true, force: true }))

function run(args: string[]) {
  const r = spawnSync(process.execPath, [bin, ...args], { env: quietEnv(), encoding: 'utf8', timeout: 30_000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** The words `text` is to `shell`: each printed as its bytes in hex, one a line. */
function wordsIn(shell: string, text: string): string[] {
  const out = execFileSync(
    shell,
    ['-c', `for w in ${text}; do printf '%s' "$w" | od -An -tx1 | tr -d ' \\n'; echo; done`],
    {
      encoding: 'utf8',
    },
  )
  return out.split('\n').slice(0, -1)
}

const hex = (s: string) => Buffer.from(s).toString('hex')

describe('shellWord', () => {
  it('leaves a word a shell takes as it is alone: URLs, paths, sizes', () => {
    for (const w of [
      's3://bucket/run-42/ckpt',
      'file:///data/x',
      '/tmp/a_b.c-d',
      './a:b',
      'mem://x',
      '16M',
      'a=b',
      '%x',
      '@x+y,z',
    ]) {
      assert.equal(shellWord(w), w)
    }
  })

  it('quotes what a shell would split, expand or end; a shell reads it back as the one word', () => {
    const words = [
      '/tmp/my dir/c',
      "it's",
      '$HOME/c',
      'a;b',
      'a*b',
      '~/c',
      '=ls',
      '(x)',
      'a|b&c',
      '`x`',
      '"q"',
      'a\\b',
      '',
      '#c',
    ]
    for (const w of words) {
      const q = shellWord(w)
      assert.notEqual(q, w, `${JSON.stringify(w)} is quoted`)
      for (const shell of ['sh', 'bash']) assert.deepEqual(wordsIn(shell, q), [hex(w)], `${shell}: ${q}`)
    }
  })

  it("a word with control characters: $'…' with no raw control left, which bash reads back", () => {
    for (const w of ['a\nb', 'tab\there', "x'\\\x1b[31m", 'c1\u009bx', 'del\x7f']) {
      const q = shellWord(w)
      assertPrintable(q, q)
      assert.deepEqual(wordsIn('bash', q), [hex(w)], q)
    }
  })
})

describe('printableLog', () => {
  it('escapes strings, and an Error line by line, its first line whole; passes the rest as it is', () => {
    const calls: unknown[][] = []
    let enabled = false
    const fake = (...args: unknown[]) => void calls.push(args)
    const log = printableLog(Object.defineProperty(fake, 'enabled', { get: () => enabled }) as typeof fake & Logger)
    log('%s: %s', 'never')
    assert.deepEqual(calls, [], 'nothing when its namespace is off')
    enabled = true
    assert.equal(log.enabled, true)
    const err = Object.assign(new Error('no such key k\x1b[31m\nforged line'), { code: 'ENOENT' })
    const object = { key: 'k\x1b' }
    log('%s %d %O: %s', '/root\u009b2J', 7, object, err)
    const [[fmt, root, n, o, e]] = calls as unknown as [[string, string, number, object, string]]
    assert.equal(fmt, '%s %d %O: %s')
    assert.equal(root, '/root\\x9b2J')
    assert.equal(n, 7)
    assert.equal(o, object, 'an object as it is: debug inspects it, and inspection escapes its strings')
    assert.ok(e.startsWith('Error: no such key k\\x1b[31m\\nforged line\n    at '), e)
    assert.match(e, /code: 'ENOENT'/)
    // biome-ignore lint/suspicious/noControlCharactersInRegex: no control character but the stack's newlines
    assert.doesNotMatch(e, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/, e)
  })
})

describe('the commands the CLI prints, pasted', () => {
  it('stream-segment ls URL of a container path with spaces and quotes runs on that container', () => {
    const url = join(dir, "un published $x 'q'")
    writeFileSync(join(dir, 'in.bin'), 'some bytes')
    assert.equal(run(['put', join(dir, 'in.bin'), url]).status, 0)
    rmSync(join(url, 'inode'))
    const r = run(['inspect', url])
    assert.equal(r.status, 3, r.stderr)
    const m = /\(stream-segment (ls .*) lists them\)\n$/.exec(r.stderr)
    assert.ok(m, r.stderr)
    assert.equal(m[1], `ls '${dir}/un published $x '\\''q'\\'''`)
    // Pasted into a shell, with the command as this build runs it.
    const ls = spawnSync('sh', ['-c', `"$0" "$1" ${m[1]} --json`, process.execPath, bin], {
      env: quietEnv(),
      encoding: 'utf8',
    })
    assert.equal(ls.status, 0, ls.stderr)
    assert.match(ls.stdout, /"cno":1/)
  })

  it('a misspelt container URL with a space: the URL suggested, pasted, is the one argument meant', () => {
    const cases: Array<[string, string]> = [
      ['s3:/bucket/my runs', 's3://bucket/my runs'],
      ["file:/tmp/it's here", "file:///tmp/it's here"],
      ['a:b c', './a:b c'],
    ]
    for (const [given, meant] of cases) {
      const r = run(['ls', given])
      assert.equal(r.status, 2, r.stderr)
      const word = /(?:did you mean|named so, write) ('.*'|\S+?)(?:\?| \(|\n)/.exec(r.stderr)?.[1]
      assert.ok(word !== undefined, r.stderr)
      for (const shell of ['sh', 'bash']) assert.deepEqual(wordsIn(shell, word), [hex(meant)], `${shell}: ${word}`)
    }
  })

  it("a put's hints quote the file or container given", () => {
    const file = join(dir, 'my file.bin')
    writeFileSync(file, 'x')
    assert.match(run(['put', file]).stderr, /give the container after the file: put '[^']*\/my file\.bin' <url>\)\n$/)
    assert.match(run(['put', join(dir, 'a c')]).stderr, /give - as the file: put - '[^']*\/a c'\)\n$/)
    assert.match(run(['put', join(dir, 'a c'), '--']).stderr, /no command after --: put '[^']*\/a c' -- <command>/)
  })

  it("an option's value that looks like an option: write --name=VALUE, quoted", () => {
    const r = run(['get', join(dir, 'c'), '-o', '-my file'])
    assert.equal(r.status, 2, r.stderr)
    assert.match(r.stderr, /\(got -my file; if that is the value, write --output='-my file'\)\n$/)
  })
})
