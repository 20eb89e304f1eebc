/**
 * The package as a user gets it: `npm pack` of the build, installed from that tarball into a
 * fresh project (the registry's packages from npm's cache, as `npm ci` left them), then
 * imported (ESM), required (CommonJS), type-checked (TypeScript, strict, the package's
 * declaration files included) and run as the `stream-segment` command. What the package
 * declares (`main`, `types`, `exports`, `bin`, `files`) is checked against what it ships.
 */
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { collected } from './helpers/child.js'

const ROOT = resolve('.')
const work = mkdtempSync(join(tmpdir(), 'package-'))
const project = join(work, 'project')
after(() => rmSync(work, { recursive: true, force: true }))

function run(command: string, args: string[], cwd: string, input?: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' }
  delete env.DEBUG
  const r = spawnSync(command, args, { cwd, env, encoding: 'utf8', input, maxBuffer: 64 << 20 })
  assert.equal(r.error, undefined, `${command} ${args.join(' ')}: ${r.error?.message}`)
  assert.equal(r.status, 0, `${command} ${args.join(' ')} exited ${r.status}:\n${r.stderr}\n${r.stdout}`)
  return r.stdout
}

/** As run, without blocking: the type check goes on in its process while the other checks run. */
function runAsync(command: string, args: string[], cwd: string): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' }
  delete env.DEBUG
  return new Promise((resolve, reject) => {
    const p = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
    const output = collected(p)
    p.on('error', (err) => reject(new Error(`${command} ${args.join(' ')}: ${err.message}`)))
    p.on('close', (code) => {
      try {
        assert.equal(code, 0, `${command} ${args.join(' ')} exited ${code}:\n${output.stderr()}\n${output.stdout()}`)
        resolve(output.stdout())
      } catch (err) {
        reject(err)
      }
    })
  })
}

interface Packed {
  filename: string
  files: Array<{ path: string }>
}
let packed: Packed
let shipped: Set<string>

before(() => {
  const out = run('npm', ['pack', '--json', '--pack-destination', work], ROOT)
  packed = (JSON.parse(out) as Packed[])[0] as Packed
  shipped = new Set(packed.files.map((f) => f.path))
})

const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as {
  main: string
  types: string
  bin: Record<string, string>
  exports: Record<string, string | Record<string, Record<string, string>>>
}
const rel = (p: string) => p.replace(/^\.\//, '')

describe('the package as npm pack makes it', () => {
  it('ships every file its main, types, exports and bin name, the addons’ sources and the licence', () => {
    const named = [pkg.main, pkg.types, ...Object.values(pkg.bin)]
    for (const entry of Object.values(pkg.exports)) {
      if (typeof entry === 'string') named.push(entry)
      else for (const cond of Object.values(entry)) named.push(...Object.values(cond))
    }
    named.push('binding.gyp', 'lib/native/crc32.c', 'lib/native/memory.c', 'LICENSE', 'README.md')
    named.push('dist/cjs/package.json', 'dist/esm/lib/store/s3-sdk.cjs', 'dist/cjs/lib/cli.js')
    for (const p of named) assert.ok(shipped.has(rel(p)), `${rel(p)} is not in the tarball`)
  })

  it('ships what the README links to (the docs, the licence), so its links work in node_modules', () => {
    const readme = readFileSync('README.md', 'utf8').replace(/^```[\s\S]*?^```$/gm, '')
    const links = [...readme.matchAll(/\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g)]
      .map((m) => m[1] as string)
      .filter((l) => !/^[a-z]+:/i.test(l))
    assert.ok(links.includes('docs/api.md'), `README's links: ${links.join(' ')}`)
    assert.deepEqual(
      links.filter((l) => !shipped.has(l)),
      [],
    )
  })

  it('ships no tests, benchmarks, examples, TypeScript sources or build outputs of the addons', () => {
    const stray = [...shipped].filter(
      (p) =>
        /^(dist\/(esm|cjs)\/(test|examples)\/|test\/|examples\/|build\/|node_modules\/)/.test(p) ||
        (p.endsWith('.ts') && !p.endsWith('.d.ts') && !p.endsWith('.d.cts')),
    )
    assert.deepEqual(stray, [])
  })
})

// Its checks side by side, the type check first: it takes most of the time, in a process of
// its own (the others, synchronous, run meanwhile). Each writes files of its own names.
describe('the package installed from its tarball into a fresh project', { concurrency: true }, () => {
  before(() => {
    mkdirSync(project)
    writeFileSync(join(project, 'package.json'), '{ "name": "user-project", "private": true }\n')
    run(
      'npm',
      ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', join(work, packed.filename)],
      project,
    )
  })

  it('TypeScript (strict, nodenext, declaration files checked): both builds’ types', async () => {
    const source = `import { createStreamSegmentWriteStream, openStore, SegmentFile, StreamSegmentError, type FlushTiming } from 'stream-segment'
      export async function save(url: string): Promise<number | undefined> {
        const writer = createStreamSegmentWriteStream({ url })
        writer.end(Buffer.from('x'))
        const timing: FlushTiming | undefined = writer.flushTiming
        const file = await SegmentFile.open(openStore(url), { readOnly: true })
        const size: number = file.size
        await file.close()
        if (!(new StreamSegmentError('ERR_NOT_FOUND', 'm') instanceof Error)) return undefined
        return timing?.cno ?? size
      }\n`
    writeFileSync(join(project, 'check.mts'), source) // resolves the "import" condition
    writeFileSync(join(project, 'check.cts'), source) // and the "require" one
    const tsc = createRequire(join(ROOT, 'package.json')).resolve('typescript/bin/tsc')
    const flags = ['--strict', '--noEmit', '--skipLibCheck', 'false', '--module', 'nodenext']
    const types = ['--types', 'node', '--typeRoots', join(ROOT, 'node_modules/@types')]
    await runAsync(process.execPath, [tsc, ...flags, ...types, 'check.mts', 'check.cts'], project)
  })

  it('ESM: a stream written to a directory container and read back equal', () => {
    const container = JSON.stringify(join(work, 'esm-container'))
    writeFileSync(
      join(project, 'check.mjs'),
      `import { pipeline } from 'node:stream/promises'
      import { Readable } from 'node:stream'
      import { createStreamSegmentWriteStream, createStreamSegmentReadStream, crc32Implementation } from 'stream-segment'
      const data = Buffer.alloc(3 << 20)
      for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 12)) & 255
      const writer = createStreamSegmentWriteStream({ url: ${container} })
      await pipeline(Readable.from([data.subarray(0, 1 << 20), data.subarray(1 << 20)]), writer)
      const chunks = []
      for await (const c of createStreamSegmentReadStream({ url: ${container} })) chunks.push(c)
      console.log(JSON.stringify({ equal: Buffer.concat(chunks).equals(data), cno: writer.flushTiming.cno, crc32Implementation }))`,
    )
    const seen = JSON.parse(run(process.execPath, ['check.mjs'], project).trim()) as Record<string, unknown>
    assert.equal(seen.equal, true)
    assert.equal(seen.cno, 1)
    // The install built the CRC-32 addon from the shipped sources wherever this checkout's build did.
    if (existsSync(join(ROOT, 'build/Release/stream_segment_crc32.node'))) {
      assert.match(String(seen.crc32Implementation), /^stream-segment addon/)
    }
  })

  it('CommonJS: require gives the same entry points, and the SDK stays unloaded', () => {
    writeFileSync(
      join(project, 'check.cjs'),
      `const lib = require('stream-segment')
      const names = ['openStore', 'SegmentFile', 'createStreamSegmentWriteStream', 'createStreamSegmentReadStream', 'StreamSegmentError', 'Upload', 'gc', 'removeContainer', 'exportObject']
      const missing = names.filter((n) => lib[n] === undefined)
      const sdk = Object.keys(require.cache).some((k) => /[\\\\/]@aws-sdk[\\\\/]client-s3[\\\\/]/.test(k))
      console.log(JSON.stringify({ missing, sdk }))`,
    )
    assert.deepEqual(JSON.parse(run(process.execPath, ['check.cjs'], project).trim()), { missing: [], sdk: false })
  })

  it('the stream-segment command: put from stdin, ls and get', () => {
    const bin = join(project, 'node_modules/.bin/stream-segment')
    const container = join(work, 'cli-container')
    const text = 'a file given on standard input\n'.repeat(5000)
    run(bin, ['put', '-', container], project, text)
    assert.match(run(bin, ['ls', container], project), new RegExp(`^\\s*1\\s+${text.length}\\s`, 'm'))
    run(bin, ['get', container, join(work, 'back.txt')], project)
    assert.equal(readFileSync(join(work, 'back.txt'), 'utf8'), text)
  })
})
