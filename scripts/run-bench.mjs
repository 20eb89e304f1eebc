// Runs every compiled benchmark program (dist/esm/test/bench/*.js) in turn, sorted, each in its
// own process with its default settings (no arguments), its tables printed as they come.
// Arguments filter the programs by substring of their file name: `npm run bench -- read crc32`.
//
// Benchmarks that use S3 (their code mentions s3-env or AWS_ENDPOINT_URL_S3) get the same
// server as the tests (scripts/s3-server.mjs): the one of AWS_ENDPOINT_URL_S3, else radosgw
// started for the run on free ports in a private folder (RGW_BASE is passed on, so that
// s3-upload.js can read the server's CPU time) and stopped afterwards.
// Ends with a summary (seconds and exit code of each); exits 1 when any benchmark failed.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT, run, s3ServerIfNeeded } from './s3-server.mjs'

process.chdir(ROOT)
const DIR = 'dist/esm/test/bench'

let all
try {
  all = readdirSync(DIR).filter((f) => f.endsWith('.js'))
} catch (err) {
  console.error(`no compiled benchmarks in ${DIR} (${err.code ?? err.message}): run 'npm run build' first`)
  process.exit(1)
}
const filters = process.argv.slice(2)
const benches = all.filter((f) => filters.length === 0 || filters.some((x) => f.includes(x))).sort()
if (benches.length === 0) {
  console.error(`no benchmarks match ${filters.join(' ')} (there are: ${all.sort().join(' ')})`)
  process.exit(1)
}

const usesS3 = (f) => /s3-env|AWS_ENDPOINT_URL_S3/.test(readFileSync(join(DIR, f), 'utf8'))
const server = await s3ServerIfNeeded(benches.some(usesS3), 'benchmark')

// The SDK's warning that its later versions need a newer Node would print into every table.
const env = { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', ...server.env }
const results = []
for (const f of benches) {
  console.log(`\n## bench: ${f}`)
  const t0 = performance.now()
  const r = await run(process.execPath, ['--enable-source-maps', join(DIR, f)], { stdio: 'inherit', env })
  results.push({ f, seconds: (performance.now() - t0) / 1000, exit: r.code ?? r.signal })
}
server.stop()

console.log('\n## bench summary')
console.log('| benchmark | seconds | exit |')
console.log('|---|---:|---:|')
for (const { f, seconds, exit } of results) console.log(`| ${f} | ${seconds.toFixed(1)} | ${exit} |`)
const failed = results.filter((x) => x.exit !== 0)
console.log(
  failed.length === 0
    ? `# ${results.length} benchmark${results.length === 1 ? '' : 's'} ran, all exited 0`
    : `# ${failed.length} of ${results.length} benchmarks failed: ${failed.map((x) => x.f).join(' ')}`,
)
process.exit(failed.length === 0 ? 0 : 1)
