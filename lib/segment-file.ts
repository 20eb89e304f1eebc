/**
 * SegmentFile: one file in a container, opened for reading and writing.
 *
 * - Calls are serialised: each runs after the previous one has finished, so a write,
 *   a read and a flush never interleave on one handle.
 * - Writes go to the dirty tier. Under the dirty limit, what is unsent may go ahead
 *   (send-ahead.ts: the writer waits only for room among the requests in flight); over
 *   it, the open object closes and partial segments are written before the write
 *   returns (the writer waits: that is the backpressure). Nothing a write does is
 *   visible to other readers until a flush publishes it.
 * - A failure of the store during a write or flush leaves the handle usable: what was
 *   not stored is still dirty and the next flush writes it. A bug (ERR_INTERNAL) or an
 *   abort makes the handle unusable; every later call throws it again.
 * - With a WAL (`wal: { dir }`), every write, writeZeroes and truncate is in the local log
 *   before the call resolves (wal/), in call order, and applied only once logged. A flush
 *   that publishes rotates the log; close keeps it: the next open with the same folder
 *   replays what no published checkpoint holds and publishes it before it returns.
 */
import { constants } from 'node:buffer'
import debug from 'debug'
import { gc } from './admin/gc.js'
import { checkUnpublished } from './admin/verify.js'
import {
  checkCommitPoint,
  containerFormat,
  hasInode,
  nothingPublished,
  readCheckpointInode,
  readInode,
  rollForward,
} from './container/inode.js'
import { firstFreeCno, hasCheckpointObjects } from './container/listing.js'
import { readObjectHeader, readPart0Header } from './container/object-header.js'
import type { OpenedBytes } from './container/opened.js'
import { isSignal, StreamSegmentError, throwIfAborted } from './errors.js'
import { emptyInode, FORMAT_PARTED, FORMAT_STREAM, type Inode } from './format/inode.js'
import { MAX_CNO } from './format/pointer.js'
import { Reader } from './read/reader.js'
import {
  badSetting,
  checkCno,
  checkForStore,
  checkOptionNames,
  checkSettingValues,
  dirtyLimit,
  PART_BYTES,
  type ReadOptions,
  resolveFileSettings,
  resolveReadOptions,
  resolveReadSettings,
  type Settings,
  type WithHooks,
} from './settings.js'
import type { BlockSource } from './state/dirty-tier.js'
import { FileState, noNumbersLeft } from './state/file-state.js'
import { checkStore } from './store/common.js'
import type { ObjectStore } from './store/types.js'
import { printableLog } from './util/shell-words.js'
import { unlessAborted } from './util/signals.js'
import { isoTime } from './util/time.js'
import { asError, bytesOf, describeValue } from './util/typed-arrays.js'
import type { WalLog, WalRecord } from './wal/log.js'
import { walPlacementProblem } from './wal/placement.js'
import { checkWalOptions, type OpenedWal, openWal, type WalOptions, type WalReplay } from './wal/wal.js'
import { dropLeftPart0s, type FlushTiming, flush, isUnknownOutcome, startPublish } from './write/flush.js'
import { SendAhead } from './write/send-ahead.js'
import { BlockWriter, checkRange, checkSize } from './write/write-blocks.js'

/**
 * For a caller inside the library (the write stream): an AbortSignal under this key of
 * `open`'s or `create`'s options aborts what an open writes, which no store wrapper of the
 * caller's that adds its signal to reads can cut: a roll-forward's inode write, and the
 * handle while the open replays its WAL and publishes what it replayed (its uploads carry
 * the handle's own signal). A symbol: no option of the API, and unseen by the check of the
 * option names.
 */
export const OPEN_SIGNAL: unique symbol = Symbol('stream-segment: open signal')

function stopOf(options: object): AbortSignal | undefined {
  return (options as { [OPEN_SIGNAL]?: AbortSignal })[OPEN_SIGNAL]
}

/** With a WAL nothing is sent ahead (the spec's "With the WAL"): streamSegmentBytes is unused. */
function withWal<T extends CreateOptions>(options: T): T {
  return options.wal === undefined ? options : { ...options, streamSegmentBytes: 0 }
}

/** A write is logged in pieces of at most this many bytes, each applied once logged. */
const WAL_PIECE = 64 * 1024 * 1024

const log = printableLog(debug('stream-segment:file'))

/** Settings, and how the handle's reads fetch (`read`, `readInto`). */
export interface OpenOptions extends Partial<Settings>, ReadOptions {
  /** Open this checkpoint instead of the latest; writing to it publishes a new checkpoint with its content. */
  cno?: number
  readOnly?: boolean
  /** A write-ahead log for this writer (not with readOnly). */
  wal?: WalOptions
  /** Aborts the open (ERR_ABORTED); the handle it gives does not hear it. */
  signal?: AbortSignal
}

export interface CreateOptions extends Partial<Settings>, ReadOptions {
  wal?: WalOptions
  /** Aborts the create (ERR_ABORTED); the handle it gives does not hear it. */
  signal?: AbortSignal
}

/** Set by SegmentFile's static block, which alone may read the private `core`. */
let stateOf: (file: SegmentFile) => FileState

/**
 * The handle's state (FileState), for the library's own modules built on the handle (the
 * streams, uploadFile, the CLI) and for tests: no part of the API, which the package root
 * does not export it from.
 */
export function fileState(file: SegmentFile): FileState {
  return stateOf(file)
}

export class SegmentFile {
  static {
    stateOf = (file) => file.core
  }

  private queue: Promise<unknown> = Promise.resolve()
  private sticky: unknown
  private closed = false
  private readonly reader: Reader
  private readonly sendAhead: SendAhead
  private readonly writer: BlockWriter
  /** The cleaner running in the background, if any (retainCheckpoints). */
  private cleaning: Promise<void> | undefined
  private cleanAgain = false
  private wal: OpenedWal | undefined
  /** An atomic group is open in the log (walBegin, not yet walCommit). */
  private walGroup = false
  /** The background publish under way (publish()), settled: flush, rollback, close and the next publish wait for it. */
  private publishing: Promise<unknown> = Promise.resolve()

  private constructor(
    private readonly core: FileState,
    readonly readOnly: boolean,
    read: ReadOptions,
  ) {
    this.reader = new Reader(core, read)
    this.sendAhead = new SendAhead(core)
    this.writer = new BlockWriter(core, this.sendAhead, this.reader, dirtyLimit(core.settings))
  }

  /** Highest dirty-tier use seen (bytes), for tests and benchmarks. */
  get peakDirtyBytes(): number {
    return this.writer.peakDirtyBytes
  }

  /** Partial segments written under memory pressure. */
  get partials(): number {
    return this.writer.partials
  }

  /**
   * Starts a new container in `store`; ERR_CONFLICT if it already has a checkpoint. Nothing
   * is written before the first flush, but for what a WAL given replays (published before
   * the create returns, as an open's replay is).
   *
   * `signal` is the create's alone, as open's is that call's (see open): it aborts the
   * create's requests (the HEAD of the commit point, the LIST of the numbers taken, and a
   * WAL replay's publish, as OPEN_SIGNAL does), and the create rejects with ERR_ABORTED as
   * soon as it fires; a handle such a create gives later is closed, which releases its log.
   */
  static async create(store: ObjectStore, options: CreateOptions = {}): Promise<SegmentFile> {
    const what = () => `SegmentFile.create in ${store.url}`
    let checked: ReturnType<typeof checkCreateOptions>
    try {
      checked = checkCreateOptions(store, options)
    } catch (err) {
      throw asError(err, what)
    }
    return SegmentFile.untilAborted(what, options.signal, (signal) =>
      SegmentFile.createHandle(store, options, checked, signal),
    )
  }

  /** `create` once its arguments are checked; `signal`: the create's (see create). */
  private static async createHandle(
    store: ObjectStore,
    settings: CreateOptions,
    checked: ReturnType<typeof checkCreateOptions>,
    signal?: AbortSignal,
  ): Promise<SegmentFile> {
    const { s, read } = checked
    if (await hasInode(store, signal)) {
      throw StreamSegmentError.conflict(`${store.url}: a container exists here already (open it instead)`)
    }
    const none = emptyInode()
    const base = emptyInode({
      format: s.format === 'parted' ? FORMAT_PARTED : FORMAT_STREAM,
      dataShift: Math.log2(s.dataBlockSize),
      metaShift: Math.log2(s.metaBlockSize),
      ctimeMs: Date.now(),
    })
    const state = new FileState(store, s, base, none, undefined)
    state.skipTo(await firstFreeCno(store, 1, signal))
    const file = new SegmentFile(state, false, read)
    // The publish of what the log replays hears the caller's signal, or the library's own caller's (OPEN_SIGNAL).
    if (settings.wal !== undefined) await file.attachWal(settings.wal, stopOf(settings) ?? signal)
    return file
  }

  /**
   * Opens the latest checkpoint (or `cno`); ERR_NOT_FOUND when the container has none.
   * A writer reads the commit point (HEAD for its ETag, then GET), and first publishes
   * the next checkpoint if its part 0 is complete but was never published, built on that
   * very inode (container/inode.ts, `rollForward`: one LIST when there is none), and skips the
   * numbers abandoned attempts took. A reader (`readOnly`)
   * GETs `inode` alone, or, given a `cno`, that checkpoint's part 0's header in the format
   * `inode` names (readerCheckpointInode), with as much of part 0 as the first read takes
   * of it (FileState.opened), so it can open a complete checkpoint whose
   * publication was interrupted; a checkpoint without a part 0 was abandoned and is
   * ERR_NOT_FOUND.
   *
   * `signal` is the open's alone, as a `gc`'s is that call's: it aborts the open's
   * requests (a writer's roll-forward and WAL replay as OPEN_SIGNAL does), and the open
   * rejects with ERR_ABORTED as soon as it fires, without waiting for a request that does
   * not hear it (a custom store's): a handle such an open gives later is closed. The
   * handle's own calls never hear it (`abort()` and `close()` stop those).
   */
  static async open(store: ObjectStore, options: OpenOptions = {}): Promise<SegmentFile> {
    checkStore('SegmentFile.open', store)
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      throw StreamSegmentError.invalidArgument(
        `SegmentFile.open: options must be an object, got ${describeValue(options)}`,
      )
    }
    const checked = checkOpenOptions(options)
    return SegmentFile.untilAborted(
      () => `SegmentFile.open of ${store.url}`,
      options.signal,
      (signal) => SegmentFile.openHandle(store, options, checked, signal),
    )
  }

  /**
   * What `make` gives, `make` hearing a signal of its own that fires with `signal` (open's
   * or create's): ERR_ABORTED (the signal's reason as cause) as soon as `signal` fires,
   * without waiting for what does not hear it, and the handle `make` gives later closed.
   * Any other failure that is no Error is ERR_STORE naming the call (`what`).
   */
  private static async untilAborted(
    what: () => string,
    signal: AbortSignal | undefined,
    make: (signal?: AbortSignal) => Promise<SegmentFile>,
  ): Promise<SegmentFile> {
    if (signal === undefined) return make().catch((err) => Promise.reject(asError(err, what)))
    throwIfAborted(signal, what())
    // Its reason is the library's error, which the call rejects with once it fires.
    const stop = new AbortController()
    const onAbort = () => stop.abort(StreamSegmentError.aborted(`${what()} aborted`, signal.reason))
    signal.addEventListener('abort', onAbort, { once: true })
    try {
      return await unlessAborted(make(stop.signal), stop.signal, (late) => {
        late.close().catch(() => undefined)
      })
    } catch (err) {
      throw stop.signal.aborted ? stop.signal.reason : asError(err, what)
    } finally {
      signal.removeEventListener('abort', onAbort)
    }
  }

  /** `open` once its arguments are checked; `signal`: the open's (see open). */
  private static async openHandle(
    store: ObjectStore,
    options: OpenOptions,
    checked: ReturnType<typeof checkOpenOptions>,
    signal?: AbortSignal,
  ): Promise<SegmentFile> {
    const { cno, readOnly, read } = checked
    // What the open writes (a roll-forward's inode write, a replay's publish) hears the
    // caller's signal, or the library's own caller's (OPEN_SIGNAL), which never gives both.
    const writes = stopOf(options) ?? signal
    let opened: OpenedBytes | undefined
    let { inode: published, etag } = await (readOnly && cno !== undefined
      ? readerCheckpointInode(store, cno, signal).then((read) => {
          opened = read.opened
          return { inode: read.inode, etag: undefined }
        })
      : readInode(store, { withEtag: !readOnly, signal }).catch(async (err) => {
          // No inode, but checkpoints: nothing is published there (a reader's open), which
          // "no container here" would deny. Asked only once the open has failed.
          if (readOnly && StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
            if (await hasCheckpointObjects(store, signal).catch(() => false)) throw nothingPublished(store, err)
          }
          throw err
        }))
    let base: Inode = published
    // The format and block sizes are the container's, fixed for its life: checked before
    // a writer changes anything.
    const own = {
      format: base.format === FORMAT_PARTED ? ('parted' as const) : ('stream' as const),
      dataBlockSize: 2 ** base.dataShift,
      metaBlockSize: 2 ** base.metaShift,
    }
    if (!readOnly) {
      // Block sizes the format allows and this library's writer does not make: the
      // container's, not a setting of the caller's.
      try {
        resolveFileSettings(own)
      } catch (err) {
        throw StreamSegmentError.unsupported(
          `${store.url}: a container of ${own.dataBlockSize}-byte data blocks and ${own.metaBlockSize}-byte meta blocks is not one this library writes (${(err as Error).message}); a read-only handle reads it`,
        )
      }
    }
    for (const name of ['format', 'dataBlockSize', 'metaBlockSize'] as const) {
      if (options[name] !== undefined && options[name] !== own[name]) {
        throw StreamSegmentError.invalidArgument(
          `${name} ${options[name]}: the container at ${store.url} has ${own[name]}`,
        )
      }
    }
    // A piece size chosen for blocks of another size (a multiple of the default 4 KiB): named
    // with the container whose blocks it does not fit. One derived (PART_BYTES) is rounded up to them.
    const chunk = options.segmentMpuChunkSize
    const derived = (options as WithHooks)[PART_BYTES] !== undefined
    if (!readOnly && !derived && chunk !== undefined && chunk % own.dataBlockSize !== 0) {
      throw badSetting(
        'segmentMpuChunkSize',
        chunk,
        `must be a multiple of the data block size of the container at ${store.url} (${own.dataBlockSize})`,
      )
    }
    const s = (readOnly ? resolveReadSettings : resolveFileSettings)({ ...withWal(options), ...own })
    if (!readOnly) checkForStore(s, store)
    let firstFree = 0
    if (!readOnly) {
      // The commit point is checked against its part 0 beside the look above it (no round
      // trip more); both are waited for, so nothing goes on after the open has failed.
      const [rolled, checked] = await Promise.allSettled([
        rollForward(store, published, etag as string, {
          afterMs: s.rollForwardAfterMs,
          check: async (inode, publishedCno, objects) =>
            (await checkUnpublished(store, inode, publishedCno, objects, signal)).map((p) => p.message),
          // Its inode write too: cut, the checkpoint is published or left complete for the next
          // writer to roll forward, either of which is a state the container may be in.
          signal: writes,
        }),
        checkCommitPoint(store, { inode: published, etag }, signal),
      ])
      if (checked.status === 'rejected') throw checked.reason
      if (rolled.status === 'rejected') throw rolled.reason
      const above = rolled.value
      firstFree = above.firstFree
      // Every number is taken up to the last: this writer could never publish (a reader can read).
      if (firstFree > MAX_CNO) throw noNumbersLeft(store.url)
      if (above.rolled !== undefined) {
        base = published = above.rolled.inode
        etag = above.rolled.etag
      }
      if (cno !== undefined && cno !== published.cno) {
        if (cno > published.cno) {
          throw StreamSegmentError.notFound(
            `${store.url}: checkpoint ${cno} is not published (the latest is ${published.cno}): a writer opens the published checkpoint or an older one; a complete checkpoint above it, if there is one, opens with readOnly: true`,
          )
        }
        ;({ inode: base, opened } = await readCheckpointInode(store, cno, { format: published.format, signal }))
      }
    }
    log('open %s at checkpoint %d (%d bytes)', store.url, base.cno, base.size)
    const state = new FileState(store, s, base, published, etag)
    // Part 0's bytes the open read beyond its header: the first read of that object takes them.
    state.opened.bytes = opened
    // A writer's first object must not land on a number an abandoned attempt took: that
    // would move the checkpoint at its first collision and lose what was sent ahead.
    state.skipTo(firstFree)
    const file = new SegmentFile(state, readOnly, read)
    if (options.wal !== undefined) await file.attachWal(options.wal, writes)
    return file
  }

  /**
   * Opens the WAL and replays what it holds past the published checkpoint, then publishes
   * it. A log built on an older checkpoint than the published one is either this writer's
   * (it published, then died before it started a new log: a checkpoint published since
   * holds the records already) or lost a race to another writer: with conflictPolicy
   * 'fail' the second is ERR_CONFLICT, the log kept; with 'retry' the records are
   * published on top. A log with nothing to replay is moved onto the published checkpoint,
   * so that what is logged from now on is read as written on it. When it fails, the handle
   * is closed (closeFailedOpen). `stop` (OPEN_SIGNAL) aborts the handle meanwhile, as
   * abort() would: the publish of what was replayed stops as a flush does, and the log is kept.
   */
  private async attachWal(o: WalOptions, stop: AbortSignal | undefined): Promise<void> {
    const onStop = () => this.abort(stop?.reason)
    if (stop?.aborted) onStop()
    else stop?.addEventListener('abort', onStop, { once: true })
    try {
      await this.replayWal(o)
    } finally {
      stop?.removeEventListener('abort', onStop)
    }
  }

  private async replayWal(o: WalOptions): Promise<void> {
    const replayed = new ReplayEffect()
    const history = new PublishedHistory(this.core.store, this.core.published, this.core.signal)
    const misplaced = walPlacementProblem(o.dir, this.core.store)
    if (misplaced !== undefined) await this.closeFailedOpen(StreamSegmentError.invalidArgument(`wal.dir ${misplaced}`))
    const opened = await openWal(
      o,
      this.core.store.url,
      { cno: this.core.published.cno, ctimeMs: this.walCtimeMs },
      {
        apply: async (r) => {
          replayed.add(r)
          await this.apply(r)
        },
        // A generation started by a publish of `cno`: the records before it are skipped
        // only when that publish landed (`cno` is in the container's published history: a
        // publish that failed, or never ended, left the number to another writer or to
        // nobody) and the checkpoint holds their effect (a publish of another writer that
        // took the number does not).
        heldBy: async (cno) => {
          if (!(await history.has(cno)) || !(await this.heldBy(cno, replayed))) return false
          await this.discardChanges()
          replayed.clear()
          return true
        },
      },
    ).catch((err) => this.closeFailedOpen(err))
    this.wal = opened
    const { replay } = opened
    log('wal %s: replayed %d records (skipped %d) on checkpoint %d', o.dir, replay.records, replay.skipped, this.cno)
    try {
      if (replay.records === 0) {
        await this.settleWal(opened.log)
        return
      }
      // The first records replayed build on a checkpoint this container never published:
      // the log is of another history at this URL (a container removed and made again, or
      // restored). Replaying it would write its changes into content it never saw.
      if ((replay.baseCno ?? 0) > this.core.published.cno) {
        throw StreamSegmentError.conflict(
          `WAL ${o.dir}: its records apply to checkpoint ${replay.baseCno}, which the container at ${this.core.store.url} never published (its latest is ${this.core.published.cno}): the log is of another history of this container; it is kept, nothing was published`,
        )
      }
      if (opened.foreign !== undefined) {
        throw StreamSegmentError.conflict(
          `WAL ${o.dir}: its records were written on checkpoint ${replay.baseCno} of another container at ${this.core.store.url} (made at ${isoTime(opened.foreign)}; this one was made at ${isoTime(this.walCtimeMs)}): the container was removed and made again since; the log is kept, nothing was published`,
        )
      }
      const base = replay.baseCno ?? 0
      if (base < this.core.published.cno) {
        // This writer's flush (or publish) may have published the records, and the process
        // died before it started a new log; another writer may have published on top since.
        // A checkpoint of the history from the log's base on that holds their effect says so.
        for (const cno of await history.above(base)) {
          if (await this.heldBy(cno, replayed)) {
            await this.discardChanges()
            // Found published, as those a generation's checkpoint holds: skipped, not applied.
            replay.skipped += replay.records
            replay.records = 0
            replay.baseCno = undefined
            await this.settleWal(opened.log, true)
            return
          }
        }
        if (this.core.settings.conflictPolicy === 'fail') {
          throw StreamSegmentError.conflict(
            `WAL ${o.dir}: its records apply to checkpoint ${replay.baseCno}, and checkpoint ${this.core.published.cno} was published since by another writer (the log is kept)`,
          )
        }
      }
      await this.flush()
    } catch (err) {
      await this.closeFailedOpen(err)
    }
  }

  /**
   * Closes the handle whose open failed (the replay, or its publish), with its log and the
   * log's lock when they were opened, and throws the open's error: a close that fails too
   * is logged, not thrown in its place.
   */
  private async closeFailedOpen(err: unknown): Promise<never> {
    await this.close().catch((closeErr) =>
      log('%s: closing after the open failed (%s): %s', this.core.store.url, (err as Error)?.message ?? err, closeErr),
    )
    throw err
  }

  /**
   * After a replay that left nothing to publish: a log not on the published checkpoint of
   * this container (left on an older one, of a container made again since, or holding
   * records found published: `emptied`) starts afresh on it. Otherwise the files before
   * the current one (their records were found published) go. A failure is logged: the
   * switch is made again before the next logged call, and an open meanwhile finds the old
   * records published.
   */
  private async settleWal(wal: WalLog, emptied = false): Promise<void> {
    const { cno } = this.core.published
    const ctimeMs = this.walCtimeMs
    try {
      if (emptied || wal.baseCno !== cno || (ctimeMs !== 0 && wal.ctimeMs !== ctimeMs)) await wal.reset(cno, ctimeMs)
      else if (this.walReplay?.skipped) await wal.dropBefore(wal.generation)
    } catch (err) {
      log('wal %s: the log was not moved onto checkpoint %d: %s', wal.dir, cno, (err as Error)?.message ?? err)
    }
  }

  /**
   * Whether checkpoint `cno` already holds the effect of the records replayed (`effect`):
   * replaying them on it would change nothing. Their bytes (what this handle reads over the
   * ranges they touched: those values come from the records alone) are compared with the
   * checkpoint's, and so is the size they leave it at.
   */
  private async heldBy(cno: number, effect: ReplayEffect): Promise<boolean> {
    let theirs: SegmentFile
    try {
      theirs = await SegmentFile.open(this.core.store, { readOnly: true, cno })
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return false // dropped by the cleaner
      throw err
    }
    try {
      if (effect.sizeAfter(theirs.size) !== theirs.size) return false
      for (const [offset, length] of effect.touched) {
        const end = Math.min(offset + length, theirs.size)
        for (let at = offset; at < end; at += WAL_PIECE) {
          const n = Math.min(WAL_PIECE, end - at)
          const [mine, other] = await Promise.all([this.reader.read(at, n), theirs.read(at, n)])
          if (Buffer.compare(mine, other) !== 0) return false
        }
      }
      return true
    } catch (err) {
      if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) return false
      throw err
    } finally {
      await theirs.close()
    }
  }

  /** Undoes every change made since the checkpoint this handle is on (the replayed records found published). */
  private async discardChanges(): Promise<void> {
    await this.sendAhead.abandon()
    this.sendAhead.check()
    this.core.rollback()
    this.reader.clear()
  }

  /**
   * Applies a replayed record (not logged again). A write or zeroes of no bytes is never
   * logged now (the call changes nothing), but a log written by an earlier version may hold
   * one: that version grew the file to its offset, and the log replays as it was written.
   */
  private apply(r: WalRecord): Promise<void> {
    if (r.kind !== 'truncate' && (r.kind === 'write' ? r.data.byteLength : r.length) === 0) {
      // Checked as a call's range is: growing past the largest file would publish an inode
      // no reader takes. The replay reports the refusal as the log's corruption.
      checkRange(r.kind === 'write' ? 'write' : 'writeZeroes', r.offset, 0, this.core.blockSize)
      this.core.grow(r.offset)
      return Promise.resolve()
    }
    if (r.kind === 'write') return this.writer.write(r.offset, r.data)
    if (r.kind === 'zeroes') return this.writer.writeZeroes(r.offset, r.length)
    return this.writer.truncate(r.size)
  }

  /** Starts the log afresh on the checkpoint just published (or kept), and deletes what it holds. */
  private async rotateWal(): Promise<void> {
    const w = this.wal
    if (w === undefined) return
    await w.log.reset(this.core.published.cno, this.walCtimeMs)
  }

  /**
   * The creation time of the container, as the log records it: the published inodes' (0
   * for a container made before they held it: no log is then told apart by it), or, before
   * a new container's first checkpoint, the one it will publish.
   */
  private get walCtimeMs(): number {
    return this.core.published.cno > 0 ? this.core.published.ctimeMs : this.core.base.ctimeMs
  }

  /**
   * Opens an atomic group in the WAL: the writes, zeroes and truncates logged from now on
   * are replayed by a later open only if `walCommit()` was logged after them, so a writer
   * that dies inside the group leaves the container as if the group never began (the write
   * stream makes its whole stream one group). A flush or publish inside a group is refused
   * (it would make part of it visible); rollback ends the group with the changes.
   */
  walBegin(): Promise<void> {
    return this.run('walBegin', true, async () => {
      const wal = this.requireWal('walBegin')
      if (this.walGroup) throw StreamSegmentError.state('walBegin: an atomic group is open already')
      await wal.appendBegin()
      this.walGroup = true
    })
  }

  /** Ends the atomic group: once this resolves (fsynced with sync 'always'), a replay applies the group whole. */
  walCommit(): Promise<void> {
    return this.run('walCommit', true, async () => {
      const wal = this.requireWal('walCommit')
      if (!this.walGroup) throw StreamSegmentError.state('walCommit: no atomic group is open')
      await wal.appendCommit()
      this.walGroup = false
    })
  }

  private requireWal(what: string): WalLog {
    const wal = this.wal?.log
    if (wal === undefined) throw StreamSegmentError.state(`${what}: this file has no WAL`)
    return wal
  }

  private refuseInGroup(what: string): void {
    if (this.walGroup) {
      throw StreamSegmentError.state(`${what}: an atomic group is open in the WAL (walCommit() first, or rollback())`)
    }
  }

  /** What the open found in the WAL (undefined without one). */
  get walReplay(): WalReplay | undefined {
    return this.wal?.replay
  }

  /**
   * The settings alone, as resolveSettings gives them: without the fan-out and test hooks
   * the handle derives (which create and open refuse as unknown), and a copy, so that
   * changing it leaves the handle's own as they are.
   */
  get settings(): Settings {
    const { maxNodeEntries, abortWaitMs, ...settings } = this.core.settings
    return settings
  }

  /** The file's size, unflushed writes included. */
  get size(): number {
    return this.core.size
  }

  /** The checkpoint this handle last opened or published. */
  get cno(): number {
    return this.core.base.cno
  }

  /**
   * For progress displays: body bytes of every upload request that completed (objects
   * sent ahead, partial segments, flush parts; an upload that failed and was sent again
   * counts twice) and requests carrying bodies in flight now.
   */
  get progress(): { uploadedBytes: number; requestsInFlight: number } {
    return { uploadedBytes: this.core.uploader.uploadedBytes, requestsInFlight: this.core.uploader.slots.inUse }
  }

  /** Bytes held in the dirty tier now. */
  get dirtyBytes(): number {
    return this.core.tier.usedBytes
  }

  /**
   * Writes `data` at `offset`: a Buffer or Uint8Array, or any other ArrayBufferView, whose
   * bytes (not elements) are written. With `{ adopt: true }` the caller hands the bytes over:
   * runs of whole blocks (from a block boundary of the file, at least 256 KiB at 4 KiB
   * blocks) are kept as they are, not copied, until the object holding them is stored;
   * the rest is copied. The caller must then not change `data` until the checkpoint
   * holding them is published (or the handle closed). Adopted bytes count against the
   * dirty limit like copied ones. With a WAL the bytes are logged first, then applied.
   */
  write(offset: number, data: ArrayBufferView, options?: { adopt?: boolean }): Promise<void> {
    // Checked before the call is queued: a bad argument fails this call only.
    let bytes: Uint8Array
    try {
      bytes = bytesOf('write: bytes', data)
      checkWriteOptions(options)
    } catch (err) {
      return Promise.reject(err)
    }
    const adopt = options?.adopt === true
    const wal = this.wal?.log
    const n = bytes.byteLength
    const call = () => `write of ${n} bytes at ${offset} of ${this.core.store.url}`
    if (wal === undefined) return this.run('write', true, () => this.writer.write(offset, bytes, adopt), call)
    return this.run(
      'write',
      true,
      async () => {
        checkRange('write', offset, bytes.byteLength, this.core.blockSize)
        // A write of no bytes changes nothing, and logs nothing. Each piece is logged once what
        // may fail is done, before the file changes (BlockWriter.write); logged whole, so a
        // write failing inside it (its buffer detached) leaves the log ahead of the handle
        // until the next flush: a replay applies the piece whole (docs/wal.md).
        const length = bytes.byteLength
        for (let at = 0; at < length; at += WAL_PIECE) {
          // Detached or shrunk meanwhile (BlockWriter.write says why it is checked).
          if (bytes.byteLength !== length) {
            throw StreamSegmentError.invalidArgument(
              `write: the bytes' ArrayBuffer was detached or shrunk once ${at} of the ${length} bytes at ${offset} were written`,
            )
          }
          const piece = bytes.subarray(at, at + WAL_PIECE)
          const call = { offset, length, before: at }
          await this.writer.write(offset + at, piece, adopt, () => wal.appendWrite(offset + at, piece), call)
        }
      },
      call,
    )
  }

  /**
   * Writes [offset, offset + length) by reference: the bytes are `source`'s from
   * `sourceOffset` on, read only when the object holding them is sent (or the flush, or a
   * read, needs them), never held in the dirty tier; the dirty limits do not apply to
   * them. Blocks only partly covered are read at once and written by value. Contract: the
   * source gives the same bytes until the flush that publishes them returns.
   */
  writeRef(offset: number, length: number, source: BlockSource, sourceOffset = 0): Promise<void> {
    return this.run(
      'writeRef',
      true,
      async () => {
        if (this.wal !== undefined) {
          throw StreamSegmentError.invalidArgument(
            'writeRef: a write by reference is not logged; with a WAL, write by value',
          )
        }
        await this.writer.writeRef(offset, length, source, sourceOffset)
      },
      () => `writeRef of ${length} bytes at ${offset} of ${this.core.store.url}`,
    )
  }

  writeZeroes(offset: number, length: number): Promise<void> {
    return this.run(
      'writeZeroes',
      true,
      async () => {
        checkRange('writeZeroes', offset, length, this.core.blockSize)
        if (length === 0) return // changes nothing (BlockWriter.write): nothing to log
        // Logged once what may fail is done, before the file changes (BlockWriter.writeZeroes).
        const wal = this.wal?.log
        await this.writer.writeZeroes(
          offset,
          length,
          wal === undefined ? undefined : () => wal.appendZeroes(offset, length),
        )
      },
      () => `writeZeroes of ${length} bytes at ${offset} of ${this.core.store.url}`,
    )
  }

  truncate(size: number): Promise<void> {
    return this.run(
      'truncate',
      true,
      async () => {
        checkSize('truncate', size, this.core.blockSize)
        // Logged once what may fail is done, before the file changes (BlockWriter.truncate).
        const wal = this.wal?.log
        await this.writer.truncate(size, wal === undefined ? undefined : () => wal.appendTruncate(size))
      },
      () => `truncate to ${size} bytes of ${this.core.store.url}`,
    )
  }

  read(offset: number, length: number): Promise<Uint8Array> {
    return this.run(
      'read',
      false,
      async () => {
        checkRange('read', offset, length, this.core.blockSize)
        const end = Math.min(offset + length, this.core.size)
        // Refused here, not by Buffer.allocUnsafe: its RangeError, taken for a bug, would make
        // the handle unusable and lose its unflushed writes.
        if (end - offset > constants.MAX_LENGTH) {
          throw StreamSegmentError.invalidArgument(
            `read: ${end - offset} bytes at ${offset} is more than a Buffer holds (${constants.MAX_LENGTH}): read it in parts, or into memory of yours with readInto`,
          )
        }
        if (end <= offset) return new Uint8Array(0)
        return this.reader.read(offset, end - offset)
      },
      () => `read of ${length} bytes at ${offset} of ${this.core.store.url}`,
    )
  }

  /**
   * Reads the bytes from `offset` into `into` (memory the caller owns and may reuse: no
   * buffer is made for the bytes; a Buffer, a Uint8Array or any ArrayBufferView, filled
   * byte by byte) and resolves to how many were read: fewer than `into.byteLength` at the
   * end of the file, and the rest of `into` is left as it was. Otherwise as `read`. On
   * failure, resolves only once nothing writes into `into` any more; what it holds then is
   * unspecified.
   */
  readInto(offset: number, into: ArrayBufferView): Promise<number> {
    return this.run(
      'read',
      false,
      async () => {
        const target = bytesOf('readInto: target', into)
        checkRange('readInto', offset, target.byteLength, this.core.blockSize)
        const end = Math.min(offset + target.byteLength, this.core.size)
        if (end <= offset) return 0
        await this.reader.readInto(offset, target.subarray(0, end - offset))
        return end - offset
      },
      () => `readInto of ${into.byteLength} bytes at ${offset} of ${this.core.store.url}`,
    )
  }

  /**
   * Publishes a checkpoint with everything written so far (a no-op when nothing changed),
   * in parts when it is larger than one object. Waits for a background publish under way first.
   */
  flush(): Promise<FlushTiming> {
    return this.run('flush', true, async () => {
      this.refuseInGroup('flush')
      await this.publishing
      await this.sendAhead.drain()
      const timing = await flush(this.core)
      if (timing.objects > 0) this.retain()
      if (this.wal !== undefined && (timing.objects > 0 || this.wal.log.holdsRecords)) {
        // What the log holds is published: a log that cannot start afresh (a full disk) does
        // not undo that. The switch is made again before the next logged call (which fails
        // while it cannot be), and an open meanwhile finds the records published.
        await this.rotateWal().catch((err) =>
          log('wal %s: the log was not started afresh after checkpoint %d: %s', this.wal?.log.dir, timing.cno, err),
        )
      }
      return timing
    })
  }

  /**
   * Publishes a checkpoint with everything written so far as one object, part 0, in the
   * background: the handle takes the next calls as soon as the object is built (its bytes
   * pinned in memory, and reads of them served from there until it lands); writes from
   * then on build the next checkpoint. Resolves once the checkpoint is published (the same
   * timing as flush), or rejects when it was not: its changes then stay, for the next
   * publish or flush. With a WAL, the log is cut to the records after it once it lands.
   * A checkpoint larger than segmentMaxObjectBytes, or holding writes by reference, is
   * refused (ERR_STATE): flush() writes those. A publish waits for the one before it to
   * settle; a no-op when nothing changed.
   */
  publish(): Promise<FlushTiming> {
    return this.run('publish', true, async () => {
      this.refuseInGroup('publish')
      await this.publishing
      await this.sendAhead.drain()
      const job = await startPublish(this.core)
      if (job === undefined) return { landed: flush(this.core) } // nothing changed: its timing
      this.publishing = job.landed.catch(() => undefined)
      const wal = this.wal?.log
      // Records appended from now on are the next checkpoint's: a new log file, based on
      // this one; the old file goes once this checkpoint is published. A new file that
      // cannot be made (a full disk) does not stop the publish under way: it is made
      // before the next logged call, which fails while it cannot be.
      const closed = wal?.generation
      await wal
        ?.rotate(job.cno, this.walCtimeMs)
        .catch((err) => log('wal %s: no new log file for checkpoint %d: %s', wal.dir, job.cno, err))
      const landed = job.landed.then(async (timing) => {
        this.retain()
        // A file left behind is harmless: a replay finds its records in this checkpoint and skips them.
        if (closed !== undefined) {
          await this.wal?.log.dropBefore(closed + 1).catch((err) => log('wal: old log files not removed: %s', err))
        }
        return timing
      })
      this.publishing = landed.catch(() => undefined)
      return { landed }
    }).then(({ landed }) =>
      // Its failures come after the call's (run's): one that is no Error is said as run says it.
      landed.catch((err: unknown) => Promise.reject(asError(err, () => `publish of ${this.core.store.url}`))),
    )
  }

  /**
   * Automatic retention (`retainCheckpoints`): the cleaner runs in the background after a
   * flush that published, one run at a time; it never fails a call, its failures are
   * logged. `close` waits for it.
   */
  private retain(): void {
    const { retainCheckpoints: keep, retainGraceMs: graceMs } = this.core.settings
    if (keep === 0) return
    if (this.cleaning !== undefined) {
      this.cleanAgain = true // once the run under way ends
      return
    }
    const store = this.core.store
    // This writer's next checkpoint is spared: its objects may be in flight already.
    const spareFromCno = this.core.published.cno + 1
    this.cleaning = gc(store, { keep, graceMs, spareFromCno, signal: this.core.signal })
      .then(
        (r) =>
          log(
            'retention on %s: kept %o, deleted %d objects (%d bytes), left %d younger than the grace period (%d bytes), held %d of numbers %o below a checkpoint a writer rolls forward to (%d bytes)',
            store.url,
            r.kept,
            r.deletedObjects,
            r.deletedBytes,
            r.youngObjects,
            r.youngBytes,
            r.heldObjects,
            r.heldCnos,
            r.heldBytes,
          ),
        (err) => log('retention on %s failed: %s', store.url, (err as Error)?.message ?? err),
      )
      .finally(() => {
        this.cleaning = undefined
        if (this.cleanAgain && !this.closed) {
          this.cleanAgain = false
          this.retain()
        }
      })
  }

  /** Waits until every object sent ahead so far has completed (or failed: its blocks then go again). */
  settle(): Promise<void> {
    return this.run('settle', false, async () => {
      await this.sendAhead.settle()
      this.sendAhead.check()
    })
  }

  /**
   * Discards every change since the last checkpoint this handle opened or published. With a
   * WAL the log gives them up too: it starts afresh on the published checkpoint, or, when
   * its new file cannot be made (a full disk), its files are removed (the new file is made
   * before the next logged call, which fails while it cannot be), so that no open replays
   * them. When neither can be done the rollback rejects, the changes given up by the
   * handle all the same; the log is voided before the next logged call, or by close().
   */
  rollback(): Promise<void> {
    return this.run('rollback', true, async () => {
      await this.publishing
      await this.sendAhead.abandon()
      this.sendAhead.check()
      this.core.rollback()
      this.reader.clear()
      this.walGroup = false
      await dropLeftPart0s(this.core)
      const wal = this.wal?.log
      if (wal === undefined) return
      await wal.discard(this.core.published.cno, this.walCtimeMs).catch((err) => {
        const code = StreamSegmentError.is(err) ? err.code : 'ERR_STORE'
        throw new StreamSegmentError(
          code,
          `rollback: the changes are given up, but the log still holds them (${(err as Error)?.message ?? err}): they are voided before the next logged call, or by close()`,
          { cause: err },
        )
      })
    })
  }

  /**
   * Closes the handle, discarding what was not flushed: uploads in flight are waited for,
   * the open multipart upload is aborted. Runs after an abort or a failure too. With a WAL
   * the log stays, for the next open with its folder to replay; `discardWal: true` empties
   * it instead (what it holds past the published checkpoint is never published: for a
   * writer that gave its changes up, as the write stream destroyed during its flush does).
   * A read-only handle's requests still in flight then (those of a read stream or a
   * download on it) are aborted.
   */
  close(options: { discardWal?: boolean } = {}): Promise<void> {
    let discardWal: boolean
    try {
      if (typeof options !== 'object' || options === null || Array.isArray(options)) {
        throw StreamSegmentError.invalidArgument(`close: options must be an object, got ${describeValue(options)}`)
      }
      checkOptionNames('close', options, ['discardWal'])
      const given = (options as { discardWal?: unknown }).discardWal
      if (given !== undefined && typeof given !== 'boolean') {
        throw StreamSegmentError.invalidArgument(`close: discardWal must be true or false, got ${describeValue(given)}`)
      }
      discardWal = given === true
    } catch (err) {
      return Promise.reject(err) // the handle stays open
    }
    const p = this.queue.then(async () => {
      if (this.closed) {
        // A close whose voiding of the log failed kept it (closeWal): this one tries again.
        await this.closeWal(discardWal)
        return
      }
      this.closed = true
      try {
        await this.publishing
        await this.sendAhead.abandon()
        await dropLeftPart0s(this.core)
        this.cleanAgain = false
        while (this.cleaning !== undefined) await this.cleaning
        this.core.tier.clear()
      } finally {
        // A read-only handle's requests still in flight once its calls have settled (a
        // read stream's read-ahead, the GETs of a walk beside one that failed) are of no
        // use to anyone: cut, they no longer keep the process alive.
        if (this.readOnly && !this.core.signal.aborted) {
          this.core.abort.abort(StreamSegmentError.aborted(`${this.core.store.url}: the file was closed`))
        }
        // The block map's nodes and the cached summaries go, as the dirty tier did: a handle
        // held after close (a write stream keeps its `file`) keeps none of them. Any walk
        // still in flight (cut just above) holds the nodes it reached.
        this.core.dropNodes()
        this.reader.clear()
        await this.closeWal(discardWal)
      }
    })
    this.queue = p.catch(() => undefined)
    // One that is no Error is said as run says it.
    return p.catch((err: unknown) => Promise.reject(asError(err, () => `close of ${this.core.store.url}`)))
  }

  /**
   * Closes the log and releases its folder, voiding what it holds first with `discardWal`.
   * A voiding that fails (no new log file can be made, and no file removed) rejects and
   * keeps the log open and its folder locked: no other writer replays what was given up
   * meanwhile, and a close again tries again (the reset stays pending, so a plain close
   * tries too, and then releases the folder whatever comes of it).
   */
  private async closeWal(discardWal: boolean): Promise<void> {
    const wal = this.wal
    if (wal === undefined) return
    if (discardWal) {
      await wal.log.discard(this.core.published.cno, this.walCtimeMs).catch((err) => {
        const code = StreamSegmentError.is(err) ? err.code : 'ERR_STORE'
        throw new StreamSegmentError(
          code,
          `close: the log still holds the changes given up (${(err as Error)?.message ?? err}): it stays open, its folder ${wal.log.dir} locked, until a close again voids it (or the process ends: the next open then replays them)`,
          { cause: err },
        )
      })
    } else if (wal.log.resetPending) {
      // A reset that could not be made (a rollback, or a flush, on a full disk): what
      // the log holds was given up or published. Voided now, not replayed by the next open.
      await wal.log
        .discard(this.core.published.cno, this.walCtimeMs)
        .catch((err) => log('wal %s: the log was not voided at close: %s', wal.log.dir, err))
    }
    this.wal = undefined
    await wal.log.close().finally(() => wal.release())
  }

  /** Aborts every request in flight and makes the handle unusable; nothing more is published. */
  abort(reason?: unknown): void {
    const err = StreamSegmentError.is(reason)
      ? reason
      : StreamSegmentError.aborted(`${this.core.store.url}: aborted`, reason)
    this.sticky ??= err
    this.core.abort.abort(err)
  }

  // --- internals ---

  /**
   * Runs `fn` as the call `what` once the calls before it are done. A failure that is no
   * Error (a custom store's rejection with `undefined` or a string) is ERR_STORE naming the
   * call (`call`, or `what` of the container) and showing the value, its cause: a store
   * failure, after which the handle stays usable, not a bug (nor, being `undefined`, no
   * failure at all to the sticky check).
   */
  private run<T>(what: string, writes: boolean, fn: () => Promise<T>, call?: () => string): Promise<T> {
    const p = this.queue.then(async () => {
      if (this.sticky !== undefined) throw this.sticky
      if (this.closed) throw StreamSegmentError.state(`${what}: the file is closed`)
      if (writes && this.readOnly) throw StreamSegmentError.state(`${what}: the file is open read-only`)
      try {
        return await fn()
      } catch (thrown) {
        const err = asError(thrown, call ?? (() => `${what} of ${this.core.store.url}`))
        if (StreamSegmentError.is(err, 'ERR_INTERNAL') || !(err instanceof StreamSegmentError)) this.sticky ??= err
        // An abort answers as itself, but for one that left the publication unknown: that says so.
        if (this.core.signal.aborted) throw isUnknownOutcome(err) ? err : (this.sticky ?? err)
        throw err
      }
    })
    this.queue = p.catch(() => undefined)
    return p
  }
}

/** SegmentFile.create's store and options, each checked before any request: the settings and read options. */
function checkCreateOptions(
  store: ObjectStore,
  options: CreateOptions,
): { s: ReturnType<typeof resolveFileSettings>; read: Required<ReadOptions> } {
  checkStore('SegmentFile.create', store)
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw StreamSegmentError.invalidArgument(
      `SegmentFile.create: options must be an object, got ${describeValue(options)}`,
    )
  }
  checkOptionNames('SegmentFile.create', options, ['wal', 'signal'], { settings: true, read: true })
  checkSettingValues(options) // as given: withWal replaces streamSegmentBytes
  const s = resolveFileSettings(withWal(options))
  const read = resolveReadOptions(options)
  checkForStore(s, store)
  if (options.wal !== undefined) checkWalOptions(options.wal)
  const { signal } = options as { signal?: unknown }
  if (signal !== undefined && !isSignal(signal)) {
    throw StreamSegmentError.invalidArgument(
      `SegmentFile.create: signal must be an AbortSignal, got ${describeValue(signal)}`,
    )
  }
  return { s, read }
}

/** SegmentFile.open's options, each checked before any request: its cno, readOnly and read options. */
function checkOpenOptions(options: OpenOptions): {
  cno: number | undefined
  readOnly: boolean
  read: Required<ReadOptions>
} {
  const { cno, readOnly = false } = options
  checkCno('SegmentFile.open', cno)
  // Any truthy value would open a reader: a string "false" from a configuration, say.
  if (typeof readOnly !== 'boolean') {
    throw StreamSegmentError.invalidArgument(
      `SegmentFile.open: readOnly must be true or false, got ${describeValue(readOnly)}`,
    )
  }
  checkOptionNames('SegmentFile.open', options, ['cno', 'readOnly', 'wal', 'signal'], {
    settings: true,
    read: true,
  })
  checkSettingValues(options) // each alone, before any request; together once the inode is read
  if (options.wal !== undefined) {
    if (readOnly) throw StreamSegmentError.invalidArgument('wal: a read-only handle writes no log')
    // A replay applies the log on top of the latest checkpoint: records written on an
    // older one would be applied to other content.
    if (cno !== undefined) {
      throw StreamSegmentError.invalidArgument(
        `wal: a writer with a log opens the latest checkpoint, not checkpoint ${cno} (open without cno, or without wal)`,
      )
    }
    checkWalOptions(options.wal)
  }
  const { signal } = options as { signal?: unknown }
  if (signal !== undefined && !isSignal(signal)) {
    throw StreamSegmentError.invalidArgument(
      `SegmentFile.open: signal must be an AbortSignal, got ${describeValue(signal)}`,
    )
  }
  return { cno, readOnly, read: resolveReadOptions(options) }
}

/**
 * The inode of checkpoint `cno`'s part 0, for a reader: read in the container's format,
 * which the `inode` object names, fetched beside the HEAD that gives the part's size (one
 * request more, no round trip more); with it, the bytes of part 0 read along, for the
 * handle's first read of that object (`opened`). A part 0's end (PartedSegment) or start
 * (StreamSegment) is file content, which can pass for a header of the other format, so
 * the format is detected only when `inode` is missing or unreadable.
 */
async function readerCheckpointInode(
  store: ObjectStore,
  cno: number,
  signal: AbortSignal | undefined,
): Promise<{ inode: Inode; opened: OpenedBytes | undefined }> {
  const { header, opened } = await readPart0Header(store, cno, containerFormat(store, signal), signal)
  return { inode: header.inode, opened }
}

/** `write`'s options: none, or an object whose `adopt` is true or false. */
function checkWriteOptions(options: unknown): void {
  if (options === undefined) return
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw StreamSegmentError.invalidArgument(`write: options must be an object, got ${describeValue(options)}`)
  }
  checkOptionNames('write', options, ['adopt'])
  const { adopt } = options as { adopt?: unknown }
  if (adopt !== undefined && typeof adopt !== 'boolean') {
    throw StreamSegmentError.invalidArgument(`write: adopt must be true or false, got ${describeValue(adopt)}`)
  }
}

/**
 * The checkpoints of a container's published history, walked back from the published one
 * (each part 0 names the inode it was built on) as far as asked. A part 0 gone (the
 * cleaner dropped a superseded checkpoint) ends the walk: what is older is not known to
 * have been published.
 */
class PublishedHistory {
  readonly #cnos = new Set<number>()
  #cur: Inode | undefined

  constructor(
    private readonly store: ObjectStore,
    published: Inode,
    private readonly signal: AbortSignal,
  ) {
    this.#cur = published
  }

  /** Whether checkpoint `cno` was published in this container's history (as far as it is known). */
  async has(cno: number): Promise<boolean> {
    await this.#reach(cno)
    return this.#cnos.has(cno)
  }

  /** The checkpoints published after `cno` (as far as known), oldest first. */
  async above(cno: number): Promise<number[]> {
    await this.#reach(cno)
    return [...this.#cnos].filter((c) => c > cno).sort((a, b) => a - b)
  }

  async #reach(cno: number): Promise<void> {
    for (let cur = this.#cur; cur !== undefined && cur.cno > 0; cur = this.#cur) {
      this.#cnos.add(cur.cno)
      if (cur.cno <= cno) return
      try {
        const read = await readObjectHeader(this.store, cur.cno, 0, { format: cur.format, signal: this.signal })
        this.#cur = read.header.baseInode
      } catch (err) {
        if (!StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
        log('history of %s: checkpoint %d has no part 0 (dropped): older ones not known', this.store.url, cur.cno)
        this.#cur = undefined
      }
    }
  }
}

/**
 * What replayed records do to a file, whatever content they are applied to: the ranges
 * whose bytes come from them alone (a write's or zeroes' range, everything from a
 * truncate's size on: cut, then zeros or later records), and the size they leave a file
 * of a given size at (a truncate sets it, a write or zeroes grows it to their end). Over
 * those ranges and that size, a checkpoint the records change nothing in holds them.
 */
class ReplayEffect {
  touched: [number, number][] = []
  /** The size set by the last truncate (undefined: none), and the furthest end written since. */
  #cut: number | undefined
  #end = 0

  add(r: WalRecord): void {
    if (r.kind === 'truncate') {
      this.touched.push([r.size, Number.POSITIVE_INFINITY])
      this.#cut = r.size
      this.#end = 0
      return
    }
    const length = r.kind === 'write' ? r.data.byteLength : r.length
    this.touched.push([r.offset, length])
    this.#end = Math.max(this.#end, r.offset + length)
  }

  sizeAfter(size: number): number {
    return Math.max(this.#cut ?? size, this.#end)
  }

  clear(): void {
    this.touched = []
    this.#cut = undefined
    this.#end = 0
  }
}
