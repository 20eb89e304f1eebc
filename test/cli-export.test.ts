/**
 * `stream-segment export`: a checkpoint to a local file and to an S3 object on radosgw
 * (copied server-side, the counts printed), GetObject equal to what was put; refused
 * destinations and a missing container exit with their codes and write nothing.
 */
import assert from 'node:assert/strict'
import { type SpawnSyncOptions, spawnSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { DeleteObjectCommand, GetObjectCommand } from '@aws-sdk/client-s3'
import { bin, quietEnv } from './helpers/cli.js'
import { s3TestBucket, s3TestClient, uniquePrefix } from './helpers/s3-env.js'

const run = (args: string[], options: SpawnSyncOptions = {}) => {
  const env = quietEnv()
  const r = spawnSync(process.execPath, [bin, ...args], { env, maxBuffer: 64 << 20, timeout: 120_000, ...options })
  return { status: r.status, text: String(r.stdout), stderr: String(r.stderr) }
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

describe('stream-segment export', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-cli-export-'))
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('a directory container to a local file: the same bytes, the counts printed, --json', () => {
    const data = randomBytes(3_000_000)
    const container = join(dir, 'c1')
    assert.equal(run(['put', '-', container], { input: data }).status, 0)
    const out = join(dir, 'out.bin')
    const r = run(['export', container, out])
    assert.equal(r.status, 0, r.stderr)
    assert.equal(sha(readFileSync(out)), sha(data))
    assert.match(r.text, /^exported checkpoint 1 of .* to .*out\.bin: 2\.9 MiB \(3000000 bytes\)/)
    assert.match(r.text, /copied server-side 0 bytes \(0\.0 %\), sent 3000000 bytes/)
    const j = run(['export', container, `file://${join(dir, 'out2.bin')}`, '--json', '--cno', '1'])
    assert.equal(j.status, 0, j.stderr)
    const report = JSON.parse(j.text)
    assert.equal(report.size, 3_000_000)
    assert.equal(report.cno, 1)
    assert.equal(sha(readFileSync(join(dir, 'out2.bin'))), sha(data))
  })

  it('refused destinations exit 2, a missing container 3, a missing checkpoint 3: nothing written', () => {
    const container = join(dir, 'c2')
    assert.equal(run(['put', '-', container], { input: randomBytes(1000) }).status, 0)
    for (const dest of ['gs://b/k', 's3://bucket-only', 'https://x/y']) {
      const r = run(['export', container, dest])
      assert.equal(r.status, 2, `${dest}: ${r.stderr}`)
      assert.match(r.stderr, /^stream-segment: ERR_INVALID_ARGUMENT: export: /)
    }
    assert.equal(run(['export', container, join(dir, 'x.bin'), '--content-type', 'a/b']).status, 2)
    assert.equal(run(['export', container]).status, 2)
    const missing = run(['export', join(dir, 'nothing-here'), join(dir, 'y.bin')])
    assert.equal(missing.status, 3, missing.stderr)
    const noCno = run(['export', container, join(dir, 'z.bin'), '--cno', '9'])
    assert.equal(noCno.status, 3, noCno.stderr)
    assert.ok(!existsSync(join(dir, 'x.bin')) && !existsSync(join(dir, 'y.bin')) && !existsSync(join(dir, 'z.bin')))
    assert.deepEqual(
      readdirSync(dir).filter((n) => n.includes('ss-export')),
      [],
      'no temporary file left',
    )
  })

  it('file URLs as openStore reads them; a bad path, a directory or the container itself exit 2 or 3, nothing written', () => {
    const container = join(dir, 'c3')
    assert.equal(run(['put', '-', container], { input: randomBytes(1000) }).status, 0)
    const objects = readdirSync(container).sort()
    for (const [dest, status, message] of [
      ['file:///tmp/%zz', 2, /ERR_INVALID_ARGUMENT: export: file:\/\/\/tmp\/%zz: URI malformed/],
      ['file://host/x', 2, /ERR_INVALID_ARGUMENT: export: file:\/\/host\/x: a file URL has an empty host/],
      [join(dir, 'nonexist', 'x'), 3, /ERR_NOT_FOUND: export to .*nonexist\/x: .*no such file or directory/],
      [dir, 2, /ERR_INVALID_ARGUMENT: export to .*: is a directory/],
      // /proc is there but takes no new file: the temporary file is what cannot be made.
      [
        '/proc/version',
        2,
        /ERR_INVALID_ARGUMENT: export to \/proc\/version: the temporary file \/proc\/\.ss-export-.*cannot be created/,
      ],
      [join(container, '0000000001.0'), 2, /ERR_INVALID_ARGUMENT: export to .*: inside the container's folder/],
    ] as const) {
      const r = run(['export', container, dest])
      assert.equal(r.status, status, `${dest}: ${r.stderr}`)
      assert.match(r.stderr, message)
    }
    assert.equal(run(['export', container, `file://localhost${join(dir, 'ok.bin')}`]).status, 0)
    assert.deepEqual(readdirSync(container).sort(), objects, 'the container is unchanged')
    assert.equal(run(['verify', container]).status, 0)
    assert.deepEqual(
      readdirSync(dir).filter((n) => n.includes('ss-export')),
      [],
      'no temporary file left',
    )
  })

  it('an S3 container to an S3 object: copied server-side, GetObject returns what was put', async () => {
    const bucket = await s3TestBucket()
    const prefix = uniquePrefix('cli-export')
    const url = `s3://${bucket}/${prefix}`
    const input = join(dir, 'in.bin')
    const data = randomBytes(24 * 1024 * 1024)
    writeFileSync(input, data)
    assert.equal(run(['put', input, url]).status, 0)
    const Key = `${prefix}export/out.bin`
    try {
      const r = run(['export', url, `s3://${bucket}/${Key}`, '--content-type', 'application/x-test'])
      assert.equal(r.status, 0, r.stderr)
      const copied = /copied server-side (\d+) bytes/.exec(r.text)
      assert.ok(copied !== null && Number(copied[1]) > 0, r.text)
      const got = await s3TestClient().send(new GetObjectCommand({ Bucket: bucket, Key }))
      assert.equal(got.ContentType, 'application/x-test')
      const body = await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray()
      assert.equal(sha(body), sha(data))
    } finally {
      assert.equal(run(['rm', url, '--yes']).status, 0)
      await s3TestClient().send(new DeleteObjectCommand({ Bucket: bucket, Key }))
    }
  })
})
