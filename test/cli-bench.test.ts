/**
 * `stream-segment bench` and the `benchStore` under it: the four passes run and report, the
 * bytes read back are the bytes written, a location that holds anything is refused with
 * nothing touched, and nothing written is left behind: after a run, after a store failure
 * in any pass, after an abort; a cleanup that fails is reported; on a terminal, its progress
 * is one line redrawn in place. (On radosgw: test/cli-s3.test.ts.)
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, statfsSync } from 'node:fs'
import { tmpdir, totalmem } from 'node:os'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { benchDiskShortfall, benchMemoryNeeded, benchMemoryShortfall } from '../lib/cli/bench.js'
import { main } from '../lib/cli.js'
import { StreamSegmentError } from '../lib/errors.js'
import { SegmentFile } from '../lib/segment-file.js'
import { DirectoryStore } from '../lib/store/directory.js'
import { MemoryStore } from '../lib/store/memory.js'
import { createS3Client, S3Store } from '../lib/store/s3.js'
import type { ObjectStore } from '../lib/store/types.js'
import { benchStore } from '../lib/streams/bench.js'
import { bin, fakeOutput, quietEnv } from './helpers/cli.js'
import { FailingStore } from './helpers/failing-store.js'
import type { StoreOp } from './helpers/wrapped-store.js'

const MiB = 1024 * 1024
const dir = mkdtempSync(join(tmpdir(), 'ss-cli-bench-'))
after(() => rmSync(dir, { recursive: true, force: true }))

function run(args: string[]) {
  const env = quietEnv()
  const r = spawnSync(process.execPath, [bin, ...args], { env, encoding: 'utf8', timeout: 120_000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

async function keys(store: ObjectStore): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) out.push(e.key)
  return out
}

describe('stream-segment bench', () => {
  it('on a directory store: four passes per round, JSON figures, nothing left', async () => {
    const where = join(dir, 'json')
    const r = run(['bench', where, '--size', '20M', '--rounds', '2', '--json'])
    assert.equal(r.status, 0, r.stderr)
    const got = JSON.parse(r.stdout)
    assert.equal(got.bytes, 20 * MiB)
    assert.equal(got.rounds.length, 2)
    for (const round of got.rounds) {
      for (const pass of ['write', 'read', 'put', 'get']) {
        assert.ok(round[pass].seconds > 0, `${pass} seconds`)
        assert.ok(round[pass].cpuSeconds >= 0, `${pass} CPU`)
      }
      // The write stream's 16 MiB objects, and part 0; the baseline's two plain objects.
      assert.ok(round.write.objects >= 2, `${round.write.objects} objects written`)
      assert.equal(round.put.objects, 2)
      assert.ok(round.read.firstByteMs >= 0)
    }
    assert.ok(got.writeToPut > 0 && got.readToGet > 0)
    assert.equal(got.machine.node, process.version)
    assert.deepEqual(await keys(new DirectoryStore(where)), [], 'nothing left in the store')
  })

  it('prints a table of MiB/s and CPU-s/GiB', () => {
    const r = run(['bench', join(dir, 'table'), '--size', '3M', '--rounds', '1'])
    assert.equal(r.status, 0, r.stderr)
    const lines = r.stdout.trimEnd().split('\n')
    assert.match(
      lines[0] as string,
      /^bench of .*table: 3\.0 MiB per pass, 1 round, median \(min-max\); node v\d+\.\d+\.\d+, .+ × \d+ cores$/,
    )
    assert.match(lines[1] as string, /^pass +MiB\/s +CPU-s\/GiB$/)
    for (const [i, name] of ['write stream', 'read stream', 'store put', 'store get'].entries()) {
      assert.match(
        lines[2 + i] as string,
        new RegExp(`^${name} \\(.*\\) +\\d+ \\(\\d+-\\d+\\) +[\\d.]+ \\([\\d.]+-[\\d.]+\\)$`),
      )
    }
    assert.match(lines[6] as string, /^write stream [\d.]+x the store's put MiB\/s, read stream [\d.]+x its get; /)
  })

  it('on a TTY, draws one progress line on stderr, redrawn in place, naming the round and pass, and clears it', async () => {
    const out = fakeOutput(false)
    const err = fakeOutput(true)
    assert.equal(await main(['bench', 'mem://tty', '--size', '1M', '--rounds', '2'], out, err), 0, err.writes.join(''))
    assert.match(out.writes.join(''), /^bench of mem:\/\/tty: 1\.0 MiB per pass, 2 rounds/)
    assert.equal(err.writes.at(-1), '\r\x1b[K', 'cleared at the end')
    const lines = err.writes.filter((w) => w !== '\r\x1b[K')
    assert.ok(lines.length >= 2, 'drawn at the start and as it ends')
    for (const l of lines) {
      // Each drawing overwrites the last: it starts by erasing the line and ends no line.
      assert.ok(l.startsWith('\r\x1b[K') && !l.includes('\n'), JSON.stringify(l))
      assert.match(l.slice(4), /^bench: round [12]\/2: (write stream|read stream|store put|store get)$/)
    }
    assert.equal(lines[0], '\r\x1b[Kbench: round 1/2: write stream')
    assert.equal(lines.at(-1), '\r\x1b[Kbench: round 2/2: store get')
    // Not a TTY: nothing on stderr.
    const quiet = fakeOutput(false)
    assert.equal(await main(['bench', 'mem://quiet', '--size', '1M', '--rounds', '1'], fakeOutput(false), quiet), 0)
    assert.deepEqual(quiet.writes, [])
  })

  it('refuses a location that holds anything, and leaves it as it was', async () => {
    const where = join(dir, 'taken')
    const store = new DirectoryStore(where)
    const f = await SegmentFile.create(store)
    await f.write(0, Buffer.alloc(5000, 9))
    await f.flush()
    await f.close()
    const before = await keys(store)
    const r = run(['bench', where, '--size', '1M', '--rounds', '1'])
    assert.equal(r.status, 6, r.stderr)
    assert.match(
      r.stderr,
      /^stream-segment: ERR_CONFLICT: bench: .* holds objects already \(.*\binode\b.*\); give a location that holds nothing/,
    )
    assert.deepEqual(await keys(store), before)
    const g = await SegmentFile.open(store, { readOnly: true })
    assert.deepEqual(Buffer.from(await g.read(0, 5000)), Buffer.alloc(5000, 9))
    await g.close()
  })

  for (const [args, message] of [
    [['--size', '0'], /option --size: 0 bytes; at least 1M \(1048576\)/],
    [['--size', '1048575'], /option --size: 1048575 bytes; at least 1M/],
    [['--size', 'lots'], /option --size: "lots" is not a size/],
    [['--rounds', '0'], /option --rounds: "0" is not a number from 1 to 100/],
    [['--rounds', '2.5'], /option --rounds: "2.5" is not a number from 1 to 100/],
    [[], /usage: stream-segment bench <url>/],
  ] as const) {
    it(`bad usage ${args.join(' ') || '(no url)'}: exit 2, one line`, () => {
      const r = run(args.length === 0 ? ['bench'] : ['bench', join(dir, 'never'), ...args])
      assert.equal(r.status, 2, r.stderr)
      assert.match(r.stderr, message)
      assert.equal(r.stderr.split('\n').length, 2, r.stderr)
      assert.equal(r.stdout, '')
    })
  }
})

describe('bench --size far past what a bench can move', () => {
  it('is refused at once (exit 2, one line), not a process that grows until V8 kills it', () => {
    for (const size of ['9007199254740991', '1000000G']) {
      // A small heap and SIGKILL at the time limit: a process that builds the key list dies
      // (or is killed) in seconds, deaf to the SIGTERM a plain timeout sends.
      const r = spawnSync(process.execPath, [bin, 'bench', join(dir, 'huge'), '--size', size], {
        env: quietEnv({ NODE_OPTIONS: '--max-old-space-size=256' }),
        encoding: 'utf8',
        timeout: 60_000,
        killSignal: 'SIGKILL',
      })
      assert.equal(r.status, 2, `--size ${size}: ${r.signal ?? ''} ${r.stderr.slice(0, 300)}`)
      assert.match(
        r.stderr,
        /^stream-segment: ERR_INVALID_ARGUMENT: option --size: \d+ bytes; at most 1024G \(1099511627776\)[^\n]*\n$/,
      )
      assert.equal(r.stdout, '')
    }
  })
})

describe('benchStore leaves nothing behind', () => {
  it("an S3 prefix with room for a container's keys but not for the plain objects' is refused before any request", async () => {
    // 1000 bytes leave a container's 16 room (1007 do), not stream-segment-bench-raw-0's 26:
    // those puts, and then the clean-up's delete of them, would be refused part-way.
    const credentials = { accessKeyId: 'test', secretAccessKey: 'test' }
    const client = createS3Client({ endpoint: 'http://127.0.0.1:1', region: 'us-east-1', credentials })
    try {
      for (const [prefix, bytes] of [
        ['p'.repeat(1000), 1027],
        ['p'.repeat(998), 1025],
      ] as const) {
        const store = new S3Store({ client, bucket: 'b', prefix, maxRetries: 0 })
        await assert.rejects(benchStore(store, { bytes: 1, rounds: 1 }), (err) => {
          assert.ok(StreamSegmentError.is(err, 'ERR_INVALID_ARGUMENT'), String(err))
          assert.match(
            err.message,
            new RegExp(
              `^bench: s3://b/p{${prefix.length}}: the keys of its plain objects do not fit below the prefix: invalid key "stream-segment-bench-raw-0": 26 bytes of UTF-8, ${bytes} with the prefix "p{${prefix.length}}/", over the 1024 an S3 key may have$`,
            ),
          )
          return true
        })
      }
      // 997 bytes leave the 26 room: the first request is made (and finds nothing listening).
      const fits = new S3Store({ client, bucket: 'b', prefix: 'p'.repeat(997), maxRetries: 0 })
      await assert.rejects(benchStore(fits, { bytes: 1, rounds: 1 }), (err) => StreamSegmentError.is(err, 'ERR_STORE'))
    } finally {
      client.destroy()
    }
  })

  // A failure in each pass: the write stream's puts, the read stream's GETs, the plain puts, the plain gets.
  const cases: Array<[string, StoreOp[], RegExp, number]> = [
    // (A send ahead that fails leaves its data to the flush: the flush's upload fails too.)
    ['the write stream', ['put', 'createMultipart', 'uploadPart'], /^\d+\.\d+$/, 2],
    ['the read stream', ['get'], /^\d+\.\d+$/, 1],
    ['the plain puts', ['put'], /^stream-segment-bench-raw-\d+$/, 2],
    ['the plain gets', ['get'], /^stream-segment-bench-raw-\d+$/, 1],
  ]
  for (const [pass, ops, key, nth] of cases) {
    it(`a store failure in ${pass}: the error, and an empty store`, async () => {
      const inner = new MemoryStore()
      const store = new FailingStore(inner, [{ ops, key, nth, times: 1000 }])
      await assert.rejects(benchStore(store, { bytes: 40 * MiB, rounds: 1 }), (err) => {
        assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
        return true
      })
      assert.ok(
        store.calls.some((c) => c.outcome === 'failed'),
        'the failure happened',
      )
      assert.deepEqual(await keys(inner), [])
    })
  }

  it('a cleanup that fails after a good round is reported, not passed over', async () => {
    const inner = new MemoryStore()
    const store = new FailingStore(inner, [{ ops: ['delete'], key: /stream-segment-bench-raw-/ }])
    await assert.rejects(benchStore(store, { bytes: 20 * MiB, rounds: 1 }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_STORE'), String(err))
      assert.match((err as Error).message, /^bench: could not delete what the round wrote at mem:/)
      return true
    })
    assert.deepEqual(await keys(inner), ['stream-segment-bench-raw-0', 'stream-segment-bench-raw-1'])
  })

  it('an abort mid-way: ERR_ABORTED, and an empty store', async () => {
    const inner = new MemoryStore()
    const ac = new AbortController()
    const passes: string[] = []
    const run = benchStore(inner, {
      bytes: 40 * MiB,
      rounds: 2,
      signal: ac.signal,
      onPass: (round, pass) => {
        passes.push(`${round}:${pass}`)
        if (round === 0 && pass === 'store put') queueMicrotask(() => ac.abort(new Error('stop')))
      },
    })
    await assert.rejects(run, (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_ABORTED'), String(err))
      return true
    })
    assert.deepEqual(passes, ['0:write stream', '0:read stream', '0:store put'])
    assert.deepEqual(await keys(inner), [])
  })

  it('a byte changed on its way from the store fails the round as ERR_CORRUPT, and nothing is left', async () => {
    // The read stream checks every block against its CRC: a byte changed on storage is ERR_CORRUPT.
    class Flipping extends MemoryStore {
      override async get(key: string, options?: Parameters<MemoryStore['get']>[1]) {
        const b = await super.get(key, options)
        if (
          /^\d+\.[1-9]\d*$/.test(key) &&
          options?.range !== undefined &&
          'start' in options.range &&
          b.length > 4096
        ) {
          const c = Buffer.from(b)
          c[100] = (c[100] as number) ^ 1
          return c
        }
        return b
      }
    }
    const inner = new Flipping()
    await assert.rejects(benchStore(inner, { bytes: 20 * MiB, rounds: 1 }), (err) => {
      assert.ok(StreamSegmentError.is(err, 'ERR_CORRUPT'), String(err))
      return true
    })
    assert.deepEqual(await keys(inner), [])
  })
})

describe('bench mem:// of more than the memory there is', () => {
  it('is refused at once (exit 2, one line, the memory named), not a process that runs out of it', () => {
    // A size past the machine's memory (sizes are binary G): refused whatever is free now.
    const gib = Math.ceil(totalmem() / (1024 * MiB)) + 1
    // Limited address space and SIGKILL at the time limit: a bench that tries dies in seconds, and takes nobody's memory.
    const r = spawnSync(
      '/bin/sh',
      ['-c', 'ulimit -v 3000000 && exec "$0" "$@"', process.execPath, bin, 'bench', 'mem://big', '--size', `${gib}G`],
      { env: quietEnv(), encoding: 'utf8', timeout: 120_000, killSignal: 'SIGKILL' },
    )
    assert.equal(r.status, 2, `--size ${gib}G: ${r.signal ?? ''} ${r.stderr.slice(0, 300)}`)
    assert.match(
      r.stderr,
      new RegExp(
        `^stream-segment: ERR_INVALID_ARGUMENT: option --size: ${gib}G in mem://big needs [\\d.]+ GiB of memory ` +
          '\\(the size, an eighth more, and 512 MiB\\): more than this machine has \\([\\d.]+ GiB\\); ' +
          'give a smaller size, or a store on disk or S3\\n$',
      ),
    )
    assert.equal(r.stdout, '')
  })
})

describe('benchMemoryShortfall: the rule bench mem:// is refused by', () => {
  const GiB = 1024 * MiB
  it("the size, an eighth more and 512 MiB, against the machine's memory, then what is available now", () => {
    assert.equal(benchMemoryNeeded(8 * GiB), 9.5 * GiB)
    const memory = { total: 16 * GiB, available: 10 * GiB }
    assert.equal(benchMemoryShortfall(8 * GiB, memory), undefined, '9.5 GiB of 10 available')
    assert.equal(
      benchMemoryShortfall(9 * GiB, memory),
      'needs 10.6 GiB of memory (the size, an eighth more, and 512 MiB): more than is available now (10.0 GiB of 16.0 GiB)',
    )
    assert.match(benchMemoryShortfall(15 * GiB, memory) ?? '', /: more than this machine has \(16\.0 GiB\)$/)
  })
})

describe('bench of a folder with more than the disk holds', () => {
  it('is refused at once (exit 2, one line, the free space named), not run until the disk is full', () => {
    const st = statfsSync(dir)
    // Past what is free there (binary G), within what --size takes; a disk with more free is judged by the rule alone.
    const gib = Math.min(1024, Math.ceil((st.bavail * st.bsize) / (1024 * MiB)) + 1)
    const fits = gib * 1024 * MiB * 1.125 <= st.bavail * st.bsize
    // SIGTERM at the time limit: a bench that has started writes cleans up what it wrote.
    const r = spawnSync(process.execPath, [bin, 'bench', join(dir, 'disk', 'new'), '--size', `${gib}G`], {
      env: quietEnv(),
      encoding: 'utf8',
      timeout: 20_000,
    })
    if (fits) assert.notEqual(r.status, 2, 'a size that fits is not refused')
    else {
      assert.equal(r.status, 2, `--size ${gib}G: ${r.signal ?? ''} ${r.stderr.slice(0, 300)}`)
      assert.match(
        r.stderr,
        new RegExp(
          `^stream-segment: ERR_INVALID_ARGUMENT: option --size: ${gib}G in .*new needs [\\d.]+ GiB of disk ` +
            '\\(the size and an eighth more\\): more than is free there \\([\\d.]+ GiB\\); give a smaller size\\n$',
        ),
      )
      assert.equal(r.stdout, '')
    }
    const GiB = 1024 * MiB
    assert.equal(benchDiskShortfall(8 * GiB, 9 * GiB), undefined)
    assert.equal(
      benchDiskShortfall(8 * GiB, 8.5 * GiB),
      'needs 9.0 GiB of disk (the size and an eighth more): more than is free there (8.5 GiB)',
    )
    assert.equal(benchDiskShortfall(8 * GiB, undefined), undefined, 'not known: not refused')
  })
})
