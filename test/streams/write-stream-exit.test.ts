/**
 * A write stream or uploadFile that fails (a store error, an abort, a source error) leaves
 * nothing holding the event loop: its process exits by itself once the call has ended.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { runNode } from '../helpers/child.js'
import { pattern } from '../helpers/pattern.js'

const CHILD = fileURLToPath(new URL('../helpers/stream-fail-child.js', import.meta.url))
const roots: string[] = []
after(() => Promise.all(roots.map((d) => fs.rm(d, { recursive: true, force: true }))))

/** Well past the process's own start and the failure; a process held by a timer or a handle is killed then. */
const EXIT_WITHIN_MS = 8_000

describe('the process exits by itself after a failed write', () => {
  for (const [scenario, want] of [
    ['store-error-part0', 'ERR_STORE'],
    ['store-error-data', 'ERR_STORE'],
    ['abort-data', 'ERR_ABORTED'],
    ['aborted-at-creation', 'ERR_ABORTED'],
    ['source-error', 'undefined source broke'],
    ['upload-store-error', 'ERR_STORE'],
    ['upload-abort', 'ERR_ABORTED'],
  ] as const) {
    it(scenario, async () => {
      const root = await fs.mkdtemp(join(tmpdir(), 'ss-exit-'))
      roots.push(root)
      const file = join(root, 'src')
      await fs.writeFile(file, pattern(0, 700 * 1024 + 5, 3))
      const { killed, lines } = await runNode(CHILD, [scenario, join(root, 'c'), file], { killAfterMs: EXIT_WITHIN_MS })
      assert.equal(lines.length, 1, lines.join('\n'))
      assert.ok(lines[0]?.startsWith(`failed ${want}`), lines[0])
      assert.equal(killed, false, `${scenario}: still running ${EXIT_WITHIN_MS} ms after it started`)
      assert.deepEqual(await fs.readdir(join(root, 'c', '.ss-tmp')).catch(() => []), [], 'temp files left')
    })
  }
})
