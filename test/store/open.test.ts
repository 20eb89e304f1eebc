// openStore's URL forms and the S3 client's environment, with no S3 server: what names a
// container, and what is refused (ERR_INVALID_ARGUMENT naming the location and the fault)
// rather than read as some other container.
import assert from 'node:assert/strict'
import { homedir, tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, test } from 'node:test'
import { StreamSegmentError } from '../../lib/errors.js'
import type { DirectoryStore } from '../../lib/store/directory.js'
import { openStore } from '../../lib/store/open.js'
import { createS3Client, S3Store } from '../../lib/store/s3.js'

// The default client of s3:// URLs is made on the first one: an endpoint nothing listens on.
process.env.AWS_ENDPOINT_URL_S3 = 'http://127.0.0.1:1'
process.env.AWS_REGION = 'us-east-1'
process.env.AWS_ACCESS_KEY_ID = 'test'
process.env.AWS_SECRET_ACCESS_KEY = 'test'

const USE = 'use s3://bucket/prefix, file:///dir or mem://name; a local directory is a path or a file:// URL'

/** `text` as a RegExp matching it literally. */
function literally(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

function refused(fn: () => unknown, re: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof StreamSegmentError, String(err))
    assert.equal(err.code, 'ERR_INVALID_ARGUMENT')
    assert.match(err.message, re)
    return true
  })
}

describe('openStore: file URLs and paths', () => {
  const dir = join(tmpdir(), 'ss-open-test')

  test('a file URL with a trailing slash names the directory its path names (one url, so one WAL binding)', () => {
    const byPath = openStore(dir) as DirectoryStore
    for (const spelling of [`file://${dir}/`, `file://${dir}`, `file://${dir}/.`, `${dir}/`]) {
      const store = openStore(spelling) as DirectoryStore
      assert.equal(store.root, byPath.root, spelling)
      assert.equal(store.url, byPath.url, spelling)
    }
  })

  test('a file URL with a query or a fragment is refused, not read as the path before it', () => {
    refused(() => openStore(`file://${dir}?x=1`), /^openStore: file:\/\/.*\?x=1: a file URL .*query.*%3F/)
    refused(() => openStore(`file://${dir}#part`), /^openStore: file:\/\/.*#part: a file URL .*fragment.*%23/)
    assert.equal((openStore(`file://${dir}/a%3Fb%23c`) as DirectoryStore).root, `${dir}/a?b#c`)
  })

  test('a path starting with ~ is refused (no shell expands it here), ./~ is a folder named ~', () => {
    refused(
      () => openStore('~/data'),
      new RegExp(`^openStore: ~/data: ~ is not expanded: .*${join(homedir(), 'data')}`),
    )
    refused(() => openStore('~'), /^openStore: ~: ~ is not expanded/)
    assert.equal((openStore('./~/data') as DirectoryStore).root, join(process.cwd(), '~', 'data'))
  })
})

describe('openStore: a URL or path a message suggests is quoted as a shell needs it', () => {
  test('with nothing a shell reads specially, the suggestion is as it is', () => {
    const said = (text: string) => {
      try {
        openStore(text)
      } catch (err) {
        return (err as Error).message
      }
      assert.fail(`${text} was opened`)
    }
    assert.equal(
      said('s3:/bucket/x'),
      'openStore: s3:/bucket/x: did you mean s3://bucket/x? (a local directory by that name: ./s3:/bucket/x)',
    )
    assert.equal(
      said('a:b'),
      `openStore: a:b: not a URL this reads (${USE}); for a local directory named so, write ./a:b`,
    )
  })

  test('a space or a quote in it: single-quoted, so that it pastes as one argument', () => {
    const home = join(homedir(), 'my data')
    const cases: Array<[string, RegExp]> = [
      [
        's3:/bucket/my runs',
        /^openStore: s3:\/bucket\/my runs: did you mean 's3:\/\/bucket\/my runs'\? \(a local directory by that name: '\.\/s3:\/bucket\/my runs'\)$/,
      ],
      [
        "s3:bucket/it's",
        /: did you mean 's3:\/\/bucket\/it'\\''s'\? \(a local directory by that name: '\.\/s3:bucket\/it'\\''s'\)$/,
      ],
      [
        's3//bucket/a b',
        /: did you mean 's3:\/\/bucket\/a b'\? \(a local directory by that name: '\.\/s3\/\/bucket\/a b'\)$/,
      ],
      [
        's3:///bucket/x y',
        /: expected s3:\/\/bucket\/prefix with a valid bucket name: did you mean 's3:\/\/bucket\/x y'\?$/,
      ],
      ['file:x $y', /: did you mean 'file:\/\/\/x \$y'\? \(a local directory by that name: '\.\/file:x \$y'\)$/],
      [
        'file://dir/my x',
        /: a file URL has an empty host: did you mean 'file:\/\/\/dir\/my x', or the path 'dir\/my x'\?$/,
      ],
      ['mem:a b', /: did you mean 'mem:\/\/a b'\?/],
      ['a:b c', /; for a local directory named so, write '\.\/a:b c'$/],
      [
        '~/my data',
        new RegExp(
          `: ~ is not expanded: give the home directory's path \\('${literally(home)}'\\), or '\\./~/my data' for a folder named ~$`,
        ),
      ],
    ]
    for (const [text, re] of cases) refused(() => openStore(text), re)
  })
})

describe('openStore: s3 URLs and S3Store prefixes', () => {
  test('s3://b/p and s3://b/p/ are one container; s3://b alone is the bucket root', () => {
    assert.equal((openStore('s3://bkt/p') as S3Store).prefix, 'p/')
    assert.equal((openStore('s3://bkt/p/') as S3Store).prefix, 'p/')
    assert.equal((openStore('s3://bkt') as S3Store).prefix, '')
    assert.equal((openStore('s3://bkt/') as S3Store).prefix, '')
  })

  test('a prefix with an empty, "." or ".." segment is refused: keys under it are ones no key may be', () => {
    for (const [url, fault] of [
      ['s3://bkt/p//q', /an empty segment/],
      ['s3://bkt/p//', /an empty segment/],
      ['s3://bkt/a/../c', /a "\.\." segment/],
      ['s3://bkt/./c', /a "\." segment/],
      ['s3://bkt/a/%2E%2E/c', /a "\.\." segment/],
    ] as const) {
      refused(() => openStore(url), new RegExp(`^openStore: ${url.replaceAll('.', '\\.')}: .*prefix.*`))
      refused(() => openStore(url), fault)
    }
    const client = createS3Client()
    try {
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 'a/../c' }),
        /^S3Store: prefix "a\/\.\.\/c": .*"\.\." segment/,
      )
      refused(() => new S3Store({ client, bucket: 'bkt', prefix: 'p//' }), /^S3Store: prefix "p\/\/": .*empty segment/)
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 5 as never }),
        /^S3Store: prefix must be a string, got number 5$/,
      )
      // A leading slash is no segment of the prefix: `/a/b` is `a/b`.
      assert.equal(new S3Store({ client, bucket: 'bkt', prefix: '/a/b/' }).prefix, 'a/b/')
    } finally {
      client.destroy()
    }
  })

  test("a prefix that leaves no room for the container's keys, or has a character no key may have, is refused when the store is made", () => {
    const client = createS3Client()
    try {
      // A container's keys are up to 16 bytes (1073741823.16383): with its "/", a prefix of
      // 1007 bytes leaves them room within S3's 1024; one of 1008 would have its first
      // segment key refused part-way through a write. Counted in UTF-8 bytes, not characters.
      const longest = [
        'a'.repeat(1007),
        `${'\u00E9'.repeat(503)}a`,
        `${'a'.repeat(1005)}\u00E9`,
        `${'\u20AC'.repeat(335)}ab`,
        `${'a'.repeat(1007)}/`,
        `/${'a'.repeat(1007)}`,
      ]
      for (const prefix of longest) {
        const made = new S3Store({ client, bucket: 'bkt', prefix })
        assert.equal(Buffer.byteLength(made.prefix), 1008, prefix.slice(0, 8))
        const opened = openStore(`s3://bkt/${encodeURIComponent(prefix)}`) as S3Store
        assert.equal(opened.prefix, made.prefix)
        assert.equal((openStore({ client, bucket: 'bkt', prefix }) as S3Store).prefix, made.prefix)
        assert.equal(Buffer.byteLength(made.prefix + '1073741823.16383'), 1024)
      }
      const tooLong: Array<[string, number]> = [
        ['a'.repeat(1008), 1009],
        [`${'\u00E9'.repeat(504)}`, 1009],
        [`${'a'.repeat(1006)}\u00E9`, 1009],
        [`${'\u20AC'.repeat(336)}`, 1009],
        [`${'a'.repeat(1008)}/`, 1009],
        [`${'\u00E9'.repeat(511)}a`, 1024],
        ['a'.repeat(1023), 1024],
      ]
      const why = (bytes: number) =>
        `${bytes} bytes of UTF-8 with its "/", and a container's keys below it take up to 16 bytes more: ${bytes + 16}, over the 1024 an S3 key may have (at most 1007 bytes leave them room, 1008 with the "/")`
      for (const [prefix, bytes] of tooLong) {
        const shown = JSON.stringify(Array.from(prefix).slice(0, 60).join('')).slice(0, -1)
        const at = (who: string) => new RegExp(`^${who}.*prefix ${literally(shown)}…": ${literally(why(bytes))}$`)
        refused(() => new S3Store({ client, bucket: 'bkt', prefix }), at('S3Store: '))
        refused(() => openStore(`s3://bkt/${encodeURIComponent(prefix)}`), at('openStore: s3://bkt/'))
        refused(() => openStore({ client, bucket: 'bkt', prefix }), at('S3Store: '))
      }
      // Over S3's 1024 by itself, the prefix is no key at all.
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 'a'.repeat(5000) }),
        /^S3Store: prefix "a{60}…": 5000 bytes of UTF-8, over the 1024/,
      )
      refused(() => new S3Store({ client, bucket: 'bkt', prefix: 'a\0b' }), /^S3Store: prefix "a\\u0000b": .*NUL/)
      refused(() => new S3Store({ client, bucket: 'bkt', prefix: 'a\uD800' }), /^S3Store: prefix .*lone surrogate/)
    } finally {
      client.destroy()
    }
  })

  test('an s3 URL with a query or a fragment is refused, not taken into the prefix', () => {
    refused(() => openStore('s3://bkt/p?versionId=3'), /^openStore: s3:\/\/bkt\/p\?versionId=3: .*query.*%3F/)
    refused(() => openStore('s3://bkt/p#x'), /^openStore: s3:\/\/bkt\/p#x: .*fragment.*%23/)
    assert.equal((openStore('s3://bkt/p%3Fq%23r') as S3Store).prefix, 'p?q#r/')
  })

  test("a store's url opens the same container: %, ? and # of its prefix are escaped", () => {
    const client = createS3Client()
    try {
      for (const prefix of ['p?q#r/', 'a%b/', '50%25/x?/', 'é €/']) {
        const url = new S3Store({ client, bucket: 'bkt', prefix }).url
        assert.equal((openStore(url) as S3Store).prefix, prefix, url)
        assert.equal(openStore(url).url, url)
      }
      assert.equal(new S3Store({ client, bucket: 'bkt', prefix: 'a%b?c#d' }).url, 's3://bkt/a%25b%3Fc%23d')
    } finally {
      client.destroy()
    }
  })
})

describe('S3Store and openStore { client, bucket }: options', () => {
  test('a misspelt or unknown option is refused, not ignored (a misspelt prefix made the bucket root the container)', () => {
    const client = createS3Client()
    try {
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefx: 'data/run' } as never),
        /^S3Store: unknown option "prefx" \(did you mean prefix\?\)$/,
      )
      refused(
        () => openStore({ client, bucket: 'bkt', prefx: 'data/run' } as never),
        /^openStore: unknown option "prefx" \(did you mean prefix\?\)$/,
      )
      // openStore's form takes the four it documents; the others are S3Store's.
      refused(
        () => openStore({ client, bucket: 'bkt', pageSize: 10 } as never),
        /^openStore: unknown option "pageSize"/,
      )
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 'p', maxRetrys: 0 } as never),
        /^S3Store: unknown option "maxRetrys" \(did you mean maxRetries\?\)$/,
      )
    } finally {
      client.destroy()
    }
  })

  test('a second argument is refused: openStore(url, { client }) would have used the default client', () => {
    const client = createS3Client()
    try {
      refused(
        () => (openStore as (...a: unknown[]) => unknown)('s3://bkt/p', { client }),
        /^openStore: takes one argument, the location; got a second: Object \(for your own S3 client give \{ client, bucket, prefix \}\)$/,
      )
    } finally {
      client.destroy()
    }
  })

  test('null is a value, refused as one, not taken for the default; a flag must be true or false', () => {
    const client = createS3Client()
    try {
      refused(
        () => openStore({ client, bucket: 'bkt', prefix: null } as never),
        /^openStore: prefix must be a string, got null$/,
      )
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 'p', maxRetries: null } as never),
        /^S3Store: maxRetries null must be an integer ≥ 0$/,
      )
      refused(
        () => new S3Store({ client, bucket: 'bkt', prefix: 'p', getPath: null } as never),
        /^S3Store: getPath null is not 'http' or 'sdk'$/,
      )
      for (const name of ['checksums', 'unsignedPayload', 'contentMd5', 'unorderedListing']) {
        for (const [v, shown] of [
          [null, 'null'],
          ['false', 'string "false"'],
        ] as const) {
          refused(
            () => new S3Store({ client, bucket: 'bkt', prefix: 'p', [name]: v } as never),
            new RegExp(`^S3Store: ${name} must be true or false, got ${shown}$`),
          )
        }
      }
      refused(
        () => openStore({ client, bucket: 'bkt', checksums: 'yes' } as never),
        /^S3Store: checksums must be true or false, got string "yes"$/,
      )
      assert.equal(new S3Store({ client, bucket: 'bkt', prefix: 'p', checksums: false, pageSize: 5 }).pageSize, 5)
    } finally {
      client.destroy()
    }
  })
})

describe('createS3Client: the environment', () => {
  const saved = { ...process.env }
  after(() => {
    process.env = saved
  })

  test('a region that is no region name is refused when the client is made, naming where it came from', () => {
    process.env.AWS_REGION = 'us east 1'
    refused(() => createS3Client(), /^createS3Client: AWS_REGION is "us east 1": not a region name/)
    process.env.AWS_REGION = ''
    refused(() => createS3Client(), /^createS3Client: AWS_REGION is "": not a region name/)
    delete process.env.AWS_REGION
    process.env.AWS_DEFAULT_REGION = 'eu-west-1 '
    refused(() => createS3Client(), /^createS3Client: AWS_DEFAULT_REGION is "eu-west-1 ": not a region name/)
    refused(() => createS3Client({ region: 'a/b' }), /^createS3Client: region "a\/b": not a region name/)
    createS3Client({ region: 'eu-west-1' }).destroy()
    process.env.AWS_REGION = 'us-east-1'
  })

  test('an endpoint variable that is no http(s) URL is refused by createS3Client too', () => {
    process.env.AWS_ENDPOINT_URL_S3 = '127.0.0.1:9000'
    refused(() => createS3Client(), /^createS3Client: AWS_ENDPOINT_URL_S3 is "127\.0\.0\.1:9000": not an http/)
    // An endpoint given to the call is the caller's: the variable is not read.
    createS3Client({ endpoint: 'http://127.0.0.1:1' }).destroy()
    process.env.AWS_ENDPOINT_URL_S3 = 'http://127.0.0.1:1'
  })
})

describe('createS3Client: option names', () => {
  test("a name neither createS3Client's nor the SDK's is refused, with the one meant (the SDK ignores it)", () => {
    refused(
      () => createS3Client({ endpiont: 'http://127.0.0.1:1' } as never),
      /^createS3Client: unknown option "endpiont" \(did you mean endpoint\?\)$/,
    )
    refused(
      () => createS3Client({ forcePathstyle: true } as never),
      /^createS3Client: unknown option "forcePathstyle" \(did you mean forcePathStyle\?\)$/,
    )
    refused(
      () => createS3Client({ maxsockets: 8 } as never),
      /^createS3Client: unknown option "maxsockets" \(did you mean maxSockets\?\)$/,
    )
  })

  test("every option of the SDK's S3ClientConfig is taken, and ours; a name set to undefined is not given", () => {
    const taken = [
      { credentials: { accessKeyId: 'a', secretAccessKey: 'b' }, forcePathStyle: false, useArnRegion: true },
      { followRegionRedirects: true, tls: true, customUserAgent: 'x', retryMode: 'standard' },
      { maxSockets: 2, connectTimeoutMs: 10, idleTimeoutMs: 10, endpiont: undefined },
    ]
    for (const options of taken) createS3Client(options as never).destroy()
  })
})
