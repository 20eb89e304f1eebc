/**
 * A time since the epoch in ms, for messages and reports: ISO 8601, or the number when no
 * Date holds it. Stored times may be anything up to 2^53 - 1 ms, past a Date's ±8.64e15
 * ms, where toISOString would throw a RangeError instead of the message being given.
 */
export function isoTime(ms: number): string {
  const d = new Date(ms)
  return Number.isNaN(d.getTime()) ? `${ms} ms (not a date)` : d.toISOString()
}
