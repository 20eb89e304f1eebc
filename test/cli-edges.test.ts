/**
 * The command at the edges a user reaches by accident: a bad value in an environment
 * variable the package reads as it loads. Each is one line with its code and the
 * documented exit code, nothing written.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { bin, quietEnv } from './helpers/cli.js'

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
