/** What the stream adapters share: where the container is, and an AbortSignal that ends the stream. */
import { StreamSegmentError } from '../errors.js'
import { openStore, type StoreLocation } from '../store/open.js'
import type { ObjectStore } from '../store/types.js'

/** Where a stream's container is: a URL, or the store itself (exactly one). */
export interface StreamLocation {
  /** Where the container is: s3://bucket/prefix, a directory, file:///dir, mem://name. */
  url?: StoreLocation
  /** Or the store itself. */
  store?: ObjectStore
}

/** The store `options` name; ERR_INVALID_ARGUMENT, naming `who`, unless exactly one of url and store is given. */
export function storeOf(options: StreamLocation, who: string): ObjectStore {
  const { url, store } = options
  if ((url === undefined) === (store === undefined)) {
    throw StreamSegmentError.invalidArgument(`${who}: give exactly one of url and store`)
  }
  return store ?? openStore(url as StoreLocation)
}

/** Destroys `stream` with ERR_ABORTED (`what` aborted) when `signal` aborts, or at once if it has. */
export function destroyOnAbort(
  stream: { destroy(err: Error): void },
  signal: AbortSignal | undefined,
  what: string,
): void {
  if (signal === undefined) return
  const onAbort = () => stream.destroy(StreamSegmentError.aborted(`${what} aborted`, signal.reason))
  if (signal.aborted) queueMicrotask(onAbort)
  else signal.addEventListener('abort', onAbort, { once: true })
}
