/**
 * Problems capped per object where a hostile or damaged container could make one each by
 * the hundred thousand: the block-map walk of a map whose CRC-valid nodes point at 100,000
 * distinct meta blocks of one object that are garbage (walkMap, inspect, verify, export,
 * ls and gc alike), and the checks of a roll-forward checkpoint whose part 0 has a
 * great many bad data blocks (checkUnpublished). 20 kept per object, one more counting
 * the rest, as inspect and verify keep an object's own.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { exportObject, gc, inspectCheckpoint, listCheckpoints, verifyCheckpoint } from '../../lib/admin/index.js'
import { MAX_PROBLEMS_PER_OBJECT, type Problem, problemCount, walkMap } from '../../lib/admin/map-walk.js'
import { checkUnpublished } from '../../lib/admin/verify.js'
import { readObjectHeader } from '../../lib/container/object-header.js'
import { encodeHeader, HEADER_BYTES, objectLayout } from '../../lib/format/header.js'
import { encodeInodeObject, FORMAT_STREAM, INODE_KEY, type Inode, segmentKey } from '../../lib/format/index.js'
import { type BlockMapNode, encodeNode, nodeCapacity } from '../../lib/format/node.js'
import { pointerLo } from '../../lib/format/pointer.js'
import { SegmentFile } from '../../lib/segment-file.js'
import { resolveRange } from '../../lib/store/common.js'
import { MemoryStore } from '../../lib/store/memory.js'
import type { GetOptions, ListEntry, ListOptions, ObjectInfo, RequestOptions } from '../../lib/store/types.js'
import { rejectsCode } from '../helpers/assert.js'
import { pattern } from '../helpers/pattern.js'

const BS = 4096
/** The damaged nodes pointed at, each a meta block of zeros in DAMAGED. */
const N = 100_000
const DAMAGED = segmentKey(1, 1)
/** Where the crafted index nodes lie: the level-2 node in its first block, the level-1 nodes after it. */
const INDEX = segmentKey(1, 2)

/** Encodes one node into a meta block of its own. */
function nodeBlock(node: Omit<BlockMapNode, 'cno'>): Uint8Array {
  const block = new Uint8Array(BS)
  encodeNode(block, { ...node, cno: 1 })
  return block
}

/**
 * A MemoryStore whose DAMAGED is `bytes` of zeros not held (hundreds of MiB, copied on
 * every put): its GETs answered with zeros, its size told as that, its other objects kept.
 */
class ZerosStore extends MemoryStore {
  constructor(private readonly bytes: number) {
    super()
  }

  override async get(key: string, options?: GetOptions): Promise<Uint8Array> {
    if (key !== DAMAGED || (await super.head(key)) === undefined) return super.get(key, options)
    const [start, end] = resolveRange(options?.range, this.bytes, `${this.url}/${key}`)
    return new Uint8Array(end - start)
  }

  override async head(key: string, options?: RequestOptions): Promise<ObjectInfo | undefined> {
    const info = await super.head(key, options)
    return key === DAMAGED && info !== undefined ? { ...info, size: this.bytes } : info
  }

  override async *list(prefix?: string, options?: ListOptions): AsyncIterable<ListEntry> {
    for await (const e of super.list(prefix, options)) yield e.key === DAMAGED ? { ...e, size: this.bytes } : e
  }
}

/**
 * Checkpoint 1, published, whose map (root of level 3) reaches, through one level-2 node
 * and the level-1 nodes under it (all with valid CRCs, in INDEX), `n` distinct leaves of
 * DAMAGED, block i mapped by the leaf at its unit i: zeros, not nodes.
 */
async function hostileContainer(n: number): Promise<MemoryStore> {
  const store = new ZerosStore(n * BS)
  const f = await SegmentFile.create(store, { format: 'stream', metaBlockSize: BS, dataBlockSize: BS })
  await f.write(0, pattern(0, BS, 1))
  await f.flush()
  await f.close()

  const per = nodeCapacity(BS)
  const level1 = Math.ceil(n / per)
  assert.ok(level1 <= per, 'one level-2 node holds them all')
  const index = new Uint8Array((1 + level1) * BS)
  index.set(
    nodeBlock({
      level: 2,
      count: level1,
      keys: Uint32Array.from({ length: level1 }, (_, j) => j * per),
      ptrHi: new Uint32Array(level1).fill(1),
      ptrLo: Uint32Array.from({ length: level1 }, (_, j) => pointerLo(2, 1 + j)),
    }),
    0,
  )
  for (let j = 0; j < level1; j++) {
    const count = Math.min(per, n - j * per)
    const leaf = (e: number) => j * per + e
    const node = nodeBlock({
      level: 1,
      count,
      keys: Uint32Array.from({ length: count }, (_, e) => leaf(e)),
      ptrHi: new Uint32Array(count).fill(1),
      ptrLo: Uint32Array.from({ length: count }, (_, e) => pointerLo(1, leaf(e))),
    })
    index.set(node, (1 + j) * BS)
  }
  await store.put(INDEX, index)
  await store.put(DAMAGED, new Uint8Array(0)) // read as n * BS zeros

  // Part 0's header, and the inode object, made to name the crafted root.
  const key = segmentKey(1, 0)
  const bytes = Buffer.from(await store.get(key))
  const { header } = await readObjectHeader(store, 1, 0)
  assert.equal(header.format, FORMAT_STREAM, 'its header is its tail')
  const inode: Inode = header.inode
  inode.size = n * BS
  inode.rootLevel = 3
  inode.rootCount = 1
  inode.rootKeys.fill(0)
  inode.rootPtrHi.fill(0)
  inode.rootPtrLo.fill(0)
  inode.rootPtrHi[0] = 1
  inode.rootPtrLo[0] = pointerLo(2, 0)
  encodeHeader(header, bytes, bytes.length - HEADER_BYTES)
  await store.put(key, bytes)
  await store.put(INODE_KEY, encodeInodeObject(inode))
  return store
}

/** Checks that `problems` hold DAMAGED's `n` walk problems capped: 20 nodes kept, one counting the rest. */
function capped(problems: readonly Problem[], label: string, n = N): void {
  const more = problems.filter((p) => p.where === DAMAGED && /more problems$/.test(p.message))
  const nodes = problems.filter((p) => p.what === 'node' && p.where.startsWith(`${DAMAGED} byte `))
  assert.equal(nodes.length, MAX_PROBLEMS_PER_OBJECT, `${label}: ${problems.length} problems`)
  assert.equal(more.length, 1, `${label}: one problem counts the rest`)
  assert.equal(more[0]?.what, 'node')
  assert.equal(more[0]?.code, 'ERR_CORRUPT')
  assert.match(more[0]?.message ?? '', new RegExp(`/${DAMAGED.replace('.', '\\.')}: and ${n - 20} more problems$`))
  assert.equal(more[0]?.more, n - 20, `${label}: the count is a field too`)
  assert.ok(
    problems.every((p) => p === more[0] || p.more === undefined),
    `${label}: no other problem has one`,
  )
  assert.ok(problems.length < 50, `${label}: ${problems.length} problems in all`)
}

describe('the block-map walk of a map pointing at 100,000 damaged nodes of one object', () => {
  let store: MemoryStore
  before(async () => {
    store = await hostileContainer(N)
  })

  it('walkMap keeps 20 of them and counts the rest', async () => {
    const { header } = await readObjectHeader(store, 1, 0)
    const problems: Problem[] = []
    const walk = await walkMap(store, header.inode, problems)
    capped(problems, 'walkMap')
    assert.equal(problems.length, MAX_PROBLEMS_PER_OBJECT + 1)
    assert.equal(problemCount(problems), N, 'counted, they tell of every one')
    assert.match(problems[0]?.message ?? '', new RegExp(`${DAMAGED.replace('.', '\\.')} byte \\d+`))
    // Every pointer reached still counts: the objects' own checks need them.
    assert.equal(walk.reached.get(DAMAGED)?.nodes.length, N)
    assert.equal(walk.nodes, 1 + Math.ceil(N / nodeCapacity(BS)), 'the level-2 node and the level-1 nodes')
  })

  it('verify reports them capped, then the object’s own problem', async () => {
    const { problems } = await verifyCheckpoint(store)
    capped(problems, 'verify')
    assert.ok(
      problems.some((p) => p.what === 'header' && p.where.startsWith(DAMAGED)),
      'its header is zeros too',
    )
  })

  it('gc stops on it and deletes nothing', async () => {
    const keys = async () => {
      const out: string[] = []
      for await (const e of store.list('')) out.push(e.key)
      return out.sort()
    }
    const was = await keys()
    await rejectsCode(gc(store, { graceMs: 0 }), 'ERR_CORRUPT', /cannot be walked whole \(100000 problems, first: /)
    assert.deepEqual(await keys(), was)
  })
})

describe('the walk’s problems capped, as its other callers take them', () => {
  // Each walk of the large one takes a second or two: these callers see a smaller one.
  let store: MemoryStore
  before(async () => {
    store = await hostileContainer(1000)
  })

  it('of 1,000 such nodes: inspect reports them capped, then the object’s own problem', async () => {
    const { problems } = await inspectCheckpoint(store)
    capped(problems, 'inspect', 1000)
    assert.ok(
      problems.some((p) => p.what === 'header' && p.where.startsWith(DAMAGED)),
      'its header is zeros too',
    )
  })

  it('of 1,000 such nodes: export refuses with the first; ls counts the map as not whole', async () => {
    const dest = new MemoryStore()
    await rejectsCode(
      exportObject(store, { store: dest, key: 'out' }),
      'ERR_CORRUPT',
      new RegExp(`export of checkpoint 1: .*${DAMAGED.replace('.', '\\.')} byte \\d+`),
    )
    assert.equal(await dest.head('out'), undefined)
    const list = await listCheckpoints(store)
    assert.deepEqual(
      list.checkpoints.map((c) => [c.cno, c.uniqueBytes]),
      [[1, -1]],
    )
  })
})

describe('the checks of a roll-forward checkpoint with 64 bad data blocks in its part 0', () => {
  it('checkUnpublished keeps 20 of them and counts the rest', async () => {
    const store = new MemoryStore()
    // Default objects: checkpoint 2's 64 blocks all in its part 0, whose slots are checked.
    const f = await SegmentFile.create(store, { format: 'stream', dataBlockSize: BS })
    await f.write(0, pattern(0, 64 * BS, 1))
    await f.flush()
    const published = await store.get(INODE_KEY)
    await f.write(0, pattern(0, 64 * BS, 2))
    assert.equal((await f.flush()).cno, 2)
    await f.close()
    // Left unpublished, as by a writer that stopped before its inode write.
    await store.put(INODE_KEY, published)

    const key = segmentKey(2, 0)
    const { header } = await readObjectHeader(store, 2, 0)
    const layout = objectLayout(header, header)
    assert.equal(header.dataCount, 64)
    const sizes = async () => {
      const out = new Map<string, { size: number }>()
      for await (const e of store.list('')) out.set(e.key, { size: e.size })
      return out
    }
    assert.deepEqual(await checkUnpublished(store, header.inode, 1, await sizes()), [])
    // A byte of every data slot flipped: its CRC in the summary no longer matches.
    const bytes = Buffer.from(await store.get(key))
    for (let slot = 0; slot < header.dataCount; slot++) {
      const at = layout.dataOffset + slot * BS + 100
      bytes[at] = (bytes[at] as number) ^ 0x01
    }
    await store.put(key, bytes)

    const problems = await checkUnpublished(store, header.inode, 1, await sizes())
    const blocks = problems.filter((p) => p.what === 'block' && p.where.startsWith(`${key} byte `))
    assert.equal(blocks.length, MAX_PROBLEMS_PER_OBJECT, JSON.stringify(problems.map((p) => p.where)))
    assert.equal(problems.length, MAX_PROBLEMS_PER_OBJECT + 1)
    const rest = problems.find((p) => p.where === key)
    assert.equal(rest?.what, 'block')
    assert.match(rest?.message ?? '', /0000000002\.0: and 44 more problems$/)
    assert.equal(rest?.more, 44)
    assert.equal(problemCount(problems), 64, 'counted, they tell of every bad block')
  })
})
