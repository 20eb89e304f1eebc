#!/usr/bin/env node
'use strict'
const { main, EXIT_CODES } = require('../dist/cjs/lib/cli.js')
main(process.argv.slice(2)).then((code) => {
  // A code already set stays: stdout failed (`--help > /dev/full`) after the command was done.
  if (!process.exitCode) process.exitCode = code
  // Interrupted with output still waiting for a reader that stopped reading (`get URL - | stalled`):
  // the process would wait for that reader; what it waits to write is of an aborted command.
  if (code === EXIT_CODES.ERR_ABORTED && process.stdout.writableLength > 0) process.exit()
})
