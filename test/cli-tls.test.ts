/**
 * The command against an S3 endpoint over https whose certificate a private CA signed (the
 * self-signed one of test/fixtures/tls, on a server here that answers every request
 * NoSuchBucket): refused as docs/cli.md says, naming how to trust it, and trusted with
 * NODE_EXTRA_CA_CERTS. No real S3 server is needed.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:https'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { FIXTURES_DIR } from './fixtures/make-fixtures.js'
import { bin, quietEnv } from './helpers/cli.js'

const certFile = fileURLToPath(new URL('tls/localhost.crt', FIXTURES_DIR))
const key = readFileSync(new URL('tls/localhost.key', FIXTURES_DIR))

describe('an https endpoint whose certificate a private CA signed', () => {
  let endpoint = ''
  const server = createServer({ cert: readFileSync(certFile), key }, (req, res) => {
    req.resume()
    req.on('end', () => {
      const body = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>no</Message></Error>'
      res.writeHead(404, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) })
      res.end(req.method === 'HEAD' ? undefined : body)
    })
  })
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    endpoint = `https://localhost:${(server.address() as { port: number }).port}`
  })
  after(() => new Promise<void>((resolve) => server.close(() => resolve()).closeAllConnections()))

  /** The command run with the endpoint and test keys (and `more`), its exit code and stderr. */
  const run = (args: string[], more: Record<string, string> = {}) =>
    new Promise<{ status: number | null; stderr: string }>((resolve) => {
      const env = quietEnv({
        AWS_ENDPOINT_URL_S3: endpoint,
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_REGION: 'us-east-1',
      })
      delete env.NODE_EXTRA_CA_CERTS
      Object.assign(env, more)
      execFile(process.execPath, [bin, ...args], { env, timeout: 60_000 }, (err, _stdout, stderr) => {
        resolve({ status: err === null ? 0 : ((err as { code?: number }).code ?? null), stderr })
      })
    })

  test('without its CA: ERR_STORE, exit 7, naming the refusal and NODE_EXTRA_CA_CERTS', async () => {
    const r = await run(['ls', 's3://bkt/x'])
    assert.match(
      r.stderr,
      /^stream-segment: ERR_STORE: ListObjectsV2 s3:\/\/bkt\/x\/: .*TLS certificate was refused \(DEPTH_ZERO_SELF_SIGNED_CERT\), not retried: .*NODE_EXTRA_CA_CERTS=ca\.pem/,
    )
    assert.equal(r.status, 7, r.stderr)
  })

  test('with NODE_EXTRA_CA_CERTS naming its CA: the server is reached, by ls and by get (its own GET path)', async () => {
    for (const args of [
      ['ls', 's3://bkt/x'],
      ['get', 's3://bkt/x', '-'],
    ]) {
      const r = await run(args, { NODE_EXTRA_CA_CERTS: certFile })
      assert.match(r.stderr, /^stream-segment: ERR_NOT_FOUND: .*bucket bkt does not exist\n$/, args.join(' '))
      assert.equal(r.status, 3, r.stderr)
    }
  })
})
