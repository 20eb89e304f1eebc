// Benchmark (a program, not a test): export a sequentially written checkpoint to one plain
// object on the S3 server of AWS_ENDPOINT_URL_S3 (radosgw from test/rgw/rgw.sh), two ways,
// side by side in this one process:
//   exportObject   server-side UploadPartCopy of each object's data range, the rest sent
//   sdk-copy       the baseline a user without it has: GetObject of the same bytes (the
//                  export made by the first row) streamed into @aws-sdk/lib-storage `Upload`
//                  (16 MiB parts, 4 in flight, createS3Client's client)
// Every request of both is counted (a middleware on the one client). Before timing, the
// checkpoint is read back through the read stream and its SHA-256 compared with GetObject
// of each export: the program exits 1 if they differ.
//
//   node dist/esm/test/bench/export.js [--mib 1024] [--rounds 3]
import { createHash } from 'node:crypto'
import * as os from 'node:os'
import type { Readable } from 'node:stream'
import { parseArgs } from 'node:util'
import { DeleteObjectCommand, GetObjectCommand, type S3Client } from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { exportObject } from '../../lib/admin/export.js'
import { removeContainer } from '../../lib/admin/remove.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { S3Store } from '../../lib/store/s3.js'
import { createStreamSegmentReadStream } from '../../lib/streams/read-stream.js'
import { countingClient, ensureBucket, median, medianRange, requireS3Server } from '../helpers/bench.js'
import { fillPattern } from '../helpers/pattern.js'

const MiB = 1024 * 1024
const GiB = 1024 * MiB
const { values: args } = parseArgs({
  options: {
    mib: { type: 'string', default: '1024' },
    rounds: { type: 'string', default: '3' },
    bucket: { type: 'string', default: 'stream-segment-bench' },
  },
})
const size = Number(args.mib) * MiB
const rounds = Number(args.rounds)
const bucket = args.bucket as string

requireS3Server()
const { client, counts } = countingClient()

async function shaOf(stream: AsyncIterable<Uint8Array>): Promise<string> {
  const h = createHash('sha256')
  for await (const c of stream) h.update(c)
  return h.digest('hex')
}

async function getSha(client: S3Client, key: string): Promise<string> {
  const out = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))
  return shaOf(out.Body as Readable)
}

interface Row {
  name: string
  seconds: number
  cpuSeconds: number
  copiedBytes: number
  sentBytes: number
  requests: number
  retries: number
}

async function measure(
  name: string,
  fn: () => Promise<{ copiedBytes: number; sentBytes: number; retries?: number }>,
): Promise<Row> {
  const r0 = counts.requests
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const { copiedBytes, sentBytes, retries = 0 } = await fn()
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  const row = {
    name,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    copiedBytes,
    sentBytes,
    requests: counts.requests - r0,
    retries,
  }
  console.log(
    `  ${name}: ${seconds.toFixed(2)} s, ${row.cpuSeconds.toFixed(2)} CPU-s, ${row.requests} requests, ${retries} retries, load ${os.loadavg()[0]?.toFixed(1)}`,
  )
  return row
}

async function main(): Promise<void> {
  await ensureBucket(client, bucket)
  const prefix = `bench-export-${process.pid}`
  const store = new S3Store({ client, bucket, prefix })
  // The checkpoint: `size` patterned bytes in 1 MiB writes, the spec's default settings.
  const f = await SegmentFile.create(store)
  const chunk = Buffer.allocUnsafe(MiB)
  for (let at = 0; at < size; at += MiB) {
    fillPattern(chunk, at, 3)
    await f.write(at, chunk)
  }
  const timing = await f.flush()
  await f.close()
  const want = await shaOf(createStreamSegmentReadStream({ store }) as AsyncIterable<Uint8Array>)
  const cpus = os.cpus()
  console.log(
    `export a ${size / MiB} MiB checkpoint written sequentially (${timing.objects} objects, spec defaults) to one object, ` +
      `${rounds} rounds (median, min–max), on ${process.env.AWS_ENDPOINT_URL_S3}`,
  )
  console.log(
    `machine: ${cpus[0]?.model} × ${cpus.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  )
  const rows = new Map<string, Row[]>()
  const keep = (r: Row) => {
    const list = rows.get(r.name) ?? []
    list.push(r)
    rows.set(r.name, list)
  }
  let bad = false
  const exportKey = `${prefix}-out/export.bin`
  const copyKey = `${prefix}-out/sdk-copy.bin`
  for (let round = 0; round < rounds; round++) {
    keep(
      await measure('exportObject', async () => {
        const r = await exportObject(store, { client, Bucket: bucket, Key: exportKey })
        return { copiedBytes: r.copiedBytes, sentBytes: r.sentBytes, retries: r.retries }
      }),
    )
    keep(
      await measure('sdk-copy (GetObject + Upload)', async () => {
        const out = await client.send(new GetObjectCommand({ Bucket: bucket, Key: exportKey }))
        await new Upload({
          client,
          params: { Bucket: bucket, Key: copyKey, Body: out.Body as Readable },
          partSize: 16 * MiB,
          queueSize: 4,
        }).done()
        return { copiedBytes: 0, sentBytes: size }
      }),
    )
    for (const key of [exportKey, copyKey]) {
      const got = await getSha(client, key)
      if (got !== want) {
        console.error(`round ${round + 1}: GetObject of ${key} has SHA-256 ${got}, the checkpoint ${want}`)
        bad = true
      }
    }
  }
  const header = ['how', 'seconds', 'MB/s', 'copied %', 'sent bytes', 'requests', 'client CPU-s/GiB']
  const table = [...rows].map(([name, rs]) => [
    name,
    medianRange(
      rs.map((r) => r.seconds),
      2,
    ),
    medianRange(
      rs.map((r) => size / 1e6 / r.seconds),
      0,
    ),
    (100 * median(rs.map((r) => r.copiedBytes / size))).toFixed(2),
    String(median(rs.map((r) => r.sentBytes))),
    String(median(rs.map((r) => r.requests))),
    medianRange(
      rs.map((r) => r.cpuSeconds / (size / GiB)),
      3,
    ),
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => (r[i] as string).length)))
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] as number)).join(' | ')} |`
  console.log(line(header))
  console.log(`| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`)
  for (const r of table) console.log(line(r))
  console.log(`SHA-256 of GetObject of every export ${bad ? 'DIFFERS from' : 'equals'} the checkpoint's (${want})`)
  await removeContainer(store)
  for (const key of [exportKey, copyKey]) await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
  client.destroy()
  if (bad) process.exit(1)
}

await main()
