/** The CLI's put of a file resumes an interrupted upload of it; --no-resume sends everything again. */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createReadStream, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, it } from 'node:test'
import { main } from '../lib/cli.js'
import { DirectoryStore } from '../lib/store/directory.js'
import { bin, fakeOutput } from './helpers/cli.js'
import { interruptedUpload, readBackSha256, sha256, writePatternFile } from './helpers/resume.js'

const MiB = 1024 * 1024
const dir = mkdtempSync(join(tmpdir(), 'ss-cli-resume-'))
after(() => rmSync(dir, { recursive: true, force: true }))

async function put(args: string[]): Promise<string> {
  const out = fakeOutput()
  const err = fakeOutput()
  const code = await main(['put', ...args], out, err)
  assert.equal(code, 0, err.writes.join(''))
  return out.writes.join('')
}

it('put FILE URL resumes an interrupted upload and says what it kept; --no-resume keeps nothing', async () => {
  const path = join(dir, 'file.bin')
  const data = writePatternFile(path, 16 * MiB, 5)
  const url = join(dir, 'c')
  const store = new DirectoryStore(url)
  const settings = { segmentMpuChunkSize: MiB, segmentMpuMaxConcurrency: 2 }
  const flags = ['--segment-mpu-chunk-size', '1M', '--segment-mpu-max-concurrency', '2']

  await interruptedUpload(path, store, settings, 8 * MiB)
  const text = await put([path, url, ...flags])
  const m = /\nreused ([\d.]+) MiB sent before by an interrupted upload of this file\n/.exec(text)
  assert.ok(m !== null, text)
  assert.ok(Number(m[1]) >= 6, text)
  assert.deepEqual(await readBackSha256(store), { size: data.length, sha256: sha256(data) })

  await interruptedUpload(path, store, settings, 8 * MiB)
  const json = JSON.parse(await put([path, url, ...flags, '--no-resume', '--json']))
  assert.equal(json.flushTiming.reusedBytes, 0)
  assert.equal(json.flushTiming.streamSentBytes + json.flushTiming.streamFlushBytes, data.length)
  assert.deepEqual(await readBackSha256(store), { size: data.length, sha256: sha256(data) })

  // With resume off nothing is looked for: the report says nothing of reuse, not "reused 0 B".
  const plain = await put([path, url, ...flags, '--no-resume'])
  assert.match(plain, /^committed checkpoint \d+ of /, plain)
  assert.doesNotMatch(plain, /reused/, plain)

  const err = fakeOutput()
  assert.equal(await main(['put', '-', url, '--no-resume'], fakeOutput(), err), 2)
  assert.match(err.writes.join(''), /--no-resume is for a file/)
})

/**
 * `put …` run by the CLI and interrupted by SIGINT (Ctrl-C) once `parts` pieces were
 * uploaded (its debug log says each one), with `stdin` (a file) piped to its stdin when
 * given: resolves with its exit code and stderr.
 */
async function interruptedPut(
  args: string[],
  parts: number,
  stdin?: string,
): Promise<{ status: number | null; stderr: string }> {
  const env = { ...process.env, DEBUG: 'stream-segment:upload' }
  const child = spawn(process.execPath, [bin, 'put', ...args], { env })
  if (stdin !== undefined) {
    child.stdin.on('error', () => {}) // EPIPE once it has stopped reading
    createReadStream(stdin).pipe(child.stdin)
  } else child.stdin.end()
  let stderr = ''
  let seen = 0
  child.stderr.on('data', (c) => {
    stderr += c
    seen = (stderr.match(/ part \S+ #\d+/g) ?? []).length
    if (seen >= parts && !child.killed) child.kill('SIGINT')
  })
  const [status] = await once(child, 'close')
  return { status: status as number | null, stderr }
}

/** The line an interrupted put of a file adds before its error: the bytes sent, of the file's size. */
const RESUME_HINT =
  /^stream-segment: ([\d.]+ [KMG]?i?B) of ([\d.]+ [KMG]?i?B) sent; the same put run again within 30 minutes resumes from there \(--no-resume starts over\)\n/m

/** The lines of stderr a user sees, without the debug log's (nor, DEBUG being set, the stack). */
const shown = (stderr: string) => stderr.replace(/^(?!stream-segment: ).*\n/gm, '')

it('put FILE URL interrupted by Ctrl-C (SIGINT) exits 8, says how much it sent and that the same put resumes, and the next put does', async () => {
  const path = join(dir, 'ctrl-c.bin')
  const data = writePatternFile(path, 48 * MiB, 6)
  const url = join(dir, 'ctrl-c')
  const flags = ['--segment-mpu-chunk-size', '256K', '--segment-mpu-max-concurrency', '1']
  const r = await interruptedPut([path, url, ...flags], 40)
  assert.equal(r.status, 8, r.stderr.slice(-2000))
  assert.match(r.stderr, /keep \S+ open for a resume/)
  // The hint, then the error's line, last.
  const lines = shown(r.stderr)
  const hint = RESUME_HINT.exec(lines)
  assert.ok(hint !== null, lines)
  assert.equal(hint[2], '48.0 MiB', lines)
  assert.match(lines, /\(--no-resume starts over\)\nstream-segment: ERR_ABORTED: [^\n]+: interrupted \(SIGINT\)\n$/)
  const text = await put([path, url, ...flags])
  const m = /\nreused ([\d.]+ MiB) sent before by an interrupted upload of this file\n/.exec(text)
  assert.ok(m !== null && Number.parseFloat(m[1] as string) >= 40 / 4 - 1, text)
  // The next put kept the whole pieces of what it said was sent: at most that, and all but
  // the pieces in flight (4 at most) and the object's last part (made again).
  const said = Number.parseFloat(hint[1] as string)
  const kept = Number.parseFloat(m[1] as string)
  assert.ok(kept <= said && kept >= said - 5 * 0.25, `${lines}\n${text}`)
  assert.deepEqual(await readBackSha256(new DirectoryStore(url)), { size: data.length, sha256: sha256(data) })
})

it('an interrupted put of stdin, or of a file with --no-resume, says nothing of resuming: only the error', async () => {
  const path = join(dir, 'stdin.bin')
  writePatternFile(path, 48 * MiB, 7)
  const flags = ['--segment-mpu-chunk-size', '256K', '--segment-mpu-max-concurrency', '1']
  const s = await interruptedPut(['-', join(dir, 'stdin'), ...flags], 20, path)
  assert.equal(s.status, 8, s.stderr.slice(-2000))
  assert.match(shown(s.stderr), /^stream-segment: ERR_ABORTED: [^\n]+: interrupted \(SIGINT\)\n$/)
  assert.doesNotMatch(s.stderr, /put again|resume from/)
  const n = await interruptedPut([path, join(dir, 'no-resume'), ...flags, '--no-resume'], 20)
  assert.equal(n.status, 8, n.stderr.slice(-2000))
  assert.match(shown(n.stderr), /^stream-segment: ERR_ABORTED: [^\n]+: interrupted \(SIGINT\)\n$/)
  assert.doesNotMatch(n.stderr, /put again|resume from/)
  // What it sent is left all the same (docs/cli.md says so): a put without --no-resume takes it.
  const text = await put([path, join(dir, 'no-resume'), ...flags])
  const m = /\nreused ([\d.]+) MiB sent before/.exec(text)
  assert.ok(m !== null && Number(m[1]) >= 20 / 4 - 1, text)
})
