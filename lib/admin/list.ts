/**
 * The checkpoints of a container, for `ls` (and any caller).
 *
 * - A checkpoint is openable when its part 0 exists. Parts of a cno without a part 0 are
 *   an abandoned attempt: listed apart, never openable (ERR_NOT_FOUND naming the cno);
 *   but for the published number's, whose entry says its part 0 is gone.
 * - A part 0 newer than the published inode is a complete checkpoint whose publication
 *   was interrupted ('unpublished'). So is one below it that is not in its history (each
 *   part 0 names the inode it was built on, the one it replaced: the chain gc keeps too):
 *   a writer that lost a conflict stored it, then published its view under a later
 *   number. Below where that chain cannot be followed (a part 0 on it gone or unreadable)
 *   an older one is 'complete', as it may have been published. With an `inode` object that cannot be read (damaged,
 *   gone, a newer layout), which checkpoint is published is not known: every state is
 *   'unknown', never one that claims it. Every part 0 is read in the container's format,
 *   which the `inode` object names (an object's far end is file content, which could
 *   pass for a header of the other format); detected only when `inode` is missing or
 *   unreadable (container/object-header.ts).
 * - Sizes come from one listing, so every header is checked against its object's real size.
 * - Each complete checkpoint's block map is walked to say which objects only it reaches:
 *   the bytes dropping it would free (`uniqueBytes`, what `gc` would delete).
 */
import { containerFormat, nothingPublished, readInode, sameInode } from '../container/inode.js'
import { type ContainerListing, listContainer, listOpenUploads } from '../container/listing.js'
import { nodeLocation } from '../container/nodes.js'
import { readObjectHeader } from '../container/object-header.js'
import { StreamSegmentError, throwIfAborted } from '../errors.js'
import type { Header } from '../format/header.js'
import type { Inode } from '../format/inode.js'
import { INODE_KEY, parseKey, segmentKey } from '../format/names.js'
import { checkCallOptions, checkCno } from '../settings.js'
import { type StoreLocation, storeAt } from '../store/open.js'
import type { MultipartUpload, ObjectStore } from '../store/types.js'
import { Limiter } from '../util/limiter.js'
import { asError } from '../util/typed-arrays.js'
import {
  isLeafObjects,
  isUnreadable,
  type KnownNode,
  leafObjects,
  type NodePlace,
  newProblem,
  type Problem,
  toProblem,
  walkMap,
} from './map-walk.js'

export interface CheckpointEntry {
  cno: number
  /** The file's size at this checkpoint (from its part 0's inode; −1 when unreadable). */
  size: number
  /** Objects this checkpoint wrote (its parts), and their bytes. */
  objects: number
  bytes: number
  /** When it was made (its inode's mtime, ms since the epoch). */
  timeMs: number
  /**
   * 'published': the one the `inode` object names; 'complete': an older one, published
   * once (in the published one's history, or older than where that can be followed);
   * 'unpublished': one the inode never named, a newer one or an older one not in that
   * history (a writer that lost a conflict); 'unknown': any, when the `inode` object cannot
   * be read (`inodeError`), so that which one is published is not known.
   */
  state: 'published' | 'complete' | 'unpublished' | 'unknown'
  /** The checkpoint it was built on, as its part 0's header says (0: the container's first; −1 when unreadable). */
  baseCno: number
  /**
   * 'unpublished' only: whether a writer opening the container could publish it (roll it
   * forward; never one below the published checkpoint), once its part 0 is older than
   * `rollForwardAfterMs` and its content checks out: it is built on exactly the published
   * checkpoint, or on an unpublished one that could be (its writer stopped between part 0
   * and the inode). Of several built on the same one, a roll-forward publishes at most one
   * (the first in number order that is old enough and checks out), and the others never:
   * each is marked, as gc keeps each. False for one built on another (a writer that lost to
   * another, or gave its changes up): never published.
   */
  rollsForward?: boolean
  /**
   * Bytes of the objects only this checkpoint's block map reaches (its part 0 among
   * them): what dropping it would free. −1 when its map could not be walked whole.
   */
  uniqueBytes: number
  /** Why its part 0 could not be read, if it could not. */
  error?: string
}

export interface AbandonedCheckpoint {
  cno: number
  parts: number
  bytes: number
  /**
   * The multipart uploads open under its keys (an interrupted upload whose claim is its
   * part listed), when there are any, and the bytes their parts hold so far: not in `bytes`
   * (−1 when not known: see OpenUploads).
   */
  openUploads?: number
  openUploadBytes?: number
}

/**
 * The multipart uploads open under the container's segment keys: what interrupted writers
 * sent of objects never completed, stored but in no object (nor in `storedBytes`). A put of
 * the same file resumes one younger than 30 minutes; gc aborts those older than its grace
 * period; rm aborts them all.
 */
export interface OpenUploads {
  /** How many are open. */
  count: number
  /**
   * The bytes the parts of those sized hold so far (listParts without MD5s); −1 when none
   * could be (a store without listParts): never 0 for bytes not known.
   */
  bytes: number
  /**
   * How many of them `bytes` leaves out: the store cannot list parts (or refused to), or more
   * were open than an ls sizes (MAX_UPLOADS_SIZED, the newest first).
   */
  unsized: number
  /**
   * Set when the store refused to list the uploads (ERR_AUTH: its message); `count` and
   * `bytes` are then −1, not known. Any other failure fails the listing.
   */
  refused?: string
}

export interface CheckpointList {
  /** The checkpoint the `inode` object names (0: none, or unreadable: see `inodeError`). */
  published: number
  inodeError?: string
  checkpoints: CheckpointEntry[]
  abandoned: AbandonedCheckpoint[]
  /** Bytes of every segment object stored in the container. */
  storedBytes: number
  /** The open multipart uploads, and what their parts hold (not in `storedBytes`). */
  uploads: OpenUploads
}

/** The most open uploads whose parts an ls lists (one ListParts each), the newest first. */
export const MAX_UPLOADS_SIZED = 200

/**
 * Every checkpoint of the container, oldest first, and the abandoned attempts.
 * A store rejection that is no Error (a store outside the contract) is ERR_STORE naming
 * the call and the container (asError).
 */
export async function listCheckpoints(
  where: StoreLocation | ObjectStore,
  options: { signal?: AbortSignal } = {},
): Promise<CheckpointList> {
  const store = storeAt(where, 'listCheckpoints')
  return await listOf(store, options).catch((err) => {
    throw asError(err, () => `listCheckpoints of ${store.url}`)
  })
}

async function listOf(store: ObjectStore, options: { signal?: AbortSignal }): Promise<CheckpointList> {
  checkCallOptions('listCheckpoints', options, ['signal'])
  const { signal } = options
  throwIfAborted(signal, `listCheckpoints of ${store.url}`)
  const listing = await listContainer(store, signal)
  let published = 0
  let publishedInode: Inode | undefined
  let format: number | undefined
  let inodeError: string | undefined
  if (listing.hasInode) {
    try {
      publishedInode = (await readInode(store, { signal })).inode
      ;({ cno: published, format } = publishedInode)
    } catch (err) {
      if (!isUnreadable(err)) throw err
      inodeError = err.message
    }
  }
  const { checkpoints, abandoned, inodes, bases } = await readCheckpoints(
    store,
    listing,
    inodeError === undefined ? published : undefined,
    format,
    signal,
  )
  markRollForward(checkpoints, publishedInode, inodes, bases)
  markOffHistory(checkpoints, published, bases)
  await countUniqueBytes(store, listing, checkpoints, inodes, signal)
  let storedBytes = 0
  for (const size of listing.sizes.values()) storedBytes += size
  const uploads = await sizeOpenUploads(store, abandoned, signal)
  return {
    published,
    ...(inodeError === undefined ? {} : { inodeError }),
    checkpoints,
    abandoned,
    storedBytes,
    uploads,
  }
}

/**
 * The open uploads under the container's segment keys (one listing of uploads), each of
 * the MAX_UPLOADS_SIZED newest sized by its parts (listParts with `md5: false`, 8 at a
 * time: no part's bytes read); what each abandoned checkpoint's hold is set on its entry.
 * An upload gone meanwhile (completed or aborted: ERR_NOT_FOUND) is not counted.
 */
async function sizeOpenUploads(
  store: ObjectStore,
  abandoned: AbandonedCheckpoint[],
  signal: AbortSignal | undefined,
): Promise<OpenUploads> {
  let open: MultipartUpload[]
  try {
    open = await listOpenUploads(store, signal)
  } catch (err) {
    // A store that lets the objects be listed but not the uploads (an S3 user without
    // s3:ListBucketMultipartUploads): the checkpoints are listed all the same.
    if (!StreamSegmentError.is(err, 'ERR_AUTH')) throw err
    return { count: -1, bytes: -1, unsized: 0, refused: err.message }
  }
  const listParts = store.listParts?.bind(store)
  const byCno = new Map(abandoned.map((a) => [a.cno, a]))
  const newest = [...open].sort((a, b) => b.initiatedMs - a.initiatedMs)
  /** Each upload sized: its parts' bytes, or GONE (completed or aborted meanwhile). */
  const sizes = new Map<MultipartUpload, number>()
  const GONE = -1
  let gone = 0
  if (listParts !== undefined) {
    const limiter = new Limiter(8)
    await Promise.all(
      newest.slice(0, MAX_UPLOADS_SIZED).map((u) =>
        limiter.run(async () => {
          throwIfAborted(signal, `listCheckpoints of ${store.url}`)
          try {
            const parts = await listParts(u.key, u.uploadId, { signal, md5: false })
            sizes.set(
              u,
              parts.reduce((n, p) => n + p.size, 0),
            )
          } catch (err) {
            if (StreamSegmentError.is(err, 'ERR_NOT_FOUND')) {
              gone++
              sizes.set(u, GONE)
            } else if (!StreamSegmentError.is(err, 'ERR_AUTH')) throw err
            // Its parts not to be listed (no s3:ListMultipartUploadParts): counted, not sized.
          }
        }),
      ),
    )
  }
  let bytes = 0
  let sized = 0
  let unsized = 0
  for (const u of open) {
    const size = sizes.get(u)
    if (size === GONE) continue
    if (size === undefined) unsized++
    else {
      bytes += size
      sized++
    }
    const k = parseKey(u.key)
    const a = k?.kind === 'segment' ? byCno.get(k.cno) : undefined
    if (a === undefined) continue
    a.openUploads = (a.openUploads ?? 0) + 1
    a.openUploadBytes = size === undefined || a.openUploadBytes === -1 ? -1 : (a.openUploadBytes ?? 0) + size
  }
  return {
    count: open.length - gone,
    bytes: sized === 0 && unsized > 0 ? -1 : bytes,
    unsized,
  }
}

/**
 * Every cno of the listing: a complete checkpoint (its part 0's header read, in `format`,
 * for its size, time and inode; a header that fails its checks is its entry's `error`),
 * or an abandoned attempt. Both sorted by cno. `published` undefined: not known (the
 * inode object could not be read), every state 'unknown'.
 */
async function readCheckpoints(
  store: ObjectStore,
  listing: ContainerListing,
  published: number | undefined,
  format: number | undefined,
  signal: AbortSignal | undefined,
): Promise<{
  checkpoints: CheckpointEntry[]
  abandoned: AbandonedCheckpoint[]
  inodes: Map<number, Inode>
  bases: Map<number, Inode>
}> {
  const checkpoints: CheckpointEntry[] = []
  const abandoned: AbandonedCheckpoint[] = []
  const inodes = new Map<number, Inode>()
  const bases = new Map<number, Inode>()
  const limiter = new Limiter(8)
  await Promise.all(
    [...listing.byCno].map(([cno, c]) =>
      limiter.run(async () => {
        if (!c.parts.includes(0)) {
          // The published one's entry says its part 0 is gone (publishedWithoutPart0).
          if (cno !== published) abandoned.push({ cno, parts: c.parts.length, bytes: c.bytes })
          return
        }
        const entry: CheckpointEntry = {
          cno,
          size: -1,
          objects: c.parts.length,
          bytes: c.bytes,
          timeMs: 0,
          state:
            published === undefined
              ? 'unknown'
              : cno === published
                ? 'published'
                : cno > published
                  ? 'unpublished'
                  : 'complete',
          baseCno: -1,
          uniqueBytes: -1,
        }
        try {
          const size = listing.sizes.get(segmentKey(cno, 0))
          const h = (await readObjectHeader(store, cno, 0, { format, size, signal })).header
          entry.size = h.inode.size
          entry.timeMs = h.inode.mtimeMs
          entry.baseCno = h.baseInode.cno
          inodes.set(cno, h.inode)
          bases.set(cno, h.baseInode)
        } catch (err) {
          if (!isUnreadable(err)) throw err
          entry.error = err.message
        }
        checkpoints.push(entry)
      }),
    ),
  )
  if (published !== undefined && published > 0 && !listing.byCno.get(published)?.parts.includes(0)) {
    checkpoints.push(publishedWithoutPart0(store.url, listing, published))
  }
  checkpoints.sort((a, b) => a.cno - b.cno)
  abandoned.sort((a, b) => a.cno - b.cno)
  return { checkpoints, abandoned, inodes, bases }
}

/**
 * The entry of the published checkpoint `cno` when its part 0 is not listed (an rm stopped
 * part-way deletes the part 0s first and the inode last; or the object was lost): left
 * out, or listed as an abandoned attempt, the container would look as if nothing, or an
 * older checkpoint, were published; readers, gc and export refuse it.
 */
function publishedWithoutPart0(url: string, listing: ContainerListing, cno: number): CheckpointEntry {
  const c = listing.byCno.get(cno)
  const key = segmentKey(cno, 0)
  return {
    cno,
    size: -1,
    objects: c?.parts.length ?? 0,
    bytes: c?.bytes ?? 0,
    timeMs: 0,
    state: 'published',
    baseCno: -1,
    uniqueBytes: -1,
    error: `${url}/${key}: no such object, but the ${INODE_KEY} object names checkpoint ${cno}: the published checkpoint cannot be opened (if an rm of the container was stopped, run rm again)`,
  }
}

/**
 * Sets `rollsForward` on the unpublished checkpoints: whether a roll-forward could publish
 * each (container/inode.ts rollForward). It goes up the numbers from the published inode
 * and publishes the first built on exactly the inode reached so far that is old enough and
 * checks out, then goes on from it; so of two built on the same inode either may be
 * published (the first's part 0 too young, or its content failing the check, the second
 * takes its place), and then the other never is. Every checkpoint built on the published
 * inode, or on one below it that could be published, could be: the ones gc keeps for a
 * roll-forward (admin/gc.ts rollForwardCandidates). `ls` reads no content, so it cannot
 * tell which of them a writer will pick.
 */
function markRollForward(
  checkpoints: CheckpointEntry[],
  published: Inode | undefined,
  inodes: ReadonlyMap<number, Inode>,
  bases: ReadonlyMap<number, Inode>,
): void {
  /** The inodes a roll-forward could reach, by cno: the published one, then each candidate. */
  const reachable = new Map<number, Inode>(published === undefined ? [] : [[published.cno, published]])
  for (const c of checkpoints) {
    if (c.state !== 'unpublished') continue
    const base = bases.get(c.cno)
    const inode = inodes.get(c.cno)
    // A base numbered at or above it is passed before it is reached: never this one's.
    const below = base !== undefined && base.cno < c.cno ? reachable.get(base.cno) : undefined
    c.rollsForward = below !== undefined && inode !== undefined && sameInode(base as Inode, below)
    if (c.rollsForward) reachable.set(c.cno, inode as Inode)
  }
}

/**
 * Marks 'unpublished' (never to be: `rollsForward` false) the checkpoints below the
 * published one that are not in its history, as gc follows it (keptHeaders): from the
 * published checkpoint down, each part 0 names the checkpoint it was built on, the one
 * it replaced. Where a link cannot be read (a part 0 gone, unreadable, or naming no older
 * checkpoint) the chain ends, and what lies below that link is left 'complete': it may be
 * in the history.
 */
function markOffHistory(checkpoints: CheckpointEntry[], published: number, bases: ReadonlyMap<number, Inode>): void {
  if (published === 0) return
  const history = new Set<number>()
  /** The links below this are not known. */
  let floor = published
  for (let cno = published; ; ) {
    history.add(cno)
    const base = bases.get(cno)?.cno
    if (base === undefined || base >= cno) break
    floor = base
    if (base === 0 || !bases.has(base)) break
    cno = base
  }
  for (const c of checkpoints) {
    if (c.state === 'complete' && c.cno > floor && !history.has(c.cno)) {
      c.state = 'unpublished'
      c.rollsForward = false
    }
  }
}

/**
 * Sets each checkpoint's `uniqueBytes`: the bytes of the objects only its block map
 * reaches (its part 0 among them). A map that cannot be walked whole leaves its entry at
 * −1, but what it did reach still counts against the others'. Checkpoints share most of
 * their maps, so each map is walked only where no map before it was (WalkShare.seen), and
 * a subtree passed over is marked once as shared: whatever it reaches is no map's alone.
 * Walking every map whole instead costs checkpoints × map entries, minutes for a long
 * history of a large file. Returns the nodes walked (for tests).
 */
export async function countUniqueBytes(
  store: ObjectStore,
  listing: ContainerListing,
  checkpoints: readonly CheckpointEntry[],
  inodes: ReadonlyMap<number, Inode>,
  signal: AbortSignal | undefined,
): Promise<number> {
  /** The objects each whole map reaches through the nodes it walked, and how many maps reach each so. */
  const reaches = new Map<number, Set<string>>()
  const reachedBy = new Map<string, number>()
  /**
   * Checkpoints share most nodes: each is fetched once for all the walks. A leaf is kept
   * as the objects it reaches (objectsOnly), not decoded: held for the whole listing, the
   * leaves would be 4 KiB each, gigabytes for a file of a few TiB.
   */
  const nodes = new Map<string, KnownNode>()
  const seen = new Map<string, NodePlace>()
  const shared = new SharedSubtrees(nodes)
  let walked = 0
  // The maps one after the other, so that each walk finds in memory the nodes the ones
  // before it fetched.
  for (const entry of checkpoints) {
    const inode = inodes.get(entry.cno)
    if (inode === undefined) continue
    const problems: Problem[] = []
    let whole = true
    const onCovered = (hi: number, lo: number, level: number) => {
      if (!shared.mark(hi, lo, level)) whole = false
    }
    // Which objects it reaches is all this needs: no data pointer recorded (objectsOnly).
    const walk = await walkMap(store, inode, problems, signal, { nodes, seen, onCovered, objectsOnly: true })
    walked += walk.nodes
    const keys = new Set(walk.reached.keys())
    keys.add(segmentKey(entry.cno, 0))
    for (const k of keys) reachedBy.set(k, (reachedBy.get(k) ?? 0) + 1)
    if (problems.length === 0 && whole) reaches.set(entry.cno, keys)
  }
  for (const entry of checkpoints) {
    const keys = reaches.get(entry.cno)
    if (keys === undefined) continue
    entry.uniqueBytes = 0
    for (const k of keys) {
      if (reachedBy.get(k) === 1 && !shared.objects.has(k)) entry.uniqueBytes += listing.sizes.get(k) ?? 0
    }
  }
  return walked
}

/**
 * Subtrees that more than one map reaches, each marked once from the nodes in memory: the
 * objects they reach (`objects`) are no map's alone. A subtree is whole when every node
 * under it is in memory at its level; a node that failed its checks is not passed over
 * (the walk that met it gave up its claim in `seen`, so the next map walks it itself), and
 * one missing below leaves the maps that pass over the subtree not walked whole.
 */
class SharedSubtrees {
  readonly objects = new Set<string>()
  /** Whether the subtree under each node marked is whole. */
  private readonly whole = new Map<string, boolean>()

  constructor(private readonly nodes: ReadonlyMap<string, KnownNode>) {}

  /** Marks the subtree under the node at (hi, lo), reached at `level`; says whether it is whole. */
  mark(hi: number, lo: number, level: number): boolean {
    const id = `${hi}:${lo}`
    const known = this.whole.get(id)
    if (known !== undefined) return known
    this.objects.add(nodeLocation(hi, lo).key)
    const n = this.nodes.get(id)
    // Levels go down by one at each step, so this ends even on a map with a cycle.
    let whole = n !== undefined && n.level === level
    this.whole.set(id, whole)
    if (n === undefined || !whole) return false
    // Of its level (whole): one kept as its objects is a leaf.
    if (level === 0 || isLeafObjects(n)) {
      for (const key of leafObjects(n).objects) this.objects.add(key)
      return true
    }
    for (let i = 0; i < n.count; i++) {
      if (!this.mark(n.ptrHi[i] as number, n.ptrLo[i] as number, level - 1)) whole = false
    }
    this.whole.set(id, whole)
    return whole
  }
}

/**
 * The inode of checkpoint `cno` (default: the published one), with its part 0's header
 * when a cno was given, read in the format the `inode` object names (detected when it is
 * missing or unreadable); ERR_NOT_FOUND for abandoned ones.
 */
export async function resolveCheckpoint(
  store: ObjectStore,
  listing: ContainerListing,
  cno: number | undefined,
  signal?: AbortSignal,
): Promise<{ inode: Inode; part0: Header | undefined }> {
  checkCno('resolveCheckpoint', cno)
  if (cno === undefined) {
    if (!listing.hasInode) {
      throw nothingPublished(store)
    }
    const { inode } = await readInode(store, { signal })
    return { inode, part0: undefined }
  }
  const c = listing.byCno.get(cno)
  if (c === undefined) throw StreamSegmentError.notFound(`${store.url}: no checkpoint ${cno}`)
  if (!c.parts.includes(0)) {
    throw StreamSegmentError.notFound(
      `${store.url}: checkpoint ${cno} was abandoned (${c.parts.length} parts, no part 0): it cannot be opened`,
    )
  }
  const format = listing.hasInode ? await containerFormat(store, signal) : undefined
  const size = listing.sizes.get(segmentKey(cno, 0))
  const part0 = (await readObjectHeader(store, cno, 0, { format, size, signal })).header
  return { inode: part0.inode, part0 }
}

/**
 * resolveCheckpoint for inspect and verify, which report what they find rather than throw
 * it: an entry of the checkpoint that cannot be read (the `inode` object, or with `cno` its
 * part 0: damaged, or of a newer layout) is a problem (`inode` or `header`), and the
 * result undefined. What says there is nothing to look at still throws: no published
 * checkpoint, no such one, an abandoned one (ERR_NOT_FOUND), a bad `cno`, the store's own
 * failures.
 */
export async function resolveOrReport(
  store: ObjectStore,
  listing: ContainerListing,
  cno: number | undefined,
  problems: Problem[],
  signal?: AbortSignal,
): Promise<{ inode: Inode; part0: Header | undefined } | undefined> {
  try {
    return await resolveCheckpoint(store, listing, cno, signal)
  } catch (err) {
    if (!isUnreadable(err) || StreamSegmentError.is(err, 'ERR_NOT_FOUND')) throw err
    problems.push(
      toProblem(err, cno === undefined ? 'inode' : 'header', cno === undefined ? INODE_KEY : segmentKey(cno, 0)),
    )
    return undefined
  }
}

/**
 * Whether the `inode` object names checkpoint `inode` (resolved for `cno`), for inspect and
 * verify: the commit point is checked whatever checkpoint is looked at, as it is the
 * container's entry. No `inode` object beside checkpoints is a problem (nothing is
 * published: false); one that cannot be read too, and then whether it names this one is
 * not known (undefined); one naming this checkpoint but holding another inode than its
 * part 0 is a problem too. With no `cno`, the checkpoint is the one the inode named.
 */
export async function checkPublished(
  store: ObjectStore,
  listing: ContainerListing,
  inode: Inode,
  cno: number | undefined,
  problems: Problem[],
  signal?: AbortSignal,
): Promise<boolean | undefined> {
  if (!listing.hasInode) {
    problems.push(
      newProblem({
        code: 'ERR_NOT_FOUND',
        what: 'missing',
        where: INODE_KEY,
        message: `${store.url}/${INODE_KEY}: no such object, but the container has checkpoints: nothing is published`,
      }),
    )
    return false
  }
  if (cno === undefined) return true
  let published: Inode
  try {
    published = (await readInode(store, { signal })).inode
  } catch (err) {
    problems.push(toProblem(err, 'inode', INODE_KEY))
    return undefined
  }
  if (published.cno !== inode.cno) return false
  if (!sameInode(published, inode)) {
    problems.push(
      newProblem({
        code: 'ERR_CORRUPT',
        what: 'inode',
        where: INODE_KEY,
        message: `${store.url}/${INODE_KEY}: names checkpoint ${inode.cno}, but differs from the inode in its part 0`,
      }),
    )
  }
  return true
}
