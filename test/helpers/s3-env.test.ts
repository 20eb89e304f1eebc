/**
 * The S3 test helper fails with a message that says what is wrong: no server at the
 * endpoint, or a server that answers but does not create the test bucket. Each case runs
 * s3TestBucket in a child process against a port of its own (no server, or a small HTTP
 * server that refuses CreateBucket), so the real server the other tests use is not touched.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { resolve } from 'node:path'
import { describe, it } from 'node:test'
import { RGW_HINT } from './s3-env.js'

/** s3TestBucket in a fresh process against `endpoint`: its exit code and stderr. */
function bucketIn(endpoint: string): Promise<{ code: number | null; stderr: string }> {
  const helper = resolve('dist/esm/test/helpers/s3-env.js')
  const script = `import(${JSON.stringify(helper)}).then((m) => m.s3TestBucket()).then(
    () => process.exit(0),
    (e) => { process.stderr.write(String(e.message)); process.exit(1) })`
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    AWS_ENDPOINT_URL_S3: endpoint,
    AWS_ACCESS_KEY_ID: 'k',
    AWS_SECRET_ACCESS_KEY: 's',
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
  }
  delete env.S3_TEST_BUCKET
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['-e', script], { env, stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (s: string) => {
      stderr += s
    })
    child.on('error', fail)
    child.on('close', (code) => done({ code, stderr }))
  })
}

function listen(server: Server): Promise<number> {
  return new Promise((done) => server.listen(0, '127.0.0.1', () => done((server.address() as AddressInfo).port)))
}

describe('s3TestBucket', () => {
  it('with no server at the endpoint: fails with how to start one', async () => {
    const server = createServer()
    const port = await listen(server)
    await new Promise((done) => server.close(done)) // the port is free now: nothing answers
    const r = await bucketIn(`http://127.0.0.1:${port}`)
    assert.equal(r.code, 1)
    assert.ok(r.stderr.includes(RGW_HINT), r.stderr)
  })

  it('with a server that does not create the bucket: says so, and names the bucket', async () => {
    const seen: string[] = []
    const server = createServer((req, res) => {
      seen.push(req.method ?? '')
      if (req.method === 'HEAD') {
        res.writeHead(404).end()
        return
      }
      req.resume()
      res.writeHead(400, { 'content-type': 'application/xml' })
      res.end('<?xml version="1.0"?><Error><Code>InvalidRequest</Code><Message>no room</Message></Error>')
    })
    const port = await listen(server)
    try {
      const r = await bucketIn(`http://127.0.0.1:${port}`)
      assert.equal(r.code, 1)
      assert.match(r.stderr, /answers but did not create bucket stream-segment-test-\S+: no room/)
      assert.deepEqual(seen.slice(0, 2), ['HEAD', 'PUT'])
    } finally {
      server.close()
    }
  })
})
