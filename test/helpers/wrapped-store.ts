/**
 * A base for test stores that wrap another: every ObjectStore call goes through
 * `around(op, key, bytesUp, call)`, which subclasses override to fail, hang, delay or
 * count. Listing calls pass through `around` once, before the first entry.
 */
import { bodyLength } from '../../lib/store/common.js'
import type {
  AbortMultipartOptions,
  Body,
  CompletedPart,
  CreateMultipartOptions,
  GetOptions,
  ListEntry,
  MultipartUpload,
  ObjectInfo,
  ObjectStore,
  PutOptions,
  RequestOptions,
  UploadedPart,
} from '../../lib/store/types.js'

export type StoreOp =
  | 'put'
  | 'get'
  | 'head'
  | 'list'
  | 'delete'
  | 'createMultipart'
  | 'uploadPart'
  | 'completeMultipart'
  | 'abortMultipart'
  | 'listMultipart'
  | 'listParts'

export interface CallInfo {
  op: StoreOp
  key: string
  /** Bytes sent with the request (put and uploadPart bodies). */
  bytesUp: number
  signal: AbortSignal | undefined
}

export abstract class WrappedStore implements ObjectStore {
  constructor(readonly inner: ObjectStore) {}

  get url(): string {
    return this.inner.url
  }

  now(): number | Promise<number> {
    return this.inner.now?.() ?? Date.now()
  }

  protected abstract around<T>(call: CallInfo, run: () => Promise<T>, bytesDown: (result: T) => number): Promise<T>

  put(key: string, body: Body, options?: PutOptions) {
    return this.around(
      { op: 'put', key, bytesUp: bodyLength(body), signal: options?.signal },
      () => this.inner.put(key, body, options),
      () => 0,
    )
  }
  get(key: string, options?: GetOptions) {
    return this.around(
      { op: 'get', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.get(key, options),
      (b) => b.byteLength,
    )
  }
  head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    return this.around(
      { op: 'head', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.head(key, options),
      () => 0,
    )
  }
  async *list(prefix = '', options?: RequestOptions): AsyncIterable<ListEntry> {
    const entries = await this.around(
      { op: 'list', key: prefix, bytesUp: 0, signal: options?.signal },
      async () => {
        const out: ListEntry[] = []
        for await (const e of this.inner.list(prefix, options)) out.push(e)
        return out
      },
      () => 0,
    )
    yield* entries
  }
  delete(keys: string | readonly string[], options?: RequestOptions) {
    const key = typeof keys === 'string' ? keys : keys.join(',')
    return this.around(
      { op: 'delete', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.delete(keys, options),
      () => 0,
    )
  }
  createMultipart(key: string, options?: CreateMultipartOptions) {
    return this.around(
      { op: 'createMultipart', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.createMultipart(key, options),
      () => 0,
    )
  }
  uploadPart(key: string, uploadId: string, partNumber: number, body: Body, options?: RequestOptions) {
    return this.around(
      { op: 'uploadPart', key, bytesUp: bodyLength(body), signal: options?.signal },
      () => this.inner.uploadPart(key, uploadId, partNumber, body, options),
      () => 0,
    )
  }
  completeMultipart(key: string, uploadId: string, parts: readonly CompletedPart[], options?: RequestOptions) {
    return this.around(
      { op: 'completeMultipart', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.completeMultipart(key, uploadId, parts, options),
      () => 0,
    )
  }
  abortMultipart(key: string, uploadId: string, options?: AbortMultipartOptions) {
    return this.around(
      { op: 'abortMultipart', key, bytesUp: 0, signal: options?.signal },
      () => this.inner.abortMultipart(key, uploadId, options),
      () => 0,
    )
  }
  listParts(key: string, uploadId: string, options?: RequestOptions): Promise<UploadedPart[]> {
    const inner = this.inner
    if (inner.listParts === undefined) return Promise.reject(new Error(`${inner.url}: no listParts`))
    return this.around(
      { op: 'listParts', key, bytesUp: 0, signal: options?.signal },
      () => (inner.listParts as NonNullable<ObjectStore['listParts']>).call(inner, key, uploadId, options),
      () => 0,
    )
  }
  async *listMultipart(prefix = '', options?: RequestOptions): AsyncIterable<MultipartUpload> {
    const uploads = await this.around(
      { op: 'listMultipart', key: prefix, bytesUp: 0, signal: options?.signal },
      async () => {
        const out: MultipartUpload[] = []
        for await (const u of this.inner.listMultipart(prefix, options)) out.push(u)
        return out
      },
      () => 0,
    )
    yield* uploads
  }
}

/** `target` with every method call counted: `calls()` says how many were made. */
export function countingCalls<T extends object>(target: T): { store: T; calls: () => number } {
  let n = 0
  const store = new Proxy(target, {
    get(t, prop) {
      const v = Reflect.get(t, prop, t)
      if (typeof v !== 'function') return v
      return (...args: unknown[]) => {
        n++
        return v.apply(t, args)
      }
    },
  })
  return { store, calls: () => n }
}

/** A store that runs `afterList` once, after the first LIST has been answered. */
export class AfterList extends WrappedStore {
  afterList: (() => Promise<void>) | undefined
  protected async around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    const result = await run()
    const hook = this.afterList
    if (call.op === 'list' && hook !== undefined) {
      this.afterList = undefined
      await hook()
    }
    return result
  }
}
