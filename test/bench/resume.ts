// Benchmark (a program, not a test): uploadFile of a local file to the S3 server of
// AWS_ENDPOINT_URL_S3 (radosgw from test/rgw/rgw.sh), the spec's default settings (one
// 1 GiB object filled in 16 MiB pieces), two ways side by side in this one process, each
// in a container of its own: an upload aborted (its signal) once --at of the file was
// uploaded, not timed, then uploadFile again, the run timed:
//   full       with resume: false (the baseline: what a run after an interruption costs
//              without resume)
//   resumed    with resume (the default)
// Every request and every body byte of the timed run is counted (a middleware on the one
// client). Each published checkpoint is read back and its SHA-256 compared with the
// file's: the program exits 1 if one differs.
//
//   node dist/esm/test/bench/resume.js [--mib 1024] [--rounds 3] [--at 0.6]
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import * as os from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { removeContainer } from '../../lib/admin/remove.js'
import { StreamSegmentError } from '../../lib/errors.js'
import { fileState, SegmentFile } from '../../lib/segment-file.js'
import { S3Store } from '../../lib/store/s3.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { countingClient, ensureBucket, median, requireS3Server } from '../helpers/bench.js'
import { writeBlocksFile } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const { values: args } = parseArgs({
  options: {
    mib: { type: 'string', default: '1024' },
    rounds: { type: 'string', default: '3' },
    at: { type: 'string', default: '0.6' },
    bucket: { type: 'string', default: 'stream-segment-bench' },
  },
})
const size = Number(args.mib) * MiB
const rounds = Number(args.rounds)
const at = Number(args.at)
const bucket = args.bucket as string

requireS3Server()
const { client, counts } = countingClient()

interface Row {
  name: string
  seconds: number
  sent: number
  reused: number
  requests: number
}

async function readBackSha(store: S3Store): Promise<string> {
  const f = await SegmentFile.open(store, { readOnly: true })
  const h = createHash('sha256')
  for (let p = 0; p < f.size; p += 16 * MiB) h.update(await f.read(p, Math.min(16 * MiB, f.size - p)))
  await f.close()
  return h.digest('hex')
}

async function main(): Promise<void> {
  await ensureBucket(client, bucket)
  const dir = mkdtempSync(join(os.tmpdir(), 'ss-bench-resume-'))
  const path = join(dir, 'file.bin')
  const want = writeBlocksFile(path, size, 9)
  const cpus = os.cpus()
  console.log(
    `uploadFile of a ${size / MiB} MiB file (spec defaults), the run after an interruption at ${at * 100} %: ` +
      `${rounds} rounds (median), on ${process.env.AWS_ENDPOINT_URL_S3}`,
  )
  console.log(
    `machine: ${cpus[0]?.model} × ${cpus.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  )
  const rows: Row[] = []
  let bad = false
  try {
    for (let round = 0; round < rounds; round++) {
      for (const name of ['full', 'resumed'] as const) {
        const store = new S3Store({ client, bucket, prefix: `bench-resume-${process.pid}-${round}-${name}` })
        const ac = new AbortController()
        await uploadFile(
          path,
          store,
          {},
          {
            signal: ac.signal,
            onStart: (file) => {
              const uploader = fileState(file).uploader
              uploader.onRequestDone = () => {
                if (uploader.uploadedBytes >= at * size) ac.abort(new Error('interrupted by the benchmark'))
              }
            },
          },
        ).catch((err) => {
          if (!StreamSegmentError.is(err, 'ERR_ABORTED')) throw err
        })
        const r0 = counts.requests
        const b0 = counts.bytesUp
        const t0 = performance.now()
        const t = await uploadFile(path, store, {}, { resume: name === 'resumed' })
        const row = {
          name,
          seconds: (performance.now() - t0) / 1000,
          sent: counts.bytesUp - b0,
          reused: t.reusedBytes,
          requests: counts.requests - r0,
        }
        rows.push(row)
        console.log(
          `  ${name}: ${row.seconds.toFixed(2)} s, ${row.sent} bytes sent, ${row.reused} reused, ${row.requests} requests, load ${os.loadavg()[0]?.toFixed(1)}`,
        )
        const got = await readBackSha(store)
        if (got !== want) {
          console.error(`round ${round + 1} ${name}: the checkpoint's SHA-256 is ${got}, the file's ${want}`)
          bad = true
        }
        await removeContainer(store)
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  const header = ['run after the interruption', 'seconds', 'sent % of the file', 'reused % of the file', 'requests']
  const table = (['full', 'resumed'] as const).map((name) => {
    const rs = rows.filter((r) => r.name === name)
    return [
      name === 'full' ? 'full (resume: false)' : 'resumed',
      median(rs.map((r) => r.seconds)).toFixed(2),
      ((100 * median(rs.map((r) => r.sent))) / size).toFixed(1),
      ((100 * median(rs.map((r) => r.reused))) / size).toFixed(1),
      String(median(rs.map((r) => r.requests))),
    ]
  })
  const widths = header.map((c, i) => Math.max(c.length, ...table.map((r) => (r[i] as string).length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(' | ')} |`
  console.log(line(header))
  console.log(`| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`)
  for (const r of table) console.log(line(r))
  console.log(`SHA-256 of every checkpoint ${bad ? 'DIFFERS from' : 'equals'} the file's (${want})`)
  if (bad) process.exit(1)
}

await main()
