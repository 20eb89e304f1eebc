/**
 * The resume acceptance check on radosgw: a 1 GiB uploadFile with the default settings (one
 * 1 GiB object filled in 16 MiB pieces), in a child process killed with SIGKILL at about
 * 60 % uploaded, then run again: the second run sends at most 45 % of the bytes and
 * publishes a checkpoint equal to the file.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { runNode } from '../helpers/child.js'
import { writeBlocksFile } from '../helpers/pattern.js'
import { CountingStore, readBackSha256 } from '../helpers/resume.js'
import { s3TestStore } from '../helpers/s3-env.js'

const MiB = 1024 * 1024
const SIZE = Number(process.env.RESUME_KILL_MIB ?? 1024) * MiB
const CHILD = fileURLToPath(new URL('../helpers/upload-child.js', import.meta.url))

const dir = mkdtempSync(join(tmpdir(), 'ss-resume-kill-'))
after(() => rmSync(dir, { recursive: true, force: true }))

/** Writes `bytes` of the block pattern to `path`; resolves with its SHA-256. */
/** Runs the child until it has uploaded `killAt` bytes, then SIGKILLs it; resolves with the bytes it had uploaded. */
async function uploadAndKill(url: string, path: string, killAt: number): Promise<number> {
  let uploaded = 0
  let stopped = false
  const { killed, lines } = await runNode(CHILD, [url, path], {
    onLine: (line, _, kill) => {
      const m = /^p (\d+)$/.exec(line)
      if (m === null || stopped) return
      uploaded = Number(m[1])
      if (uploaded >= killAt) {
        stopped = true
        kill()
      }
    },
  })
  if (!killed) throw new Error(`the upload finished before it was killed: ${lines.at(-1)}`)
  return uploaded
}

it(`s3 (radosgw): a ${SIZE / MiB} MiB uploadFile killed at 60 % and run again sends ≤ 45 % and publishes the file`, async (ctx) => {
  const path = join(dir, 'big.bin')
  const sha256 = writeBlocksFile(path, SIZE, 61)
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
