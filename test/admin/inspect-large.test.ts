/**
 * inspect's report of one object (inspectObject) over large inputs: a hostile map whose
 * node pointers into one object name no meta block by the hundred thousand (20 problems
 * kept, the rest counted), and an
 * object with an unreadable header met after a great many problems. Each is a list the
 * stored data sizes, so it must cost no call stack and no scan per object.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { inspectObject } from '../../lib/admin/inspect.js'
import { type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { readInode } from '../../lib/container/inode.js'
import { listContainer } from '../../lib/container/listing.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { MemoryStore } from '../../lib/store/memory.js'
import { pattern } from '../helpers/pattern.js'

const PART0 = '0000000001.0'

/** Checkpoint 1 of 64 KiB in part 0 alone, with its listing, inode and map walk. */
async function smallCheckpoint(name: string) {
  const store = new MemoryStore(`inspect-large-${name}`)
  const f = await SegmentFile.create(store)
  await f.write(0, pattern(0, 64 * 1024, 3))
  await f.flush()
  await f.close()
  const listing = await listContainer(store)
  const inode = (await readInode(store)).inode
  const problems: Problem[] = []
  const walk = await walkMap(store, inode, problems)
  assert.equal(problems.length, 0, JSON.stringify(problems))
  return { store, listing, inode, walk, problems }
}

describe('inspectObject over large inputs', () => {
  it('of 200,000 node pointers that name no meta block, reports the first 20 and counts the rest, as verify does', async () => {
    const { store, listing, inode, walk, problems } = await smallCheckpoint('pointers')
    const reached = walk.reached.get(PART0)
    assert.ok(reached, 'the map reaches part 0')
    // Byte 0 of part 0 is its first data block: a pointer there names no meta block.
    for (let i = 0; i < 200_000; i++) reached.nodes.push(0)
    const found = { listing, walk, problems, walked: new Set<string>() }
    const report = await inspectObject(store, inode, PART0, found, undefined)
    assert.equal(report.error, undefined)
    const pointers = problems.filter((p) => p.what === 'pointer' && p.where === `${PART0} byte 0`)
    assert.equal(pointers.length, 20)
    assert.equal(problems.length, 21, 'the first 20 problems and one counting the rest')
    const rest = problems[20]
    assert.equal(rest?.where, PART0)
    assert.equal(rest?.what, 'pointer')
    assert.match(rest?.message ?? '', /0000000001\.0: and 199980 more problems$/)
  })

  it('an unreadable header does not look through the problems found before it', async () => {
    const { store, listing, inode, walk } = await smallCheckpoint('header')
    const size = listing.sizes.get(PART0) as number
    await store.put(PART0, Buffer.alloc(size)) // same size, no header
    let looked = 0
    const problems: Problem[] = Array.from({ length: 1000 }, (_, i) => ({
      code: 'ERR_CORRUPT' as const,
      what: 'node' as const,
      get where() {
        looked++
        return `0000000002.${i} byte 0`
      },
      message: `problem ${i}`,
    }))
    // Problems of other objects, none of them this one's (as inspectCheckpoint would say in `walked`).
    const found = { listing, walk, problems, walked: new Set<string>() }
    const report = await inspectObject(store, inode, PART0, found, undefined)
    assert.match(report.error ?? '', /0000000001\.0/)
    assert.equal(problems.length, 1001)
    assert.equal(problems[1000]?.where, PART0)
    assert.equal(looked, 0, 'the problems before were each looked at')
  })
})
