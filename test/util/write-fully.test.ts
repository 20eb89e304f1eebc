import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { it } from 'node:test'
import { IOV_MAX, readFully, writeFully } from '../../lib/util/local-fs.js'

it('writeFully and readFully: every chunk in order, at a position or at the file position, over more chunks than one writev takes', async () => {
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
    // Read back the same way, and past the end: fewer bytes than the buffers hold.
    const back = chunks.map((c) => Buffer.alloc(c.length))
    assert.equal(await readFully(fh, back, 10_000), all.length)
    assert.ok(Buffer.concat(back).equals(all), 'readFully: the list at position 10000')
    const past = [Buffer.alloc(5000), Buffer.alloc(5000)]
    const size = 10_000 + all.length
    assert.equal(await readFully(fh, past, size - 6000), 6000, 'stops where the file ends')
    assert.ok(past[1]?.subarray(0, 1000).equals(all.subarray(-1000)))
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
