/**
 * Format detection: an object read without knowing its container's format (its `inode`
 * object missing or unreadable) is read at both ends, side by side; one header is taken,
 * a header at both ends is ERR_CORRUPT (either end can be file content). Readers that can
 * take the format from the `inode` object do (ls, inspect, verify, gc, a reader opening a
 * checkpoint by number): a PartedSegment file whose last block holds a StreamSegment
 * summary and header reads as written, whatever the checkpoint is opened by.
 */
import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { exportObject, gc, inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { type Problem, walkMap } from '../../lib/admin/map-walk.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { decodeHeader, encodeHeader, HEADER_BYTES } from '../../lib/format/header.js'
import {
  decodeInodeObject,
  emptyInode,
  emptySummary,
  encodeInodeObject,
  encodeObjectTail,
  FLAG_CHECKPOINT,
  FORMAT_PARTED,
  FORMAT_STREAM,
  INODE_KEY,
  pointerLo,
  segmentKey,
} from '../../lib/format/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ObjectStore } from '../../lib/store/types.js'
import { crc32 } from '../../lib/util/crc32.js'
import { printable } from '../../lib/util/shell-words.js'
import { smallSettings } from '../helpers/containers.js'
import { FailingStore } from '../helpers/failing-store.js'
import { readFixture } from '../helpers/format.js'
import { pattern } from '../helpers/pattern.js'
import { runLiveWriterRace } from '../helpers/race.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

async function storeWith(objects: Record<string, Uint8Array>): Promise<MemoryStore> {
  const store = new MemoryStore()
  for (const [key, bytes] of Object.entries(objects)) await store.put(key, bytes)
  return store
}

describe('readObjectHeader', () => {
  it('detects either format from both ends, read side by side (two requests)', async () => {
    const store = await storeWith({
      '0000000007.0': readFixture('0000000007.0.bin'),
      '0000000008.0': relabel(readFixture('parted.0000000007.0.bin')),
    })
    const tail = await readObjectHeader(store, 7, 0)
    assert.equal(tail.header.format, FORMAT_STREAM)
    assert.equal(tail.requests, 2)
    const known = await readObjectHeader(store, 7, 0, { format: FORMAT_STREAM })
    assert.deepEqual(known.header, tail.header)
    assert.equal(known.requests, 1)
    // The relabelled object fails its header CRC: detection reports the head-first header's problem.
    await assert.rejects(readObjectHeader(store, 8, 0), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'))
      assert.match(err.message, /^0000000008\.0: header CRC/)
      return true
    })
  })

  it('reads a head-first header from the start, in one request when the format is known', async () => {
    const parted = readFixture('parted.0000000007.1.bin')
    const store = await storeWith({ '0000000007.1': parted })
    const detected = await readObjectHeader(store, 7, 1, { size: parted.length })
    assert.equal(detected.header.format, FORMAT_PARTED)
    assert.equal(detected.header.dataCount, 4)
    assert.equal(detected.requests, 2)
    const known = await readObjectHeader(store, 7, 1, { format: FORMAT_PARTED })
    assert.deepEqual(known.header, detected.header)
    assert.equal(known.requests, 1)
    // Told the wrong format, the magic refuses it.
    await assert.rejects(readObjectHeader(store, 7, 1, { format: FORMAT_STREAM }), /header magic .* is not "SSEGTAIL"/)
    // The size a listing gives is checked against the counts.
    await assert.rejects(readObjectHeader(store, 7, 1, { size: parted.length + 1 }), /object has 24577/)
  })

  it('an object with neither header is ERR_CORRUPT naming both reasons', async () => {
    const store = await storeWith({ '0000000003.1': pattern(0, 9000, 1), '0000000003.2': new Uint8Array(0) })
    await assert.rejects(
      readObjectHeader(store, 3, 1),
      /^StreamSegmentError: 0000000003\.1: no header: its last 256 bytes are not a StreamSegment header \(magic .*\), its first 256 not a PartedSegment header \(magic .*\)$/,
    )
    await assert.rejects(readObjectHeader(store, 3, 2), /0000000003\.2: no header: .*is 0 bytes/)
  })

  it('a StreamSegment header of a newer layout is ERR_UNSUPPORTED, not a reason to take the start', async () => {
    const bytes = readFixture('0000000007.0.bin')
    const tail = bytes.subarray(bytes.length - 256)
    new DataView(tail.buffer, tail.byteOffset).setUint16(8, 2, true)
    new DataView(tail.buffer, tail.byteOffset).setUint32(252, crc32(tail.subarray(0, 252)), true)
    const store = await storeWith({ '0000000007.0': bytes })
    await assert.rejects(readObjectHeader(store, 7, 0), (err) => StreamSegmentError.is(err, 'ERR_UNSUPPORTED'))
  })
})

describe('a head-first container without its inode', () => {
  it('ls, inspect and verify find its checkpoints by number, the format detected', async () => {
    const store = new MemoryStore()
    const file = await SegmentFile.create(store, { ...smallSettings, format: 'parted' })
    const data = pattern(0, 200 * 1024, 3)
    await file.write(0, data)
    await file.flush()
    await file.write(4096, pattern(4096, 8192, 4))
    await file.flush()
    await file.close()
    await store.delete(INODE_KEY)

    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.size, c.state, c.error]),
      [
        [1, data.length, 'unpublished', undefined],
        [2, data.length, 'unpublished', undefined],
      ],
    )
    const report = await inspectCheckpoint(store, { cno: 2 })
    assert.equal(report.format, 'PartedSegment')
    assert.ok(report.objects.length >= 2)
    for (const o of report.objects) assert.equal(o.error, undefined, `${o.key}: ${o.error}`)
    const v = await verifyCheckpoint(store, { cno: 2 })
    assert.deepEqual(
      v.problems.map((p) => p.what),
      ['missing'],
      'only the inode is missing',
    )
    assert.ok(v.slots > 0)
    // Reopened by number, it reads back.
    await store.put(INODE_KEY, readFixture('parted.inode.bin')) // any inode: only its format is used to open cno 1
    const old = await SegmentFile.open(store, { cno: 1, readOnly: true })
    assert.ok(Buffer.from(await old.read(0, data.length)).equals(data))
    await old.close()
  })
})

describe('a PartedSegment file whose last block passes for a StreamSegment tail', () => {
  it('reads as written by every reader; without the inode, detection says it is ambiguous', async () => {
    const { store, file } = await dualFormat()
    const key = segmentKey(1, 0)
    const ambiguous = (err: unknown) =>
      StreamSegmentError.is(err, 'ERR_CORRUPT') &&
      err.message.includes(key) &&
      /ambiguous without the container's inode/.test(err.message)
    // Both headers are valid: each format reads its own.
    assert.equal((await readObjectHeader(store, 1, 0, { format: FORMAT_PARTED })).header.format, FORMAT_PARTED)
    assert.equal((await readObjectHeader(store, 1, 0, { format: FORMAT_STREAM })).header.inode.size, 4 * 4096)
    await assert.rejects(readObjectHeader(store, 1, 0), ambiguous)

    for (const cno of [undefined, 1]) {
      const r = await SegmentFile.open(store, { readOnly: true, cno })
      assert.equal(r.size, file.length, `opened with cno ${cno}`)
      assert.ok(Buffer.from(await r.read(0, r.size)).equals(file), `cno ${cno}: the file as written`)
      await r.close()
    }
    const w = await SegmentFile.open(store, { cno: 1 })
    assert.equal(w.size, file.length)
    await w.close()
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.size, c.error]),
      [[1, file.length, undefined]],
    )
    const report = await inspectCheckpoint(store, { cno: 1 })
    assert.equal(report.format, 'PartedSegment')
    assert.equal(report.size, file.length)
    const v = await verifyCheckpoint(store, { cno: 1 })
    assert.deepEqual(v.problems, [])
    const dry = await gc(store, { dryRun: true, graceMs: 0 })
    assert.deepEqual(dry.deletedKeys, [])

    // Without the inode nothing says which end is the header: refused, never guessed.
    await store.delete(INODE_KEY)
    await assert.rejects(SegmentFile.open(store, { readOnly: true, cno: 1 }), ambiguous)
    const orphan = await listCheckpoints(store)
    assert.match(orphan.checkpoints[0]?.error ?? '', /ambiguous without the container's inode/)
  })

  it('a store whose URL holds control characters is named once, escaped', async () => {
    const { store } = await dualFormat('runs\x1b[31m\u009b\n')
    await store.delete(INODE_KEY)
    const shown = `${printable(store.url)}/${segmentKey(1, 0)}: a StreamSegment header at its end and a PartedSegment`
    await assert.rejects(SegmentFile.open(store, { readOnly: true, cno: 1 }), (err: Error) => {
      assert.ok(err.message.startsWith(shown), JSON.stringify(err.message))
      return true
    })
  })
})

/**
 * A legit PartedSegment container holding one file of 240 blocks whose last block is a
 * StreamSegment summary and header for the same object (sizes meet: 240 × 16 + 256 = 4096),
 * naming as its file blocks 10…13 of the real one.
 */
async function dualFormat(name?: string): Promise<{ store: MemoryStore; file: Buffer }> {
  const BS = 4096
  const N = 240
  const file = Buffer.from(pattern(0, N * BS, 9))
  file.write('CONTENT CHOSEN BY THE FILE', 10 * BS)
  // Head first: [header + summary, one unit][the leaf][data…].
  const slotOf = (block: number) => 2 + block
  const summary = emptySummary(N)
  const inode = emptyInode({ format: FORMAT_STREAM, dataShift: 12, metaShift: 12, ctimeMs: 1 })
  inode.cno = 1
  inode.size = 4 * BS
  inode.rootLevel = 0
  inode.rootCount = 4
  for (let j = 0; j < 4; j++) {
    const k = slotOf(10 + j)
    summary.blockIndex[k] = j
    summary.live[k] = 1
    summary.crc[k] = crc32(file.subarray((10 + j) * BS, (11 + j) * BS))
    inode.rootKeys[j] = j
    inode.rootPtrHi[j] = 1
    inode.rootPtrLo[j] = pointerLo(0, slotOf(10 + j))
  }
  const tail = encodeObjectTail(
    {
      format: FORMAT_STREAM,
      flags: FLAG_CHECKPOINT,
      dataShift: 12,
      metaShift: 12,
      cno: 1,
      part: 0,
      metaCount: 1,
      createdMs: 1,
      baseInode: emptyInode(),
      inode,
    },
    summary,
  )
  assert.equal(tail.length, BS)
  file.set(tail, (N - 1) * BS)
  const store = new MemoryStore(name)
  const f = await SegmentFile.create(store, { format: 'parted' })
  await f.write(0, file)
  await f.flush()
  await f.close()
  const h = await readObjectHeader(store, 1, 0, { format: FORMAT_STREAM })
  assert.equal(h.header.inode.size, 4 * BS, 'the file content passes for a StreamSegment tail')
  return { store, file }
}

/** Checkpoints 1 and 2, then the commit point put back to checkpoint 1: 2 is complete, unpublished. */
/** A store whose object `key` is deleted just before it is first read, as a cleaner running beside would. */
class DeletedOnRead extends WrappedStore {
  constructor(
    inner: ObjectStore,
    private key: string | undefined,
  ) {
    super(inner)
  }

  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'get' && call.key === this.key) {
      this.key = undefined
      await this.inner.delete(call.key)
    }
    return run()
  }
}

async function interrupted(format: 'stream' | 'parted') {
  const store = new MemoryStore()
  const file = await SegmentFile.create(store, { ...smallSettings, format })
  await file.write(0, pattern(0, 64 * 1024, 1))
  await file.flush()
  const inode1 = await store.get(INODE_KEY)
  await file.write(8192, pattern(8192, 4096, 2))
  await file.flush()
  await file.close()
  await store.put(INODE_KEY, inode1)
  const want = Buffer.from(pattern(0, 64 * 1024, 1))
  want.set(pattern(8192, 4096, 2), 8192)
  return { store, inode1, want }
}

describe('a complete checkpoint whose publication was interrupted', () => {
  it('a reader opens it by number, without publishing it', async () => {
    for (const format of ['stream', 'parted'] as const) {
      const { store, want } = await interrupted(format)
      const r = await SegmentFile.open(store, { cno: 2, readOnly: true })
      assert.ok(Buffer.from(await r.read(0, want.length)).equals(want), `${format}: checkpoint 2 reads back`)
      await r.close()
      assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1, 'still checkpoint 1 published')
      const list = await listCheckpoints(store)
      assert.deepEqual(
        list.checkpoints.map((c) => c.state),
        ['published', 'unpublished'],
      )
      // Parts without a part 0 were abandoned: not openable.
      await store.delete(segmentKey(2, 0))
      await assert.rejects(
        SegmentFile.open(store, { cno: 2, readOnly: true }),
        (err) => StreamSegmentError.is(err, 'ERR_NOT_FOUND') && /checkpoint 2 has no part 0/.test(err.message),
      )
    }
  })
})

describe('the commit point against its part 0', () => {
  it('an `inode` object of megabytes is read 64 KiB at most, and refused', async () => {
    const asked: Array<number | undefined> = []
    const store = new (class extends MemoryStore {
      override get(key: string, options?: GetOptions) {
        if (key === INODE_KEY) asked.push(options?.range && 'end' in options.range ? options.range.end : undefined)
        return super.get(key, options)
      }
    })()
    await store.put(INODE_KEY, new Uint8Array(8 * 1024 * 1024))
    for (const readOnly of [true, false]) {
      await assert.rejects(
        SegmentFile.open(store, { readOnly }),
        (err) =>
          StreamSegmentError.is(err, 'ERR_CORRUPT') &&
          /inode: inode object: 65536 bytes, expected 128/.test(err.message),
      )
    }
    assert.ok(asked.length >= 2 && asked.every((end) => end === 65536), JSON.stringify(asked))
    await store.put(INODE_KEY, new Uint8Array(0))
    await assert.rejects(SegmentFile.open(store, { readOnly: true }), /inode object: 0 bytes, expected 128/)
  })

  it('a writer and an export refuse an inode object that is not the inode of its part 0', async () => {
    const store = new MemoryStore()
    const f = await SegmentFile.create(store, smallSettings)
    await f.write(0, pattern(0, 16 * 1024, 1))
    await f.flush()
    await f.close()
    const changed = decodeInodeObject(await store.get(INODE_KEY))
    changed.mtimeMs += 1 // one field differs
    await store.put(INODE_KEY, encodeInodeObject(changed))
    const differs = (err: unknown) =>
      StreamSegmentError.is(err, 'ERR_CORRUPT') &&
      /inode: names checkpoint 1, but differs from the inode in its part 0/.test(err.message)
    await assert.rejects(SegmentFile.open(store, smallSettings), differs)
    await assert.rejects(exportObject(store, { store: new MemoryStore(), key: 'x' }), differs)
    // By number, the export takes part 0's own inode.
    const dest = new MemoryStore()
    await exportObject(store, { store: dest, key: 'x' }, { cno: 1 })
    assert.ok(Buffer.from(await dest.get('x')).equals(pattern(0, 16 * 1024, 1)))
    // No part 0 at all: named as such.
    await store.delete(segmentKey(1, 0))
    await assert.rejects(
      SegmentFile.open(store, smallSettings),
      (err) => StreamSegmentError.is(err, 'ERR_CORRUPT') && /names checkpoint 1, which has no part 0/.test(err.message),
    )
  })
})

describe('roll-forward', () => {
  it('a writer opening the container publishes a complete checkpoint built on the inode published', async () => {
    for (const format of ['stream', 'parted'] as const) {
      const { store, want } = await interrupted(format)
      // Its part 0 is young: its writer might still be publishing it; not rolled forward.
      const young = await SegmentFile.open(store)
      assert.equal(young.cno, 1, `${format}: a young part 0 is left to its writer`)
      await young.close()
      const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
      assert.equal(w.cno, 2, `${format}: rolled forward to checkpoint 2`)
      assert.ok(Buffer.from(await w.read(0, want.length)).equals(want))
      // It builds on it: the next checkpoint is 3, on top of 2.
      await w.write(0, pattern(0, 4096, 3))
      assert.equal((await w.flush()).cno, 3)
      await w.close()
      assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 3)
      want.set(pattern(0, 4096, 3), 0)
      const r = await SegmentFile.open(store, { readOnly: true })
      assert.ok(Buffer.from(await r.read(0, want.length)).equals(want), `${format}: checkpoint 3 reads back`)
    }
  })

  it('a part 0 deleted between the listing and its read (a cleaner) is passed over: the writer opens', async () => {
    const { store, want } = await interrupted('stream')
    const w = await SegmentFile.open(new DeletedOnRead(store, segmentKey(2, 0)), { rollForwardAfterMs: 0 })
    assert.equal(w.cno, 1)
    assert.ok(Buffer.from(await w.read(0, 8192)).equals(want.subarray(0, 8192)))
    await w.write(0, pattern(0, 4096, 3))
    assert.equal((await w.flush()).cno, 3, 'above the number seen taken')
    await w.close()
  })

  it('a roll-forward that loses its inode write still skips every number taken above it', async () => {
    const { store } = await interrupted('stream')
    // Numbers 3 to 22 taken by abandoned attempts: more than a send moves across.
    for (let cno = 3; cno <= 22; cno++) await store.put(segmentKey(cno, 1), new Uint8Array(100))
    const inode2 = encodeInodeObject((await readObjectHeader(store, 2, 0)).header.inode)
    // Another writer rolls checkpoint 2 forward just before this one's inode write.
    class RolledBeside extends WrappedStore {
      private first = true
      protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
        if (call.op === 'put' && call.key === INODE_KEY && this.first) {
          this.first = false
          await this.inner.put(INODE_KEY, inode2)
        }
        return run()
      }
    }
    const w = await SegmentFile.open(new RolledBeside(store), {
      ...smallSettings,
      rollForwardAfterMs: 0,
      conflictPolicy: 'retry',
    })
    assert.equal(w.cno, 1, 'its own roll-forward lost')
    // More than the dirty limit: data parts beside part 0, as parts 1 on of its number.
    await w.write(0, pattern(0, 256 * 1024, 3))
    assert.equal((await w.flush()).cno, 24, 'published on top of 2, above every number taken')
    await w.close()
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 24)
  })

  it('never skips or undoes a checkpoint: a part 0 built on another inode stays unpublished', async () => {
    const { store } = await interrupted('stream')
    // The commit point names checkpoint 1, but checkpoint 2 was built on another inode
    // (its part 0's header says so, its CRC made again).
    const key = segmentKey(2, 0)
    const bytes = Buffer.from(await store.get(key))
    const at = bytes.length - HEADER_BYTES
    const h = decodeHeader(bytes.subarray(at), bytes.length, { cno: 2, part: 0, format: FORMAT_STREAM })
    h.baseInode.mtimeMs += 1
    encodeHeader(h, bytes, at)
    await store.put(key, bytes)
    const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
    assert.equal(w.cno, 1)
    await w.close()
    // Nor may a writer build on it by number.
    await assert.rejects(
      SegmentFile.open(store, { cno: 2, rollForwardAfterMs: 0 }),
      /checkpoint 2 is not published \(the latest is 1\)/,
    )
    assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1)
    // A reader does not roll forward either: it opens what is published.
    const r = await SegmentFile.open(store, { readOnly: true })
    assert.equal(r.cno, 1)
  })

  it('a part 0 built on no inode (its writer lost the race to create the container, then died) is left, and nothing fails on it', async () => {
    const store = new MemoryStore()
    const a = await SegmentFile.create(store, smallSettings)
    // B's inode write never lands (it dies there).
    const b = await SegmentFile.create(new FailingStore(store, [{ ops: ['put'], key: /^inode$/ }]), smallSettings)
    await a.write(0, pattern(0, 8192, 1))
    await a.flush()
    await a.close()
    // B's checkpoint moves to number 2 (1.0 is A's); its part 0 is stored, built on no inode.
    await b.write(0, pattern(0, 8192, 2))
    await assert.rejects(b.flush(), (err) => StreamSegmentError.is(err, 'ERR_STORE'))
    assert.equal((await readObjectHeader(store, 2, 0)).header.baseInode.cno, 0)
    const w = await SegmentFile.open(store, { ...smallSettings, rollForwardAfterMs: 0 })
    assert.equal(w.cno, 1, 'not rolled forward: built on another inode than the published one')
    await w.write(0, pattern(0, 4096, 3))
    assert.equal((await w.flush()).cno, 3)
    await w.close()
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.state]),
      [
        [1, 'complete'],
        [2, 'unpublished'],
        [3, 'published'],
      ],
    )
    assert.deepEqual((await gc(store, { graceMs: 0, dryRun: true })).kept, [3])
  })

  it('publishes nothing a header alone vouches for: a part 0 with a damaged block stays unpublished', async () => {
    for (const format of ['stream', 'parted'] as const) {
      const { store } = await interrupted(format)
      const key = segmentKey(2, 0)
      const part0 = Buffer.from(await store.get(key))
      // Its one data block, the 4 KiB written at 8192: first in a StreamSegment, last in a PartedSegment.
      const at = format === 'stream' ? 100 : part0.length - 100
      part0[at] = (part0[at] as number) ^ 0x40
      await store.put(key, part0)
      const h = await readObjectHeader(store, 2, 0, { format: format === 'stream' ? FORMAT_STREAM : FORMAT_PARTED })
      assert.equal(h.header.inode.cno, 2, `${format}: the header still checks out`)
      const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
      assert.equal(w.cno, 1, `${format}: not rolled forward`)
      await w.write(0, pattern(0, 4096, 3))
      assert.equal((await w.flush()).cno, 3, `${format}: the number taken is skipped`)
      await w.close()
      const r = await SegmentFile.open(store, { readOnly: true })
      const want = Buffer.from(pattern(0, 64 * 1024, 1))
      want.set(pattern(0, 4096, 3), 0)
      assert.ok(Buffer.from(await r.read(0, want.length)).equals(want), `${format}: checkpoint 3 is built on 1`)
      await r.close()
    }
  })

  it('publishes no checkpoint whose new nodes point into an older object that is not there', async () => {
    const { store } = await interrupted('stream')
    // Checkpoint 2's new leaf (blocks 0..3, block 2 written again) points at blocks 0, 1
    // and 3 in checkpoint 1's objects: the one holding block 0 goes (as a cleaner might).
    const inode1 = decodeInodeObject(await store.get(INODE_KEY))
    const problems: Problem[] = []
    const walk = await walkMap(store, inode1, problems)
    const holding0 = [...walk.reached].find(([, r]) => r.dataBlock.length > 0 && r.dataBlock.get(0) === 0)?.[0]
    assert.ok(holding0?.startsWith('0000000001.'), `block 0 in ${holding0}`)
    await store.delete(holding0 as string)
    const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
    assert.equal(w.cno, 1, 'not rolled forward')
    await w.close()
  })

  it('publishes no checkpoint whose block map names an object that is not there', async () => {
    for (const format of ['stream', 'parted'] as const) {
      const store = new MemoryStore()
      const file = await SegmentFile.create(store, { ...smallSettings, format })
      await file.write(0, pattern(0, 64 * 1024, 1))
      await file.flush()
      const inode1 = await store.get(INODE_KEY)
      // More than the dirty limit: checkpoint 2 has data parts beside its part 0.
      await file.write(0, pattern(0, 256 * 1024, 2))
      await file.flush()
      await file.close()
      await store.put(INODE_KEY, inode1)
      const listed = await listCheckpoints(store)
      const parts = listed.checkpoints.find((c) => c.cno === 2)?.objects ?? 0
      assert.ok(parts > 1, `${format}: checkpoint 2 has ${parts} parts`)
      await store.delete(segmentKey(2, 1))
      const w = await SegmentFile.open(store, { rollForwardAfterMs: 0 })
      assert.equal(w.cno, 1, `${format}: not rolled forward`)
      assert.ok(Buffer.from(await w.read(0, 64 * 1024)).equals(pattern(0, 64 * 1024, 1)), `${format}: checkpoint 1`)
      await w.close()
      assert.equal(decodeInodeObject(await store.get(INODE_KEY)).cno, 1)
    }
  })
})

for (const [name, make] of [
  ['memory', async () => new MemoryStore() as ObjectStore],
  ['directory', async () => new DirectoryStore(mkdtempSync(join(tmpdir(), 'ss-race-'))) as ObjectStore],
] as const) {
  runLiveWriterRace(name, make)
}

/** A copy of the parted fixture whose header names checkpoint 8 (its CRC left stale). */
function relabel(bytes: Uint8Array): Uint8Array {
  const out = bytes.slice()
  new DataView(out.buffer).setUint32(16, 8, true)
  return out
}
