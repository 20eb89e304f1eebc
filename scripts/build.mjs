// Compiles lib/, test/ and examples/ to dist/esm (ESM), and lib/ again to dist/cjs (CommonJS),
// marking dist/cjs as CommonJS so Node loads it with require().
import { execFileSync } from 'node:child_process'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
// Always from scratch: a test or benchmark moved or removed must not linger in dist/.
rmSync('dist', { recursive: true, force: true })
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { stdio: 'inherit' })
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.cjs.json'], { stdio: 'inherit' })
mkdirSync('dist/cjs', { recursive: true })
writeFileSync('dist/cjs/package.json', '{ "type": "commonjs" }\n')
