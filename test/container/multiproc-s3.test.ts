/**
 * Several processes on one container on S3 (the test radosgw), each a real process
 * (test/helpers/multiproc-child.ts, as multiproc-dir.test.ts runs them on a directory
 * store): two writers publishing at once, through the API and through `put` with an
 * s3:// location; a writer killed with SIGKILL after its part 0, with its inode write in
 * flight, once that write landed, and at a random store call; a `put` killed with a
 * multipart upload open; then the next writer, verify and gc; a reader of the published
 * checkpoint while a writer publishes newer ones and gc runs, and one whose checkpoint gc
 * drops under it. The compare-and-swap on the inode is S3's conditional write (If-Match,
 * If-None-Match).
 */
import assert from 'node:assert/strict'
import { promises as fs } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { after, describe, it } from 'node:test'
import { gc, listCheckpoints } from '../../lib/admin/index.js'
import type { S3Store } from '../../lib/store/s3.js'
import { runNode } from '../helpers/child.js'
import {
  CHILD,
  child,
  type Line,
  nextWriterAfterKill,
  noErrors,
  put,
  readChecked,
  seed,
  twoPuts,
  twoWriters,
  verifyClean,
} from '../helpers/multiproc.js'
import { BLOCKS, blockBytes, manifestBytes } from '../helpers/multiproc-file.js'
import { s3TestBucket, s3TestStore, uniquePrefix } from '../helpers/s3-env.js'

const MiB = 1024 * 1024

const dirs: string[] = []
after(() => Promise.all(dirs.map((d) => fs.rm(d, { recursive: true, force: true }))))

/** A fresh container on the test bucket: the parent's store, and the URL the children get. */
async function newContainer(): Promise<{ url: string; store: S3Store }> {
  const prefix = uniquePrefix('multiproc')
  return { url: `s3://${await s3TestBucket()}/${prefix}`, store: await s3TestStore(prefix) }
}

/** A container holding one checkpoint of the children's file. */
async function seeded(): Promise<{ url: string; store: S3Store }> {
  const c = await newContainer()
  await seed(c.url)
  return c
}

/** The multipart uploads open under the store's prefix. */
async function openUploads(store: S3Store): Promise<string[]> {
  const keys: string[] = []
  for await (const u of store.listMultipart('')) keys.push(u.key)
  return keys
}

describe('S3: two writer processes on one container', () => {
  for (const [policy, rounds] of [
    ['fail', 3],
    ['retry', 2],
  ] as const) {
    it(`conflictPolicy ${policy}, ${rounds} rounds each: each checkpoint number is one round's, whole; only ERR_CONFLICT fails`, async () => {
      const { store, url } = await seeded()
      console.log(`# ${await twoWriters(url, store, policy, rounds)}`)
    })
  }

  it('two `put` processes at once on an s3:// location, with --conflict-policy fail and by default', async () => {
    const { store, url } = await seeded()
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-multiproc-s3-'))
    dirs.push(dir)
    await twoPuts(url, store, dir, 1)
  })
})

describe('S3: a writer process killed with SIGKILL', () => {
  /**
   * After the kill: the published checkpoint is the one before or the new one, whole, and
   * verify is clean; the next writer publishes on top; gc (grace 0: no writer runs) leaves
   * only what the kept checkpoint reaches: no unpublished checkpoint, no abandoned attempt,
   * no open upload, and a second run finds nothing to delete.
   */
  async function afterTheKill(url: string, store: S3Store, killed: string[], newRound: string) {
    const next = await nextWriterAfterKill(url, store, killed, newRound)
    const g = await gc(store, { keep: 1, graceMs: 0 })
    assert.equal(g.stopped, undefined)
    const list = await listCheckpoints(store)
    assert.equal(list.published, next)
    assert.deepEqual(list.abandoned, [])
    assert.deepEqual(
      list.checkpoints.filter((c) => c.state === 'unpublished'),
      [],
    )
    assert.deepEqual(await openUploads(store), [])
    await verifyClean(store)
    const again = await gc(store, { keep: 1, graceMs: 0, dryRun: true })
    assert.deepEqual([again.deletedObjects, again.abortedUploads], [0, 0], 'left over by the killed writer')
  }

  // (Killed with its part 0 stored, before the inode write, is the directory store's test:
  // no S3 request is in flight then.)
  const stops = {
    inode: 'its inode write sent, the answer not awaited',
    landed: 'its inode written, before it was told',
  }
  for (const [stop, what] of Object.entries(stops)) {
    it(`killed with ${what}`, async () => {
      const { url, store } = await seeded()
      const { lines, killed } = await runNode(CHILD, ['crash', url, '5', stop], {
        onLine: (line, _, kill) => {
          if (line === 'stop') kill()
        },
      })
      assert.ok(killed)
      const published = (await listCheckpoints(store)).published
      if (stop === 'landed') assert.equal(published, 2)
      await afterTheKill(url, store, lines, 'c5')
    })
  }

  it('killed at a random store call', async () => {
    // A whole run, to count its lines.
    const { url: u0 } = await seeded()
    const { lines: all } = await runNode(CHILD, ['crash', u0, '5'])
    assert.equal(all.at(-1), '{"done":true}')
    const { url, store } = await seeded()
    const at = 1 + Math.floor(Math.random() * (all.length - 2))
    const { lines } = await runNode(CHILD, ['crash', url, '5'], {
      onLine: (_, seen, kill) => {
        if (seen.length === at) kill(Math.floor(Math.random() * 3))
      },
    })
    await afterTheKill(url, store, lines, 'c5')
  })

  it('a `put -` killed with a multipart upload open: the next writer publishes, verify is clean, gc aborts the upload', async () => {
    const { url, store } = await seeded()
    // 12 MiB on stdin, which stays open: in 5 MiB pieces, an upload holds a part or two,
    // and the put cannot end before it is killed.
    const stdin = new PassThrough()
    stdin.write(Buffer.alloc(12 * MiB, 'stdin;'))
    const kill = new AbortController()
    const killing = put('-', url, ['--segment-mpu-chunk-size', '5MiB'], { stdin, kill: kill.signal })
    while ((await partsStored(store)) === 0) await new Promise((r) => setTimeout(r, 50))
    kill.abort()
    assert.equal((await killing).code, -1)
    assert.equal((await listCheckpoints(store)).published, 1)
    assert.ok((await openUploads(store)).length > 0, 'an upload is left open')
    await afterTheKill(url, store, [], 'w9r0')
  })
})

/** The parts stored in the open uploads under the store's prefix. */
async function partsStored(store: S3Store): Promise<number> {
  let n = 0
  for await (const u of store.listMultipart('')) n += (await store.listParts(u.key, u.uploadId)).length
  return n
}

describe('S3: a reader process beside a writer process and gc in a third', () => {
  it('gc with its default grace: the reader reads the checkpoint it opened, byte for byte, to the end', async () => {
    const { url, store } = await seeded()
    const [reader, writer, cleaner] = await Promise.all([
      child('reader', url, '20', '50'),
      child('writer', url, '3', '4', 'retry'),
      child('gc', url, String(60 * 60_000), '8'),
    ])
    assert.deepEqual(reader.at(-1), { ok: reader[0]?.cno }, JSON.stringify(reader))
    noErrors({ writer, cleaner })
    await verifyClean(store)
  })

  it('gc with a grace of 0, run once a `put` replaced every block, drops the checkpoint the reader has open: the reader gets ERR_NOT_FOUND naming an object gone', async () => {
    // No writer runs while gc does: a grace of 0 is then safe for writers (api.md, gc),
    // and nothing keeps the superseded checkpoint a reader has open.
    const { url, store } = await seeded()
    const dir = await fs.mkdtemp(join(tmpdir(), 'ss-multiproc-s3-'))
    dirs.push(dir)
    const go = join(dir, 'go')
    let opened: (cno: number) => void = () => {}
    const open = new Promise<number>((resolve) => {
      opened = resolve
    })
    const reading = runNode(CHILD, ['reader', url, '1', '0', go], {
      onLine: (line) => {
        if (line.startsWith('{"cno"')) opened((JSON.parse(line) as { cno: number }).cno)
      },
    })
    try {
      assert.equal(await open, 1)
      // The children's file, every block written by one round 'p': checkpoint 2 reaches
      // nothing of checkpoint 1.
      const tags = Array.from({ length: BLOCKS }, () => 'p')
      const file = join(dir, 'p')
      await fs.writeFile(
        file,
        Buffer.concat([manifestBytes(tags), ...tags.slice(1).map((t, i) => blockBytes(t, i + 1))]),
      )
      const replaced = await put(file, url, [])
      assert.deepEqual([replaced.code, replaced.cno], [0, 2], replaced.stderr)
      const [cleaned] = await child('gc', url, '0', '1')
      assert.ok((cleaned?.deleted as number) > 0, JSON.stringify(cleaned))
    } finally {
      await fs.writeFile(go, '')
    }
    const end = JSON.parse((await reading).lines.at(-1) as string) as Line
    assert.equal(end.error, 'ERR_NOT_FOUND', JSON.stringify(end))
    assert.match(String(end.message), /0000000001\.\d+/, 'names an object of checkpoint 1')
    console.log(`# reader: ${end.message}`)
    assert.equal((await readChecked(store)).round, 'p')
    await verifyClean(store)
  })
})
