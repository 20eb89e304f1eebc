/** What the directory store's tests share. */

/** The ETag of an object whose file has no sidecar of its own (written before sidecars, or copied): its file's identity. */
export function legacyEtag(st: { ino: number; size: number; mtimeMs: number }): string {
  return `${st.ino.toString(16)}-${st.size.toString(16)}-${Math.round(st.mtimeMs * 1000).toString(16)}`
}
