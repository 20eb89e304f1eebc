/**
 * The resume acceptance check on radosgw: a 1 GiB uploadFile with the default settings (one
 * 1 GiB object filled in 16 MiB pieces), in a child process killed with SIGKILL at about
 * 60 % uploaded, then run again: the second run sends at most 45 % of the bytes and
 * publishes a checkpoint equal to the file.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { fillBlocks } from '../helpers/pattern.js'
import { CountingStore, readBackSha256 } from '../helpers/resume.js'
import { s3TestStore } from '../helpers/s3-env.js'

const MiB = 1024 * 1024
const SIZE = Number(process.env.RESUME_KILL_MIB ?? 1024) * MiB
const CHILD = fileURLToPath(new URL('../helpers/upload-child.js', import.meta.url))

const dir = mkdtempSync(join(tmpdir(), 'ss-resume-kill-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** Writes `bytes` of the block pattern to `path`; resolves with its SHA-256. */
function writeFile(path: string, bytes: number): string {
  const fd = openSync(path, 'w')
  const h = createHash('sha256')
  try {
    const chunk = Buffer.allocUnsafe(16 * MiB)
    for (let at = 0; at < bytes; at += chunk.length) {
      const b = chunk.subarray(0, Math.min(chunk.length, bytes - at))
      fillBlocks(b, at, 61)
      h.update(b)
      writeSync(fd, b)
    }
  } finally {
    closeSync(fd)
  }
  return h.digest('hex')
}

/** Runs the child until it has uploaded `killAt` bytes, then SIGKILLs it; resolves with the bytes it had uploaded. */
function uploadAndKill(url: string, path: string, killAt: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, url, path], { stdio: ['ignore', 'pipe', 'pipe'] })
    let uploaded = 0
    let killed = false
    let stderr = ''
    let rest = ''
    child.stderr.on('data', (d) => {
      stderr += d
    })
    child.stdout.on('data', (d) => {
      rest += d
      const lines = rest.split('\n')
      rest = lines.pop() ?? ''
      for (const line of lines) {
        if (line.startsWith('done ')) reject(new Error(`the upload finished before it was killed: ${line}`))
        const m = /^p (\d+)$/.exec(line)
        if (m === null || killed) continue
        uploaded = Number(m[1])
        if (uploaded >= killAt) {
          killed = true
          child.kill('SIGKILL')
        }
      }
    })
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL' && killed) resolve(uploaded)
      else reject(new Error(`upload-child exited ${code ?? signal} before it was killed: ${stderr}`))
    })
  })
}

it(`s3 (radosgw): a ${SIZE / MiB} MiB uploadFile killed at 60 % and run again sends ≤ 45 % and publishes the file`, async (ctx) => {
  const path = join(dir, 'big.bin')
  const sha256 = writeFile(path, SIZE)
  const store = await s3TestStore()
  const uploaded = await uploadAndKill(store.url, path, 0.6 * SIZE)
  assert.ok(uploaded >= 0.6 * SIZE && uploaded < SIZE, `killed with ${uploaded} bytes uploaded`)

  const counting = new CountingStore(store)
  const t = await uploadFile(path, counting)
  assert.ok(
    counting.bytesUp <= 0.45 * SIZE,
    `the second run sent ${counting.bytesUp} bytes (${((counting.bytesUp / SIZE) * 100).toFixed(1)} %), kept ${t.reusedBytes}`,
  )
  ctx.diagnostic(
    `killed at ${uploaded} bytes uploaded; second run: ${counting.bytesUp} bytes sent (${((counting.bytesUp / SIZE) * 100).toFixed(1)} %), ${t.reusedBytes} kept, ${counting.requests.uploadPart ?? 0} parts uploaded`,
  )
  assert.ok(t.reusedBytes >= 0.55 * SIZE, `kept ${t.reusedBytes} bytes`)
  assert.deepEqual(await readBackSha256(store), { size: SIZE, sha256 })
})
