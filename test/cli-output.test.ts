/**
 * The CLI's text tables (lib/cli/output.ts): columns as wide as their widest cell, at any
 * number of rows (ls of a long history, inspect of a checkpoint of many objects).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { table } from '../lib/cli/output.js'

describe('table', () => {
  it('pads each column to its widest cell, numbers to the right', () => {
    const text = table(
      [
        ['cno', 'state'],
        [7, 'published'],
        [12345, 'complete'],
      ],
      [true, false],
    )
    assert.equal(text, '  cno  state\n    7  published\n12345  complete')
  })

  it('takes 200,000 rows (a column of that many does not fit in a call as arguments)', () => {
    const rows: Array<Array<string | number>> = [['cno', 'state']]
    for (let i = 1; i <= 200_000; i++) rows.push([i, 'complete'])
    const lines = table(rows, [true, false]).split('\n')
    assert.equal(lines.length, 200_001)
    assert.equal(lines[0], '   cno  state')
    assert.equal(lines[1], '     1  complete')
    assert.equal(lines.at(-1), '200000  complete')
  })
})
