/**
 * docs/logging.md names every `debug` namespace lib/ logs under, and no other; docs/settings.md
 * names every environment variable lib/ reads, and no other.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { it } from 'node:test'

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  )
}

it('every debug namespace in lib/ is documented in docs/logging.md, and only those', () => {
  const inCode = new Set<string>()
  for (const file of sources('lib')) {
    for (const m of readFileSync(file, 'utf8').matchAll(/(?:debug|createDebug)\('(stream-segment:[a-z0-9-]+)'\)/g)) {
      inCode.add(m[1] as string)
    }
  }
  assert.ok(inCode.size >= 8, `found only ${[...inCode].join(', ')} in lib/`)
  const doc = readFileSync('docs/logging.md', 'utf8')
  const inDoc = new Set([...doc.matchAll(/`(stream-segment:[a-z0-9-]+)`/g)].map((m) => m[1] as string))
  assert.deepEqual([...inCode].sort(), [...inDoc].sort())
})

/**
 * The environment variables lib/ reads: `process.env.X`, through an alias (`const env =
 * process.env; env.X`, `env['X']`), and the names a read picks among (`env[name]`, name
 * one of 'AWS_…' or 'STREAM_SEGMENT_…' literals).
 */
function readInLib(): Set<string> {
  const inCode = new Set<string>()
  const reads = [
    /\benv\.([A-Z][A-Z0-9_]*)/g,
    /\benv\[\s*['"`]([A-Z][A-Z0-9_]*)['"`]\s*\]/g,
    /['"`]((?:AWS|STREAM_SEGMENT)_[A-Z0-9_]+)['"`]/g,
  ]
  for (const file of sources('lib')) {
    const text = readFileSync(file, 'utf8')
    for (const re of reads) for (const m of text.matchAll(re)) inCode.add(m[1] as string)
  }
  return inCode
}

it('every environment variable lib/ reads is in docs/settings.md', () => {
  const inCode = readInLib()
  assert.ok(inCode.has('STREAM_SEGMENT_CRC32') && inCode.has('AWS_DEFAULT_REGION'), [...inCode].join(', '))
  const doc = readFileSync('docs/settings.md', 'utf8')
  const missing = [...inCode].filter((name) => !doc.includes(`\`${name}\``))
  assert.deepEqual(missing, [])
})

it("every variable of docs/settings.md's Environment table is one lib/ reads (DEBUG: the debug package)", () => {
  const inCode = readInLib()
  const doc = readFileSync('docs/settings.md', 'utf8')
  const table = doc.slice(doc.indexOf('\n## Environment\n'))
  const rows = [...table.matchAll(/^\| `([A-Z][A-Z0-9_]*)` /gm)].map((m) => m[1] as string)
  assert.ok(rows.includes('STREAM_SEGMENT_HUGE_PAGES'), rows.join(', '))
  assert.deepEqual(
    rows.filter((name) => name !== 'DEBUG' && !inCode.has(name)),
    [],
  )
})
