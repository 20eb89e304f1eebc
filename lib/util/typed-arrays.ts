import { StreamSegmentError } from '../errors.js'

type Numbers = Uint8Array | Uint16Array | Uint32Array | Int32Array | Float64Array

/** `bigger`, holding the first `used` entries of `old` (all of them by default): a typed array grown. */
export function grownArray<T extends Numbers>(old: T, bigger: T, used = old.length): T {
  bigger.set(old.subarray(0, used))
  return bigger
}

/**
 * The bytes of a caller's buffer: a Uint8Array (a Buffer) as it is, any other typed array or
 * DataView as a Uint8Array over the same memory (its bytes, not its elements, as `fs.write`
 * takes them); anything else is ERR_INVALID_ARGUMENT naming `what` and what was given.
 */
export function bytesOf(what: string, value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
  throw StreamSegmentError.invalidArgument(
    `${what} must be a Buffer, a Uint8Array or another ArrayBufferView, got ${describeValue(value)}`,
  )
}

/** What a value is, for a message: `null`, `undefined`, a type, or a class name. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return String(value)
  if (typeof value !== 'object') return `${typeof value} ${JSON.stringify(value)?.slice(0, 40)}`
  return (value as object).constructor?.name ?? 'an object'
}
