/**
 * The statistics the benchmark programs print (test/helpers/bench.ts): medians of odd and
 * even counts, "median (min–max)", and nearest-rank percentiles.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { median, medianRange, percentile } from './bench.js'

it('median: the middle value of an odd count, the mean of the two middle ones of an even count', () => {
  assert.equal(median([3, 1, 2]), 2)
  assert.equal(median([7]), 7)
  assert.equal(median([4, 1, 3, 2]), 2.5)
  assert.equal(median([10, 20]), 15)
})

it('medianRange: the median, then the smallest and largest, in the order given or not', () => {
  assert.equal(medianRange([0.31, 0.25, 0.4], 2), '0.31 (0.25–0.40)')
  assert.equal(medianRange([4, 1, 3, 2], 1), '2.5 (1.0–4.0)')
})

it('percentile: by nearest rank, so p99 of 100 values is the 99th and p50 of an even count the lower middle', () => {
  const hundred = Array.from({ length: 100 }, (_, i) => 100 - i) // 100 … 1
  assert.equal(percentile(hundred, 99), 99)
  assert.equal(percentile(hundred, 50), 50)
  assert.equal(percentile(hundred, 100), 100)
  assert.equal(percentile(hundred, 1), 1)
  const twenty = Array.from({ length: 20 }, (_, i) => i + 1)
  assert.equal(percentile(twenty, 99), 20)
  assert.equal(percentile(twenty, 50), 10)
  assert.equal(percentile([5], 99), 5)
  assert.equal(percentile([5], 0), 5)
})
