import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { it } from 'node:test'
import { IOV_MAX, writeFully } from '../../lib/util/local-fs.js'

it('writeFully: every chunk in order, at a position or at the file position, over more chunks than one writev takes', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'ss-wf-')), 'f')
  // IOV_MAX + 300 chunks of 1..7 bytes, empty ones among them.
  const chunks = Array.from({ length: IOV_MAX + 300 }, (_, i) => Buffer.alloc(i % 8, i % 251))
  const all = Buffer.concat(chunks)
  const fh = await open(path, 'w+')
  try {
    await fh.write(Buffer.from('head'))
    await writeFully(fh, chunks) // at the file position: after "head"
    await writeFully(fh, chunks, 10_000) // at a position
    await writeFully(fh, [Buffer.from('tail')]) // the file position is after the first list
  } finally {
    await fh.close()
  }
  const got = readFileSync(path)
  assert.ok(got.subarray(0, 4).equals(Buffer.from('head')))
  assert.ok(got.subarray(4, 4 + all.length).equals(all), 'the list at the file position')
  assert.ok(
    got.subarray(4 + all.length, 8 + all.length).equals(Buffer.from('tail')),
    'a positioned write left the file position',
  )
  assert.ok(got.subarray(10_000, 10_000 + all.length).equals(all), 'the list at position 10000')
})
