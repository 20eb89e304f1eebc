/**
 * nodeSpans (container/nodes.ts), which cuts the node pointers into one object into the
 * spans a walk reads: the same spans and refs as the plain definition below on random
 * pointers (aligned or not, repeated, needed or not), and spans over a million pointers
 * into one object (a hostile map's), which the plain definition takes minutes over.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type NodeSpan, nodeSpans } from '../../lib/container/nodes.js'
import { prng } from '../helpers/containers.js'

interface Ref {
  offset: number
  needed: boolean
  n: number
}

/**
 * The spans by their definition, every step over every ref: cut the needed refs into
 * spans of at most `cap` bytes, widen each over the others (rightwards first) while it
 * stays under `cap` and clear of its neighbours, give each ref to the first span holding it.
 */
function plainSpans(refs: readonly Ref[], mbs: number, cap: number): NodeSpan<Ref>[] {
  const sorted = [...refs].sort((a, b) => a.offset - b.offset)
  const spans: NodeSpan<Ref>[] = []
  for (const r of sorted) {
    if (!r.needed) continue
    const last = spans[spans.length - 1]
    if (last !== undefined && r.offset + mbs - last.start <= cap) last.end = Math.max(last.end, r.offset + mbs)
    else spans.push({ start: r.offset, end: r.offset + mbs, refs: [] })
  }
  for (let j = 0; j < spans.length; j++) {
    const s = spans[j] as NodeSpan<Ref>
    const lowest = j > 0 ? (spans[j - 1] as NodeSpan<Ref>).end : 0
    const highest = j + 1 < spans.length ? (spans[j + 1] as NodeSpan<Ref>).start : Number.POSITIVE_INFINITY
    for (const r of sorted) {
      if (r.offset >= s.end && r.offset + mbs <= highest && r.offset + mbs - s.start <= cap) s.end = r.offset + mbs
    }
    for (let k = sorted.length - 1; k >= 0; k--) {
      const r = sorted[k] as Ref
      if (r.offset < s.start && r.offset >= lowest && s.end - r.offset <= cap) s.start = r.offset
    }
  }
  for (const r of sorted) spans.find((x) => r.offset >= x.start && r.offset + mbs <= x.end)?.refs.push(r)
  return spans
}

const shape = (spans: NodeSpan<Ref>[]) =>
  spans.map((s) => ({ start: s.start, end: s.end, refs: s.refs.map((r) => r.n) }))

describe('nodeSpans', () => {
  it('gives the spans and refs of the plain definition on random pointers', () => {
    const rnd = prng(7)
    for (let round = 0; round < 2000; round++) {
      const mbs = [512, 4096, 16384][round % 3] as number
      const cap = mbs * (1 + Math.floor(rnd() * 40))
      // Aligned in most rounds; unaligned (overlapping nodes) and repeated pointers in others.
      const unit = round % 4 === 0 ? 512 : mbs
      const count = Math.floor(rnd() * 60)
      const refs: Ref[] = Array.from({ length: count }, (_, n) => ({
        offset: Math.floor(rnd() * 200) * unit,
        needed: rnd() < 0.6,
        n,
      }))
      assert.deepEqual(
        shape(nodeSpans(refs, mbs, cap)),
        shape(plainSpans(refs, mbs, cap)),
        `round ${round}: mbs ${mbs}, cap ${cap}, offsets ${refs.map((r) => `${r.offset}${r.needed ? '' : '?'}`).join(' ')}`,
      )
    }
  })

  it('cuts a million pointers into one object, every needed one in a span of at most the cap', () => {
    const mbs = 4096
    const cap = 1024 * 1024
    const rnd = prng(11)
    const refs: Ref[] = Array.from({ length: 1_000_000 }, (_, n) => ({
      offset: Math.floor(rnd() * 4_000_000) * mbs,
      needed: rnd() < 0.5,
      n,
    }))
    const spans = nodeSpans(refs, mbs, cap)
    assert.ok(spans.length > 1000, `${spans.length} spans`)
    const given = new Set<number>()
    for (const [j, s] of spans.entries()) {
      assert.ok(s.end - s.start <= cap, `span ${j}: ${s.end - s.start} bytes`)
      if (j > 0) assert.ok(s.start >= (spans[j - 1] as NodeSpan<Ref>).end, `span ${j} overlaps the one before`)
      for (const r of s.refs) {
        assert.ok(r.offset >= s.start && r.offset + mbs <= s.end, `ref ${r.n} outside span ${j}`)
        assert.ok(!given.has(r.n), `ref ${r.n} in two spans`)
        given.add(r.n)
      }
    }
    const lost = refs.filter((r) => r.needed && !given.has(r.n))
    assert.deepEqual(lost, [], 'every needed ref in a span')
  })
})
