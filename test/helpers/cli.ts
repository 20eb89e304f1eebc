/** What the CLI tests share: the command's path, a quiet environment, and stand-ins for stdout and stderr. */
import { resolve } from 'node:path'

/** The installed command, as a user runs it (it loads `dist/cjs`). */
export const bin = resolve('bin/stream-segment.cjs')

/** The environment with the debug log off (a test may set it again with `more`). */
export function quietEnv(more: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...more }
  if (!('DEBUG' in more)) delete env.DEBUG
  return env
}

/** A stand-in for stdout or stderr, a terminal or not, that keeps what is written. */
export function fakeOutput(isTTY = false) {
  const writes: string[] = []
  const stream = {
    isTTY,
    writes,
    write(chunk: string | Uint8Array) {
      writes.push(String(chunk))
      return true
    },
  }
  return stream as typeof stream & NodeJS.WritableStream
}
