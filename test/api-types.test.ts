/**
 * The declaration files users get: every type the package root's exports name, as far as
 * a user reaches (an option's type, a result's, what a store implements), is one the root
 * exports too, so that a user can name it. The exports map lets no one import a module
 * below the root, so a type declared there and not exported could be met but not named.
 * Both builds' declarations are walked (ESM's and CommonJS's), as npm run build leaves them.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, relative } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import type * as TS from 'typescript'
import { diagnosticsOf, sharedHost } from './helpers/type-check.js'

const ts = createRequire(import.meta.url)('typescript') as typeof TS

/** Helper aliases a user has no need to name: the write stream's typed-listener overloads, and typeof crc32. */
const UNNAMED = new Set(['Listener', 'Other', 'AnyListener', 'Crc32Fn', 'Treatment'])

const OPTIONS: TS.CompilerOptions = {
  strict: true,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: ['node'],
}
const programs = new Map<string, TS.Program>()
/**
 * The program of a build's declarations, made once for both walks over it (the types the
 * root's exports name, the members of the classes users hold): making one is most of what
 * each test costs, and neither walk changes it.
 */
function programOf(indexDts: string): TS.Program {
  let program = programs.get(indexDts)
  if (program === undefined) {
    program = ts.createProgram([indexDts], OPTIONS, sharedHost(OPTIONS))
    programs.set(indexDts, program)
  }
  return program
}

/** `Name (file)` for each type the root's exports name and do not export, with where it was met. */
function unexportedTypes(indexDts: string): string[] {
  const root = dirname(indexDts)
  const program = programOf(indexDts)
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
      // Node's and streamx's underscore hooks of a stream are no API of ours.
      if (member.startsWith('_') || member.startsWith('#')) continue
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

/** The classes whose instances users hold, and the section of docs/api.md that documents each one's members. */
const DOCUMENTED_IN = {
  SegmentFile: '## SegmentFile',
  StreamSegmentReadStream: '## Read stream',
  StreamSegmentWriteStream: '## Write stream',
  Upload: '## Upload',
} as const

/** The part of docs/api.md under `heading`, to the next heading of its level or above. */
function apiSection(heading: string): string {
  const api = readFileSync('docs/api.md', 'utf8')
  const at = api.indexOf(`\n${heading}\n`)
  assert.ok(at >= 0, `docs/api.md has no heading ${heading}`)
  const rest = api.slice(at + heading.length + 2)
  const next = rest.search(/^#{1,2} /m)
  return next < 0 ? rest : rest.slice(0, next)
}

/**
 * `Class.member` for each member a class declares that a user can reach from the
 * declarations (neither private nor protected, nor an underscore hook of a stream) and
 * that its section of docs/api.md does not name as code:
 * an internal left public is a member users may come to depend on.
 */
function undocumentedMembers(indexDts: string): string[] {
  const program = programOf(indexDts)
  const checker = program.getTypeChecker()
  const root = checker.getSymbolAtLocation(program.getSourceFile(indexDts) as TS.SourceFile) as TS.Symbol
  const exports = new Map(checker.getExportsOfModule(root).map((s) => [s.name, s]))
  const found: string[] = []
  for (const [name, heading] of Object.entries(DOCUMENTED_IN)) {
    const symbol = exports.get(name)
    assert.ok(symbol !== undefined, `the root exports no ${name}`)
    const decl = checker.getAliasedSymbol(symbol).valueDeclaration
    assert.ok(decl !== undefined && ts.isClassDeclaration(decl), `${name} is no class`)
    const text = apiSection(heading)
    for (const m of decl.members) {
      if (m.name === undefined || ts.isConstructorDeclaration(m)) continue
      if (ts.getCombinedModifierFlags(m) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) continue
      const member = m.name.getText()
      if (member.startsWith('_') || member.startsWith('#')) continue
      // As code: `member`, `file.member`, or called on an instance in an example (`upload.on(`).
      if (!new RegExp(`\`(?:\\w+\\.)?${member}\\b|\\w\\.${member}\\(`).test(text)) found.push(`${name}.${member}`)
    }
  }
  return [...new Set(found)].sort()
}

describe('the public members of the classes users hold', () => {
  for (const build of ['esm', 'cjs']) {
    it(`${build}: each is named in its section of docs/api.md; internals are private`, () => {
      const index = fileURLToPath(new URL(`../../${build}/lib/index.d.ts`, import.meta.url))
      assert.deepEqual(undocumentedMembers(index), [])
    })
  }
})

describe('an S3Client of another copy of @aws-sdk/client-s3, whose types are not this one', () => {
  it('type-checks wherever a client is taken; something that is no client does not', () => {
    // A client of another SDK version: the members every S3Client has, typed its own way.
    const other = `
      import { exportObject, openStore, S3Store, Upload } from PACKAGE
      interface OtherInput { OtherVersion: true }
      declare const other: {
        send(command: { input: OtherInput }, options?: { abortSignal?: AbortSignal }): Promise<{ $metadata: { attempts?: number } }>
        config: { region(): Promise<string>; otherVersion: true }
        middlewareStack: { add(mw: (next: (a: { input: OtherInput }) => Promise<unknown>) => unknown, o?: { step: 'initialize' }): void }
        destroy(): void
      }
      export const uses = [
        openStore({ client: other, bucket: 'b' }),
        new S3Store({ client: other, bucket: 'b', prefix: 'p' }),
        new Upload({ client: other, params: { Bucket: 'b', Key: 'k', Body: 'x' } }),
        exportObject('./c', { client: other, Bucket: 'b', Key: 'k' }),
      ]
    `
    assert.deepEqual(diagnosticsOf(other), [])
    const notAClient = diagnosticsOf(`
      import { openStore } from PACKAGE
      export const store = openStore({ client: { send: 1 }, bucket: 'b' })
    `)
    assert.equal(notAClient.length, 1, notAClient.join('\n'))
  })
})
