/**
 * A multipart upload that fails for good (a part or the completion refused, the caller
 * neither aborting nor retrying) is aborted, and its claim goes with it: no empty
 * placeholder is left under the object's key for `ls` to list until gc. Run on every store.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import type { ObjectStore } from '../../lib/store/types.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { rejectsCode } from './assert.js'
import { collect, openUploadCount } from './containers.js'
import { FailingStore } from './failing-store.js'
import { pattern } from './pattern.js'
import { smallSettings } from './small-settings.js'
import type { StoreOp } from './wrapped-store.js'

const KiB = 1024

/** `make` gives a fresh, empty store, in `dir` if it needs a folder. */
export function runFailedClaimTests(name: string, make: (dir: string) => Promise<ObjectStore>): void {
  describe(`failed multipart uploads leave no claim: ${name} store`, () => {
    // Every request of the kind fails, on the segment objects only: what a store down for
    // good gives. Puts pass, so that objects of one piece land beside the failed uploads.
    const failing: StoreOp[] = ['uploadPart', 'completeMultipart']
    for (const op of failing) {
      it(`every ${op} failing: the uploads claimed are aborted, their placeholders gone`, async () => {
        const dir = mkdtempSync(join(tmpdir(), 'ss-failed-claims-'))
        try {
          const path = join(dir, 'f.bin')
          writeFileSync(path, pattern(0, 512 * KiB, 1))
          const store = new FailingStore(await make(dir), [{ ops: [op], key: /^\d+\.\d+$/ }])
          await rejectsCode(uploadFile(path, store, smallSettings), 'ERR_STORE', /injected failure/)
          assert.ok(store.count('createMultipart', 'ok') > 0, 'multipart uploads were claimed')
          assert.ok(store.count(op, 'failed') > 0, `${op} failed`)
          assert.equal(await openUploadCount(store), 0, 'every failed upload was aborted')
          const empty = (await collect(store.list())).filter((e) => e.size === 0).map((e) => e.key)
          assert.deepEqual(empty, [], 'no claim placeholder is left')
          assert.equal(await store.head('inode'), undefined, 'nothing was published')
        } finally {
          rmSync(dir, { recursive: true, force: true })
        }
      })
    }
  })
}
