type Numbers = Uint8Array | Uint16Array | Uint32Array | Int32Array | Float64Array

/** `bigger`, holding the first `used` entries of `old` (all of them by default): a typed array grown. */
export function grownArray<T extends Numbers>(old: T, bigger: T, used = old.length): T {
  bigger.set(old.subarray(0, used))
  return bigger
}
