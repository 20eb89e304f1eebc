/**
 * Reads file bytes: dirty blocks from memory, stored blocks from their objects.
 *
 * Stored blocks are fetched by ranged GETs, one per run of blocks that are contiguous in
 * one object (capped at READ_RUN_BYTES), several at once. Every block fetched is checked
 * against its object's summary: the slot must hold that block, be live, and match its
 * CRC-32; anything else is ERR_CORRUPT naming the key and offset, never wrong bytes.
 * An object's header and summary are read once (a HEAD, a suffix GET for the header,
 * a ranged GET for the summary) and cached, bounded by OBJECT_CACHE entries.
 */
import { DIRTY_BASE, isDirtyRef } from './block-map.js'
import { crc32 } from './crc32.js'
import { StreamSegmentError } from './errors.js'
import type { FileCore } from './file-core.js'
import { decodeHeader, HEADER_BYTES, SUMMARY_ENTRY_BYTES } from './format/header.js'
import { segmentKey } from './format/names.js'
import { pointerPart, pointerUnit, UNIT_BYTES } from './format/pointer.js'
import { decodeSummary, type Summary } from './format/summary.js'

const READ_RUN_BYTES = 16 * 1024 * 1024
const READ_CONCURRENCY = 8
const OBJECT_CACHE = 1024

interface Run {
  key: string
  cno: number
  part: number
  /** First block's byte offset in the object, and the file blocks it holds in order. */
  start: number
  blocks: number[]
}

export class BasicReader {
  private summaries = new Map<string, Promise<Summary>>()

  constructor(private readonly core: FileCore) {}

  /** Forgets cached summaries (after a rollback or reload nothing cached is wrong, but memory is freed). */
  clear(): void {
    this.summaries.clear()
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    const core = this.core
    const out = Buffer.alloc(length)
    if (length === 0) return out
    const bs = core.blockSize
    const end = offset + length
    const runs: Run[] = []
    let run: Run | undefined
    const ptr: [number, number] = [0, 0]
    for (let b = Math.floor(offset / bs); b * bs < end; b++) {
      if (!core.map.lookup(b, ptr)) {
        await core.map.load(b)
        core.map.lookup(b, ptr)
      }
      const [hi, lo] = ptr
      const from = Math.max(offset, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      if (hi === 0 && lo === 0) continue // a hole: zeros, already there
      if (isDirtyRef(hi, lo)) {
        const slot = lo - DIRTY_BASE
        const so = core.tier.offset(slot) + (from - b * bs)
        core.tier.slab(slot).copy(out, from - offset, so, so + (to - from))
        continue
      }
      const part = pointerPart(lo)
      const at = pointerUnit(lo) * UNIT_BYTES
      if (
        run !== undefined &&
        run.cno === hi &&
        run.part === part &&
        run.start + run.blocks.length * bs === at &&
        (run.blocks.length + 1) * bs <= READ_RUN_BYTES &&
        run.blocks[run.blocks.length - 1] === b - 1
      ) {
        run.blocks.push(b)
      } else {
        run = { key: segmentKey(hi, part), cno: hi, part, start: at, blocks: [b] }
        runs.push(run)
      }
    }
    let next = 0
    const worker = async () => {
      while (next < runs.length) {
        const r = runs[next++] as Run
        await this.fetchRun(r, out, offset, end)
      }
    }
    await Promise.all(Array.from({ length: Math.min(READ_CONCURRENCY, runs.length) }, worker))
    return out
  }

  private async fetchRun(r: Run, out: Uint8Array, offset: number, end: number): Promise<void> {
    const core = this.core
    const bs = core.blockSize
    const [bytes, summary] = await Promise.all([
      core.store.get(r.key, { range: { start: r.start, end: r.start + r.blocks.length * bs }, signal: core.signal }),
      this.summary(r.key, r.cno, r.part),
    ])
    const where = `${core.store.url}/${r.key}`
    if (bytes.byteLength !== r.blocks.length * bs) {
      throw StreamSegmentError.corrupt(
        `${where}: read ${bytes.byteLength} bytes at ${r.start}, expected ${r.blocks.length * bs}`,
      )
    }
    for (let i = 0; i < r.blocks.length; i++) {
      const b = r.blocks[i] as number
      const slotOffset = r.start + i * bs
      const k = slotOffset / bs
      const block = bytes.subarray(i * bs, (i + 1) * bs)
      if (!Number.isInteger(k) || k >= summary.count) {
        throw StreamSegmentError.corrupt(
          `${where}: block ${b} points at offset ${slotOffset}, past the object's ${summary.count} data slots`,
        )
      }
      if (summary.blockIndex[k] !== b || summary.live[k] !== 1) {
        throw StreamSegmentError.corrupt(
          `${where}: slot ${k} holds block ${summary.blockIndex[k]}${summary.live[k] ? '' : ' (dead)'}, the block map says block ${b}`,
        )
      }
      const crc = crc32(block)
      if (crc !== summary.crc[k]) {
        throw StreamSegmentError.corrupt(
          `${where}: block ${b} at offset ${slotOffset} has CRC-32 ${crc.toString(16)}, summary says ${(summary.crc[k] as number).toString(16)}`,
        )
      }
      const from = Math.max(offset, b * bs)
      const to = Math.min(end, (b + 1) * bs)
      out.set(block.subarray(from - b * bs, to - b * bs), from - offset)
    }
  }

  private summary(key: string, cno: number, part: number): Promise<Summary> {
    let p = this.summaries.get(key)
    if (p === undefined) {
      if (this.summaries.size >= OBJECT_CACHE) this.summaries.clear()
      p = this.loadSummary(key, cno, part)
      p.catch(() => this.summaries.delete(key))
      this.summaries.set(key, p)
    }
    return p
  }

  private async loadSummary(key: string, cno: number, part: number): Promise<Summary> {
    const { store, signal } = this.core
    const info = await store.head(key, { signal })
    if (info === undefined)
      throw StreamSegmentError.corrupt(`${store.url}/${key}: the block map points into it, but it does not exist`)
    const header = decodeHeader(await store.get(key, { range: { suffix: HEADER_BYTES }, signal }), info.size, {
      cno,
      part,
    })
    const n = header.dataCount
    const start = info.size - HEADER_BYTES - n * SUMMARY_ENTRY_BYTES
    const bytes =
      n === 0
        ? new Uint8Array(0)
        : await store.get(key, { range: { start, end: start + n * SUMMARY_ENTRY_BYTES }, signal })
    return decodeSummary(bytes, { count: n, summaryCrc: header.summaryCrc, where: `${store.url}/${key}` })
  }
}
