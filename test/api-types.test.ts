/**
 * The declaration files users get: every type the package root's exports name, as far as
 * a user reaches (an option's type, a result's, what a store implements), is one the root
 * exports too, so that a user can name it. The exports map lets no one import a module
 * below the root, so a type declared there and not exported could be met but not named.
 * Both builds' declarations are walked (ESM's and CommonJS's), as npm run build leaves them.
 */
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { dirname, relative } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import type * as TS from 'typescript'

const ts = createRequire(import.meta.url)('typescript') as typeof TS

/**
 * Members not walked: the handle's state and the read stream's reader, which the library's
 * own adapters reach and users are not meant to, and Node's underscore hooks of a stream.
 */
const NOT_WALKED = new Set(['core', 'reader'])

/** Helper aliases a user has no need to name: the write stream's typed-listener overloads, and typeof crc32. */
const UNNAMED = new Set(['Listener', 'Other', 'AnyListener', 'Crc32Fn', 'Treatment'])

/** `Name (file)` for each type the root's exports name and do not export, with where it was met. */
function unexportedTypes(indexDts: string): string[] {
  const root = dirname(indexDts)
  const program = ts.createProgram([indexDts], {
    strict: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: ['node'],
  })
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(indexDts)
  assert.ok(source, `${indexDts} is not built`)
  const moduleSymbol = checker.getSymbolAtLocation(source)
  assert.ok(moduleSymbol, `${indexDts} is no module`)
  const aliased = (s: TS.Symbol) => (s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s)
  const exported = new Set(checker.getExportsOfModule(moduleSymbol).map(aliased))
  const ours = (d: TS.Declaration) => d.getSourceFile().fileName.startsWith(root)
  const seen = new Set<TS.Symbol>()
  const found = new Map<string, string>()

  const visitSymbol = (s: TS.Symbol, from: string) => {
    const decls = (s.declarations ?? []).filter(ours)
    if (decls.length === 0 || s.flags & ts.SymbolFlags.TypeParameter) return
    if (!exported.has(s) && !UNNAMED.has(s.name)) {
      found.set(`${s.name} (${relative(root, (decls[0] as TS.Declaration).getSourceFile().fileName)})`, from)
    }
    if (seen.has(s)) return
    seen.add(s)
    for (const d of decls) visitDeclaration(d, s.name)
  }
  const visitNode = (node: TS.Node, from: string): void => {
    let name: TS.Node | undefined
    if (ts.isTypeReferenceNode(node)) name = node.typeName
    else if (ts.isExpressionWithTypeArguments(node)) name = node.expression
    else if (ts.isTypeQueryNode(node)) name = node.exprName
    else if (ts.isImportTypeNode(node)) name = node.qualifier
    const s = name === undefined ? undefined : checker.getSymbolAtLocation(name)
    if (s !== undefined) visitSymbol(aliased(s), from)
    ts.forEachChild(node, (child) => visitNode(child, from))
  }
  const visitDeclaration = (d: TS.Declaration, from: string) => {
    if (!ts.isClassDeclaration(d)) return visitNode(d, from)
    for (const h of d.heritageClauses ?? []) visitNode(h, from)
    for (const m of d.members) {
      if (ts.getCombinedModifierFlags(m) & ts.ModifierFlags.Private) continue
      const member = m.name === undefined ? 'constructor' : m.name.getText()
      if (NOT_WALKED.has(member) || member.startsWith('_') || member.startsWith('#')) continue
      visitNode(m, `${from}.${member}`)
    }
  }
  for (const s of exported) visitSymbol(s, s.name)
  return [...found].map(([type, from]) => `${type}, met in ${from}`).sort()
}

describe('the declaration files', () => {
  for (const build of ['esm', 'cjs']) {
    it(`${build}: every type the root's exports name is exported by the root`, () => {
      const index = fileURLToPath(new URL(`../../${build}/lib/index.d.ts`, import.meta.url))
      assert.deepEqual(unexportedTypes(index), [])
    })
  }
})
