#!/usr/bin/env node
'use strict'
require('../dist/cjs/lib/cli.js')
  .main(process.argv.slice(2))
  .then((code) => {
    process.exitCode = code
  })
