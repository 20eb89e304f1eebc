/**
 * The docs against the code. Every TypeScript block (```ts) of README.md and docs/*.md is a whole program that
 * type-checks, strict, against the package as built: an import from 'stream-segment'
 * resolves to this checkout's declaration files (the package's own name, through its
 * `exports`). A renamed function, option, event or field fails here with the document
 * and line of the block. Every value and type the package's root exports is named in
 * docs/api.md, the reference, and every setting in docs/settings.md; every relative link
 * leads to a file, and to a heading of it.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, resolve } from 'node:path'
import { after, it } from 'node:test'
import { READ_OPTIONS } from '../lib/cli/args.js'
import * as lib from '../lib/index.js'

interface Block {
  doc: string
  line: number
  source: string
}

/** The ```ts blocks of a Markdown text, with the line each one's code starts on. */
function tsBlocks(doc: string, text: string): Block[] {
  const blocks: Block[] = []
  for (const m of text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)) {
    const line = text.slice(0, m.index).split('\n').length + 1
    blocks.push({ doc, line, source: m[1] as string })
  }
  return blocks
}

const docs = ['README.md', ...readdirSync('docs').map((f) => `docs/${f}`)].filter((f) => f.endsWith('.md'))
const blocks = docs.flatMap((doc) => tsBlocks(doc, readFileSync(doc, 'utf8')))

// Inside the checkout, so that 'stream-segment' and the SDK resolve as they do for its code.
mkdirSync('.tmp', { recursive: true })
const work = mkdtempSync(resolve('.tmp/snippets-'))
after(() => rmSync(work, { recursive: true, force: true }))

it('finds the blocks: a ```ts block closed on its own line gives its code and first line', () => {
  assert.deepEqual(tsBlocks('x.md', 'text\n```ts\nconst a = 1\n```\n```sh\nls\n```\n```ts\nb()\n```\n'), [
    { doc: 'x.md', line: 3, source: 'const a = 1\n' },
    { doc: 'x.md', line: 9, source: 'b()\n' },
  ])
  assert.ok(blocks.length >= 15, `only ${blocks.length} blocks found in ${docs.join(', ')}`)
  assert.ok(
    blocks.some((b) => b.doc === 'README.md'),
    'README.md has blocks',
  )
})

it('every ```ts block of README.md and docs/ type-checks against the package (strict)', () => {
  const names = new Map<string, Block>()
  for (const b of blocks) {
    const name = `${b.doc.replace(/[/.]/g, '_')}_${b.line}.mts`
    names.set(name, b)
    writeFileSync(join(work, name), b.source)
  }
  const tsc = createRequire(resolve('package.json')).resolve('typescript/bin/tsc')
  const flags = ['--ignoreConfig', '--strict', '--noEmit', '--module', 'nodenext', '--target', 'es2022']
  const args = [tsc, ...flags, '--types', 'node']
  const r = spawnSync(process.execPath, [...args, ...names.keys()], { cwd: work, encoding: 'utf8' })
  // Each error names its block's document and the line in that document.
  const errors = r.stdout
    .split('\n')
    .filter((l) => /^\S+\.mts\(\d+,\d+\)/.test(l))
    .map((l) => {
      const [, file, line, rest] = /^(\S+\.mts)\((\d+),\d+\): (.*)$/.exec(l) as RegExpExecArray
      const b = names.get(file as string) as Block
      return `${b.doc}:${b.line + Number(line) - 1}: ${rest}`
    })
  assert.deepEqual(errors, [])
  assert.equal(r.status, 0, `tsc exited ${r.status}: ${r.stderr}${r.stdout}`)
})

it('docs/api.md names every value and type the package root exports', () => {
  const api = readFileSync('docs/api.md', 'utf8')
  const values = Object.keys(lib)
  // The names in the declaration file's `export { … }` and `export type { … }` lists.
  const declarations = readFileSync('dist/esm/lib/index.d.ts', 'utf8')
  const types = [...declarations.matchAll(/^export (?:type )?\{([^}]*)\}/gm)].flatMap((m) =>
    (m[1] as string)
      .split(',')
      .map((entry) => entry.trim().split(/\s+/).at(-1) as string)
      .filter((name) => /^\w+$/.test(name)),
  )
  assert.ok(values.includes('SegmentFile') && types.includes('FlushTiming'), 'the exports are found')
  const missing = [...values, ...types].filter((name) => !new RegExp(`\\b${name}\\b`).test(api))
  assert.deepEqual(missing, [])
})

it('docs/settings.md names every setting, of writes and of reads', () => {
  const doc = readFileSync('docs/settings.md', 'utf8')
  // The read options as the CLI takes them: READ_DEFAULTS' and the read stream's readAheadBytes.
  const names = [...Object.keys(lib.SPEC_DEFAULTS), ...READ_OPTIONS]
  assert.ok(names.includes('streamSegmentBytes') && names.includes('readGetMaxBytes'), 'the settings are found')
  assert.deepEqual(
    names.filter((name) => !new RegExp(`\\b${name}\\b`).test(doc)),
    [],
  )
})

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-')
}

/** The anchors of a Markdown text's headings (a repeated heading gets -1, -2, …). */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  const prose = text.replace(/^```[\s\S]*?^```$/gm, '')
  for (const m of prose.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(m[1] as string)
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

it('every relative link of README.md and docs/ names a file of the checkout, and a heading of it when it has #', () => {
  assert.equal(slug('Cleaning up: gc and rm'), 'cleaning-up-gc-and-rm')
  assert.equal(slug('`SegmentFile.write` in 16 MiB writes'), 'segmentfilewrite-in-16-mib-writes')
  const broken: string[] = []
  for (const doc of docs) {
    const text = readFileSync(doc, 'utf8').replace(/^```[\s\S]*?^```$/gm, '')
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const link = m[1] as string
      if (/^[a-z]+:/i.test(link)) continue // http(s):, mailto:
      const [path, anchor] = link.split('#') as [string, string | undefined]
      const target = path === '' ? doc : join(dirname(doc), path)
      if (!existsSync(target)) {
        broken.push(`${doc}: ${link}: no file ${target}`)
        continue
      }
      if (anchor !== undefined && target.endsWith('.md') && !anchors(readFileSync(target, 'utf8')).has(anchor)) {
        broken.push(`${doc}: ${link}: no heading #${anchor} in ${target}`)
      }
    }
  }
  assert.deepEqual(broken, [])
})
