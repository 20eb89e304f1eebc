/**
 * The file the processes of test/helpers/multiproc-child.ts write, which checks itself:
 * block 0 is a manifest naming the round that wrote the checkpoint and, for every other
 * block, the tag of the round that wrote it last; each block holds its tag and index over
 * and over (`blockBytes`). So a torn or mixed checkpoint tells from its bytes alone
 * (`checkContent`).
 */
import type { ObjectStore } from '../../lib/store/types.js'
import { smallSettings } from './small-settings.js'

export const BLOCK = 4096
/** Blocks of the file, the manifest's among them. */
export const BLOCKS = 48
/** Small nodes and objects: a round sends several objects ahead before its part 0. */
export const SETTINGS = smallSettings

/**
 * SETTINGS for `store`: on one that takes no multipart piece under some size (S3: 5 MiB),
 * pieces that large, so that the small objects go up in one PutObject each.
 */
export function settingsFor(store: ObjectStore): typeof SETTINGS {
  const min = store.minPartBytes ?? 0
  return min > (SETTINGS.segmentMpuChunkSize ?? 0) ? { ...SETTINGS, segmentMpuChunkSize: min } : SETTINGS
}

/** Block `i` as round `tag` writes it. */
export function blockBytes(tag: string, i: number): Buffer {
  return Buffer.alloc(BLOCK, `${tag}:${i};`)
}

/** The manifest block: the round's tag, then the tags of blocks 1.. (an empty string for a hole). */
export function manifestBytes(tags: readonly string[]): Buffer {
  const b = Buffer.alloc(BLOCK, ' ')
  b.write(JSON.stringify(tags))
  return b
}

export function parseManifest(b: Uint8Array): string[] {
  const text = Buffer.from(b).toString().trim()
  return text === '' ? Array(BLOCKS).fill('') : (JSON.parse(text) as string[])
}

/**
 * Undefined when `bytes` is a file these processes wrote whole (its manifest names the tag
 * of every block, each block is that round's); else what is wrong, naming the block.
 */
export function checkContent(bytes: Uint8Array): string | undefined {
  if (bytes.length !== BLOCK * BLOCKS) return `size ${bytes.length}, not ${BLOCK * BLOCKS}`
  let tags: string[]
  try {
    tags = parseManifest(bytes.subarray(0, BLOCK))
  } catch (err) {
    return `the manifest does not parse: ${(err as Error).message}`
  }
  for (let i = 1; i < BLOCKS; i++) {
    const want = tags[i] === '' ? Buffer.alloc(BLOCK) : blockBytes(tags[i] as string, i)
    const got = Buffer.from(bytes.subarray(i * BLOCK, (i + 1) * BLOCK))
    if (!got.equals(want)) return `block ${i} is not round ${tags[i]}'s: ${got.subarray(0, 24).toString()}`
  }
  return undefined
}

/** The tag of the round that wrote the checkpoint whose first block is `manifest`. */
export function roundOf(manifest: Uint8Array): string {
  return parseManifest(manifest)[0] as string
}
