import assert from 'node:assert/strict'
import { mkdtempSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileSource } from '../../lib/streams/upload-file.js'
import { printable } from '../../lib/util/shell-words.js'
import { assertPrintable } from '../helpers/assert.js'
import { fillBlocks } from '../helpers/pattern.js'

const MiB = 1024 * 1024

describe('fileSource', () => {
  it('refuses a version or a name of the wrong kind with ERR_INVALID_ARGUMENT, naming it', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'ss-src-')), 'f')
    const fh = await open(path, 'w+')
    try {
      const invalid = (what: RegExp) => (err: unknown) =>
        StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT') && what.test(err.message)
      // A name given where the version goes: taken for a version, every verify would say the file changed.
      assert.throws(() => fileSource(fh, 'model.pt' as never), invalid(/^fileSource: version .*string "model\.pt"/))
      assert.throws(() => fileSource(fh, { size: 1, mtimeMs: 2 } as never), invalid(/^fileSource: version /))
      assert.throws(() => fileSource(fh, { size: -1, mtimeMs: 2, ctimeMs: 3 }), invalid(/^fileSource: version /))
      assert.throws(() => fileSource(fh, undefined, 5 as never), invalid(/^fileSource: name .*number 5/))
      const { size, mtimeMs, ctimeMs } = await fh.stat()
      await fileSource(fh, { size, mtimeMs, ctimeMs }, 'f').verify?.()
    } finally {
      await fh.close()
    }
  })

  it('reads into buffers given back, never into one still lent; stale or foreign views are ignored', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'ss-src-')), 'f')
    const bytes = Buffer.allocUnsafe(3 * MiB)
    fillBlocks(bytes, 0)
    const fh = await open(path, 'w+')
    try {
      await fh.write(bytes, 0, bytes.length, 0)
      const src = fileSource(fh)
      const release = src.release as (b: Uint8Array) => void
      const a = await src.read(0, MiB)
      const b = await src.read(MiB, MiB)
      assert.notEqual(a.buffer, b.buffer, 'two reads lent at once share no memory')
      release(a)
      const c = await src.read(2 * MiB, MiB / 2)
      assert.equal(c.buffer, a.buffer, 'a read given back is read into again')
      assert.ok(Buffer.from(c).equals(bytes.subarray(2 * MiB, 2.5 * MiB)))
      assert.ok(Buffer.from(b).equals(bytes.subarray(MiB, 2 * MiB)), 'a lent read is left as it was')
      // `a` again (its memory is c's now) and bytes the source never gave: both ignored.
      release(a)
      release(Buffer.alloc(MiB))
      const d = await src.read(0, MiB)
      assert.notEqual(d.buffer, c.buffer)
      assert.notEqual(d.buffer, b.buffer)
      assert.ok(Buffer.from(d).equals(bytes.subarray(0, MiB)))
      assert.ok(Buffer.from(c).equals(bytes.subarray(2 * MiB, 2.5 * MiB)), 'c is left as it was')
    } finally {
      await fh.close()
    }
  })

  it('keeps at most 64 MiB of buffers given back', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'ss-src-')), 'sparse')
    const fh = await open(path, 'w+')
    try {
      await fh.truncate(80 * MiB) // sparse: reads are zeros
      const src = fileSource(fh)
      const release = src.release as (b: Uint8Array) => void
      const first = await Promise.all([0, 1, 2, 3, 4].map((i) => src.read(i * 16 * MiB, 16 * MiB)))
      assert.equal(new Set(first.map((r) => r.buffer)).size, 5)
      for (const r of first) release(r)
      const again = await Promise.all([0, 1, 2, 3, 4].map((i) => src.read(i * 16 * MiB, 16 * MiB)))
      const reused = again.filter((r) => first.some((f) => f.buffer === r.buffer)).length
      assert.equal(reused, 4, 'four 16 MiB buffers kept, the fifth let go')
    } finally {
      await fh.close()
    }
  })

  it("verify: a stat that fails (the disk's EIO) is ERR_STORE naming the file, not a file that changed", async () => {
    const version = { size: 8192, mtimeMs: 1000, ctimeMs: 1000 }
    const eio = Object.assign(new Error('EIO: i/o error, fstat'), { code: 'EIO' })
    let statFails = false
    const fh = {
      read: async (_b: Uint8Array, _o: number, length: number, position: number) => ({
        bytesRead: Math.max(0, Math.min(length, version.size - position)),
      }),
      stat: async () => {
        if (statFails) throw eio
        return version
      },
    }
    // The first stat (when the source is made) fails, then the one verify makes.
    for (const [first, given] of [
      [true, undefined],
      [false, undefined],
      [false, version],
    ] as const) {
      statFails = first
      const src = fileSource(fh, given, 'model.pt')
      statFails = true
      await assert.rejects(src.verify?.() as Promise<void>, (err) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
        assert.equal(err.message, 'model.pt: cannot be checked for changes (EIO: i/o error, fstat)')
        assert.equal(err.cause, eio)
        return true
      })
      statFails = false
      if (first) {
        // Nothing to compare with: it cannot tell the file unchanged, ever.
        await assert.rejects(src.verify?.() as Promise<void>, { code: 'ERR_STORE', cause: eio })
      } else {
        await src.verify?.() // the disk answers again: unchanged
      }
    }
  })

  it('verify: bytes past the size its stat says (unchanged) are ERR_STATE naming the file; a read there that fails, ERR_STORE', async () => {
    const version = { size: 8192, mtimeMs: 1000, ctimeMs: 1000 }
    let length = 8192
    let fails: Error | undefined
    const fh = {
      read: async (_b: Uint8Array, _o: number, n: number, position: number) => {
        if (fails !== undefined) throw fails
        return { bytesRead: Math.max(0, Math.min(n, length - position)) }
      },
      stat: async () => version,
    }
    const src = fileSource(fh, undefined, 'model.pt')
    await src.verify?.() // as long as its size says: unchanged
    length = 8193
    await assert.rejects(src.verify?.() as Promise<void>, (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STATE'), `rejected with ${String(err)}`)
      assert.match(err.message, /^model\.pt: holds more than the 8192 bytes its size says .*: nothing was published/)
      return true
    })
    fails = Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' })
    await assert.rejects(src.verify?.() as Promise<void>, (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), `rejected with ${String(err)}`)
      assert.equal(err.message, 'model.pt: cannot be read at byte 8192 (EIO: i/o error, read)')
      assert.equal(err.cause, fails)
      return true
    })
  })

  it('a name holding control characters (an OSC title, the one-byte CSI, a newline) is escaped in its errors', async () => {
    const name = 'model\x1b]0;owned\x07\u009b2J\n.pt'
    const version = { size: 8192, mtimeMs: 1000, ctimeMs: 1000 }
    let now = version
    const fh = {
      read: async (_b: Uint8Array, _o: number, n: number, position: number) => ({
        bytesRead: Math.max(0, Math.min(n, now.size - position)),
      }),
      stat: async () => now,
    }
    const src = fileSource(fh, version, name)
    now = { size: 8193, mtimeMs: 2000, ctimeMs: 2000 }
    await assert.rejects(src.verify?.() as Promise<void>, (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STATE'), `rejected with ${String(err)}`)
      assertPrintable(err.message)
      assert.ok(err.message.startsWith(`${printable(name)}: changed while being uploaded`), err.message)
      return true
    })
    await assert.rejects(src.read(8000, 1000), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STATE'), `rejected with ${String(err)}`)
      assertPrintable(err.message)
      assert.ok(err.message.startsWith(`${printable(name)}: ended at byte 8193, 807 bytes short`), err.message)
      return true
    })
  })
})
