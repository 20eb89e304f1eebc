/**
 * The directory store's uploads made with `partBytes` (parts written in place) against the
 * memory store, the model: random sequences of parts sent (in any order, again, several at
 * once under different numbers, some short, some empty), listings, and completions of any
 * subset of the parts with current or replaced ETags. After each step both stores must say
 * the same: the same parts listed (number, size, MD5), the same completions refused, and a
 * completed object holding the same bytes; nothing left in `.ss-tmp`, and no upload folder
 * once an upload ended. IN_PLACE_RUNS (default 60) sequences; IN_PLACE_SEED replays one.
 */
import assert from 'node:assert/strict'
import * as fs from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import fc from 'fast-check'
import { StreamSegmentError } from '../../lib/errors.js'
import { DirectoryStore } from '../../lib/store/directory.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { ObjectStore } from '../../lib/store/types.js'
import { tmpLeft } from '../helpers/directory-store.js'

const P = 4096
const runs = Number(process.env.IN_PLACE_RUNS ?? 60)
const seed = process.env.IN_PLACE_SEED === undefined ? {} : { seed: Number(process.env.IN_PLACE_SEED) }

type Step =
  | { kind: 'send'; parts: Array<{ n: number; size: number; fill: number }> }
  | { kind: 'list' }
  | { kind: 'complete'; pick: Array<{ n: number; stale: boolean }> }

const size = fc.oneof(
  { weight: 6, arbitrary: fc.constant(P) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: P - 1 }) },
  { weight: 1, arbitrary: fc.constant(0) },
)
const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .uniqueArray(fc.record({ n: fc.integer({ min: 1, max: 6 }), size, fill: fc.integer({ min: 0, max: 255 }) }), {
        minLength: 1,
        maxLength: 3,
        selector: (p) => p.n, // several at once, under different numbers
      })
      .map((parts) => ({ kind: 'send' as const, parts })),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'list' as const }) },
  {
    weight: 2,
    arbitrary: fc
      .uniqueArray(fc.record({ n: fc.integer({ min: 1, max: 6 }), stale: fc.boolean() }), {
        minLength: 1,
        maxLength: 6,
        selector: (p) => p.n,
      })
      .map((pick) => ({ kind: 'complete' as const, pick })),
  },
)

/** The bytes of a part sent: `size` bytes of `fill`, the part number in the first (so no two parts look alike). */
function body(n: number, bytes: number, fill: number): Buffer {
  const b = Buffer.alloc(bytes, fill)
  if (bytes > 0) b[0] = n
  return b
}

/** What a store said to one call: its result, or the code it failed with. */
async function outcome<T>(p: Promise<T>): Promise<{ ok: T } | { code: string }> {
  try {
    return { ok: await p }
  } catch (err) {
    if (!(err instanceof StreamSegmentError)) throw err
    return { code: err.code }
  }
}

describe('directory store, parts written in place, against the memory store', () => {
  let dir = ''
  let n = 0
  before(async () => {
    dir = await fs.mkdtemp(join(tmpdir(), 'ss-in-place-model-'))
  })
  after(async () => {
    await fs.rm(dir, { recursive: true, force: true })
  })

  it(`${runs} random sequences of sends, listings and completions say the same on both`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
        const root = join(dir, `r${n++}`)
        const stores: ObjectStore[] = [new DirectoryStore(root), new MemoryStore()]
        const ids = await Promise.all(stores.map((s) => s.createMultipart('k', { partBytes: P })))
        // Per store, per part number: the ETags of its sends, oldest first.
        const sent = stores.map(() => new Map<number, string[]>())
        let done = false
        for (const s of steps) {
          if (done) break
          if (s.kind === 'send') {
            await Promise.all(
              stores.map(async (store, i) => {
                const etags = await Promise.all(
                  s.parts.map((p) => store.uploadPart('k', ids[i] as string, p.n, body(p.n, p.size, p.fill))),
                )
                for (const [j, p] of s.parts.entries()) {
                  const m = sent[i] as Map<number, string[]>
                  m.set(p.n, [...(m.get(p.n) ?? []), (etags[j] as { etag: string }).etag])
                }
              }),
            )
          } else if (s.kind === 'list') {
            const lists = await Promise.all(stores.map((store, i) => store.listParts?.('k', ids[i] as string)))
            const [d, m] = lists.map((l) => l?.map((p) => [p.partNumber, p.size, p.md5]))
            assert.deepEqual(d, m, 'the parts listed')
            // Each store lists, for each part, the ETag of its last send.
            for (const [i, l] of lists.entries()) {
              for (const p of l ?? [])
                assert.equal(p.etag, (sent[i] as Map<number, string[]>).get(p.partNumber)?.at(-1))
            }
          } else {
            const results = await Promise.all(
              stores.map((store, i) => {
                const m = sent[i] as Map<number, string[]>
                const list = s.pick
                  .filter((p) => m.has(p.n))
                  .map((p) => {
                    const etags = m.get(p.n) as string[]
                    return { partNumber: p.n, etag: (p.stale && etags.length > 1 ? etags[0] : etags.at(-1)) as string }
                  })
                return outcome(store.completeMultipart('k', ids[i] as string, list))
              }),
            )
            const [d, m] = results as [{ ok: unknown } | { code: string }, { ok: unknown } | { code: string }]
            assert.equal('ok' in d, 'ok' in m, `completed on one store only: ${JSON.stringify(results)}`)
            if ('code' in d && 'code' in m) assert.equal(d.code, m.code)
            if ('ok' in d) {
              const [a, b] = await Promise.all(stores.map((store) => store.get('k')))
              assert.deepEqual(Buffer.from(a as Uint8Array), Buffer.from(b as Uint8Array), 'the objects differ')
              done = true
            }
          }
        }
        if (!done) await Promise.all(stores.map((store, i) => store.abortMultipart('k', ids[i] as string)))
        assert.deepEqual(await tmpLeft(root), [], 'left in .ss-tmp')
        assert.deepEqual(await fs.readdir(join(root, '.ss-multipart')), [], 'an upload folder left')
        await fs.rm(root, { recursive: true, force: true })
      }),
      { numRuns: runs, ...seed },
    )
  })
})
