/*
 * CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) of many blocks in one call: the
 * native part of lib/util/crc32.ts, built at install by node-gyp (binding.gyp) and
 * optional: without it the library uses @node-rs/crc32, zlib.crc32 or crc-32.
 *
 * Why a native call over many blocks: a summary holds one CRC per 4 KiB block, and one
 * JS-to-native call per block costs about as much as hashing the block. Here one call
 * hashes a whole run of blocks.
 *
 * The fast path (x86-64 with PCLMULQDQ, checked at run time) folds 64 bytes at a time with
 * carry-less multiplication, as in Intel's paper "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (2009), then reduces the 128-bit remainder to
 * 32 bits with a Barrett step; with AVX-512 VPCLMULQDQ, 256 bytes at a time. Elsewhere,
 * and for the last bytes, a slicing-by-8 table.
 *
 * Exports:
 *   crc32(bytes: Uint8Array, seed: number): number       the CRC of seed's bytes then these
 *   blocks(bytes: Uint8Array, blockSize: number, into: Uint32Array): void
 *                                                        into[i] = CRC of block i (the last
 *                                                        may be shorter)
 *   tableCrc32(bytes, seed): number                      the table path alone (for the tests)
 *   crc32Async(chunks: Uint8Array[], seed: number): Promise<number>
 *                                                        the CRC of seed's bytes then the
 *                                                        chunks' in order, computed on
 *                                                        libuv's thread pool (below)
 *   impl: 'vpclmul' | 'pclmul' | 'table'                 the path crc32 and blocks take
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <pthread.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_PCLMUL_PATH 1
#include <immintrin.h>
#endif

/* --- Table path: slicing-by-8 ------------------------------------------------------- */

static uint32_t table[8][256];

static void make_tables(void) {
  for (uint32_t v = 0; v < 256; v++) {
    uint32_t c = v;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    table[0][v] = c;
  }
  for (uint32_t v = 0; v < 256; v++)
    for (int t = 1; t < 8; t++) table[t][v] = (table[t - 1][v] >> 8) ^ table[0][table[t - 1][v] & 0xff];
}

static inline uint32_t load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* `state` is the running register (the CRC inverted); returns the register after `p[0…n)`. */
static uint32_t table_update(uint32_t state, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint32_t a = load_le32(p) ^ state;
    uint32_t b = load_le32(p + 4);
    state = table[7][a & 0xff] ^ table[6][(a >> 8) & 0xff] ^ table[5][(a >> 16) & 0xff] ^ table[4][a >> 24] ^
            table[3][b & 0xff] ^ table[2][(b >> 8) & 0xff] ^ table[1][(b >> 16) & 0xff] ^ table[0][b >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) state = (state >> 8) ^ table[0][(state ^ *p++) & 0xff];
  return state;
}

/* --- PCLMULQDQ path ------------------------------------------------------------------- */

#ifdef HAVE_PCLMUL_PATH
/*
 * The folding constants, bit-reflected, for P(x) = 0x104C11DB7:
 *   K1 = x^(4·128+32) mod P, K2 = x^(4·128−32) mod P   fold 512 bits forward
 *   K3 = x^(128+32) mod P,   K4 = x^(128−32) mod P     fold 128 bits forward
 *   K5 = x^64 mod P                                     fold 64 bits to 32 bits (with K4 first)
 *   P' and MU: P itself and floor(x^64 / P) for the Barrett reduction
 * (the same values as in the paper and in every PCLMUL CRC-32 since). Each K is the
 * remainder's 32 bits reflected, shifted left by one: test/util/crc32.test.ts derives them
 * all from P.
 */
#define K1 0x154442bd4ull
#define K2 0x1c6e41596ull
#define K3 0x1751997d0ull
#define K4 0x0ccaa009eull
#define K5 0x163cd6124ull
#define PX 0x1db710641ull
#define MU 0x1f7011641ull
/* Fold 2048 bits forward (four 512-bit registers at a time): x^(2048+32), x^(2048−32). */
#define K2048_LO 0x11542778aull
#define K2048_HI 0x1322d1430ull

__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
  __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* The CRC register from a 128-bit remainder x (the message folded into 16 bytes). */
__attribute__((target("pclmul,sse4.1"))) static inline uint32_t reduce128(__m128i x) {
  const __m128i k34 = _mm_set_epi64x((long long)K4, (long long)K3);
  /* 128 bits to 64: the low half times K4, plus the high half. */
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
  x = _mm_xor_si128(_mm_clmulepi64_si128(x, k34, 0x10), _mm_srli_si128(x, 8));
  /* 64 bits to 32: the low 32 bits times K5, plus the rest. */
  const __m128i k5 = _mm_set_epi64x(0, (long long)K5);
  x = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x, mask32), k5, 0x00), _mm_srli_si128(x, 4));
  /* Barrett: t = (x mod x^32)·MU, then (t mod x^32)·P, added to x; the CRC is bits 32…63. */
  const __m128i pmu = _mm_set_epi64x((long long)MU, (long long)PX);
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), pmu, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), pmu, 0x00);
  return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x, t), 1);
}

/*
 * The register from four 128-bit remainders of consecutive 16 bytes (x0 first), folded
 * into one (K3, K4), then the last 16-byte steps p[0…n) (n a multiple of 16), reduced.
 */
__attribute__((target("pclmul,sse4.1"))) static inline uint32_t finish128(__m128i x0, __m128i x1, __m128i x2,
                                                                          __m128i x3, const uint8_t *p, size_t n) {
  const __m128i k34 = _mm_set_epi64x((long long)K4, (long long)K3);
  __m128i x = fold(fold(fold(x0, k34, x1), k34, x2), k34, x3);
  while (n >= 16) {
    x = fold(x, k34, _mm_loadu_si128((const __m128i *)p));
    p += 16;
    n -= 16;
  }
  return reduce128(x);
}

/* The register after p[0…n), n ≥ 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t pclmul_update(uint32_t state, const uint8_t *p, size_t n) {
  __m128i x0 = _mm_loadu_si128((const __m128i *)p);
  __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
  __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
  __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
  x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)state));
  p += 64;
  n -= 64;

  const __m128i k12 = _mm_set_epi64x((long long)K2, (long long)K1);
  while (n >= 64) {
    x0 = fold(x0, k12, _mm_loadu_si128((const __m128i *)p));
    x1 = fold(x1, k12, _mm_loadu_si128((const __m128i *)(p + 16)));
    x2 = fold(x2, k12, _mm_loadu_si128((const __m128i *)(p + 32)));
    x3 = fold(x3, k12, _mm_loadu_si128((const __m128i *)(p + 48)));
    p += 64;
    n -= 64;
  }

  return finish128(x0, x1, x2, x3, p, n);
}

/*
 * The same folding with AVX-512 VPCLMULQDQ: four 512-bit registers (256 bytes) per step,
 * each 128-bit lane folded as above; then the registers fold into one (K1, K2: 512 bits),
 * its four lanes into one (K3, K4), and the 128-bit reduction ends it. n ≥ 256, a multiple
 * of 16.
 */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) static inline __m512i fold512(__m512i x, __m512i k,
                                                                                           __m512i next) {
  __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
  __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, next, 0x96); /* lo ^ hi ^ next */
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) static uint32_t vpclmul_update(uint32_t state,
                                                                                           const uint8_t *p,
                                                                                           size_t n) {
  __m512i x0 = _mm512_loadu_si512((const void *)p);
  __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
  __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
  __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)state)));
  p += 256;
  n -= 256;

  const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K2048_HI, (long long)K2048_LO));
  while (n >= 256) {
    x0 = fold512(x0, k2048, _mm512_loadu_si512((const void *)p));
    x1 = fold512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
    x2 = fold512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
    x3 = fold512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
    p += 256;
    n -= 256;
  }

  const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K2, (long long)K1));
  __m512i y = fold512(x0, k512, x1);
  y = fold512(y, k512, x2);
  y = fold512(y, k512, x3);
  while (n >= 64) {
    y = fold512(y, k512, _mm512_loadu_si512((const void *)p));
    p += 64;
    n -= 64;
  }

  return finish128(_mm512_extracti32x4_epi32(y, 0), _mm512_extracti32x4_epi32(y, 1), _mm512_extracti32x4_epi32(y, 2),
                   _mm512_extracti32x4_epi32(y, 3), p, n);
}

static int use_pclmul = 0;
static int use_vpclmul = 0;
#endif

/* The register after p[0…n), by the fastest path this CPU has. */
static uint32_t update(uint32_t state, const uint8_t *p, size_t n) {
#ifdef HAVE_PCLMUL_PATH
  if (use_vpclmul && n >= 256) {
    size_t m = n & ~(size_t)15;
    state = vpclmul_update(state, p, m);
    p += m;
    n -= m;
  } else if (use_pclmul && n >= 64) {
    size_t m = n & ~(size_t)15;
    state = pclmul_update(state, p, m);
    p += m;
    n -= m;
  }
#endif
  return table_update(state, p, n);
}

/* --- N-API ---------------------------------------------------------------------------- */

static napi_value throw_error(napi_env env, int range, const char *message) {
  if (range)
    napi_throw_range_error(env, NULL, message);
  else
    napi_throw_type_error(env, NULL, message);
  return NULL;
}

/* The bytes of a typed array of type `want` (a Buffer is a Uint8Array); 0 with a TypeError thrown if not. */
static int typed_array(napi_env env, napi_value v, napi_typedarray_type want, void **data, size_t *length,
                       const char *what) {
  bool is = false;
  napi_typedarray_type type;
  if (napi_is_typedarray(env, v, &is) != napi_ok || !is ||
      napi_get_typedarray_info(env, v, &type, length, data, NULL, NULL) != napi_ok || type != want) {
    throw_error(env, 0, what);
    return 0;
  }
  return 1;
}

/*
 * Whether typed array `v` is over a resizable ArrayBuffer (its `resizable` is true); 0 with
 * an exception pending when that cannot be read. A growable SharedArrayBuffer only grows.
 */
static int over_resizable(napi_env env, napi_value v, bool *resizable) {
  napi_value buffer, flag;
  napi_valuetype t;
  *resizable = false;
  if (napi_get_typedarray_info(env, v, NULL, NULL, NULL, &buffer, NULL) != napi_ok ||
      napi_get_named_property(env, buffer, "resizable", &flag) != napi_ok || napi_typeof(env, flag, &t) != napi_ok)
    return 0;
  return t != napi_boolean || napi_get_value_bool(env, flag, resizable) == napi_ok;
}

/* The optional seed, argv[1]: left as it is when absent or undefined; 0 with a TypeError thrown if not a number. */
static int seed_arg(napi_env env, size_t argc, const napi_value *argv, uint32_t *seed, const char *what) {
  if (argc < 2) return 1;
  napi_valuetype t;
  if (napi_typeof(env, argv[1], &t) != napi_ok) return 0;
  if (t != napi_undefined && napi_get_value_uint32(env, argv[1], seed) != napi_ok) {
    throw_error(env, 0, what);
    return 0;
  }
  return 1;
}

static napi_value crc_of(napi_env env, napi_callback_info info, int table_only) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1) return throw_error(env, 0, "crc32: bytes must be a Uint8Array");
  void *data;
  size_t length;
  if (!typed_array(env, argv[0], napi_uint8_array, &data, &length, "crc32: bytes must be a Uint8Array")) return NULL;
  uint32_t seed = 0;
  if (!seed_arg(env, argc, argv, &seed, "crc32: seed must be a number")) return NULL;
  uint32_t state = ~seed;
  state = table_only ? table_update(state, data, length) : update(state, data, length);
  napi_value out;
  if (napi_create_uint32(env, ~state, &out) != napi_ok) return NULL;
  return out;
}

static napi_value js_crc32(napi_env env, napi_callback_info info) { return crc_of(env, info, 0); }
static napi_value js_table_crc32(napi_env env, napi_callback_info info) { return crc_of(env, info, 1); }

static napi_value js_blocks(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 3) return throw_error(env, 0, "crc32 blocks: (bytes, blockSize, into) expected");
  void *data;
  size_t length;
  if (!typed_array(env, argv[0], napi_uint8_array, &data, &length, "crc32 blocks: bytes must be a Uint8Array"))
    return NULL;
  uint32_t block_size = 0;
  if (napi_get_value_uint32(env, argv[1], &block_size) != napi_ok || block_size == 0)
    return throw_error(env, 1, "crc32 blocks: blockSize must be a positive integer");
  void *into;
  size_t room;
  if (!typed_array(env, argv[2], napi_uint32_array, &into, &room, "crc32 blocks: into must be a Uint32Array"))
    return NULL;
  size_t count = length / block_size + (length % block_size != 0);
  if (room < count) return throw_error(env, 1, "crc32 blocks: into has room for fewer CRCs than there are blocks");
  const uint8_t *p = data;
  uint32_t *out = into;
  for (size_t i = 0, left = length; i < count; i++) {
    size_t n = left < block_size ? left : block_size;
    out[i] = ~update(0xffffffffu, p, n);
    p += n;
    left -= n;
  }
  return NULL;
}

/*
 * crc32Async: a long run's CRC off the event loop. The job holds its own array of the
 * chunks (a reference the caller cannot change), so their memory lives until the job
 * completes; their bytes must not change, nor their buffers be transferred, meanwhile (the
 * reader's pieces are not: nothing else holds them until the check answers). A chunk over
 * a resizable ArrayBuffer is refused: a resize() that shrinks it gives its pages back at
 * once, and the job would read memory no longer mapped (a crash, not a wrong CRC).
 */
typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref keep;
  uint32_t state;
  size_t count;
  const uint8_t **data;
  size_t *length;
} crc_job;

static void job_execute(napi_env env, void *arg) {
  (void)env;
  crc_job *job = arg;
  uint32_t state = job->state;
  for (size_t i = 0; i < job->count; i++) state = update(state, job->data[i], job->length[i]);
  job->state = state;
}

static void job_complete(napi_env env, napi_status status, void *arg) {
  crc_job *job = arg;
  napi_value value = NULL;
  if (status == napi_ok && napi_create_uint32(env, ~job->state, &value) == napi_ok) {
    napi_resolve_deferred(env, job->deferred, value);
  } else {
    napi_value message, err;
    if (napi_create_string_utf8(env, "crc32Async: the job was cancelled", NAPI_AUTO_LENGTH, &message) == napi_ok &&
        napi_create_error(env, NULL, message, &err) == napi_ok)
      napi_reject_deferred(env, job->deferred, err);
  }
  napi_delete_reference(env, job->keep);
  napi_delete_async_work(env, job->work);
  free(job);
}

static napi_value js_crc32_async(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  bool is_array = false;
  if (argc < 1 || napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array)
    return throw_error(env, 0, "crc32Async: chunks must be an array of Uint8Arrays");
  uint32_t seed = 0;
  if (!seed_arg(env, argc, argv, &seed, "crc32Async: seed must be a number")) return NULL;
  uint32_t count;
  if (napi_get_array_length(env, argv[0], &count) != napi_ok) return NULL;
  napi_value keep;
  if (napi_create_array_with_length(env, count, &keep) != napi_ok) return NULL;
  /* One allocation: the job, then the pointers, then the lengths. */
  crc_job *job = malloc(sizeof(crc_job) + (size_t)count * (sizeof(uint8_t *) + sizeof(size_t)));
  if (job == NULL) {
    napi_throw_error(env, NULL, "crc32Async: out of memory");
    return NULL;
  }
  job->data = (const uint8_t **)(job + 1);
  job->length = (size_t *)(job->data + count);
  job->count = count;
  job->state = ~seed;
  for (uint32_t i = 0; i < count; i++) {
    napi_value chunk;
    void *data;
    size_t length;
    bool resizable;
    if (napi_get_element(env, argv[0], i, &chunk) != napi_ok ||
        !typed_array(env, chunk, napi_uint8_array, &data, &length, "crc32Async: chunks must be an array of Uint8Arrays") ||
        !over_resizable(env, chunk, &resizable) || napi_set_element(env, keep, i, chunk) != napi_ok) {
      free(job);
      return NULL;
    }
    if (resizable) {
      free(job);
      return throw_error(env, 0, "crc32Async: a chunk is over a resizable ArrayBuffer (it may shrink under the job)");
    }
    job->data[i] = data;
    job->length[i] = length;
  }
  napi_value promise, name;
  if (napi_create_reference(env, keep, 1, &job->keep) != napi_ok) {
    free(job);
    return NULL;
  }
  if (napi_create_promise(env, &job->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "crc32Async", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, job_execute, job_complete, job, &job->work) != napi_ok) {
    napi_delete_reference(env, job->keep);
    free(job);
    return NULL;
  }
  if (napi_queue_async_work(env, job->work) != napi_ok) {
    napi_delete_async_work(env, job->work);
    napi_delete_reference(env, job->keep);
    free(job);
    return NULL;
  }
  return promise;
}

/* The tables and the CPU's paths, once per process (worker threads load the addon too). */
static const char *impl = "table";

static void setup(void) {
  make_tables();
#ifdef HAVE_PCLMUL_PATH
  __builtin_cpu_init();
  use_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  use_vpclmul = use_pclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
  impl = use_vpclmul ? "vpclmul" : use_pclmul ? "pclmul" : "table";
#endif
}

#ifdef _WIN32
static INIT_ONCE setup_once = INIT_ONCE_STATIC_INIT;
static BOOL CALLBACK setup_win(PINIT_ONCE once, PVOID param, PVOID *context) {
  (void)once;
  (void)param;
  (void)context;
  setup();
  return TRUE;
}
#else
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
#endif

static napi_value init(napi_env env, napi_value exports) {
#ifdef _WIN32
  InitOnceExecuteOnce(&setup_once, setup_win, NULL, NULL);
#else
  pthread_once(&setup_once, setup);
#endif
  napi_value f_crc, f_blocks, f_table, f_async, s_impl;
  if (napi_create_function(env, "crc32", NAPI_AUTO_LENGTH, js_crc32, NULL, &f_crc) != napi_ok ||
      napi_create_function(env, "crc32Async", NAPI_AUTO_LENGTH, js_crc32_async, NULL, &f_async) != napi_ok ||
      napi_create_function(env, "blocks", NAPI_AUTO_LENGTH, js_blocks, NULL, &f_blocks) != napi_ok ||
      napi_create_function(env, "tableCrc32", NAPI_AUTO_LENGTH, js_table_crc32, NULL, &f_table) != napi_ok ||
      napi_create_string_utf8(env, impl, NAPI_AUTO_LENGTH, &s_impl) != napi_ok ||
      napi_set_named_property(env, exports, "crc32", f_crc) != napi_ok ||
      napi_set_named_property(env, exports, "blocks", f_blocks) != napi_ok ||
      napi_set_named_property(env, exports, "tableCrc32", f_table) != napi_ok ||
      napi_set_named_property(env, exports, "crc32Async", f_async) != napi_ok ||
      napi_set_named_property(env, exports, "impl", s_impl) != napi_ok)
    return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
