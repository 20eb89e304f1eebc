/**
 * uploadFile run as its own process, for the resume test that kills it
 * (test/streams/resume-kill-s3.test.ts). Usage: node upload-child.js <store url> <file>
 * Prints `p <bytes>` each time a request carrying a body completed (the bytes uploaded so
 * far), then `done <FlushTiming as JSON>`.
 */
import { fileState } from '../../lib/segment-file.js'
import { openStore } from '../../lib/store/open.js'
import { uploadFile } from '../../lib/streams/upload-file.js'

const [url, path] = process.argv.slice(2)
if (url === undefined || path === undefined) throw new Error('usage: upload-child <store url> <file>')
const timing = await uploadFile(
  path,
  openStore(url),
  {},
  {
    onStart: (file) => {
      const uploader = fileState(file).uploader
      uploader.onRequestDone = () => process.stdout.write(`p ${uploader.uploadedBytes}\n`)
    },
  },
)
process.stdout.write(`done ${JSON.stringify(timing)}\n`)
