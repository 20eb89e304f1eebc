// The dependency rule of lib/ (written at the top of lib/index.ts), checked by `npm run lint`:
//
//   1. Imports point down the wings: a module imports only from its own wing or from the
//      wings below it in LAYERS (errors.ts and util/ at the bottom, cli/, cli.ts and index.ts on top).
//   2. admin/ reads containers through container/ and format/ only: never read/, write/,
//      state/ (nor anything above them).
//   3. Nothing outside container/ (and store/ itself) calls a method of an ObjectStore:
//      found with the type checker, so `core.store.get(…)` and an alias of it alike.
//   4. No import cycles.
//
// Prints one line per violation and exits 1 when there is any. `--self-test` runs the
// checks on a small tree with one violation of each kind and fails unless all are found.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve, sep } from 'node:path'

const ts = createRequire(import.meta.url)('typescript')

/** Wings from the bottom up; a module may import its own wing and those listed before it. */
export const LAYERS = [
  ['errors.ts', 'util'],
  ['format'],
  ['store', 'settings.ts'],
  ['container'],
  ['state'],
  ['wal'],
  ['read'],
  ['write'],
  ['admin'],
  ['segment-file.ts'],
  ['streams'],
  ['cli', 'cli.ts', 'index.ts'],
]
const ADMIN_MAY_NOT = new Set(['read', 'write', 'state', 'segment-file.ts', 'streams', 'cli', 'cli.ts', 'index.ts'])
const STORE_OWNERS = new Set(['store', 'container'])

/** The wing of a file under lib/: its folder, or its own name for a file at the top. */
function wingOf(libDir, file) {
  const rel = relative(libDir, file).split(sep)
  return rel.length === 1 ? rel[0] : rel[0]
}

function layerOf(wing) {
  return LAYERS.findIndex((l) => l.includes(wing))
}

/** Every violation in the lib/ tree at `libDir`, as lines. */
export function check(libDir) {
  const files = ts.sys.readDirectory(libDir, ['.ts'], undefined, undefined).filter((f) => !f.endsWith('.d.ts'))
  const program = ts.createProgram(files, {
    strict: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: ['node'],
    skipLibCheck: true,
  })
  const checker = program.getTypeChecker()
  const problems = []
  const graph = new Map()
  const storeDir = resolve(libDir, 'store')
  for (const sf of program.getSourceFiles()) {
    const file = resolve(sf.fileName)
    if (!file.startsWith(resolve(libDir) + sep)) continue
    const name = relative(libDir, file)
    const wing = wingOf(libDir, file)
    const layer = layerOf(wing)
    if (layer < 0)
      problems.push(`${name}: wing '${wing}' is not in the dependency rule (scripts/check-deps.mjs LAYERS)`)
    const edges = []
    graph.set(file, edges)
    const visit = (node) => {
      if (
        (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
        node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier) &&
        node.moduleSpecifier.text.startsWith('.')
      ) {
        const target = resolve(dirname(file), node.moduleSpecifier.text.replace(/\.js$/, '.ts'))
        edges.push(target)
        const toWing = wingOf(libDir, target)
        const line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1
        if (toWing !== wing && layerOf(toWing) > layer) {
          problems.push(
            `${name}:${line}: imports ${relative(libDir, target)}: ${wing} may not import ${toWing} (above it)`,
          )
        }
        if (wing === 'admin' && ADMIN_MAY_NOT.has(toWing)) {
          problems.push(
            `${name}:${line}: imports ${relative(libDir, target)}: admin/ reads through container/ and format/ only`,
          )
        }
      }
      if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) && !STORE_OWNERS.has(wing)) {
        const symbol = checker.getSymbolAtLocation(node.expression.name)
        const decls = symbol?.declarations ?? []
        if (decls.some((d) => resolve(d.getSourceFile().fileName).startsWith(storeDir + sep))) {
          const line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1
          problems.push(`${name}:${line}: calls ${node.expression.getText(sf)}(): only container/ calls the store`)
        }
      }
      ts.forEachChild(node, visit)
    }
    visit(sf)
  }
  // Cycles: a depth-first search over the import graph.
  const state = new Map()
  const stack = []
  const dfs = (f) => {
    state.set(f, 1)
    stack.push(f)
    for (const t of graph.get(f) ?? []) {
      if (state.get(t) === 1) {
        const cycle = stack.slice(stack.indexOf(t)).concat(t)
        problems.push(`import cycle: ${cycle.map((x) => relative(libDir, x)).join(' -> ')}`)
      } else if (!state.has(t) && graph.has(t)) dfs(t)
    }
    stack.pop()
    state.set(f, 2)
  }
  for (const f of graph.keys()) if (!state.has(f)) dfs(f)
  return problems
}

/** A tiny lib/ with one violation of each rule: every one must be reported. */
function selfTest() {
  const dir = mkdtempSync(join(tmpdir(), 'check-deps-'))
  const put = (path, text) => {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
  try {
    put('store/types.ts', 'export interface ObjectStore { get(key: string): Promise<Uint8Array> }\n')
    put('format/a.ts', "import { b } from '../write/b.js'\nexport const a = b\n")
    put('write/b.ts', "export const b = 1\nexport { c } from './c.js'\n")
    put('write/c.ts', "export { b as c } from './b.js'\n")
    put('admin/d.ts', "import { b } from '../write/b.js'\nexport const d = b\n")
    put(
      'read/e.ts',
      "import type { ObjectStore } from '../store/types.js'\nexport const e = (s: ObjectStore) => s.get('k')\n",
    )
    const found = check(dir)
    const want = [
      /format\/a\.ts:1: .*format may not import write/,
      /admin\/d\.ts:1: .*admin\/ reads/,
      /read\/e\.ts:2: calls s\.get\(\)/,
      /import cycle: write\/[bc]\.ts -> write\/[bc]\.ts -> write\/[bc]\.ts/,
    ]
    const missing = want.filter((re) => !found.some((p) => re.test(p)))
    for (const p of found) console.log(`  found: ${p}`)
    if (missing.length > 0) {
      console.error(`check-deps self-test: not found: ${missing.join(', ')}`)
      process.exit(1)
    }
    console.log(`check-deps self-test: all ${want.length} kinds of violation found`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv.includes('--self-test')) selfTest()
else {
  const problems = check(resolve('lib'))
  for (const p of problems) console.error(`lib/${p}`)
  if (problems.length > 0) {
    console.error(`check-deps: ${problems.length} violations of the dependency rule (see lib/index.ts)`)
    process.exit(1)
  }
  console.log('check-deps: lib/ keeps the dependency rule')
}
