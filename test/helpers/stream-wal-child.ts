/**
 * A write stream with a WAL, run as its own process by test/streams/write-stream-wal.test.ts
 * and killed there with SIGKILL at a random moment. Usage:
 *   node stream-wal-child.js <store url> <wal dir> <bytes> <chunk bytes>
 * Pipes blockStream(bytes, chunk) into the container, printing `ready` before the first
 * chunk, `ended` once the source has given its last one, and `finish` once the stream has
 * published.
 */
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { openStore } from '../../lib/store/open.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { blockStream } from './pattern.js'

const [url, dir, bytesArg, chunkArg] = process.argv.slice(2)
if (url === undefined || dir === undefined)
  throw new Error('usage: stream-wal-child <store url> <wal dir> <bytes> <chunk>')
const ws = createStreamSegmentWriteStream({ store: openStore(url), wal: { dir, sync: 'always' } })
process.stdout.write('ready\n')
async function* source() {
  yield* blockStream(Number(bytesArg), Number(chunkArg))
  process.stdout.write('ended\n')
}
await pipeline(Readable.from(source()), ws)
process.stdout.write('finish\n')
