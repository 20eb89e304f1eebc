// What gc and verify hold while they walk a large checkpoint's block map: for each size in
// BENCH_MIB (MiB, default 256,1024,4096), one checkpoint written sequentially in 1 MiB
// writes into a directory store in a temporary folder (the write stream's profile: 16 MiB
// objects, 4 KiB blocks), then gc (a dry run: nothing to delete, every kept map walked)
// and verifyCheckpoint, each in a fresh process (node --expose-gc, collected before it
// starts). Prints per size and tool: the objects, the map's nodes, seconds, the growth of
// peak RSS over the process's RSS before the call, the peak of heap used + array buffers
// over theirs before it (sampled every 2 ms, garbage not yet collected included), and,
// in a second process collecting fully at each tick (gc: after each level of the map
// walked; verify: per 16 MiB read), the most heap + array buffers held then over before.
// The folder is deleted afterwards.
// Run: npm run build && node dist/esm/test/bench/gc-memory.js
import { execFileSync } from 'node:child_process'
import { promises as fs } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gc } from '../../lib/admin/gc.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { STREAMING_PROFILE } from '../../lib/settings.js'
import { DirectoryStore } from '../../lib/store/directory.js'

const MiB = 1024 * 1024

interface Measured {
  seconds: number
  nodes: number
  rssMiB: number
  heapMiB: number
  heldMiB: number
}

/** Heap used and array buffers, bytes: what the process holds in JS objects and buffers. */
function used(): number {
  const m = process.memoryUsage()
  return m.heapUsed + m.arrayBuffers
}

/** Runs `tool` on `store`, calling `tick` as it goes (gc: after each level walked; verify: per 16 MiB read). */
async function runTool(tool: string, store: DirectoryStore, tick: () => void): Promise<number> {
  if (tool === 'gc') {
    let nodes = 0
    const r = await gc(store, {
      dryRun: true,
      onProgress: (p) => {
        nodes = p.walkedNodes
        if (p.phase === 'mark') tick()
      },
    })
    if (r.stopped !== undefined) throw new Error(`gc stopped: ${r.stopped}`)
    return nodes
  }
  const r = await verifyCheckpoint(store, { onProgress: tick })
  if (r.problems.length > 0) throw new Error(`verify: ${r.problems[0]?.message}`)
  return r.nodes
}

/**
 * In a child (node --expose-gc): runs `tool` on the container at `root`, prints what it
 * measured as JSON. `timed`: the seconds, the peak RSS and the peak of heap + array
 * buffers sampled every 2 ms (garbage not yet collected among them). `held`: collects fully
 * at each tick and takes the most held then, what the tool keeps alive rather than what
 * it let go of (gc ticks after each level of the map, where a level held whole shows).
 * Each in a fresh process, so that neither sees what the other left.
 */
async function measure(tool: string, mode: string, root: string): Promise<void> {
  const store = new DirectoryStore(root)
  const collect = (globalThis as { gc?: () => void }).gc
  if (collect === undefined) throw new Error('run with node --expose-gc')
  collect()
  collect()
  const rss0 = process.memoryUsage().rss
  const used0 = used()
  if (mode === 'held') {
    let held = used0
    await runTool(tool, store, () => {
      // Twice: the array buffers one collection finds dead are freed after it, and right
      // after a level of spans fetched, 20 MiB of them would still count as held.
      collect()
      collect()
      held = Math.max(held, used())
    })
    console.log(JSON.stringify({ heldMiB: (held - used0) / MiB }))
    return
  }
  let peak = used0
  const sampler = setInterval(() => {
    peak = Math.max(peak, used())
  }, 2)
  const t0 = performance.now()
  const nodes = await runTool(tool, store, () => {})
  const seconds = (performance.now() - t0) / 1000
  peak = Math.max(peak, used())
  clearInterval(sampler)
  // maxRSS is the process's peak (KiB): the child is fresh, so it peaks during the call.
  const rssMiB = (process.resourceUsage().maxRSS * 1024 - rss0) / MiB
  console.log(JSON.stringify({ seconds, nodes, rssMiB, heapMiB: (peak - used0) / MiB }))
}

/** Runs this program as a child measuring `tool` (measure); its JSON. */
function child(tool: string, mode: string, root: string): Measured {
  const me = fileURLToPath(import.meta.url)
  const out = execFileSync(process.execPath, ['--expose-gc', me, tool, mode, root], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  })
  return JSON.parse(out.trim().split('\n').at(-1) as string)
}

async function write(root: string, mib: number): Promise<number> {
  const store = new DirectoryStore(root)
  const file = await SegmentFile.create(store, STREAMING_PROFILE)
  const chunk = Buffer.alloc(MiB)
  for (let i = 0; i < mib; i++) {
    // A different first word in every block: no two blocks alike.
    for (let at = 0; at < MiB; at += 4096) chunk.writeUInt32LE(i * 256 + at / 4096, at)
    await file.write(i * MiB, chunk)
  }
  await file.flush()
  await file.close()
  let objects = 0
  for await (const e of store.list('')) if (/^\d+\.\d+$/.test(e.key)) objects++
  return objects
}

async function main(): Promise<void> {
  const sizes = (process.env.BENCH_MIB ?? '256,1024,4096').split(',').map(Number)
  const c = cpus()
  console.log(
    `gc and verify of one checkpoint written sequentially (16 MiB objects, 4 KiB blocks) in a directory store; ` +
      `${c[0]?.model} × ${c.length} cores, node ${process.version}, load ${loadavg()[0]?.toFixed(1)}`,
  )
  console.log(
    '\n| size MiB | objects | nodes | tool | seconds | peak RSS growth MiB | heap + arrayBuffers peak growth MiB | held at a tick MiB |',
  )
  console.log('| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |')
  for (const mib of sizes) {
    const root = await fs.mkdtemp(join(tmpdir(), 'ss-bench-gc-memory-'))
    try {
      const objects = await write(root, mib)
      for (const tool of ['gc', 'verify']) {
        const m = { ...child(tool, 'timed', root), ...child(tool, 'held', root) }
        console.log(
          `| ${mib} | ${objects} | ${m.nodes} | ${tool} | ${m.seconds.toFixed(2)} | ${m.rssMiB.toFixed(0)} | ${m.heapMiB.toFixed(1)} | ${m.heldMiB.toFixed(1)} |`,
        )
      }
    } finally {
      await fs.rm(root, { recursive: true, force: true })
    }
  }
}

const [tool, mode, root] = process.argv.slice(2)
if (tool !== undefined && mode !== undefined && root !== undefined) await measure(tool, mode, root)
else await main()
