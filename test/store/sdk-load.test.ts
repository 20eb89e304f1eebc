/**
 * The AWS SDK is loaded when an S3 store or client is first made, not when the library is
 * imported: a program or a CLI command on the directory store never loads it (it costs
 * about 0.1 s of CPU per process, docs/benchmarks.md "Start-up"). Each case runs in a
 * fresh process, which reports whether any file of @aws-sdk/client-s3 is in the module
 * cache at each step; the last step makes a client, so each case also sees the SDK load.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { after, describe, it } from 'node:test'

const work = mkdtempSync(join(tmpdir(), 'sdk-load-'))
after(() => rmSync(work, { recursive: true, force: true }))

/** Runs `source` (ESM or CommonJS) in a fresh node; returns the JSON it prints last. */
function probe(source: string, type: 'module' | 'commonjs'): Record<string, boolean | number> {
  const env: NodeJS.ProcessEnv = { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' }
  delete env.DEBUG
  const r = spawnSync(process.execPath, [`--input-type=${type}`, '-e', source], { encoding: 'utf8', env })
  assert.equal(r.status, 0, `the probe failed: ${r.stderr}`)
  const last = r.stdout.trim().split('\n').pop() as string
  return JSON.parse(last)
}

// Whether the SDK's S3 client module is loaded (ESM imports of CommonJS land in the same cache).
const LOADED = String.raw`() => Object.keys(require.cache).some((k) => /[\\/]@aws-sdk[\\/]client-s3[\\/]/.test(k))`
// A file written and read back on the directory store, then a client made.
const EXERCISE = (lib: string) => `
  const seen = {}
  seen.import = loaded()
  const store = new lib.DirectoryStore(${JSON.stringify(join(work, lib))})
  const f = await lib.SegmentFile.create(store)
  await f.write(0, Buffer.alloc(100000, 7))
  await f.flush()
  await f.close()
  const g = await lib.SegmentFile.open(store, { readOnly: true })
  if ((await g.read(0, 100000)).byteLength !== 100000) throw new Error('short read')
  await g.close()
  seen.directory = loaded()
  lib.createS3Client({ endpoint: 'http://127.0.0.1:9', region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } })
  seen.client = loaded()
  console.log(JSON.stringify(seen))`

describe('the AWS SDK is loaded when first needed', () => {
  it('the ESM build: not by the import nor the directory store; by createS3Client', () => {
    const lib = JSON.stringify(resolve('dist/esm/lib/index.js'))
    const source = `import { createRequire } from 'node:module'
      const require = createRequire(import.meta.url)
      const loaded = ${LOADED}
      const lib = await import(${lib})
      ${EXERCISE('esm')}`
    assert.deepEqual(probe(source, 'module'), { import: false, directory: false, client: true })
  })

  it('the CommonJS build: the same', () => {
    const lib = JSON.stringify(resolve('dist/cjs/lib/index.js'))
    const source = `const loaded = ${LOADED}
      const lib = require(${lib})
      ;(async () => { ${EXERCISE('cjs')} })().catch((err) => { console.error(err); process.exit(1) })`
    assert.deepEqual(probe(source, 'commonjs'), { import: false, directory: false, client: true })
  })

  it('the CLI: put and get on a directory store leave it unloaded', () => {
    // (The cases above show that the probe sees the SDK once loaded.)
    const file = join(work, 'small.bin')
    writeFileSync(file, Buffer.alloc(300000, 3))
    const cli = JSON.stringify(resolve('dist/cjs/lib/cli.js'))
    const url = JSON.stringify(join(work, 'cli-store'))
    const source = `const loaded = ${LOADED}
      const { main } = require(${cli})
      const { Writable } = require('node:stream')
      const quiet = new Writable({ write(chunk, encoding, done) { done() } })
      ;(async () => {
        const seen = {}
        seen.put = await main(['put', ${JSON.stringify(file)}, ${url}], quiet, quiet)
        seen.putLoaded = loaded()
        seen.get = await main(['get', ${url}, ${JSON.stringify(join(work, 'small.out'))}], quiet, quiet)
        seen.getLoaded = loaded()
        console.log(JSON.stringify(seen))
      })().catch((err) => { console.error(err); process.exit(1) })`
    assert.deepEqual(probe(source, 'commonjs'), { put: 0, putLoaded: false, get: 0, getLoaded: false })
  })
})
