/**
 * The processes of test/container/multiproc-dir.test.ts and multiproc-s3.test.ts, one mode
 * each, on a container (the second argument: a directory store's root, or an s3:// URL on
 * the test server the environment names), writing the self-checking file of
 * multiproc-file.ts.
 *
 *   writer <place> <id> <rounds> <retry|fail>  one JSON line a round: { id, round, cno } or { id, round, error }
 *   crash <place> <seed> [stop]                one round, every store call said as it starts (`> op key`)
 *                                              and ends (`< op key`); with a stop point, it says `stop`
 *                                              there and waits to be killed: `part0` (part 0 stored),
 *                                              `inode` (the inode write sent, its answer not awaited),
 *                                              `landed` (the inode written, the writer not told);
 *                                              directory stores only: `cas` (the inode's rename, its
 *                                              lock held), `replaced` (the old inode's sidecar left)
 *   gc <place> <graceMs> <runs>                `gc` with keep 1 that many times, one JSON line each
 *   reader <place> <passes> <pauseMs> [go]     opens the published checkpoint, says { cno }, (given
 *                                              a path `go`, waits for a file there,) reads it whole
 *                                              `passes` times, pausing before each, then { ok } or
 *                                              { error }
 */
import { existsSync } from 'node:fs'
import { gc } from '../../lib/admin/index.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { type DirectoryStoreHooks, hookedDirectoryStore } from '../../lib/store/directory.js'
import { openStore } from '../../lib/store/open.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { prng } from './containers.js'
import { BLOCK, BLOCKS, blockBytes, checkContent, manifestBytes, parseManifest, settingsFor } from './multiproc-file.js'
import { type CallInfo, WrappedStore } from './wrapped-store.js'

/**
 * One round: opens the container (creating it when missing), writes `tag` over some blocks,
 * flushes. `base`: the store `store` wraps, whose limits the settings follow.
 */
async function round(
  store: ObjectStore,
  tag: string,
  seed: number,
  policy: 'retry' | 'fail',
  base = store,
): Promise<number> {
  const settings = { ...settingsFor(base), conflictPolicy: policy }
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

/** The store at `place`: an s3:// URL, or a directory store's root (with `hooks`). */
function storeAt(place: string, hooks: DirectoryStoreHooks = {}): ObjectStore {
  return /^s3:\/\//i.test(place) ? openStore(place) : hookedDirectoryStore(place, hooks)
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
  const store = storeAt(root)
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
  const inner = storeAt(root, {
    casChecked: stop === 'cas' ? stopHere : undefined,
    replaced: (path) => (stop === 'replaced' && path.endsWith('/inode') ? stopHere() : undefined),
  })
  const store =
    stop === 'part0' || stop === 'inode' || stop === 'landed'
      ? new (class extends SayingStore {
          protected override async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
            if (stop === 'inode' && call.op === 'put' && call.key === 'inode') {
              run().catch(() => {}) // sent: whether it lands before the kill is left open
              return stopHere()
            }
            const r = await super.around(call, run)
            if (stop === 'part0' && (call.op === 'put' || call.op === 'completeMultipart') && call.key.endsWith('.0'))
              await stopHere()
            if (stop === 'landed' && call.op === 'put' && call.key === 'inode') await stopHere()
            return r
          }
        })(inner)
      : new SayingStore(inner)
  await round(store, `c${seed}`, Number(seed), 'retry', inner)
  say({ done: true })
} else if (mode === 'gc') {
  const [graceMs, runs] = rest
  for (let r = 0; r < Number(runs); r++) {
    try {
      const g = await gc(storeAt(root), { keep: 1, graceMs: Number(graceMs) })
      say({ run: r, deleted: g.deletedObjects, stopped: g.stopped })
    } catch (err) {
      const e = err as { code?: string; message?: string }
      say({ run: r, error: e.code ?? String(err), message: e.message })
    }
  }
} else if (mode === 'reader') {
  const [passes, pauseMs, go] = rest
  const f = await SegmentFile.open(storeAt(root), { readOnly: true })
  say({ cno: f.cno })
  try {
    // Told what to wait for: reads only once the parent has done its part.
    while (go !== undefined && !existsSync(go)) await new Promise((r) => setTimeout(r, 20))
    for (let pass = 0; pass < Number(passes); pass++) {
      await new Promise((r) => setTimeout(r, Number(pauseMs)))
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
