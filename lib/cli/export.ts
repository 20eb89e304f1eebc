/** `stream-segment export`: a checkpoint as one plain object on S3, or a local file. */
import { type ExportTarget, exportObject } from '../admin/index.js'
import { StreamSegmentError } from '../errors.js'
import { fileUrlPath } from '../store/open.js'
import { checkS3Env } from '../store/s3-client.js'
import { printable } from '../util/shell-words.js'
import { cnoOption, openContainer, optionName, type Parsed, positionals } from './args.js'
import { type Amount, amountLine, count, formatBytes, jsonLine, type Out, progressOnTerminal } from './output.js'

const EXPORT_USAGE = 'export <url> <s3://bucket/key|file> [--cno N] [--content-type T] [--no-copy] [--json]'

/** `s3://bucket/key` → an S3 target; a path (or file:///path) → itself; other URLs are refused. */
function exportTarget(dest: string, contentType: string | undefined, contentTypeOption: string): ExportTarget {
  const s3 = /^s3:\/\/([^/]+)\/(.+)$/i.exec(dest)
  if (s3 !== null) {
    checkS3Env(`export: ${dest}`) // the client made for a target on S3 uses it too
    return { Bucket: s3[1] as string, Key: s3[2] as string, ContentType: contentType }
  }
  if (/^s3:/i.test(dest)) {
    throw StreamSegmentError.invalidArgument(`export: ${JSON.stringify(dest)} is not s3://bucket/key`)
  }
  if (contentType !== undefined) {
    throw StreamSegmentError.invalidArgument(`export: ${contentTypeOption} applies to an S3 object only`)
  }
  if (dest === '-') {
    throw StreamSegmentError.invalidArgument(
      'export: "-" is not a place to export to (to write a checkpoint to stdout: get URL -)',
    )
  }
  if (/^file:\/\//i.test(dest)) return fileUrlPath(dest, 'export')
  if (/^[a-z][a-z0-9+.-]*:\//i.test(dest)) {
    throw StreamSegmentError.invalidArgument(`export: ${JSON.stringify(dest)}: only s3://bucket/key or a file path`)
  }
  return dest
}

export async function exportCommand(p: Parsed, out: Out, err: Out, signal: AbortSignal): Promise<number> {
  const [url, dest] = positionals(p, 2, 2, EXPORT_USAGE) as [string, string]
  const target = exportTarget(dest, p.options.get('contentType'), optionName(p, 'contentType'))
  const store = openContainer(url)
  const t0 = performance.now()
  // On a terminal, the bytes copied or sent of the export's size, drawn a few times a
  // second once the first report gives the size.
  const progress = progressOnTerminal<Amount>(err, amountLine('export'))
  const report = progress.report
  let r: Awaited<ReturnType<typeof exportObject>>
  try {
    r = await exportObject(store, target, {
      cno: cnoOption(p),
      copy: !p.flags.has('noCopy'),
      // An interrupt removes the temporary file, or aborts the multipart upload.
      signal,
      onProgress: report && ((pr) => report({ done: pr.copiedBytes + pr.sentBytes, total: pr.totalBytes })),
    })
  } finally {
    progress.stop()
  }
  const s = (performance.now() - t0) / 1000
  if (p.flags.has('json')) {
    out.write(jsonLine({ ...r, seconds: s }))
    return 0
  }
  const pct = r.size === 0 ? 0 : (100 * r.copiedBytes) / r.size
  out.write(
    `exported checkpoint ${r.cno} of ${printable(r.url)} to ${printable(r.location)}: ${formatBytes(r.size)} (${r.size} bytes) in ${s.toFixed(2)} s\n` +
      `copied server-side ${r.copiedBytes} bytes (${pct.toFixed(1)} %), sent ${r.sentBytes} bytes; ` +
      `${r.parts === 0 ? 'one object' : `${count(r.parts, 'part')} (${r.copyParts} copied)`}, ` +
      `${count(r.requests, 'request')}` +
      `${r.etag === undefined ? '' : `, ETag ${printable(r.etag)}`}\n`,
  )
  return 0
}
