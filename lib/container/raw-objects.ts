/**
 * Plain objects written and read straight through the store, no container around them:
 * the baseline the CLI's `bench` sets next to the streams (what the store itself
 * sustains for the same bytes), and the check that a location holds nothing before
 * `bench` writes there.
 */
import { StreamSegmentError } from '../errors.js'
import { hasChunkedGet } from '../store/common.js'
import type { ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { givePieces } from '../util/piece-pool.js'

/** The first `n` keys the store holds under its prefix (none: it is empty). */
export async function someKeys(store: ObjectStore, n: number, signal?: AbortSignal): Promise<string[]> {
  const keys: string[] = []
  if (n <= 0) return keys
  for await (const e of store.list('', { signal })) {
    keys.push(e.key)
    if (keys.length >= n) break
  }
  return keys
}

/** Puts object `keys[i]` with body `body(i)` for every i, at most `inFlight` at once. */
export async function putObjects(
  store: ObjectStore,
  keys: readonly string[],
  body: (i: number) => Uint8Array[],
  inFlight: number,
  signal?: AbortSignal,
): Promise<void> {
  await eachLimited(keys, inFlight, (key, i) => store.put(key, body(i), { signal }).then(() => undefined))
}

/**
 * Gets each of `keys` whole, at most `inFlight` at once, handing each answer to `each` (as
 * the chunks it came in when the store can answer so), in any order; the chunks go back
 * to the GET pool after `each` returns.
 */
export async function getObjects(
  store: ObjectStore,
  keys: readonly string[],
  inFlight: number,
  each: (key: string, chunks: readonly Uint8Array[]) => void,
  signal?: AbortSignal,
): Promise<void> {
  await eachLimited(keys, inFlight, async (key) => {
    const chunks = hasChunkedGet(store) ? await store.getChunks(key, { signal }) : [await store.get(key, { signal })]
    each(key, chunks)
    givePieces(chunks)
  })
}

/** Deletes `keys` (a missing one is no error). */
export function deleteObjects(store: ObjectStore, keys: readonly string[], signal?: AbortSignal): Promise<void> {
  return keys.length === 0 ? Promise.resolve() : store.delete(keys, { signal })
}

/** Runs `task` on every item, at most `limit` at once; the first failure fails the whole once all have settled. */
async function eachLimited<T>(items: readonly T[], limit: number, task: (item: T, i: number) => Promise<void>) {
  if (!(Number.isInteger(limit) && limit >= 1)) {
    throw StreamSegmentError.invalidArgument(`in flight: ${limit} is not a positive integer`)
  }
  const limiter = new Limiter(limit)
  let failure: { err: unknown } | undefined
  await Promise.all(
    items.map((item, i) =>
      limiter
        .run(() => (failure === undefined ? task(item, i) : Promise.resolve()))
        .catch((err) => {
          failure ??= { err }
        }),
    ),
  )
  if (failure !== undefined) throw failure.err
}
