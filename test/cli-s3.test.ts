/**
 * The `stream-segment` command against a real S3 server (radosgw: the test runner starts
 * it and sets AWS_ENDPOINT_URL_S3 and the keys, which the child processes inherit): every
 * command against a bucket that does not exist is ERR_NOT_FOUND naming the bucket, and a
 * round trip through a real bucket with the scheme in capitals. Fails, never skips, without
 * the server.
 */
import assert from 'node:assert/strict'
import { type SpawnSyncOptions, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { bin, quietEnv } from './helpers/cli.js'
import { s3TestBucket, s3TestStore, uniquePrefix } from './helpers/s3-env.js'

const run = (args: string[], options: SpawnSyncOptions = {}) => {
  const env = quietEnv()
  const r = spawnSync(process.execPath, [bin, ...args], { env, maxBuffer: 64 << 20, timeout: 60_000, ...options })
  return { status: r.status, stdout: r.stdout as unknown as Buffer, text: String(r.stdout), stderr: String(r.stderr) }
}

describe('a bucket that does not exist', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-s3-'))
  const input = join(dir, 'in.bin')
  writeFileSync(input, randomBytes(100_000))
  after(() => rmSync(dir, { recursive: true, force: true }))
  // A valid name no test creates.
  const bucket = `stream-segment-missing-${randomBytes(6).toString('hex')}`
  const url = `s3://${bucket}/x`
  const commands: Array<[string, string[], SpawnSyncOptions?]> = [
    ['put (a file)', ['put', input, url]],
    ['put (stdin)', ['put', '-', url], { input: randomBytes(10_000) }],
    ['get', ['get', url, '-']],
    ['get (to a file)', ['get', url, join(dir, 'out.bin')]],
    ['ls', ['ls', url]],
    ['inspect', ['inspect', url]],
    ['verify', ['verify', url]],
    ['gc', ['gc', url]],
    ['rm', ['rm', url, '--yes']],
    ['bench', ['bench', url, '--size', '1M', '--rounds', '1']],
  ]
  for (const [name, args, options] of commands) {
    it(`${name}: ERR_NOT_FOUND, exit 3, naming the bucket`, async () => {
      await s3TestBucket() // the server answers (else this fails with how to start one)
      const r = run(args, options)
      assert.match(
        r.stderr,
        new RegExp(`^stream-segment: ERR_NOT_FOUND: [^\\n]*bucket ${bucket} does not exist[^\\n]*\\n$`),
        `${args.join(' ')}: ${r.stderr}`,
      )
      assert.equal(r.status, 3, r.stderr)
      assert.equal(r.text, '', 'nothing on stdout')
    })
  }
})

describe('a real bucket', () => {
  it('put then get, the scheme in any case; a range past the end is ERR_RANGE', async () => {
    const bucket = await s3TestBucket()
    const prefix = uniquePrefix('cli')
    const url = `s3://${bucket}/${prefix}`
    const data = randomBytes(300_000)
    const put = run(['put', '-', `S3://${bucket}/${prefix}`, '--json'], { input: data })
    assert.equal(put.status, 0, put.stderr)
    assert.equal(JSON.parse(put.text).bytes, data.length)
    try {
      const get = run(['get', url, '-'])
      assert.equal(get.status, 0, get.stderr)
      assert.ok(get.stdout.equals(data))
      const dir = mkdtempSync(join(tmpdir(), 'ss-cli-s3-'))
      try {
        const out = join(dir, 'out.bin')
        const f = run(['get', `S3://${bucket}/${prefix}`, '-o', out, '--range', '1000-'])
        assert.equal(f.status, 0, f.stderr)
        assert.ok(readFileSync(out).equals(data.subarray(1000)))
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
      const past = run(['get', url, '-', '--range', `${data.length}-`])
      assert.equal(past.status, 9, past.stderr)
      assert.match(past.stderr, new RegExp(`^stream-segment: ERR_RANGE: .*\\(${data.length} bytes, `))
    } finally {
      const rm = run(['rm', url, '--yes'])
      assert.equal(rm.status, 0, rm.stderr)
    }
  })
})

describe('bench on a real bucket', () => {
  it('runs its four passes on a fresh prefix and leaves it empty; refuses a prefix that holds objects', async () => {
    const bucket = await s3TestBucket()
    const prefix = uniquePrefix('cli-bench')
    const url = `s3://${bucket}/${prefix}`
    const r = run(['bench', url, '--size', '20M', '--rounds', '1', '--json'])
    assert.equal(r.status, 0, r.stderr)
    const got = JSON.parse(r.text)
    assert.equal(got.bytes, 20 * 1024 * 1024)
    const [round] = got.rounds
    assert.ok(round.write.objects >= 2 && round.put.objects === 2, JSON.stringify(round))
    for (const pass of ['write', 'read', 'put', 'get']) assert.ok(round[pass].seconds > 0, pass)
    const store = await s3TestStore(prefix)
    const left: string[] = []
    for await (const e of store.list('')) left.push(e.key)
    assert.deepEqual(left, [], 'nothing left under the prefix')
    let uploads = 0
    for await (const _ of store.listMultipart('')) uploads++
    assert.equal(uploads, 0, 'no open upload')
    // A prefix holding anything is refused, and kept as it was.
    await store.put('someone-elses', Buffer.from('keep me'))
    const refused = run(['bench', url, '--size', '1M', '--rounds', '1'])
    assert.equal(refused.status, 6, refused.stderr)
    assert.match(refused.stderr, /^stream-segment: ERR_CONFLICT: bench: .* holds objects already \(someone-elses\); /)
    assert.equal(Buffer.from(await store.get('someone-elses')).toString(), 'keep me')
    await store.delete('someone-elses')
  })
})
