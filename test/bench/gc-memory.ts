// What gc, verify and ls hold while they walk a large checkpoint's block map: for each size
// in BENCH_MIB (MiB, default 256,1024,4096), one checkpoint written sequentially in 1 MiB
// writes into a directory store in a temporary folder (the write stream's profile: 16 MiB
// objects, 4 KiB blocks), then gc (a dry run: nothing to delete, every kept map walked),
// verifyCheckpoint and listCheckpoints (ls: its uniqueBytes walk the map whole), each in
// a fresh process (node --expose-gc, collected before it starts). Prints per size and
// tool: the objects, the map's nodes (ls does not say: gc's, of the same map walked
// whole), seconds, the growth of peak RSS over the process's RSS before the call, the
// peak of heap used + array buffers over theirs before it (sampled every 2 ms, garbage
// not yet collected included), and, in a second process collecting fully at each tick
// (gc: after each level of the map walked; verify: per 16 MiB read; ls: as each GET
// starts), the most heap + array buffers held then over before. The folder is deleted
// afterwards.
// Run: npm run build && node dist/esm/test/bench/gc-memory.js
import { execFileSync } from 'node:child_process'
import { promises as fs } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gc } from '../../lib/admin/gc.js'
import { listCheckpoints } from '../../lib/admin/list.js'
import { verifyCheckpoint } from '../../lib/admin/verify.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { STREAMING_PROFILE } from '../../lib/settings.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

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

/** Calls `tick` as each GET starts: listCheckpoints tells no progress. */
class TickingStore extends WrappedStore {
  constructor(
    inner: ObjectStore,
    private readonly tick: () => void,
  ) {
    super(inner)
  }
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'get') this.tick()
    return await run()
  }
}

/**
 * Runs `tool` on `store`, calling `tick` as it goes (gc: after each level walked; verify:
 * per 16 MiB read; ls: as each GET starts). Returns the nodes walked (ls: 0, not told).
 */
async function runTool(tool: string, store: DirectoryStore, tick: () => void): Promise<number> {
  if (tool === 'ls') {
    const r = await listCheckpoints(new TickingStore(store, tick))
    // One checkpoint: every object is its alone.
    if (r.checkpoints.length !== 1 || r.checkpoints[0]?.uniqueBytes !== r.storedBytes) {
      throw new Error(`ls: ${JSON.stringify(r.checkpoints)}, ${r.storedBytes} bytes stored`)
    }
    return 0
  }
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
    `gc, verify and ls of one checkpoint written sequentially (16 MiB objects, 4 KiB blocks) in a directory store; ` +
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
      let mapNodes = 0
      for (const tool of ['gc', 'verify', 'ls']) {
        const m = { ...child(tool, 'timed', root), ...child(tool, 'held', root) }
        if (tool === 'gc') mapNodes = m.nodes
        else if (tool === 'ls') m.nodes = mapNodes
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
