#!/usr/bin/env node
'use strict'
require('../dist/cjs/lib/cli.js')
  .main(process.argv.slice(2))
  .then((code) => {
    // A code already set stays: stdout failed (`--help > /dev/full`) after the command was done.
    if (!process.exitCode) process.exitCode = code
  })
