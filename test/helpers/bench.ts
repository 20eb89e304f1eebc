// What the S3 benchmark programs (test/bench/) share: the server check, the bench bucket, a
// client that counts its requests and the body bytes it sends, and medians over rounds.
import { readdirSync, readFileSync } from 'node:fs'
import { CreateBucketCommand, type S3Client } from '@aws-sdk/client-s3'
import { median } from '../../lib/cli/output.js'
import { createS3Client } from '../../lib/store/s3.js'
import { allocSlabMemory } from '../../lib/util/huge-memory.js'

/** Exits 2 with how to start radosgw unless AWS_ENDPOINT_URL_S3 names a server. */
export function requireS3Server(): void {
  if (!process.env.AWS_ENDPOINT_URL_S3) {
    console.error(`needs radosgw: bash test/rgw/rgw.sh start && eval "$(bash test/rgw/rgw.sh env)"`)
    process.exit(2)
  }
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true'
}

/** Makes `bucket` unless it exists. */
export async function ensureBucket(client: S3Client, bucket: string): Promise<void> {
  await client.send(new CreateBucketCommand({ Bucket: bucket })).catch((err) => {
    if (err.name !== 'BucketAlreadyOwnedByYou' && err.name !== 'BucketAlreadyExists') throw err
  })
}

/** A createS3Client client whose `counts` add up every request it makes and the body bytes they send. */
export function countingClient(): { client: S3Client; counts: { requests: number; bytesUp: number } } {
  const counts = { requests: 0, bytesUp: 0 }
  const client = createS3Client()
  client.middlewareStack.add(
    (next) => async (a) => {
      counts.requests++
      const headers = (a.request as { headers?: Record<string, string> }).headers ?? {}
      counts.bytesUp += Number(headers['content-length'] ?? 0)
      return next(a)
    },
    { step: 'finalizeRequest', name: 'benchCountRequests' },
  )
  return { client, counts }
}

/** The median of `xs`: the middle value, or the mean of the two middle ones of an even count (as the CLI's bench). */
export { median }

/**
 * The `p`th percentile of `xs` by nearest rank: the smallest value with at least p % of
 * them at or below it (p99 of 100 values is the 99th, not the largest).
 */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] as number
}

/** "median (min–max)" with `digits` decimals. */
export function medianRange(xs: number[], digits: number): string {
  return `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`
}

/**
 * What fresh memory costs this machine: CPU-s per GiB to fault in and fill pages never
 * touched before (64 MiB of them). Filling them again costs a few hundredths; on some
 * virtual machines the first time costs several CPU-s, which then shows in every row that
 * keeps many MiB in flight (read-ahead, dirty data, part buffers).
 */
export function freshMemoryCost(alloc: (bytes: number) => Buffer = (bytes) => Buffer.allocUnsafeSlow(bytes)): number {
  const bytes = 64 * 1024 * 1024
  const c0 = process.cpuUsage()
  alloc(bytes).fill(1)
  const c = process.cpuUsage(c0)
  return (c.user + c.system) / 1e6 / (bytes / 2 ** 30)
}

/**
 * The same for the dirty tier's slab memory (util/huge-memory.ts), which the kernel may
 * back with huge pages. Close to freshMemoryCost() where the addon is missing, THP is off
 * or no huge page is free.
 */
export function freshSlabMemoryCost(): number {
  return freshMemoryCost(allocSlabMemory)
}

/**
 * User + system CPU seconds of a process or thread, from its /proc `stat` file (Linux;
 * e.g. `/proc/123/stat`, `/proc/self/task/456/stat`); throws when the file cannot be read.
 * With `children`, those of its children that have ended and been waited for instead.
 */
export function procCpuSeconds(statPath: string, children = false): number {
  const stat = readFileSync(statPath, 'utf8')
  // After the command name, in parentheses, the fields from the third on: utime and stime
  // are the 14th and 15th, cutime and cstime the 16th and 17th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const at = children ? 13 : 11
  return (Number(fields[at]) + Number(fields[at + 1])) / 100 // clock ticks: USER_HZ is 100 on Linux
}

/**
 * CPU seconds of this process's children that have ended and been waited for (Linux;
 * undefined elsewhere). Counted in clock ticks (10 ms).
 */
export function childrenCpuSeconds(): number | undefined {
  try {
    return procCpuSeconds('/proc/self/stat', true)
  } catch {
    return undefined
  }
}

/**
 * CPU seconds this process's threads other than the main one have used so far (Linux:
 * /proc/self/task; undefined elsewhere): V8's compiler and garbage-collector helpers and
 * libuv's pool (file I/O, crypto). Counted in clock ticks (10 ms).
 */
export function otherThreadsCpu(): number | undefined {
  let tasks: string[]
  try {
    tasks = readdirSync('/proc/self/task')
  } catch {
    return undefined
  }
  let seconds = 0
  for (const tid of tasks) {
    if (Number(tid) === process.pid) continue
    try {
      seconds += procCpuSeconds(`/proc/self/task/${tid}/stat`)
    } catch {
      // the thread ended meanwhile
    }
  }
  return seconds
}
