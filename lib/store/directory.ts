/**
 * The embedded default store: a container in a local directory, no server needed.
 *
 * What it guarantees, across processes on one machine:
 * - An object file holds exactly the object's bytes. Every write goes to a temporary
 *   file in `.ss-tmp/`, is fsynced, then linked (create-only: `link` fails if the key
 *   exists, atomically) or renamed (replace) into place, and the directory is fsynced.
 *   A crash leaves the old object or the new one, never a torn one; leftovers in
 *   `.ss-tmp/` are garbage.
 * - ETags come from the file's identity (inode number, size, mtime), not from hashing
 *   its bytes: every write makes a new file, so a replaced object has a new ETag.
 * - Metadata lives beside the object in `.ss-meta/<inode number>`, written before the
 *   object becomes visible; it is found through the object file's inode number.
 * - `ifMatch` puts and claimed multipart completions run under a per-key lock
 *   (`mkdir` in `.ss-lock/`), so compare-and-swap is atomic; a lock older than
 *   LOCK_STALE_MS is taken to be a crashed holder's and broken.
 * - Keys map to paths segment by segment; bytes other than [A-Za-z0-9_.-] and a
 *   leading dot are %-escaped, and a key segment that has children becomes a
 *   directory named `<segment>%2F`, so the key `a` and the key `a/b` never collide and
 *   no key reaches outside the root or into the store's own dot-folders.
 */
import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import * as fs from 'node:fs/promises'
import { join } from 'node:path'
import { StreamSegmentError } from '../errors.js'
import {
  checkKey,
  checkPartList,
  checkPartNumber,
  checkPartSizes,
  checkPutPrecondition,
  newWriteId,
  putMetadata,
  resolveRange,
  throwIfAborted,
} from './common.js'
import type {
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
} from './types.js'
import { WRITE_ID_METADATA } from './types.js'

const TMP = '.ss-tmp'
const META = '.ss-meta'
const LOCKS = '.ss-lock'
const UPLOADS = '.ss-multipart'
const LOCK_STALE_MS = 30_000
const LOCK_WAIT_MS = 60_000
const COPY_BUFFER = 1024 * 1024

export class DirectoryStore implements ObjectStore {
  readonly url: string
  private ready: Promise<void> | undefined

  constructor(readonly root: string) {
    this.url = root
  }

  async put(key: string, body: Body, options?: PutOptions): Promise<{ etag: string }> {
    checkKey(key)
    throwIfAborted(options?.signal, `put ${key}`)
    const { metadata, writeId } = putMetadata(options)
    const tmp = await this.writeTemp(body, metadata)
    try {
      const path = this.pathOf(key)
      await fs.mkdir(join(path, '..'), { recursive: true })
      if (options?.ifNoneMatch === '*') return await this.linkCreateOnly(key, tmp, path, options, writeId)
      if (options?.ifMatch !== undefined) {
        return await this.withLock(key, async () => {
          const current = await this.head(key)
          if (checkPutPrecondition(key, current, options, writeId) === 'replayed') return { etag: current!.etag }
          return { etag: await this.replace(tmp, path) }
        })
      }
      return { etag: await this.replace(tmp, path) }
    } finally {
      await fs.rm(tmp, { force: true })
    }
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    checkKey(key)
    throwIfAborted(options?.signal, `get ${key}`)
    const where = `${this.url}/${key}`
    let fh: fs.FileHandle
    try {
      fh = await fs.open(this.pathOf(key), 'r')
    } catch (err) {
      throw this.mapError(err, `get ${key}`)
    }
    try {
      const st = await fh.stat()
      if (!st.isFile()) throw StreamSegmentError.notFound(`${where}: no such key`)
      const [start, end] = resolveRange(options?.range, st.size, where)
      const out = Buffer.allocUnsafe(end - start)
      let done = 0
      while (done < out.byteLength) {
        throwIfAborted(options?.signal, `get ${key}`)
        const { bytesRead } = await fh.read(out, done, out.byteLength - done, start + done)
        if (bytesRead === 0) throw StreamSegmentError.store(`${where}: file shrank while being read`)
        done += bytesRead
      }
      return out
    } finally {
      await fh.close()
    }
  }

  async head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    checkKey(key)
    throwIfAborted(options?.signal, `head ${key}`)
    let st: Stats
    try {
      st = await fs.stat(this.pathOf(key))
    } catch (err) {
      if (isCode(err, 'ENOENT') || isCode(err, 'ENOTDIR')) return undefined
      throw this.mapError(err, `head ${key}`)
    }
    if (!st.isFile()) return undefined
    return { size: st.size, etag: etagOf(st), metadata: await this.readMetadata(st.ino) }
  }

  async *list(prefix = '', options?: RequestOptions): AsyncIterable<ListEntry> {
    const entries: ListEntry[] = []
    await this.walk(this.root, '', prefix, entries, options?.signal)
    entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    yield* entries
  }

  async delete(keys: string | readonly string[], options?: RequestOptions): Promise<void> {
    for (const key of typeof keys === 'string' ? [keys] : keys) {
      checkKey(key)
      throwIfAborted(options?.signal, `delete ${key}`)
      const path = this.pathOf(key)
      const st = await fs.stat(path).catch(() => undefined)
      if (st?.isFile()) {
        await fs.rm(path, { force: true })
        await fs.rm(join(this.root, META, String(st.ino)), { force: true })
      }
    }
  }

  async createMultipart(key: string, options?: CreateMultipartOptions): Promise<string> {
    checkKey(key)
    throwIfAborted(options?.signal, `create multipart ${key}`)
    const metadata = { ...options?.metadata }
    if (options?.ifNoneMatch === '*') {
      const claim = newWriteId()
      await this.put(key, new Uint8Array(0), { ifNoneMatch: '*', writeId: claim })
      metadata[WRITE_ID_METADATA] = claim
    }
    await this.init()
    const uploadId = randomUUID()
    const dir = join(this.root, UPLOADS, uploadId)
    await fs.mkdir(dir, { recursive: true })
    await fs.writeFile(
      join(dir, 'upload.json'),
      JSON.stringify({ key, metadata, claimed: options?.ifNoneMatch === '*' }),
    )
    return uploadId
  }

  async uploadPart(
    key: string,
    uploadId: string,
    partNumber: number,
    body: Body,
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    checkPartNumber(key, partNumber)
    throwIfAborted(options?.signal, `upload part ${partNumber} of ${key}`)
    const dir = (await this.upload(key, uploadId)).dir
    // Parts need no fsync of their own: the completed object is written anew and synced.
    const tmp = await this.writeTemp(body, {}, false)
    try {
      const path = join(dir, String(partNumber))
      await fs.rename(tmp, path)
      return { etag: etagOf(await fs.stat(path)) }
    } finally {
      await fs.rm(tmp, { force: true })
    }
  }

  async completeMultipart(
    key: string,
    uploadId: string,
    parts: readonly CompletedPart[],
    options?: RequestOptions,
  ): Promise<{ etag: string }> {
    throwIfAborted(options?.signal, `complete multipart ${key}`)
    const upload = await this.upload(key, uploadId)
    checkPartList(key, parts)
    const paths: string[] = []
    const sizes: number[] = []
    for (const p of parts) {
      const path = join(upload.dir, String(p.partNumber))
      const st = await fs.stat(path).catch(() => undefined)
      if (st === undefined || etagOf(st) !== p.etag) {
        throw StreamSegmentError.invalidArgument(`${key}: part ${p.partNumber} with etag ${p.etag} was not uploaded`)
      }
      paths.push(path)
      sizes.push(st.size)
    }
    checkPartSizes(key, sizes)
    const tmp = await this.concatTemp(paths, upload.metadata)
    try {
      const path = this.pathOf(key)
      await fs.mkdir(join(path, '..'), { recursive: true })
      const commit = async () => {
        if (upload.claimed) {
          // The key must still hold our placeholder: nobody else may have completed it.
          const current = await this.head(key)
          if (current?.size !== 0 || current.metadata[WRITE_ID_METADATA] !== upload.metadata[WRITE_ID_METADATA]) {
            throw StreamSegmentError.conflict(`${key}: claimed by another writer (multipart ${uploadId})`)
          }
        }
        return { etag: await this.replace(tmp, path) }
      }
      const result = upload.claimed ? await this.withLock(key, commit) : await commit()
      await fs.rm(upload.dir, { recursive: true, force: true })
      return result
    } finally {
      await fs.rm(tmp, { force: true })
    }
  }

  async abortMultipart(_key: string, uploadId: string, options?: RequestOptions): Promise<void> {
    throwIfAborted(options?.signal, `abort multipart ${uploadId}`)
    if (!/^[0-9a-f-]{36}$/.test(uploadId)) return
    await fs.rm(join(this.root, UPLOADS, uploadId), { recursive: true, force: true })
  }

  async *listMultipart(prefix = '', options?: RequestOptions): AsyncIterable<MultipartUpload> {
    const dir = join(this.root, UPLOADS)
    const ids = await fs.readdir(dir).catch(() => [] as string[])
    const open: MultipartUpload[] = []
    for (const uploadId of ids) {
      throwIfAborted(options?.signal, `list multipart ${prefix}`)
      const file = join(dir, uploadId, 'upload.json')
      const [meta, st] = await Promise.all([
        fs.readFile(file, 'utf8').catch(() => undefined),
        fs.stat(file).catch(() => undefined),
      ])
      if (meta === undefined || st === undefined) continue
      const { key } = JSON.parse(meta) as { key: string }
      if (key.startsWith(prefix)) open.push({ key, uploadId, initiatedMs: st.mtimeMs })
    }
    open.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.uploadId < b.uploadId ? -1 : 1))
    yield* open
  }

  // --- internals ---

  private init(): Promise<void> {
    this.ready ??= (async () => {
      for (const d of [TMP, META, LOCKS, UPLOADS]) await fs.mkdir(join(this.root, d), { recursive: true })
    })()
    return this.ready.catch((err) => {
      this.ready = undefined
      throw this.mapError(err, `create ${this.root}`)
    })
  }

  pathOf(key: string): string {
    const segs = key.split('/')
    const last = segs.length - 1
    return join(this.root, ...segs.map((s, i) => (i < last ? `${escapeSegment(s)}%2F` : escapeSegment(s))))
  }

  /** Writes body (and its metadata, keyed by the new file's inode) to a fsynced temp file. */
  private async writeTemp(body: Body, metadata: Record<string, string>, sync = true): Promise<string> {
    await this.init()
    const tmp = join(this.root, TMP, randomUUID())
    const fh = await fs.open(tmp, 'wx')
    try {
      await writeFully(fh, body instanceof Uint8Array ? [body] : body)
      if (sync) await fh.sync()
      await this.writeMetadata((await fh.stat()).ino, metadata)
    } catch (err) {
      await fs.rm(tmp, { force: true })
      throw this.mapError(err, `write ${tmp}`)
    } finally {
      await fh.close()
    }
    return tmp
  }

  private async concatTemp(paths: readonly string[], metadata: Record<string, string>): Promise<string> {
    await this.init()
    const tmp = join(this.root, TMP, randomUUID())
    const out = await fs.open(tmp, 'wx')
    try {
      const buf = Buffer.allocUnsafe(COPY_BUFFER)
      let pos = 0
      for (const p of paths) {
        const src = await fs.open(p, 'r')
        try {
          for (;;) {
            const { bytesRead } = await src.read(buf, 0, buf.byteLength, null)
            if (bytesRead === 0) break
            let done = 0
            while (done < bytesRead) done += (await out.write(buf, done, bytesRead - done, pos + done)).bytesWritten
            pos += bytesRead
          }
        } finally {
          await src.close()
        }
      }
      await out.sync()
      await this.writeMetadata((await out.stat()).ino, metadata)
    } catch (err) {
      await fs.rm(tmp, { force: true })
      throw this.mapError(err, `write ${tmp}`)
    } finally {
      await out.close()
    }
    return tmp
  }

  private async linkCreateOnly(
    key: string,
    tmp: string,
    path: string,
    options: PutOptions,
    writeId: string | undefined,
  ): Promise<{ etag: string }> {
    try {
      await fs.link(tmp, path)
    } catch (err) {
      if (!isCode(err, 'EEXIST')) throw this.mapError(err, `put ${key}`)
      const current = await this.head(key)
      if (checkPutPrecondition(key, current, options, writeId) === 'replayed') return { etag: current!.etag }
      // The key vanished between link and head: let the caller retry.
      throw StreamSegmentError.conflict(`${key}: changed during create-only put`)
    }
    await syncDir(join(path, '..'))
    return { etag: etagOf(await fs.stat(path)) }
  }

  private async replace(tmp: string, path: string): Promise<string> {
    const old = await fs.stat(path).catch(() => undefined)
    await fs.rename(tmp, path)
    await syncDir(join(path, '..'))
    if (old?.isFile()) await fs.rm(join(this.root, META, String(old.ino)), { force: true })
    return etagOf(await fs.stat(path))
  }

  private async writeMetadata(ino: number, metadata: Record<string, string>): Promise<void> {
    const path = join(this.root, META, String(ino))
    if (Object.keys(metadata).length === 0) await fs.rm(path, { force: true })
    else await fs.writeFile(path, JSON.stringify(metadata))
  }

  private async readMetadata(ino: number): Promise<Record<string, string>> {
    const text = await fs.readFile(join(this.root, META, String(ino)), 'utf8').catch(() => undefined)
    return text === undefined ? {} : (JSON.parse(text) as Record<string, string>)
  }

  private async upload(
    key: string,
    uploadId: string,
  ): Promise<{ dir: string; metadata: Record<string, string>; claimed: boolean }> {
    const dir = join(this.root, UPLOADS, uploadId)
    const text = /^[0-9a-f-]{36}$/.test(uploadId)
      ? await fs.readFile(join(dir, 'upload.json'), 'utf8').catch(() => undefined)
      : undefined
    const upload =
      text === undefined
        ? undefined
        : (JSON.parse(text) as { key: string; metadata: Record<string, string>; claimed: boolean })
    if (upload?.key !== key) throw StreamSegmentError.notFound(`${this.url}/${key}: no multipart upload ${uploadId}`)
    return { dir, metadata: upload.metadata, claimed: upload.claimed }
  }

  private async withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    await this.init()
    const lock = join(this.root, LOCKS, escapeSegment(key.replaceAll('/', '%2F')))
    const deadline = Date.now() + LOCK_WAIT_MS
    for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
      try {
        await fs.mkdir(lock)
        break
      } catch (err) {
        if (!isCode(err, 'EEXIST')) throw this.mapError(err, `lock ${key}`)
        const st = await fs.stat(lock).catch(() => undefined)
        if (st !== undefined && Date.now() - st.mtimeMs > LOCK_STALE_MS)
          await fs.rm(lock, { recursive: true, force: true })
        if (Date.now() > deadline)
          throw StreamSegmentError.store(`${this.url}/${key}: lock ${lock} held for over ${LOCK_WAIT_MS} ms`)
        await new Promise((r) => setTimeout(r, delay))
      }
    }
    try {
      return await fn()
    } finally {
      await fs.rm(lock, { recursive: true, force: true })
    }
  }

  private async walk(dir: string, keyPrefix: string, want: string, out: ListEntry[], signal?: AbortSignal) {
    throwIfAborted(signal, `list ${want}`)
    const entries = await fs.readdir(dir, { withFileTypes: true }).catch((err) => {
      if (isCode(err, 'ENOENT')) return []
      throw this.mapError(err, `list ${dir}`)
    })
    for (const e of entries) {
      if (e.name.startsWith('.')) continue // the store's own folders; keys never map to dot names
      if (e.isDirectory() && e.name.endsWith('%2F')) {
        const k = `${keyPrefix}${unescapeSegment(e.name.slice(0, -3))}/`
        if (k.startsWith(want) || want.startsWith(k)) await this.walk(join(dir, e.name), k, want, out, signal)
      } else if (e.isFile()) {
        const key = keyPrefix + unescapeSegment(e.name)
        if (!key.startsWith(want)) continue
        const st = await fs.stat(join(dir, e.name)).catch(() => undefined)
        if (st !== undefined) out.push({ key, size: st.size, etag: etagOf(st), lastModifiedMs: st.mtimeMs })
      }
    }
  }

  private mapError(err: unknown, what: string): StreamSegmentError {
    if (err instanceof StreamSegmentError) return err
    if (isCode(err, 'ENOENT') || isCode(err, 'ENOTDIR') || isCode(err, 'EISDIR')) {
      return StreamSegmentError.notFound(`${this.url}: ${what}: no such key`, err)
    }
    return StreamSegmentError.store(`${this.url}: ${what} failed: ${(err as Error).message}`, err)
  }
}

/** writev until every byte is written (writev may write less than asked). */
async function writeFully(fh: fs.FileHandle, chunks: readonly Uint8Array[]): Promise<void> {
  let rest = chunks.filter((c) => c.byteLength > 0)
  while (rest.length > 0) {
    let n = (await fh.writev(rest.slice(0, 1024))).bytesWritten
    while (n > 0 && rest.length > 0) {
      const first = rest[0] as Uint8Array
      if (n >= first.byteLength) {
        n -= first.byteLength
        rest = rest.slice(1)
      } else {
        rest = [first.subarray(n), ...rest.slice(1)]
        n = 0
      }
    }
  }
}

function escapeSegment(s: string): string {
  let out = ''
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte)
    out +=
      /[A-Za-z0-9_.-]/.test(c) && !(out === '' && c === '.')
        ? c
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
  }
  return out
}

function unescapeSegment(s: string): string {
  return Buffer.from(
    s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16))),
    'latin1',
  ).toString('utf8')
}

function etagOf(st: Stats): string {
  return `${st.ino.toString(16)}-${st.size.toString(16)}-${Math.round(st.mtimeMs * 1000).toString(16)}`
}

async function syncDir(dir: string): Promise<void> {
  const fh = await fs.open(dir, 'r')
  try {
    await fh.sync()
  } finally {
    await fh.close()
  }
}

function isCode(err: unknown, code: string): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === code
}
