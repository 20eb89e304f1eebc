#!/usr/bin/env node
'use strict'
const { EXIT_CODES } = require('../dist/cjs/lib/cli/exit-codes.js')

let cli
try {
  cli = require('../dist/cjs/lib/cli.js')
} catch (e) {
  // A variable the package reads as it loads (STREAM_SEGMENT_CRC32) naming nothing here: one
  // line, as every failure of a command, not a stack and exit 1.
  if (typeof e?.code !== 'string' || !Object.hasOwn(EXIT_CODES, e.code)) throw e
  const { printable } = require('../dist/cjs/lib/util/shell-words.js')
  process.stderr.on('error', () => {})
  process.stderr.write(`stream-segment: ${e.code}: ${printable(e.message)}\n`)
  if (process.env.DEBUG) process.stderr.write(`${e.stack}\n`)
  process.exitCode = EXIT_CODES[e.code]
}

if (cli !== undefined) {
  cli.main(process.argv.slice(2)).then((code) => {
    // A code already set stays: stdout failed (`--help > /dev/full`) after the command was done.
    if (!process.exitCode) process.exitCode = code
    // Interrupted with output still waiting for a reader that stopped reading (`get URL - | stalled`):
    // the process would wait for that reader; what it waits to write is of an aborted command.
    if (code === EXIT_CODES.ERR_ABORTED && process.stdout.writableLength > 0) process.exit()
  })
}
