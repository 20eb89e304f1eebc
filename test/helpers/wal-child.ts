/**
 * A writer with a WAL, run as its own process by the crash test (test/wal/crash.test.ts)
 * and killed there with SIGKILL at a random moment. Usage:
 *   node wal-child.js <store url> <wal dir> <seed> <ops> <flush every> [<publish every>]
 * Applies `walOps(seed, ops)` in order on the container (created when missing), printing
 * `w <i>` once operation i resolved and `f <i>` once the flush after it returned; every
 * `flush every` operations it flushes. Every `publish every` operations (the others) it
 * starts a background publish and goes on writing, printing `p <i>` once it landed.
 */
import { SegmentFile } from '../../lib/segment-file.js'
import { openStore } from '../../lib/store/open.js'
import { walOps } from './wal-ops.js'

const [url, dir, seedArg, opsArg, everyArg, publishArg] = process.argv.slice(2)
if (url === undefined || dir === undefined)
  throw new Error('usage: wal-child <store url> <wal dir> <seed> <ops> <flush every>')
const store = openStore(url)
const wal = { dir, sync: 'always' as const }
const settings = { wal }
let file: SegmentFile
try {
  file = await SegmentFile.open(store, settings)
} catch (err) {
  if ((err as { code?: string }).code !== 'ERR_NOT_FOUND') throw err
  file = await SegmentFile.create(store, settings)
}
const every = Number(everyArg)
const publishEvery = Number(publishArg ?? 0)
for (const [i, op] of walOps(Number(seedArg), Number(opsArg)).entries()) {
  if (op.kind === 'write') await file.write(op.offset, op.data)
  else if (op.kind === 'zeroes') await file.writeZeroes(op.offset, op.length)
  else await file.truncate(op.size)
  process.stdout.write(`w ${i}\n`)
  if ((i + 1) % every === 0) {
    await file.flush()
    process.stdout.write(`f ${i}\n`)
  } else if (publishEvery > 0 && (i + 1) % publishEvery === 0) {
    file.publish().then(
      () => process.stdout.write(`p ${i}\n`),
      (err) => {
        process.stderr.write(`publish after operation ${i} failed: ${err}\n`)
        process.exitCode = 1
      },
    )
  }
}
await file.close()
process.stdout.write('done\n')
