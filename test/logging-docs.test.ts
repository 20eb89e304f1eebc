/**
 * docs/logging.md names every `debug` namespace lib/ logs under, and no other; docs/settings.md
 * names every environment variable lib/ reads.
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

it('every environment variable lib/ reads is in docs/settings.md', () => {
  const inCode = new Set<string>()
  for (const file of sources('lib')) {
    for (const m of readFileSync(file, 'utf8').matchAll(/process\.env\.([A-Z][A-Z0-9_]*)/g)) inCode.add(m[1] as string)
  }
  assert.ok(inCode.has('STREAM_SEGMENT_CRC32') && inCode.has('AWS_ENDPOINT_URL_S3'), [...inCode].join(', '))
  const doc = readFileSync('docs/settings.md', 'utf8')
  const missing = [...inCode].filter((name) => !doc.includes(`\`${name}\``))
  assert.deepEqual(missing, [])
})
