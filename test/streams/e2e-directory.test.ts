/**
 * End to end on the embedded default: 2 GiB of patterned data through `pipeline` into a
 * directory container with a 32 MiB dirty limit, read back by a fresh handle and
 * compared by hash. E2E_MIB changes the size.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { DirectoryStore } from '../../lib/store/directory.js'
import { endToEnd } from '../helpers/e2e.js'

const dir = mkdtempSync(join(tmpdir(), 'ss-e2e-'))
after(() => rmSync(dir, { recursive: true, force: true }))

it('directory store: a 2 GiB stream through pipeline reads back identical', async () => {
  await endToEnd(new DirectoryStore(dir), Number(process.env.E2E_MIB ?? 2048))
})
