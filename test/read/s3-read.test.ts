/**
 * The read path and the CLI against a real S3 server (radosgw, test/rgw/rgw.sh): a
 * container read back whole and by random 4 KiB reads costing at most 3 requests after
 * open, downloaded to a local file, and every CLI command on an s3:// URL. Fails, never skips, without the server.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { SegmentFile } from '../../lib/segment-file.js'
import { downloadFile } from '../../lib/streams/download-file.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { pieceStats } from '../../lib/util/piece-pool.js'
import { s3TestBucket, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'
import { ThrottledStore } from '../helpers/throttled-store.js'

const MiB = 1024 * 1024

/** 24 MiB of random bytes written in 1 MiB writes to a new container on radosgw and flushed; the handle left open. */
async function container24() {
  const store = await s3TestStore()
  const data = randomBytes(24 * MiB)
  const file = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 4 * MiB })
  for (let at = 0; at < data.length; at += MiB) await file.write(at, data.subarray(at, at + MiB))
  await file.flush()
  return { store, data, file }
}

describe('reads on radosgw', () => {
  it('reads a container back whole, and cold random 4 KiB reads cost at most 3 requests after open', async () => {
    const { store, data, file } = await container24()
    await file.close()
    const chunks: Buffer[] = []
    for await (const c of createStreamSegmentReadStream({ store })) chunks.push(Buffer.from(c as Uint8Array))
    assert.ok(Buffer.concat(chunks).equals(data))
    for (const at of [3 * MiB + 5, 17 * MiB + 4096 * 7, 23 * MiB]) {
      const counted = new ThrottledStore(store, { latencyMs: 0, bandwidth: Number.POSITIVE_INFINITY })
      const r = await SegmentFile.open(counted, { readOnly: true })
      counted.resetCounters()
      const got = await r.read(at, 4096)
      assert.ok(Buffer.from(got).equals(data.subarray(at, at + 4096)))
      assert.ok(counted.totalRequests <= 3, `${counted.totalRequests} requests for a cold read at ${at}`)
    }
  })

  it("hands out chunks of the consumer's own: kept ones stay as they were while a later read reuses the GET pieces", async () => {
    const size = 6 * MiB + 12_345
    const data = [randomBytes(size), randomBytes(size)]
    const stores = await Promise.all(data.map(() => s3TestStore()))
    for (const [i, store] of stores.entries()) {
      const f = await SegmentFile.create(store, { dataCacheDirtyMaxBytesThreshold: 2 * MiB })
      const d = data[i] as Buffer
      for (let at = 0; at < size; at += MiB) await f.write(at, d.subarray(at, at + MiB))
      assert.ok((await f.flush()).objects >= 3)
      await f.close()
    }
    const kept: Uint8Array[][] = [[], []]
    const reused = pieceStats().reused
    for (const [i, store] of stores.entries()) {
      for await (const c of createStreamSegmentReadStream({ store, readGetMaxBytes: MiB }))
        kept[i]?.push(c as Uint8Array)
    }
    assert.ok(pieceStats().reused - reused >= 64, `${pieceStats().reused - reused} pieces read into again`)
    for (const [i, d] of data.entries()) assert.ok(Buffer.concat(kept[i] as Uint8Array[]).equals(d), `read ${i + 1}`)
  })

  it("downloadFile writes a container to a local file from the GETs' pieces, read into again", async () => {
    const { store, data, file } = await container24()
    await file.close()
    const dir = mkdtempSync(join(tmpdir(), 'ss-s3download-'))
    try {
      const path = join(dir, 'whole.bin')
      const reused = pieceStats().reused
      const got = await downloadFile(store, path, { readGetMaxBytes: MiB, readMaxConcurrency: 4 })
      assert.equal(got.bytes, data.length)
      assert.ok(readFileSync(path).equals(data))
      assert.ok(pieceStats().reused - reused >= 64, `${pieceStats().reused - reused} pieces read into again`)
      assert.ok(got.timing.requests.data >= 24, JSON.stringify(got.timing.requests))
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  describe('the CLI on an s3:// URL', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ss-s3cli-'))
    after(() => rmSync(dir, { recursive: true, force: true }))
    const run = (args: string[], input?: Buffer) => {
      const env = { ...process.env }
      delete env.DEBUG
      const r = spawnSync(process.execPath, ['bin/stream-segment.cjs', ...args], { env, input, maxBuffer: 64 << 20 })
      return { status: r.status, stdout: r.stdout, text: String(r.stdout), stderr: String(r.stderr) }
    }

    it('put, get, ls, inspect and verify', async () => {
      const prefix = uniquePrefix('cli')
      await s3TestStore(prefix) // cleaned up with the others when the process ends
      const url = `s3://${await s3TestBucket()}/${prefix}`
      const data = randomBytes(5 * MiB + 77)
      const input = join(dir, 'in.bin')
      writeFileSync(input, data)
      // A PartedSegment container: the format is fixed at create, the second put keeps it.
      const put = run(['put', input, url, '--format', 'parted', '--segmentMaxObjectBytes', '3MiB', '--json'])
      assert.equal(put.status, 0, put.stderr)
      assert.equal(JSON.parse(put.text).flushTiming.cno, 1)
      const put2 = run(['put', '-', url], data.subarray(0, MiB))
      assert.equal(put2.status, 0, put2.stderr)
      const get = run(['get', url, '-', '--cno', '1'])
      assert.equal(get.status, 0, get.stderr)
      assert.ok(get.stdout.equals(data))
      const range = run(['get', url, '-', '--range', '10-20'])
      assert.ok(range.stdout.equals(data.subarray(10, 21)))
      const ls = run(['ls', url])
      assert.equal(ls.status, 0, ls.stderr)
      assert.match(ls.text, /\n +1 +5242957 .* complete\n +2 +1048576 .* published\nstored: \d+ bytes;/)
      const inspect = run(['inspect', url, '--cno', '1'])
      assert.equal(inspect.status, 0, inspect.stderr)
      assert.match(inspect.text, /: PartedSegment, 5242957 bytes/)
      // By reference nothing is held in memory and, head first, nothing is sent ahead: the
      // flush writes a data part of at most 3 MiB, then part 0.
      assert.match(inspect.text, /\n0000000001\.1 +\d+ +- /)
      assert.match(inspect.text, /\n0000000001\.0 +\d+ +CHECKPOINT /)
      const other = run(['put', '-', url, '--format', 'stream'], data.subarray(0, 10))
      assert.equal(other.status, 2, other.stderr)
      assert.match(other.stderr, /ERR_INVALID_ARGUMENT: option --format = stream: the container at .* has parted: /)
      for (const cno of ['1', '2']) {
        const v = run(['verify', url, '--cno', cno])
        assert.equal(v.status, 0, v.stderr + v.text)
        assert.match(v.text, /: ok\n$/)
      }
      const missing = run(['ls', `s3://${await s3TestBucket()}/${uniquePrefix('none')}`])
      assert.equal(missing.status, 3, missing.stderr)
      assert.match(missing.stderr, /^stream-segment: ERR_NOT_FOUND: .*no container here [^\n]*\n$/)
    })
  })
})
