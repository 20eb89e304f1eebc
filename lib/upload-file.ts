/**
 * `uploadFile(path, url)`: a local file written into a container by reference, as a new
 * checkpoint replacing its content. Its blocks are read from the file only when the object
 * holding them is sent, so memory stays at the pieces in flight whatever the file's size;
 * the file must not change until this returns (the block-source contract).
 */
import { open } from 'node:fs/promises'
import type { FlushTiming } from './checkpoint.js'
import type { BlockSource } from './dirty-tier.js'
import { StreamSegmentError } from './errors.js'
import type { Settings } from './settings.js'
import { openStore, type StoreLocation } from './store/open.js'
import type { ObjectStore } from './store/types.js'
import { openForAppend } from './write-stream.js'

/** A block source over an open file handle. */
export function fileSource(fh: {
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>
}): BlockSource {
  return {
    async read(position, length) {
      const out = Buffer.allocUnsafe(length)
      let done = 0
      while (done < length) {
        const { bytesRead } = await fh.read(out, done, length - done, position + done)
        if (bytesRead === 0) {
          throw StreamSegmentError.state(
            `file ended at ${position + done}, ${length - done} bytes short: it changed while being uploaded`,
          )
        }
        done += bytesRead
      }
      return out
    },
  }
}

export async function uploadFile(
  path: string,
  location: StoreLocation | ObjectStore,
  settings: Partial<Settings> = {},
): Promise<FlushTiming> {
  const store = typeof location === 'object' && 'put' in location ? location : openStore(location)
  const fh = await open(path, 'r').catch((err: NodeJS.ErrnoException) => {
    throw err.code === 'ENOENT'
      ? StreamSegmentError.notFound(`${path}: no such file`, err)
      : StreamSegmentError.invalidArgument(`${path}: cannot open (${err.code ?? err.message})`)
  })
  try {
    const { size } = await fh.stat()
    const file = await openForAppend(store, settings)
    try {
      await file.writeRef(0, size, fileSource(fh))
      return await file.flush()
    } finally {
      await file.close()
    }
  } finally {
    await fh.close()
  }
}
