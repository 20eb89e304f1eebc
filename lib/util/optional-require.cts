// A CommonJS `require` usable from both builds (this file is always CommonJS), for
// optional and CommonJS-only dependencies resolved at run time.
export function optionalRequire<T>(id: string): T | undefined {
  try {
    return require(id) as T
  } catch {
    return undefined
  }
}
