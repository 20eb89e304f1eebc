/** docs/logging.md names every `debug` namespace lib/ logs under, and no other. */
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
