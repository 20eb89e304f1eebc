// A CommonJS `require` usable from both builds (this file is always CommonJS), for
// optional and CommonJS-only dependencies resolved at run time, and for dependencies
// loaded on first use.
export function optionalRequire<T>(id: string): T | undefined {
  try {
    return require(id) as T
  } catch {
    return undefined
  }
}

/** `require(id)`: a dependency loaded when first needed, not when the library is imported. */
export function requireLater<T>(id: string): T {
  return require(id) as T
}
