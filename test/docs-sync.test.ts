/**
 * The claims of README.md and docs/ that the code can make false without a type error
 * (defaults, ranges, option and member names, files, variables, usage lines, sizes), each
 * read from the docs and checked against the code, so that a change to either without
 * the other fails here, naming what differs.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import ts from 'typescript'
import { StreamSegmentError } from '../lib/errors.js'
import { HEAD_MAGIC, HEADER_BYTES, HEADER_MAGIC, SUMMARY_ENTRY_BYTES } from '../lib/format/header.js'
import { INODE_BYTES, INODE_OBJECT_BYTES, INODE_OBJECT_MAGIC } from '../lib/format/inode.js'
import { NODE_ENTRY_BYTES, NODE_HEADER_BYTES } from '../lib/format/node.js'
import { MAX_CNO, MAX_PART, POINTER_BYTES } from '../lib/format/pointer.js'
import {
  checkSettingValues,
  dirtyLimitBytes,
  READ_DEFAULTS,
  resolveReadOptions,
  SPEC_DEFAULTS,
  STREAMING_PROFILE,
} from '../lib/settings.js'
import { MemoryStore } from '../lib/store/memory.js'
import { createStreamSegmentReadStream } from '../lib/streams/read-stream.js'

const read = (doc: string) => readFileSync(doc, 'utf8')
const docs = ['README.md', ...readdirSync('docs').map((f) => `docs/${f}`)].filter((f) => f.endsWith('.md'))

/** The part of a Markdown text under `heading` (a whole heading line), to the next heading of its level or above. */
function section(markdown: string, heading: string): string {
  const at = markdown.indexOf(`\n${heading}\n`)
  assert.ok(at >= 0, `no heading ${heading}`)
  const level = heading.split(' ')[0] as string
  const rest = markdown.slice(at + heading.length + 2)
  const next = rest.search(new RegExp(`^#{1,${level.length}} `, 'm'))
  return next < 0 ? rest : rest.slice(0, next)
}

/** The rows of the Markdown tables in `text`, each a list of its cells, trimmed (header and rule rows left out). */
function tableRows(text: string): string[][] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('|') && !/^\|[\s:|-]+\|$/.test(l))
    .map((l) =>
      l
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((c) => c.trim()),
    )
}

const SUPERSCRIPTS = '⁰¹²³⁴⁵⁶⁷⁸⁹'
const UNITS: Record<string, number> = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, s: 1000, hour: 3_600_000 }

/** A number as the docs write one: `4 KiB`, `1 GiB`, `60 s`, `1 hour`, `65536`, `2³²`, `10⁶`. */
function amount(text: string): number {
  const t = text.trim()
  const power = /^(\d+)([⁰¹²³⁴⁵⁶⁷⁸⁹]+)$/.exec(t)
  if (power) return Number(power[1]) ** Number([...(power[2] as string)].map((c) => SUPERSCRIPTS.indexOf(c)).join(''))
  const m = /^(\d+)(?: (KiB|MiB|GiB|s|hour))?$/.exec(t)
  assert.ok(m, `${JSON.stringify(text)} is no amount the docs write`)
  return Number(m[1]) * (m[2] === undefined ? 1 : (UNITS[m[2]] as number))
}

/** A default cell: a quoted string, or an amount. */
function defaultValue(cell: string): string | number {
  const quoted = /^`'([^']*)'`$/.exec(cell)
  return quoted ? (quoted[1] as string) : amount(cell)
}

type Range = { kind: 'integer' | 'power of two'; min: number; max: number } | { kind: 'one of'; values: string[] }

/** A range cell's first clause (what follows a comma ties it to other settings): `power of two, a … b`, `a … b`, `integer ≥ a`, or `'x', 'y'`. */
function range(cell: string): Range {
  if (cell.startsWith("`'"))
    return { kind: 'one of', values: [...cell.matchAll(/`'([^']*)'`/g)].map((m) => m[1] as string) }
  const pow2 = cell.startsWith('power of two, ')
  const rest = pow2 ? cell.slice('power of two, '.length) : cell
  const atLeast = /^integer ≥ ([^,]+)/.exec(rest)
  if (atLeast) return { kind: 'integer', min: amount(atLeast[1] as string), max: Number.MAX_SAFE_INTEGER }
  const m = /^(.+?) … (.+?)(?:,|$)/.exec(rest)
  assert.ok(m, `${JSON.stringify(cell)} is no range the docs write`)
  return { kind: pow2 ? 'power of two' : 'integer', min: amount(m[1] as string), max: amount(m[2] as string) }
}

/** Whether `check` takes `value`; only ERR_INVALID_ARGUMENT counts as refusing it. */
function takes(check: (value: unknown) => void, value: unknown): boolean {
  try {
    check(value)
    return true
  } catch (err) {
    if (StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT')) return false
    throw err
  }
}

/** Where `check` disagrees with the documented range: each bound taken, one step past it refused. */
function rangeMismatches(name: string, documented: Range, check: (value: unknown) => void): string[] {
  const wrong: string[] = []
  const expect = (value: unknown, taken: boolean) => {
    if (takes(check, value) !== taken) wrong.push(`${name}: ${String(value)} ${taken ? 'refused' : 'taken'}`)
  }
  if (documented.kind === 'one of') {
    for (const v of documented.values) expect(v, true)
    expect('no-such-value', false)
    return wrong
  }
  expect(documented.min, true)
  expect(documented.min - 1, false)
  expect(documented.max, true)
  if (documented.max < Number.MAX_SAFE_INTEGER) expect(documented.max + 1, false)
  if (documented.kind === 'power of two') expect(documented.min + 1, false)
  return wrong
}

describe('docs/settings.md against lib/settings.ts', () => {
  const doc = read('docs/settings.md')

  it('finds the numbers: amounts, ranges', () => {
    assert.equal(amount('4 KiB'), 4096)
    assert.equal(amount('2³²'), 2 ** 32)
    assert.equal(amount('10⁶'), 1_000_000)
    assert.equal(amount('1 hour'), 3_600_000)
    assert.deepEqual(range('power of two, 4 KiB … 16 MiB'), { kind: 'power of two', min: 4096, max: 16 * 1024 ** 2 })
    assert.deepEqual(range('1 … 1 GiB, at least two'), { kind: 'integer', min: 1, max: 1024 ** 3 })
    assert.deepEqual(range("`'retry'`, `'fail'`"), { kind: 'one of', values: ['retry', 'fail'] })
  })

  it("Every setting: each row's default is SPEC_DEFAULTS', and its range is what a writer takes", () => {
    const rows = tableRows(section(doc, '## Every setting')).filter((r) => /^`\w+`$/.test(r[0] as string))
    const names = rows.map((r) => (r[0] as string).slice(1, -1))
    assert.deepEqual([...names].sort(), Object.keys(SPEC_DEFAULTS).sort(), 'one row per setting')
    const wrong: string[] = []
    for (const [cell, def, ranged] of rows) {
      const name = (cell as string).slice(1, -1) as keyof typeof SPEC_DEFAULTS
      if (defaultValue(def as string) !== SPEC_DEFAULTS[name]) {
        wrong.push(`${name}: default ${def}, SPEC_DEFAULTS has ${SPEC_DEFAULTS[name]}`)
      }
      wrong.push(...rangeMismatches(name, range(ranged as string), (v) => checkSettingValues({ [name]: v })))
    }
    assert.deepEqual(wrong, [])
  })

  it("Read options: each row's default is READ_DEFAULTS' (readAheadBytes: their product), its range what a reader takes", () => {
    const rows = tableRows(section(doc, '## Read options')).filter((r) => /^`\w+`$/.test(r[0] as string))
    const wrong: string[] = []
    for (const [cell, def, ranged] of rows) {
      const name = (cell as string).slice(1, -1)
      if (name === 'readAheadBytes') {
        const product = READ_DEFAULTS.readGetMaxBytes * READ_DEFAULTS.readMaxConcurrency
        const shown = /^`readGetMaxBytes × readMaxConcurrency` \((.+)\)$/.exec(def as string)
        if (shown === null || amount(shown[1] as string) !== product) wrong.push(`readAheadBytes: default ${def}`)
        const stream = (v: unknown) =>
          createStreamSegmentReadStream({ store: new MemoryStore(), readAheadBytes: v as number }).destroy()
        wrong.push(...rangeMismatches(name, range(ranged as string), stream))
        continue
      }
      const key = name as keyof typeof READ_DEFAULTS
      if (!(key in READ_DEFAULTS)) {
        wrong.push(`${name}: no read option`)
        continue
      }
      if (defaultValue(def as string) !== READ_DEFAULTS[key]) wrong.push(`${name}: default ${def}`)
      wrong.push(...rangeMismatches(name, range(ranged as string), (v) => resolveReadOptions({ [key]: v as number })))
    }
    assert.deepEqual(
      rows.map((r) => r[0]).sort(),
      [...Object.keys(READ_DEFAULTS), 'readAheadBytes'].map((n) => `\`${n}\``).sort(),
    )
    assert.deepEqual(wrong, [])
  })

  it('Profiles: STREAMING_PROFILE as written out, and each profile row as the settings make it', () => {
    const text = section(doc, '## Profiles')
    const written = /`STREAMING_PROFILE` is `\{([^}]*)\}`/.exec(text.replace(/\s+/g, ' '))
    assert.ok(written, 'the profile is written out')
    const profile = Object.fromEntries(
      (written[1] as string).split(',').map((entry) => {
        const [name, value] = entry.split(':').map((s) => s.trim()) as [string, string]
        return [name, amount(value)]
      }),
    )
    assert.deepEqual(profile, { ...STREAMING_PROFILE })
    const rows = tableRows(text).filter((r) => /^`'(streaming|spec)'`/.test(r[0] as string))
    assert.equal(rows.length, 2, 'a row per profile')
    for (const [profileCell, target, limit] of rows) {
      const s = (profileCell as string).startsWith("`'streaming'`")
        ? { ...SPEC_DEFAULTS, ...STREAMING_PROFILE }
        : SPEC_DEFAULTS
      assert.equal(
        amount((target as string).split(' (')[0] as string),
        s.streamSegmentBytes,
        `${profileCell}: ${target}`,
      )
      assert.equal(amount(limit as string), dirtyLimitBytes(s), `${profileCell}: dirty limit ${limit}`)
    }
  })
})

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  )
}

it("the members of StreamSegmentError the docs name (README's and docs/api.md's Errors) exist", () => {
  const e = StreamSegmentError.internal('x', new Error('cause'))
  const wrong: string[] = []
  for (const [doc, heading] of [
    ['README.md', '## Errors'],
    ['docs/api.md', '## Errors'],
  ] as const) {
    const prose = section(read(doc), heading)
      .split('\n')
      .filter((l) => !l.startsWith('|'))
      .join('\n')
    const names = [...prose.matchAll(/`\.?([a-z]\w*)`/g)].map((m) => m[1] as string)
    assert.ok(names.includes('retryable'), `${doc}: ${names.join(', ')}`)
    for (const n of names)
      if (!(n in e) && !(n in StreamSegmentError)) wrong.push(`${doc}: StreamSegmentError has no ${n}`)
  }
  assert.deepEqual(wrong, [])
})

it("docs/logging.md's table gives every namespace the files that log under it, and only those", () => {
  const inCode = new Map<string, string[]>()
  for (const file of sources('lib')) {
    for (const m of read(file).matchAll(/(?:debug|createDebug)\('(stream-segment:[a-z0-9-]+)'\)/g)) {
      inCode.set(m[1] as string, [...(inCode.get(m[1] as string) ?? []), file])
    }
  }
  const rows = tableRows(read('docs/logging.md')).filter((r) => /^`stream-segment:/.test(r[0] as string))
  const inDoc = new Map(
    rows.map((r) => [
      (r[0] as string).slice(1, -1),
      [...(r[1] as string).matchAll(/`([^`]+)`/g)].map((m) => m[1] as string),
    ]),
  )
  assert.ok(inCode.size >= 8 && inDoc.size >= 8, `${[...inCode.keys()]} / ${[...inDoc.keys()]}`)
  const sorted = (m: Map<string, string[]>) => Object.fromEntries([...m].sort().map(([k, v]) => [k, [...v].sort()]))
  assert.deepEqual(sorted(inDoc), sorted(inCode))
})

it('every STREAM_SEGMENT_ environment variable the docs name is one lib/ reads', () => {
  const code = sources('lib')
    .map((f) => read(f))
    .join('\n')
  const wrong: string[] = []
  let count = 0
  for (const doc of docs) {
    for (const m of read(doc).matchAll(/\b(STREAM_SEGMENT_[A-Z0-9_]+)/g)) {
      count++
      if (!new RegExp(`process\\.env\\.${m[1]}\\b|env\\[['"]${m[1]}['"]\\]`).test(code)) wrong.push(`${doc}: ${m[1]}`)
    }
  }
  assert.ok(count >= 3, `only ${count} found`)
  assert.deepEqual(wrong, [])
})

// The package's declarations, for the signatures of docs/api.md.
const program = ts.createProgram(['dist/esm/lib/index.d.ts'], { strict: true, types: ['node'] })
const checker = program.getTypeChecker()
const root = checker.getSymbolAtLocation(program.getSourceFile('dist/esm/lib/index.d.ts') as ts.SourceFile)
const exported = new Map(checker.getExportsOfModule(root as ts.Symbol).map((s) => [s.getName(), s]))

/** The type of an export, or of a static member of one (`SegmentFile.open`). */
function exportType(path: string): ts.Type | undefined {
  const [first, ...members] = path.split('.')
  let sym = exported.get(first as string)
  if (sym === undefined) return undefined
  if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym)
  let type = checker.getTypeOfSymbol(sym)
  for (const m of members) {
    const p = type.getProperty(m)
    if (p === undefined) return undefined
    type = checker.getTypeOfSymbol(p)
  }
  return type
}

/** `text` split at its commas outside brackets. */
function topLevel(text: string): string[] {
  const out: string[] = []
  let depth = 0
  let cur = ''
  for (const c of text) {
    if ('{([<'.includes(c)) depth++
    if ('})]>'.includes(c)) depth--
    if (c === ',' && depth === 0) {
      out.push(cur.trim())
      cur = ''
    } else cur += c
  }
  if (cur.trim() !== '') out.push(cur.trim())
  return out
}

/** The settings and read options, which a `...settings` or `...readOptions` stands for. */
const general = new Set<string>([...Object.keys(SPEC_DEFAULTS), ...Object.keys(READ_DEFAULTS)])

interface Signature {
  where: string
  call: string
  args: string[]
}

/**
 * The signatures docs/api.md gives: code spans `name(…)` or `new Name(…)`, and the
 * comments of its import list (`name, // (…)`), whose name is an export.
 */
function signatures(text: string, doc: string): Signature[] {
  const out: Signature[] = []
  const line = (index: number) => `${doc}:${text.slice(0, index).split('\n').length}`
  for (const m of text.matchAll(/`((?:new )?[A-Za-z][\w.]*)\(([^`]*)\)`/g)) {
    out.push({ where: line(m.index), call: m[1] as string, args: topLevel(m[2] as string) })
  }
  for (const m of text.matchAll(/^ {2}(\w+), \/\/ (new \w+)?\((.*)\)(?: →|:)/gm)) {
    out.push({ where: line(m.index), call: m[2] ?? (m[1] as string), args: topLevel(m[3] as string) })
  }
  return out.filter((s) => exportType(s.call.replace(/^new /, '')) !== undefined)
}

/** The names an options object of a signature lists (`{ a?, b: …, url | store, ...rest }`), and whether it has a rest. */
function listed(arg: string): { names: string[]; rest: boolean } | undefined {
  const m = /^\{(.*)\}\??$/.exec(arg)
  if (m === null) return undefined
  const items = topLevel(m[1] as string)
  return {
    names: items
      .filter((i) => !i.startsWith('...'))
      .flatMap(
        (i) =>
          i
            .split(/[:?]/)[0]
            ?.split('|')
            .map((n) => n.trim()) ?? [],
      ),
    rest: items.some((i) => i.startsWith('...')),
  }
}

it("docs/api.md's signatures list the options each call takes: none it does not, all it does but the settings", () => {
  const api = read('docs/api.md')
  const found = signatures(api, 'docs/api.md')
  assert.ok(
    ['uploadFile', 'downloadFile', 'new Upload', 'SegmentFile.open', 'verifyCheckpoint'].every((c) =>
      found.some((s) => s.call === c),
    ),
    `the signatures are found: ${found.map((s) => s.call).join(', ')}`,
  )
  const wrong: string[] = []
  for (const s of found) {
    const type = exportType(s.call.replace(/^new /, '')) as ts.Type
    const candidates = s.call.startsWith('new ') ? type.getConstructSignatures() : type.getCallSignatures()
    const sig = candidates.at(-1)
    if (sig === undefined) continue
    s.args.forEach((arg, i) => {
      const options = listed(arg)
      // Options written with `?` or a rest are a signature's; `{ cno }` is a call's example.
      if (options === undefined || !(options.rest || arg.includes('?'))) return
      const param = sig.parameters[i]
      if (param === undefined) {
        wrong.push(`${s.where}: ${s.call} takes no argument ${i + 1}`)
        return
      }
      const real = checker
        .getNonNullableType(checker.getTypeOfSymbol(param))
        .getProperties()
        .map((p) => p.getName())
      for (const n of options.names) if (!real.includes(n)) wrong.push(`${s.where}: ${s.call} takes no option ${n}`)
      for (const n of real) {
        if (!options.names.includes(n) && !(options.rest && general.has(n))) {
          wrong.push(`${s.where}: ${s.call}'s option ${n} is not listed`)
        }
      }
    })
  }
  assert.deepEqual(wrong, [])
})

it('SegmentFile: every public member is in the table of docs/api.md, and every member the table names exists', () => {
  const api = section(read('docs/api.md'), '## SegmentFile')
  const instance = checker.getDeclaredTypeOfSymbol(checker.getAliasedSymbol(exported.get('SegmentFile') as ts.Symbol))
  const isPublic = (p: ts.Symbol) =>
    !(
      ts.getCombinedModifierFlags(p.valueDeclaration as ts.Declaration) &
      (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)
    )
  const members = instance
    .getProperties()
    .filter(isPublic)
    .map((p) => p.getName())
  assert.ok(members.includes('readInto') && members.includes('walReplay'), members.join(', '))
  const table = tableRows(section(api, '### Methods and properties'))
  const named = table.flatMap((r) => [...(r[0] as string).matchAll(/`(\w+)/g)].map((m) => m[1] as string))
  assert.deepEqual(
    named.filter((n) => !members.includes(n)),
    [],
    'the table names members that do not exist',
  )
  assert.deepEqual(
    members.filter((n) => !new RegExp(`\`(?:file\\.)?${n}\\b`).test(api)),
    [],
    'members docs/api.md does not name',
  )
})

it("every usage line a command's mistakes print is the one --help gives", () => {
  const help = spawnSync(process.execPath, ['bin/stream-segment.cjs', '--help'], { encoding: 'utf8' })
  assert.equal(help.status, 0, help.stderr)
  const usages = sources('lib/cli').flatMap((f) =>
    [...read(f).matchAll(/'((?:put|get|ls|inspect|verify|gc|rm|export|bench) [<-][^']*)'/g)].map((m) => m[1] as string),
  )
  assert.ok(usages.length >= 9, usages.join('\n'))
  // A hint that names a command (`get URL FILE`) is no usage line: those start with <…>, --… or a placeholder.
  const lines = usages.filter((u) => /^\w+ (<|--\w+ <)/.test(u))
  assert.deepEqual(
    lines.filter((u) => !help.stdout.includes(`\n  ${u}`)),
    [],
  )
})

it("docs/format.md's sizes, magics and limits are the code's, and the last checkpoint number everywhere", () => {
  const doc = read('docs/format.md')
  const sup = (n: number) => [...String(n)].map((d) => SUPERSCRIPTS[Number(d)]).join('')
  const claims = [
    `cno 1 … 2${sup(Math.log2(MAX_CNO + 1))} − 1, part 0 … ${MAX_PART}`,
    `The last ${HEADER_BYTES} bytes`,
    `${POINTER_BYTES} bytes: \`lo\``,
    `magic \`${HEADER_MAGIC}\` (StreamSegment) or \`${HEAD_MAGIC}\``,
    `${SUMMARY_ENTRY_BYTES} bytes per data slot`,
    `⌊(metaBlockSize − ${NODE_HEADER_BYTES}) / ${NODE_ENTRY_BYTES}⌋ entries`,
    `${INODE_BYTES} bytes: size u64`,
    `base inode (${INODE_BYTES} bytes)`,
    `The \`inode\` object is ${INODE_OBJECT_BYTES} bytes: magic \`${INODE_OBJECT_MAGIC}\``,
  ]
  const flat = doc.replace(/\s+/g, ' ')
  assert.deepEqual(
    claims.filter((c) => !flat.includes(c)),
    [],
  )
  // The last checkpoint number, as the CLI and the API reference give it.
  assert.ok(read('docs/cli.md').includes(`each of \`--keep-cnos\`: 1 to ${MAX_CNO})`), 'docs/cli.md: the largest cno')
  assert.ok(read('docs/api.md').includes(`last checkpoint number (2${sup(Math.log2(MAX_CNO + 1))} − 1)`), 'docs/api.md')
})

it('docs/cli.md lists every setting put takes, and as durations those in milliseconds', () => {
  const text = section(read('docs/cli.md'), '### put').replace(/\s+/g, ' ')
  const list = /: (`format`, [^—]*)— every setting/.exec(text)
  const durations = /the settings in milliseconds \(([^)]*)\)/.exec(text)
  assert.ok(list && durations, 'the lists are found')
  const names = (s: string) => [...s.matchAll(/`(\w+)`/g)].map((m) => m[1] as string)
  const settings = Object.keys(SPEC_DEFAULTS)
  assert.deepEqual(names(list[1] as string), settings)
  assert.deepEqual(
    names(durations[1] as string),
    settings.filter((n) => n.endsWith('Ms')),
  )
})
