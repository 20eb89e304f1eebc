/**
 * The processes of test/container/multiproc-dir.test.ts, one mode each, on a container in
 * a directory store (its root the second argument), writing the self-checking file of
 * multiproc-file.ts.
 *
 *   writer <root> <id> <rounds> <retry|fail>   one JSON line a round: { id, round, cno } or { id, round, error }
 *   crash <root> <seed> [cas|part0|replaced]  one round, every store call said as it starts (`> op key`)
 *                                             and ends (`< op key`); with a stop point, it says `stop`
 *                                             there (`replaced`: the inode's) and waits to be killed
 *   gc <root> <graceMs> <runs>                 `gc` with keep 1 that many times, one JSON line each
 *   reader <root> <passes> <pauseMs>          opens the published checkpoint, says { cno }, reads it
 *                                             whole `passes` times, pausing between two, then
 *                                             { ok } or { error }
 */
import { gc } from '../../lib/admin/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { hookedDirectoryStore } from '../../lib/store/directory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { prng } from './containers.js'
import { BLOCK, BLOCKS, blockBytes, checkContent, manifestBytes, parseManifest, SETTINGS } from './multiproc-file.js'
import { type CallInfo, WrappedStore } from './wrapped-store.js'

/** One round: opens the container (creating it when missing), writes `tag` over some blocks, flushes. */
async function round(store: ObjectStore, tag: string, seed: number, policy: 'retry' | 'fail'): Promise<number> {
  const settings = { ...SETTINGS, conflictPolicy: policy }
  let f: SegmentFile
  try {
    f = await SegmentFile.open(store, settings)
  } catch (err) {
    if ((err as { code?: string }).code !== 'ERR_NOT_FOUND') throw err
    f = await SegmentFile.create(store, settings)
  }
  try {
    const tags = parseManifest(await f.read(0, BLOCK))
    const next = prng(seed)
    for (let i = 1; i < BLOCKS; i++) {
      if (tags[i] !== '' && next() < 0.5) continue
      await f.write(i * BLOCK, blockBytes(tag, i))
      tags[i] = tag
    }
    tags[0] = tag
    await f.write(0, manifestBytes(tags))
    return (await f.flush()).cno
  } finally {
    await f.close()
  }
}

/** Says every call as it starts and as it ends, so that the parent can kill at a chosen one. */
class SayingStore extends WrappedStore {
  protected override async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    process.stdout.write(`> ${call.op} ${call.key}\n`)
    const r = await run()
    process.stdout.write(`< ${call.op} ${call.key}\n`)
    return r
  }
}

/** Waits for the parent's SIGKILL. */
function stopHere(): Promise<never> {
  process.stdout.write('stop\n')
  setInterval(() => {}, 60_000)
  return new Promise(() => {})
}

const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`)
const [mode, root, ...rest] = process.argv.slice(2)
if (root === undefined) throw new Error('usage: multiproc-child <mode> <root> ...')

if (mode === 'writer') {
  const [id, rounds, policy] = rest
  const store = hookedDirectoryStore(root, {})
  for (let r = 0; r < Number(rounds); r++) {
    try {
      say({ id: Number(id), round: r, cno: await round(store, `w${id}r${r}`, Number(id) * 1000 + r, policy as 'fail') })
    } catch (err) {
      const e = err as { code?: string; message?: string }
      say({ id: Number(id), round: r, error: e.code ?? String(err), message: e.message })
    }
  }
} else if (mode === 'crash') {
  const [seed, stop] = rest
  const inner = hookedDirectoryStore(root, {
    casChecked: stop === 'cas' ? stopHere : undefined,
    replaced: (path) => (stop === 'replaced' && path.endsWith('/inode') ? stopHere() : undefined),
  })
  const store =
    stop === 'part0'
      ? new (class extends SayingStore {
          protected override async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
            const r = await super.around(call, run)
            if ((call.op === 'put' || call.op === 'completeMultipart') && call.key.endsWith('.0')) await stopHere()
            return r
          }
        })(inner)
      : new SayingStore(inner)
  await round(store, `c${seed}`, Number(seed), 'retry')
  say({ done: true })
} else if (mode === 'gc') {
  const [graceMs, runs] = rest
  for (let r = 0; r < Number(runs); r++) {
    try {
      const g = await gc(hookedDirectoryStore(root, {}), { keep: 1, graceMs: Number(graceMs) })
      say({ run: r, deleted: g.deletedObjects, stopped: g.stopped })
    } catch (err) {
      const e = err as { code?: string; message?: string }
      say({ run: r, error: e.code ?? String(err), message: e.message })
    }
  }
} else if (mode === 'reader') {
  const f = await SegmentFile.open(hookedDirectoryStore(root, {}), { readOnly: true })
  say({ cno: f.cno })
  try {
    for (let pass = 0; pass < Number(rest[0]); pass++) {
      await new Promise((r) => setTimeout(r, Number(rest[1])))
      const wrong = checkContent(await f.read(0, BLOCK * BLOCKS))
      if (wrong !== undefined) throw new Error(`checkpoint ${f.cno}, pass ${pass}: ${wrong}`)
    }
    say({ ok: f.cno })
  } catch (err) {
    const e = err as { code?: string; message?: string }
    say({ error: e.code ?? String(err), message: e.message })
  } finally {
    await f.close()
  }
} else {
  throw new Error(`multiproc-child: unknown mode ${mode}`)
}
