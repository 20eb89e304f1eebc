import { StreamSegmentError } from '../errors.js'

type Numbers = Uint8Array | Uint16Array | Uint32Array | Int32Array | Float64Array

/** `bigger`, holding the first `used` entries of `old` (all of them by default): a typed array grown. */
export function grownArray<T extends Numbers>(old: T, bigger: T, used = old.length): T {
  bigger.set(old.subarray(0, used))
  return bigger
}

/**
 * A list of 32-bit unsigned integers that grows as they are pushed, held in a typed array
 * (outside the JS heap, 4 bytes each): for lists as long as a checkpoint's blocks.
 */
export class U32List {
  #items = new Uint32Array(16)
  #length = 0

  get length(): number {
    return this.#length
  }

  push(v: number): void {
    if (this.#length === this.#items.length) {
      this.#items = grownArray(this.#items, new Uint32Array(this.#items.length * 2))
    }
    this.#items[this.#length++] = v
  }

  /** Item `i` (0 ≤ i < length). */
  get(i: number): number {
    return this.#items[i] as number
  }
}

/**
 * The bytes of a caller's buffer: a Uint8Array (a Buffer) as it is, any other typed array or
 * DataView as a Uint8Array over the same memory (its bytes, not its elements, as `fs.write`
 * takes them); anything else is ERR_INVALID_ARGUMENT naming `what` and what was given.
 */
export function bytesOf(what: string, value: unknown): Uint8Array {
  if (!ArrayBuffer.isView(value)) {
    throw StreamSegmentError.invalidArgument(
      `${what} must be a Buffer, a Uint8Array or another ArrayBufferView, got ${describeValue(value)}`,
    )
  }
  try {
    const bytes = value instanceof Uint8Array ? value : new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
    // A typed array whose buffer was detached (transferred to a worker, say) reads as 0
    // bytes: written, it would write nothing, read into, read nothing, both without a word.
    // A view of it throws (a DataView's byteOffset already did above).
    if (bytes.byteLength === 0) bytes.subarray(0, 0)
    return bytes
  } catch {
    // Thrown out of a handle's call, V8's TypeError would be taken for a bug and end the handle.
    throw StreamSegmentError.invalidArgument(
      `${what}: its ArrayBuffer is detached (transferred, to a worker say), or the view lies past the end of its resized buffer`,
    )
  }
}

/** What a value is, for a message: `null`, `undefined`, a type, or a class name. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return String(value)
  if (typeof value === 'string') return `string ${JSON.stringify(value).slice(0, 40)}`
  if (typeof value === 'function') return 'a function'
  if (typeof value !== 'object') return `${typeof value} ${String(value).slice(0, 40)}`
  return (value as object).constructor?.name ?? 'an object'
}

/**
 * A value as given, for a message that shows it: a string quoted (so "1" is not 1), a number
 * as itself (NaN and Infinity, which JSON calls null), a bigint with its `n`, other data as
 * JSON. Never throws: JSON.stringify throws a TypeError on a bigint or a cycle, which would
 * stand in place of the argument error the message was for; what JSON cannot show is
 * described (describeValue).
 */
export function showValue(value: unknown): string {
  if (typeof value === 'number' || value === undefined) return String(value)
  if (typeof value === 'bigint') return `${value}n`
  try {
    return JSON.stringify(value) ?? describeValue(value)
  } catch {
    return describeValue(value)
  }
}

/**
 * `thrown` as an Error: itself when it is one; otherwise ERR_STORE saying that `what` (the
 * call, named only then) failed with that value, kept as the cause. A custom store may
 * reject with anything, and a rejection with `undefined` reads as no error at all to a
 * caller that tests what it caught.
 */
export function asError(thrown: unknown, what: string | (() => string)): Error {
  if (thrown instanceof Error) return thrown
  const call = typeof what === 'string' ? what : what()
  return StreamSegmentError.store(`${call} failed with ${showValue(thrown)}, which is not an Error`, thrown)
}
