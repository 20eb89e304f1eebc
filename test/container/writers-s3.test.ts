/**
 * Four writers in separate processes on one container on radosgw, 25 rounds each: every
 * round opens the container (rolling forward young part 0s too, rollForwardAfterMs 0, so
 * openers race live flushes on purpose, and each inode write is held back a little to
 * widen that window), writes a marker naming the writer and the round,
 * and flushes with conflictPolicy 'fail'. Afterwards the published history is rebuilt from
 * the part 0 headers (each published checkpoint was built on the one published before it)
 * and checked: no writer was told ERR_CONFLICT for a checkpoint that was published, no
 * round's content was published twice, and every published round reads back.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { listCheckpoints } from '../../lib/admin/index.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { SegmentFile } from '../../lib/segment-file.js'
import type { S3Store } from '../../lib/store/s3.js'
import { collected } from '../helpers/child.js'
import { s3TestStore } from '../helpers/s3-env.js'
import { type CallInfo, WrappedStore } from '../helpers/wrapped-store.js'

const WRITERS = 4
const ROUNDS = Number(process.env.WRITER_ROUNDS ?? 25)
const MARK = 64

class SlowInode extends WrappedStore {
  protected override async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    if (call.op === 'put' && call.key === 'inode') await new Promise((r) => setTimeout(r, 50 + Math.random() * 100))
    return run()
  }
}

/** One writer: ROUNDS rounds, one JSON line per round on stdout. */
async function writer(bucket: string, prefix: string, id: number): Promise<void> {
  const { S3Store, createS3Client } = await import('../../lib/store/s3.js')
  // The inode write is held back 50–150 ms: the window in which another writer opening
  // the container finds this writer's part 0 stored and its publication in flight.
  const store = new SlowInode(new S3Store({ client: createS3Client(), bucket, prefix }))
  for (let round = 0; round < ROUNDS; round++) {
    const mark = Buffer.alloc(MARK, ' ')
    mark.write(`writer ${id} round ${round}`)
    let line: Record<string, unknown>
    try {
      const f = await SegmentFile.open(store, { conflictPolicy: 'fail', rollForwardAfterMs: 0 })
      await f.write(0, mark)
      await f.write(4096 * (1 + id), Buffer.alloc(4096, id + 1))
      const t = await f.flush()
      await f.close()
      line = { id, round, cno: t.cno }
    } catch (err) {
      const e = err as { code?: string; message?: string }
      line = { id, round, error: e.code ?? String(err), message: e.message }
    }
    process.stdout.write(`${JSON.stringify(line)}\n`)
  }
}

if (process.argv[2] === '--writer') {
  const [bucket, prefix, id] = process.argv.slice(3)
  await writer(bucket as string, prefix as string, Number(id))
  process.exit(0)
}

function runWriter(store: S3Store, id: number): Promise<Array<Record<string, unknown>>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [fileURLToPath(import.meta.url), '--writer', store.bucket, store.prefix, String(id)],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const output = collected(child)
    child.on('error', reject)
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`writer ${id} exited ${code}`))
      else
        resolve(
          output
            .stdout()
            .trim()
            .split('\n')
            .map((l) => JSON.parse(l)),
        )
    })
  })
}

it(`${WRITERS} writers in separate processes, ${ROUNDS} rounds each: no false conflict, nothing published twice`, async () => {
  const store = await s3TestStore()
  const seed = await SegmentFile.create(store)
  await seed.write(0, Buffer.alloc(MARK, ' '))
  await seed.flush()
  await seed.close()
  const results = (await Promise.all(Array.from({ length: WRITERS }, (_, id) => runWriter(store, id)))).flat()
  assert.equal(results.length, WRITERS * ROUNDS)
  const unexpected = results.filter((r) => r.error !== undefined && r.error !== 'ERR_CONFLICT')
  assert.deepEqual(unexpected, [], 'only conflicts may fail a round')

  // The published history: from the inode back through each part 0's base inode.
  const list = await listCheckpoints(store)
  const chain: number[] = []
  for (let cno = list.published; cno > 0; ) {
    chain.push(cno)
    const { header } = await readObjectHeader(store, cno, 0)
    cno = header.baseInode.cno
  }
  const markOf = async (cno: number) => {
    const f = await SegmentFile.open(store, { cno, readOnly: true })
    const m = Buffer.from(await f.read(0, MARK))
      .toString()
      .trim()
    await f.close()
    return m
  }
  const published = new Map<string, number[]>()
  for (const cno of chain) {
    const m = await markOf(cno)
    published.set(m, [...(published.get(m) ?? []), cno])
  }
  const twice = [...published].filter(([m, cnos]) => m !== '' && cnos.length > 1)
  assert.deepEqual(twice, [], 'a round published twice')
  const falseConflicts = results.filter(
    (r) => r.error === 'ERR_CONFLICT' && published.has(`writer ${r.id} round ${r.round}`),
  )
  assert.deepEqual(falseConflicts, [], 'ERR_CONFLICT for a checkpoint that was published')
  // Every round that succeeded is in the history, under the cno it was told.
  for (const r of results.filter((x) => x.cno !== undefined)) {
    assert.deepEqual(published.get(`writer ${r.id} round ${r.round}`), [r.cno], `writer ${r.id} round ${r.round}`)
  }
  const ok = results.filter((r) => r.cno !== undefined).length
  console.log(
    `# ${WRITERS} writers × ${ROUNDS} rounds: ${ok} published, ${results.length - ok} conflicts, ${chain.length} checkpoints in the history`,
  )
})
