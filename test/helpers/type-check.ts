/**
 * Compiles a user's module against the package as built, as a TypeScript user would: for
 * tests of the public types (test/api-types.test.ts, the lib-storage names of
 * test/streams/upload.test.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type * as TS from 'typescript'

const ts = createRequire(import.meta.url)('typescript') as typeof TS

/**
 * A compiler host whose source files (the package's declarations, Node's, the SDK's: tens of
 * megabytes of text) are parsed once per process and shared by every program made with it.
 * A parsed file depends only on its text and on how it is parsed (language version, module
 * format), which make its key; what each program checks is still its own.
 */
export function sharedHost(options: TS.CompilerOptions): TS.CompilerHost {
  const host = ts.createCompilerHost(options)
  const parse = host.getSourceFile.bind(host)
  host.getSourceFile = (fileName, how, onError, shouldCreate) => {
    const { languageVersion, impliedNodeFormat } = typeof how === 'object' ? how : { languageVersion: how }
    const key = `${languageVersion}:${impliedNodeFormat}:${fileName}`
    let file = parsed.get(key)
    if (file === undefined || shouldCreate) {
      file = parse(fileName, how, onError, shouldCreate)
      if (file !== undefined) parsed.set(key, file)
    }
    return file
  }
  return host
}
const parsed = new Map<string, TS.SourceFile>()

/**
 * The diagnostics of `source` (a module importing the package root as built as `PACKAGE`,
 * and any package installed) compiled strict: each as `line: message`. Written below
 * dist/, so that the packages it imports resolve from the repository's node_modules.
 */
export function diagnosticsOf(source: string): string[] {
  const dist = fileURLToPath(new URL('../../../', import.meta.url))
  const dir = mkdtempSync(join(dist, 'user-types-'))
  try {
    const file = join(dir, 'user.mts')
    writeFileSync(file, source.replace('PACKAGE', JSON.stringify(join(dist, 'esm/lib/index.js'))))
    const options: TS.CompilerOptions = {
      strict: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: ['node'],
      skipLibCheck: true,
    }
    const program = ts.createProgram([file], options, sharedHost(options))
    return ts.getPreEmitDiagnostics(program).map((d) => {
      const at =
        d.file !== undefined && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0
      return `${at}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`
    })
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
