/**
 * A write-ahead log is kept apart from a container in a local folder (a directory store).
 * A log in the container's folder is listed by the store as objects of the container (its
 * `container` and `wal-*.log` files, when it is the folder itself), left behind by `rm`,
 * which deletes only the container's own objects, and lost with the folder to whoever
 * removes or moves it as the container's; a container in the log's folder is lost with the
 * log's. Both are refused before anything is made (SegmentFile's open, and `put --wal`
 * naming its option), on the paths as the file system resolves them (links, `..`, relative
 * paths), parts not made yet taken as written.
 */
import { lstatSync, readlinkSync, realpathSync } from 'node:fs'
import { isAbsolute, join, parse, resolve, sep } from 'node:path'
import { DirectoryStore } from '../store/directory.js'
import type { ObjectStore } from '../store/types.js'

/** How many links resolvedPath follows before it takes the path as written (the kernel's ELOOP is at 40). */
const MAX_LINKS = 40

/**
 * `path` as the file system would resolve it: each existing part with its links followed
 * (so `link/..` is the parent of the link's target, as the kernel takes it; a link to
 * something not made yet too, as a mkdir through it would go), and the parts from the
 * first missing one on appended as written.
 */
export function resolvedPath(path: string): string {
  const absolute = isAbsolute(path) ? path : join(process.cwd(), path)
  const { root } = parse(absolute)
  let at = realpathSync(root)
  const parts = absolute.slice(root.length).split(sep)
  let missing = false
  let links = 0
  for (let part = parts.shift(); part !== undefined; part = parts.shift()) {
    if (part === '' || part === '.') continue
    if (part === '..') {
      at = resolve(at, '..')
      continue
    }
    const next = join(at, part)
    if (missing) {
      at = next
      continue
    }
    let link = false
    try {
      link = lstatSync(next).isSymbolicLink()
    } catch {
      // Not there (or not ours to look at): made later, as written.
      missing = true
    }
    if (!link || ++links > MAX_LINKS) {
      at = next
      continue
    }
    // The link's target in place of the link, resolved part by part as the rest is.
    let target: string
    try {
      target = readlinkSync(next)
    } catch {
      at = next // gone since lstat: taken as written, as a missing part is
      missing = true
      continue
    }
    if (isAbsolute(target)) at = realpathSync(parse(target).root)
    parts.unshift(...target.slice(isAbsolute(target) ? parse(target).root.length : 0).split(sep))
  }
  return at
}

/** Whether `inner` is `outer` or inside it; both resolved. */
function within(inner: string, outer: string): boolean {
  return inner === outer || inner.startsWith(outer.endsWith(sep) ? outer : outer + sep)
}

/**
 * What is wrong with a log folder `dir` beside the container at `store`: in a directory
 * store's folder, or holding it; undefined when nothing is (or the store is not local).
 * Said as "<dir> is inside the container's folder <root>: …", each path with what it
 * resolves to when that differs.
 */
export function walPlacementProblem(dir: string, store: ObjectStore): string | undefined {
  if (!(store instanceof DirectoryStore)) return undefined
  const wal = resolvedPath(dir)
  const container = resolvedPath(store.root)
  const where = (typed: string, real: string) => (typed === real ? typed : `${typed} (${real})`)
  if (within(wal, container)) {
    return (
      `${where(dir, wal)} is ${wal === container ? '' : 'inside '}the container's folder ${where(store.root, container)}: ` +
      'the store would take the log for objects of the container, and rm would leave it there; give a folder outside it'
    )
  }
  if (within(container, wal)) {
    return (
      `${where(dir, wal)} holds the container's folder ${where(store.root, container)}: ` +
      "removing the log's folder would remove the container too; give a folder outside it"
    )
  }
  return undefined
}
