/**
 * A write stream or uploadFile that fails, run as its own process: the test checks that the
 * process then exits by itself (nothing left holding the event loop). Usage:
 * node stream-fail-child.js <scenario> <directory> [file]. Prints `failed <code>` (or
 * `done`) once the call has ended, then returns without calling process.exit.
 */
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { DirectoryStore } from '../../lib/store/directory.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { createStreamSegmentWriteStream } from '../../lib/streams/write-stream.js'
import { FailingStore } from './failing-store.js'
import { pattern } from './pattern.js'
import { smallSettings } from './small-settings.js'
import type { CallInfo } from './wrapped-store.js'

const [scenario, dir, file] = process.argv.slice(2)
if (scenario === undefined || dir === undefined) throw new Error('usage: stream-fail-child <scenario> <dir> [file]')

/** Runs `hook` ahead of each call. */
class Hooked extends FailingStore {
  hook: (call: CallInfo) => void = () => undefined
  protected override around<T>(call: CallInfo, run: () => Promise<T>): Promise<T> {
    this.hook(call)
    return super.around(call, run)
  }
}

const store = new Hooked(new DirectoryStore(dir))
const ac = new AbortController()
const PART0 = /^\d{10}\.0$/
const data = pattern(0, 700 * 1024 + 5, 3)
const source = () => Readable.from([data.subarray(0, 300 * 1024), data.subarray(300 * 1024)])
let run: () => Promise<unknown>
const stream = (options = {}) =>
  pipeline(source(), createStreamSegmentWriteStream({ store, ...smallSettings, ...options }))
switch (scenario) {
  case 'store-error-part0':
    store.addRule({ ops: ['put', 'createMultipart'], key: PART0 })
    run = () => stream()
    break
  case 'store-error-data':
    store.addRule({ ops: ['uploadPart'] })
    run = () => stream()
    break
  case 'abort-data':
    store.hook = (call) => {
      if (call.op === 'uploadPart') ac.abort(new Error('stop'))
    }
    run = () => stream({ signal: ac.signal })
    break
  case 'aborted-at-creation':
    ac.abort(new Error('stop'))
    run = () => stream({ signal: ac.signal })
    break
  case 'source-error':
    run = () =>
      pipeline(
        Readable.from(
          (async function* () {
            yield data.subarray(0, 300 * 1024)
            throw new Error('source broke')
          })(),
        ),
        createStreamSegmentWriteStream({ store, ...smallSettings }),
      )
    break
  case 'upload-store-error':
    store.addRule({ ops: ['uploadPart'] })
    run = () => uploadFile(file as string, store, smallSettings, { resume: false })
    break
  case 'upload-abort':
    store.hook = (call) => {
      if (call.op === 'uploadPart') ac.abort(new Error('stop'))
    }
    run = () => uploadFile(file as string, store, smallSettings, { signal: ac.signal })
    break
  default:
    throw new Error(`unknown scenario ${scenario}`)
}
await run().then(
  () => process.stdout.write('done\n'),
  (err: { code?: string; message?: string }) => process.stdout.write(`failed ${err.code} ${err.message}\n`),
)
