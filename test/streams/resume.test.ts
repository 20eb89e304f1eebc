/** uploadFile's resume on the memory and directory stores (test/helpers/resume.ts). */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { runResumeTests } from '../helpers/resume.js'

const MiB = 1024 * 1024
const root = mkdtempSync(join(tmpdir(), 'ss-resume-dir-'))
after(() => rmSync(root, { recursive: true, force: true }))
let n = 0

runResumeTests('memory', async () => new MemoryStore(), { pieceSize: MiB, fileBytes: 24 * MiB })
runResumeTests('directory', async () => new DirectoryStore(join(root, `c${++n}`)), {
  pieceSize: MiB,
  fileBytes: 24 * MiB,
})
