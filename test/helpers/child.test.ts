/**
 * The crash tests judge a killed writer by the lines it printed: every write it printed as
 * done must be in what it left. `runNode` must therefore hand back every line written to the
 * child's stdout, also those still unread when the child itself has exited.
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { runNode } from './child.js'

// A program that prints a line, leaves a process holding its stdout that prints a second
// line 300 ms later, and exits: its exit comes before its last line is read.
const PROGRAM = `
import { spawn } from 'node:child_process'
process.stdout.write('w 0\\n')
spawn(process.execPath, ['-e', 'setTimeout(() => process.stdout.write("w 1\\\\n"), 300)'], {
  stdio: ['ignore', 'inherit', 'ignore'],
}).unref()
`

describe('runNode', () => {
  let dir = ''
  after(() => fs.rm(dir, { recursive: true, force: true }))

  it('resolves with every line the program wrote, also those read after it exited', async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-child-'))
    const program = join(dir, 'late-line.mjs')
    await fs.writeFile(program, PROGRAM)
    const { lines, killed } = await runNode(program, [])
    assert.deepEqual(lines, ['w 0', 'w 1'])
    assert.equal(killed, false)
  })
})
