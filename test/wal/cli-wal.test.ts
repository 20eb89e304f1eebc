/** The CLI and the WAL: `inspect --wal DIR`. */
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

function cli(args: string[]) {
  const { DEBUG: _, ...env } = process.env
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: 'utf8', timeout: 60_000 })
  return { status: r.status, text: r.stdout, stderr: r.stderr }
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
})
