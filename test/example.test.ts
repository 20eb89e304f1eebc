import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { it } from 'node:test'

it("the README's main job runs: examples/pipe-file writes a container and reads it back identical", () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-example-'))
  try {
    const r = spawnSync(process.execPath, ['dist/esm/examples/pipe-file.js'], {
      cwd: process.cwd(),
      env: { ...process.env, DEMO_MIB: '24', DEMO_DIR: dir },
      encoding: 'utf8',
    })
    assert.equal(r.status, 0, r.stderr + r.stdout)
    assert.match(r.stdout, /FlushTiming/)
    assert.match(r.stdout, /read back checkpoint 1: 25165824 bytes, sha256 [0-9a-f]{64} matches/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

it('the README quick start is the two commands the project supports', () => {
  const readme = readFileSync('README.md', 'utf8')
  const pkg = JSON.parse(readFileSync('package.json', 'utf8'))
  assert.match(readme, /npm ci && npm run demo/)
  assert.match(readme, /\nnpm test\n/)
  assert.match(pkg.scripts.demo, /examples\/pipe-file\.js/)
})
