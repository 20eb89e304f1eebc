/**
 * The command line as typed by someone who has not read the help yet: `-h` or `--help`
 * where an option's value would go, an option misspelt. Run in-process through `main`:
 * each is refused (or helped) before any store is opened.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { main } from '../lib/cli.js'
import { bin, fakeOutput, quietEnv } from './helpers/cli.js'

const dir = mkdtempSync(join(tmpdir(), 'ss-cli-args-'))
after(() => rmSync(dir, { recursive: true, force: true }))

async function run(args: string[]) {
  const out = fakeOutput()
  const err = fakeOutput()
  const status = await main(args, out, err)
  return { status, stdout: out.writes.join(''), stderr: err.writes.join('') }
}

describe('-h or --help anywhere before --', () => {
  it('prints the help also where an option expects its value (--range -h, -o --help)', async () => {
    const url = join(dir, 'none')
    for (const args of [
      ['get', url, '--range', '-h'],
      ['get', url, '-o', '--help'],
      ['inspect', url, '--cno', '--help'],
      ['put', '-', url, '--size', '-h'],
      ['gc', url, '--grace', '-h'],
    ]) {
      const r = await run(args)
      assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`)
      assert.match(r.stdout, /^Usage: stream-segment/, args.join(' '))
      assert.equal(r.stderr, '', args.join(' '))
    }
    // Given as the value itself (`--output=-h`), it is the value; after --, a positional.
    const asValue = await run(['get', url, '--output=-h'])
    assert.equal(asValue.status, 3, asValue.stderr)
    assert.doesNotMatch(asValue.stdout, /Usage/)
    const afterTerminator = await run(['get', url, '--', '--help'])
    assert.equal(afterTerminator.status, 3, afterTerminator.stderr)
    assert.deepEqual(readdirSync(dir), [], 'nothing made')
  })
})

describe('an option named as typed in errors the library raises', () => {
  it('gc --keep-cnos naming a checkpoint that does not exist: the option as typed, not the API name keepCnos', async () => {
    const url = join(dir, 'gc-keep')
    const src = join(dir, 'gc-keep.bin')
    writeFileSync(src, 'abc')
    try {
      assert.equal((await run(['put', src, url])).status, 0)
      for (const typed of ['--keep-cnos', '--keepCnos']) {
        const r = await run(['gc', url, typed, '1,7', '--dry-run'])
        assert.equal(r.status, 3, r.stderr)
        assert.match(r.stderr, new RegExp(`^stream-segment: ERR_NOT_FOUND: .*gc: ${typed} names checkpoint 7, `))
        assert.doesNotMatch(r.stderr, typed === '--keep-cnos' ? /keepCnos/ : /keep-cnos/)
      }
    } finally {
      rmSync(url, { recursive: true, force: true })
      rmSync(src, { force: true })
    }
  })
})

describe('a misspelt option', () => {
  it('is refused naming it, and the option of that command it is a slip away from', async () => {
    const url = join(dir, 'none')
    for (const [args, meant] of [
      [['get', url, '--rnage', '0-1'], '--range'],
      [['get', url, '--outptu', 'x'], '--output'],
      [['ls', url, '--jsn'], '--json'],
      [['gc', url, '--dryrun'], '--dry-run'],
      [['gc', url, '--DRY-RUN'], '--dry-run'],
      [['gc', url, '--keep-cno', '1'], '--keep-cnos'],
      [['put', '-', url, '--stream-segment-byte', '16M'], '--stream-segment-bytes'],
      [['put', '-', url, '--nor-esume'], '--no-resume'],
    ] as const) {
      const r = await run([...args])
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`)
      const typed = args.find((a) => a.startsWith('--')) as string
      assert.equal(
        r.stderr,
        `stream-segment: ERR_INVALID_ARGUMENT: unknown option ${typed} (did you mean ${meant}? see stream-segment --help)\n`,
      )
    }
    // Nothing near: no guess. A letter, or an option of another command, is only named.
    for (const args of [
      ['get', url, '--frobnicate'],
      ['get', url, '-x'],
      ['ls', url, '--cno', '1'],
    ]) {
      const r = await run(args)
      assert.equal(r.status, 2, r.stderr)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: unknown option -\S+ \(see stream-segment --help\)\n$/,
      )
    }
    assert.deepEqual(readdirSync(dir), [], 'nothing made')
  })
})

describe('"-" as the --wal folder', () => {
  it('is refused (it is stdin or stdout here), as a container "-" is: no folder "-" made, nothing published', () => {
    const url = join(dir, 'wal-dash')
    // A process of its own, its stdin an empty pipe: the put must not read the runner's.
    for (const args of [
      ['put', '-', url, '--wal', '-'],
      ['put', '-', url, '--wal=-', '--size', '0'],
    ]) {
      const r = spawnSync(process.execPath, [bin, ...args], {
        cwd: dir,
        env: quietEnv(),
        input: '',
        encoding: 'utf8',
        timeout: 60_000,
      })
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: option --wal: "-" \(stdin or stdout\) is not a folder/,
      )
    }
    assert.deepEqual(readdirSync(dir), [], 'no folder "-", no container')
  })
})
