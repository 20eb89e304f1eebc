/** A flush against a store that refuses its objects' bytes: it fails with the store's error, its other objects not sent. */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { it } from 'node:test'
import { MemoryStore } from '../../lib/store/memory.js'
import { uploadFile } from '../../lib/streams/upload-file.js'
import { rejectsCode } from '../helpers/assert.js'
import { FailingStore } from '../helpers/failing-store.js'
import { pattern } from '../helpers/pattern.js'
import { smallSettings } from '../helpers/small-settings.js'

const MiB = 1024 * 1024

it("a flush whose objects' bytes the store refuses stops sending once one failed: each piece once, not one per object", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ss-flush-failing-'))
  try {
    const path = join(dir, 'f.bin')
    writeFileSync(path, pattern(0, 4 * MiB, 1))
    // Claims and completions pass; every body sent to a segment object fails.
    const store = new FailingStore(new MemoryStore(), [{ ops: ['put', 'uploadPart'], key: /^\d+\.\d+$/ }])
    await rejectsCode(uploadFile(path, store, smallSettings), 'ERR_STORE', /injected failure/)
    const claimed = store.count('createMultipart')
    const sent = store.count('put') + store.count('uploadPart')
    // Sending ahead during writeRef stops after a few objects fail in a row (each with the
    // uploader's pieces in flight); the flush then claims every object it needs (some 80),
    // but sends pieces only until the first fails: a piece per request slot, not one per object.
    const slots = smallSettings.segmentMpuMaxConcurrency as number
    assert.ok(claimed > 60, `${claimed} objects claimed`)
    assert.ok(sent <= 4 * slots + 2 * slots, `${sent} bodies sent to a store failing each`)
    assert.equal(await store.head('inode'), undefined, 'nothing was published')
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
