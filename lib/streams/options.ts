/**
 * What the stream adapters share: where the container is, an AbortSignal that ends the
 * stream, and the open's requests counted into a read's timing.
 */
import { StreamSegmentError } from '../errors.js'
import type { ReadTiming } from '../read/reader.js'
import { checkCommonOptions } from '../settings.js'
import { checkStore } from '../store/common.js'
import { openStore, type StoreLocation } from '../store/open.js'
import type { CopySource, ObjectStore } from '../store/types.js'
import { describeValue } from '../util/typed-arrays.js'

/** Where a stream's container is: a URL, or the store itself (exactly one). */
export interface StreamLocation {
  /** Where the container is: s3://bucket/prefix, a directory, file:///dir, mem://name. */
  url?: StoreLocation
  /** Or the store itself. */
  store?: ObjectStore
}

/**
 * The store `options` name; ERR_INVALID_ARGUMENT, naming `who`, unless exactly one of url
 * and store is given, and the store is one: the stream is made before it opens the
 * container, so a store found bad there would fail the stream, not the call.
 */
export function storeOf(options: StreamLocation, who: string): ObjectStore {
  const { url, store } = options
  if ((url === undefined) === (store === undefined)) {
    throw StreamSegmentError.invalidArgument(`${who}: give exactly one of url and store`)
  }
  if (store !== undefined) return checkStore(who, store)
  // Named here, with the call: openStore would say 'openStore: object' for a null.
  if (typeof url !== 'string' && (typeof url !== 'object' || url === null)) {
    throw StreamSegmentError.invalidArgument(
      `${who}: url must be a URL or path (a string or a URL) or { client, bucket, prefix }, got ${describeValue(url)}`,
    )
  }
  return openStore(url)
}

/**
 * The options every stream checks before it is made (a stream made starts its work, so a
 * bad option found later would fail that work, not the call): `signal` an AbortSignal,
 * `highWaterMark` a byte count, the `onStart` and `onProgress` callbacks functions.
 */
export function checkStreamOptions(
  who: string,
  options: { signal?: unknown; highWaterMark?: unknown; onStart?: unknown; onProgress?: unknown },
): void {
  checkCommonOptions(who, options)
  const { highWaterMark } = options
  if (highWaterMark !== undefined && !(Number.isSafeInteger(highWaterMark) && (highWaterMark as number) >= 0)) {
    throw StreamSegmentError.invalidArgument(
      `${who}: highWaterMark ${describeValue(highWaterMark)} must be a byte count (an integer ≥ 0)`,
    )
  }
}

/**
 * Destroys `stream` with ERR_ABORTED (`what` aborted) when `signal` aborts, or at once if it
 * has. The listener goes when the stream closes: a signal that outlives many streams (a
 * server's shutdown signal) must not hold every stream it was given, nor collect listeners.
 */
export function destroyOnAbort(
  stream: { destroy(err: Error): void; once(event: 'close', listener: () => void): unknown },
  signal: AbortSignal | undefined,
  what: string,
): void {
  if (signal === undefined) return
  const onAbort = () => stream.destroy(StreamSegmentError.aborted(`${what} aborted`, signal.reason))
  if (signal.aborted) {
    queueMicrotask(onAbort)
    return
  }
  signal.addEventListener('abort', onAbort, { once: true })
  stream.once('close', () => signal.removeEventListener('abort', onAbort))
}

/**
 * `store` with its GETs and HEADs counted into `into` until `stop` (a handle's open, say).
 * Until then every read request (get, getChunks, head, list) also carries `signal`, beside
 * any signal of its own: SegmentFile.open takes none, and an open that waits on a stalled
 * request must end when the stream, download or upload is aborted, not when the request does.
 */
export function countingStore(
  store: ObjectStore,
  into: { requests: number; bytes: number },
  signal?: AbortSignal,
): { store: ObjectStore; stop: () => void } {
  let counting = true
  const withSignal = (args: unknown[]): unknown[] => {
    if (!counting || signal === undefined) return args
    const options = (args[1] ?? {}) as { signal?: AbortSignal }
    const own = options.signal
    const both = own === undefined || own === signal ? signal : AbortSignal.any([own, signal])
    return [args[0], { ...options, signal: both }, ...args.slice(2)]
  }
  const proxy = new Proxy(store, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target)
      if (typeof v !== 'function') return v
      if (prop === 'list' || prop === 'getChunks') return (...args: unknown[]) => v.apply(target, withSignal(args))
      if (prop === 'uploadPartCopy') {
        // A copy from the store itself (a resume's) names the store, not this proxy: a store
        // reads its source's private fields, which a proxy does not have.
        return (...args: unknown[]) => {
          const source = args[3] as CopySource
          const from = source.store === proxy ? { ...source, store } : source
          return v.apply(target, [...args.slice(0, 3), from, ...args.slice(4)])
        }
      }
      if (prop !== 'get' && prop !== 'head') return v.bind(target)
      return async (...args: unknown[]) => {
        if (counting) into.requests++
        const r = await v.apply(target, withSignal(args))
        if (counting && r instanceof Uint8Array) into.bytes += r.byteLength
        return r
      }
    },
  })
  return { store: proxy, stop: () => (counting = false) }
}

/** A reader's timing with the open's requests and bytes (countingStore's) as `inode`. */
export function withOpen(t: ReadTiming, open: { requests: number; bytes: number }): ReadTiming {
  return {
    ...t,
    requests: { ...t.requests, inode: open.requests },
    bytes: { ...t.bytes, inode: open.bytes },
  }
}
