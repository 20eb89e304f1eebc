/**
 * A PartedSegment object whose data blocks lie in no two neighbouring slots (written in
 * reverse order) is taken as one view per block. Some 120,000 of them (a publish of
 * ~500 MiB with a dirty limit that allows it) overflowed the call stack when the views
 * were appended to the object's chunks with push(...). Shown here with a tenth of the
 * stack and of the blocks, in a process of its own: the object's blocks, not the stack,
 * must bound what a publish can take.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { describe, it } from 'node:test'

const BLOCKS = 12_000

const PROGRAM = `
import { SegmentFile } from ${JSON.stringify(new URL('../../lib/segment-file.js', import.meta.url).href)}
import { MemoryStore } from ${JSON.stringify(new URL('../../lib/store/memory.js', import.meta.url).href)}
const f = await SegmentFile.create(new MemoryStore('parted-many-chunks'), {
  format: 'parted',
  dataCacheDirtyMaxBytesThreshold: 2 ** 30,
  segmentBufferSize: 2 ** 30,
})
const block = Buffer.alloc(4096, 7)
for (let i = ${BLOCKS} - 1; i >= 0; i--) await f.write(i * 4096, block)
try {
  const t = await f.publish()
  console.log('published', t.dataBlocks)
} catch (err) {
  console.log('failed', err.name, err.message)
}
await f.close()
`

describe('a parted publish of blocks in no two neighbouring slots', () => {
  it(`takes ${BLOCKS} of them, one view each, with a tenth of the default stack`, () => {
    const run = spawnSync(process.execPath, ['--stack-size=80', '--input-type=module', '-e', PROGRAM], {
      encoding: 'utf8',
      timeout: 60_000,
    })
    assert.equal(run.status, 0, run.stderr)
    assert.equal(run.stdout.trim(), `published ${BLOCKS}`)
  })
})
