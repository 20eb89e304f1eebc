/**
 * Digests of a body held as chunks, for the integrity headers S3 servers check: the
 * SHA-256 a signed payload carries (`x-amz-content-sha256`) and `Content-MD5`.
 *
 * Which of the two costs less depends on the CPU: with SHA extensions (x86-64 SHA-NI,
 * ARMv8 crypto) OpenSSL hashes SHA-256 about twice as fast as MD5; without them, about
 * half as fast. `sha256BeatsMd5` times both once per process on a small buffer; the two
 * sides differ by ~2× either way, far more than the timing's noise.
 */
import { createHash } from 'node:crypto'

/** The digest of `chunks` as one body, in `encoding`. */
export function digestChunks(
  algorithm: 'md5' | 'sha256',
  chunks: readonly Uint8Array[],
  encoding: 'hex' | 'base64',
): string {
  const h = createHash(algorithm)
  for (const c of chunks) h.update(c)
  return h.digest(encoding)
}

let sha256Faster: boolean | undefined

/** Whether this process hashes SHA-256 faster than MD5 (measured once, ~2 ms). */
export function sha256BeatsMd5(): boolean {
  if (sha256Faster !== undefined) return sha256Faster
  const sample = Buffer.alloc(256 * 1024, 0x5a)
  const best = { md5: Number.POSITIVE_INFINITY, sha256: Number.POSITIVE_INFINITY }
  for (let round = 0; round < 3; round++) {
    for (const algorithm of ['md5', 'sha256'] as const) {
      const t0 = process.hrtime.bigint()
      createHash(algorithm).update(sample).digest()
      best[algorithm] = Math.min(best[algorithm], Number(process.hrtime.bigint() - t0))
    }
  }
  sha256Faster = best.sha256 < best.md5
  return sha256Faster
}
