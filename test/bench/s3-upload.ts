// Benchmark (a program, not a test): upload one object in equal parts to the S3 server of
// AWS_ENDPOINT_URL_S3 (radosgw from test/rgw/rgw.sh) with a few parts in flight, six ways:
//   sdk-defaults  S3Client defaults (SigV4 SHA-256 of each body, the SDK's CRC32, Expect: 100-continue)
//   s3store       S3Store on createS3Client (no SDK checksum, keep-alive; on a custom
//                 endpoint each part's SHA-256 signed, or Content-MD5 where MD5 is the
//                 cheaper hash on this CPU: the server checks either)
//   s3store-md5   the same with UNSIGNED-PAYLOAD and Content-MD5
//   s3store-unchecked  UNSIGNED-PAYLOAD and no Content-MD5: the difference is the hash's cost
//   lib-storage   @aws-sdk/lib-storage Upload fed a stream of 64 KiB chunks, SDK-default client
//   lib-storage-tuned  the same on createS3Client's client
// Each variant and round runs in its own child process, so peak RSS is that upload's.
// Every part (and chunk) is a view of one patterned buffer: the source costs one part of
// memory and no copy.
//
//   node dist/esm/test/bench/s3-upload.js [--mib 1024] [--part-mib 16] [--inflight 4] [--rounds 3]
//     [--only NAME,…]   (some of the variants above, by name)
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import * as os from 'node:os'
import { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { createS3Client, S3Store } from '../../lib/store/s3.js'
import { ensureBucket, median, procCpuSeconds, requireS3Server } from '../helpers/bench.js'

const MiB = 1024 * 1024
const CHUNK = 64 * 1024
const VARIANTS = [
  'sdk-defaults',
  's3store',
  's3store-md5',
  's3store-unchecked',
  'lib-storage',
  'lib-storage-tuned',
] as const
type Variant = (typeof VARIANTS)[number]

const { values: args } = parseArgs({
  options: {
    mib: { type: 'string', default: '1024' },
    'part-mib': { type: 'string', default: '16' },
    inflight: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
    only: { type: 'string' },
    bucket: { type: 'string', default: 'stream-segment-bench' },
    child: { type: 'string' },
  },
})
const totalBytes = Number(args.mib) * MiB
const partBytes = Number(args['part-mib']) * MiB
const inflight = Number(args.inflight)
const parts = Math.ceil(totalBytes / partBytes)
const bucket = args.bucket as string
/** The variants --only names (all without it); a name it does not know is refused, not passed over. */
const only = args.only?.split(',').map((x) => x.trim()) ?? [...VARIANTS]
const unknown = only.filter((x) => !(VARIANTS as readonly string[]).includes(x))
if (unknown.length > 0)
  throw new Error(`--only ${args.only}: no variant ${unknown.join(', ')} (there are ${VARIANTS.join(', ')})`)

interface Result {
  variant: Variant
  seconds: number
  cpuSeconds: number
  maxRssMiB: number
  serverCpuSeconds?: number
}

function rawClient(): S3Client {
  return new S3Client({ forcePathStyle: true, region: process.env.AWS_REGION ?? 'us-east-1' })
}

function partBody(): Buffer {
  const b = Buffer.allocUnsafe(partBytes)
  for (let i = 0; i < partBytes; i += 4) b.writeUInt32LE((i * 2654435761) >>> 0, i)
  return b
}

/** Runs `fn(partNumber)` for every part, `inflight` at a time. */
async function eachPart(fn: (n: number) => Promise<void>): Promise<void> {
  let next = 1
  const worker = async () => {
    while (next <= parts) await fn(next++)
  }
  await Promise.all(Array.from({ length: Math.min(inflight, parts) }, worker))
}

function sizeOf(n: number): number {
  return Math.min(partBytes, totalBytes - (n - 1) * partBytes)
}

async function runVariant(variant: Variant, key: string, body: Buffer): Promise<void> {
  const view = (n: number) => body.subarray(0, sizeOf(n))
  if (variant === 'sdk-defaults') {
    const client = rawClient()
    const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }))
    const etags: string[] = []
    await eachPart(async (n) => {
      const out = await client.send(
        new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: n, Body: view(n) }),
      )
      etags[n - 1] = out.ETag as string
    })
    const Parts = etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 }))
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId, MultipartUpload: { Parts } }),
    )
    client.destroy()
  } else if (variant === 's3store' || variant === 's3store-md5' || variant === 's3store-unchecked') {
    const store = new S3Store({
      client: createS3Client(),
      bucket,
      prefix: '',
      ...(variant === 's3store-md5' && { unsignedPayload: true, contentMd5: true }),
      ...(variant === 's3store-unchecked' && { unsignedPayload: true, contentMd5: false }),
    })
    const uploadId = await store.createMultipart(key)
    const done: { partNumber: number; etag: string }[] = []
    await eachPart(async (n) => {
      done.push({ partNumber: n, etag: (await store.uploadPart(key, uploadId, n, view(n))).etag })
    })
    await store.completeMultipart(key, uploadId, done)
    store.client.destroy()
  } else {
    const client = variant === 'lib-storage' ? rawClient() : createS3Client()
    // A stream as a file or socket gives it: 64 KiB chunks (views: the source copies nothing).
    const source = Readable.from(
      (function* () {
        for (let n = 1; n <= parts; n++) {
          const part = view(n)
          for (let o = 0; o < part.length; o += CHUNK) yield part.subarray(o, o + CHUNK)
        }
      })(),
    )
    await new Upload({
      client,
      params: { Bucket: bucket, Key: key, Body: source },
      partSize: partBytes,
      queueSize: inflight,
    }).done()
    client.destroy()
  }
}

/** utime + stime of the radosgw and OSD processes that rgw.sh started, if we can see them. */
function serverCpuSeconds(): number | undefined {
  const run = `${process.env.RGW_BASE ?? '/tmp/stream-segment-rgw'}/run`
  let seconds = 0
  try {
    for (const name of ['rgw', 'osd']) {
      const pid = readFileSync(`${run}/${name}.pid`, 'utf8').trim()
      seconds += procCpuSeconds(`/proc/${pid}/stat`)
    }
  } catch {
    return undefined
  }
  return seconds
}

async function child(variant: Variant): Promise<void> {
  const key = `bench/${variant}-${process.pid}`
  const body = partBody()
  const server0 = serverCpuSeconds()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await runVariant(variant, key, body)
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  const server1 = serverCpuSeconds()
  const result: Result = {
    variant,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    maxRssMiB: process.resourceUsage().maxRSS / 1024,
    serverCpuSeconds: server0 !== undefined && server1 !== undefined ? server1 - server0 : undefined,
  }
  await createS3Client().send(new DeleteObjectCommand({ Bucket: bucket, Key: key }))
  process.stdout.write(`${JSON.stringify(result)}\n`)
}

async function main(): Promise<void> {
  requireS3Server()
  if (args.child) return child(args.child as Variant)
  await ensureBucket(createS3Client(), bucket)
  const variants = VARIANTS.filter((v) => only.includes(v))
  const cpus = os.cpus()
  console.log(
    `upload ${totalBytes / MiB} MiB in ${parts} parts of ${partBytes / MiB} MiB, ${inflight} in flight, ` +
      `${args.rounds} rounds (median), to ${process.env.AWS_ENDPOINT_URL_S3}`,
  )
  console.log(
    `machine: ${cpus[0]?.model} × ${cpus.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  )
  const results = new Map<Variant, Result[]>(variants.map((v) => [v, []]))
  const self = fileURLToPath(import.meta.url)
  for (let r = 0; r < Number(args.rounds); r++) {
    for (const v of variants) {
      const out = spawnSync(process.execPath, [self, ...process.argv.slice(2), '--child', v], {
        encoding: 'utf8',
      })
      if (out.status !== 0) throw new Error(`${v} failed:\n${out.stderr}`)
      results.get(v)?.push(JSON.parse(out.stdout.trim().split('\n').pop() as string))
    }
  }
  const gib = totalBytes / 2 ** 30
  const rows = [['variant', 'seconds', 'MB/s', 'client CPU-s/GiB', 'peak RSS MiB', 'server CPU-s/GiB']]
  for (const [v, rs] of results) {
    const s = median(rs.map((x) => x.seconds))
    const server = rs.every((x) => x.serverCpuSeconds !== undefined)
      ? (median(rs.map((x) => x.serverCpuSeconds as number)) / gib).toFixed(2)
      : '-'
    rows.push([
      v,
      s.toFixed(2),
      (totalBytes / 1e6 / s).toFixed(0),
      (median(rs.map((x) => x.cpuSeconds)) / gib).toFixed(2),
      median(rs.map((x) => x.maxRssMiB)).toFixed(0),
      server,
    ])
  }
  const widths = (rows[0] as string[]).map((_, i) => Math.max(...rows.map((row) => (row[i] as string).length)))
  for (const row of rows)
    console.log(
      row.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  '),
    )
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
