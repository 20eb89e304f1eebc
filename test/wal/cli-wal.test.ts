/** The CLI and the WAL: `inspect --wal DIR`, `put --wal DIR`. */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { after, describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { walFileName } from '../../lib/wal/log.js'
import { pattern } from '../helpers/pattern.js'

const bin = resolve('bin/stream-segment.cjs')
const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

function cli(args: string[], input?: Buffer) {
  const { DEBUG: _, ...env } = process.env
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: 'utf8', timeout: 60_000, input })
  return { status: r.status, text: r.stdout, stderr: r.stderr }
}

async function published(dir: string): Promise<Buffer> {
  const f = await SegmentFile.open(new DirectoryStore(dir), { readOnly: true })
  try {
    return Buffer.from(await f.read(0, f.size))
  } finally {
    await f.close()
  }
}

describe('CLI: inspect --wal', () => {
  it('shows the container, files, records and a torn tail, without changing the folder', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-cli-wal-'))
    roots.push(root)
    const dir = join(root, 'wal')
    const store = new DirectoryStore(join(root, 'c'))
    const f = await SegmentFile.create(store, { wal: { dir } })
    await f.write(0, pattern(0, 1000))
    await f.write(1000, pattern(1000, 500))
    await f.writeZeroes(0, 10)
    await f.close()

    const r = cli(['inspect', '--wal', dir])
    assert.equal(r.status, 0, r.stderr)
    assert.match(r.text, new RegExp(`^WAL ${dir} of ${join(root, 'c')}: 3 records, 1\\.5 KiB written, not locked\\n`))
    assert.match(r.text, /\nfile +base cno +first record +records +bytes +cut\n/)
    assert.match(r.text, /wal-0000000001\.log +0 +1 +3 +\d+ +-\n/)

    const path = join(dir, walFileName(1))
    const size = (await fs.stat(path)).size
    await fs.truncate(path, size - 5)
    const torn = cli(['inspect', '--wal', dir, '--json'])
    assert.equal(torn.status, 0, torn.stderr)
    const j = JSON.parse(torn.text)
    assert.equal(j.records, 2)
    assert.equal(j.generations[0].cutBytes, 35)
    assert.match(j.generations[0].cutReason, /torn header, 35 of 40 bytes/)
    assert.equal((await fs.stat(path)).size, size - 5, 'inspect changes nothing')

    const none = cli(['inspect', '--wal', join(root, 'nothing')])
    assert.equal(none.status, 3, none.stderr)
    assert.match(none.stderr, /no WAL folder here/)
  })

  it('a folder that holds no log (empty, or other files) is said to hold none: exit 3, as a missing folder', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-cli-nowal-'))
    roots.push(root)
    const empty = join(root, 'empty')
    await fs.mkdir(empty)
    const other = join(root, 'other')
    await fs.mkdir(other)
    await fs.writeFile(join(other, 'notes.txt'), 'not a log')
    for (const dir of [empty, other]) {
      for (const json of [[], ['--json']]) {
        const r = cli(['inspect', '--wal', dir, ...json])
        assert.equal(r.status, 3, r.text + r.stderr)
        assert.equal(r.text, '', 'no report of an empty log')
        assert.equal(
          r.stderr,
          `stream-segment: ERR_NOT_FOUND: ${dir}: no write-ahead log here (no container record, no wal-*.log file)\n`,
        )
      }
    }
    assert.deepEqual(await fs.readdir(empty), [], 'nothing made in the folder')
    // A folder a writer has used is a log, even with nothing in it to replay.
    const used = join(root, 'used')
    const f = await SegmentFile.create(new DirectoryStore(join(root, 'c')), { wal: { dir: used } })
    await f.close()
    const r = cli(['inspect', '--wal', used, '--json'])
    assert.equal(r.status, 0, r.stderr)
    assert.equal(JSON.parse(r.text).records, 0)
  })
})

describe('CLI: put --wal', () => {
  it('logs stdin and publishes it; a producer that fails publishes nothing and leaves nothing to replay', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-cli-putwal-'))
    roots.push(root)
    const dir = join(root, 'wal')
    const c = join(root, 'c')
    const input = pattern(0, 3 * 1024 * 1024 + 17)
    const r = cli(['put', '-', c, '--wal', dir, '--wal-sync', 'interval', '--json'], input)
    assert.equal(r.status, 0, r.stderr)
    assert.equal(JSON.parse(r.text).flushTiming.streamSentBytes, 0, 'nothing sent ahead with a log')
    assert.deepEqual(await published(c), input)
    assert.equal(
      JSON.parse(cli(['inspect', '--wal', dir, '--json']).text).records,
      0,
      'the log is empty once published',
    )

    const failed = cli([
      'put',
      c,
      '--wal',
      dir,
      '--',
      process.execPath,
      '-e',
      "process.stdout.write('x'.repeat(300000)); process.exit(3)",
    ])
    assert.equal(failed.status, 8, failed.stderr)
    assert.match(failed.stderr, /exited with code 3: nothing was published/)
    assert.deepEqual(await published(c), input)
    const seen = JSON.parse(cli(['inspect', '--wal', dir, '--json']).text)
    assert.equal(seen.records, 0, 'the failed stream emptied its log: nothing to replay')
    assert.equal(seen.lockedBy, undefined, 'the folder is released')

    const again = cli(['put', '-', c, '--wal', dir], pattern(0, 5000, 2))
    assert.equal(again.status, 0, again.stderr)
    assert.deepEqual(await published(c), pattern(0, 5000, 2))
  })

  it('refuses --wal with a regular file, and a bad --wal-sync', async () => {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-cli-putwal-'))
    roots.push(root)
    const file = join(root, 'f')
    await fs.writeFile(file, pattern(0, 100))
    const r = cli(['put', file, join(root, 'c'), '--wal', join(root, 'wal')])
    assert.equal(r.status, 2, r.stderr)
    assert.match(r.stderr, /option --wal is for stdin, a command, a FIFO or a device: a regular file goes by reference/)
    const bad = cli(
      ['put', '-', join(root, 'c'), '--wal', join(root, 'wal'), '--wal-sync', 'sometimes'],
      Buffer.alloc(1),
    )
    assert.equal(bad.status, 2, bad.stderr)
    assert.match(bad.stderr, /--wal-sync is "sometimes": use always, interval or none/)
  })
})
