/*
 * Memory for the dirty tier's slabs and the GET pieces, mapped in 2 MiB-aligned regions
 * that the kernel may back with transparent huge pages: the native part of
 * lib/util/huge-memory.ts, built at install by node-gyp (binding.gyp) and optional:
 * without it they come from Buffer.allocUnsafeSlow.
 *
 * Why: a fresh 4 KiB page costs a fault, and on a virtual machine a fault costs several
 * CPU-seconds per GiB (docs/benchmarks.md, "Huge pages"). A writer that fills its dirty
 * limit (96 MiB by default), or a reader its read-ahead (160 MiB), pays that for every new
 * page of it. A region advised MADV_HUGEPAGE is faulted in 2 MiB at a time when the kernel
 * has a huge page free, at a small part of that cost; when it has none, the pages are
 * ordinary ones, as before. Linux's default THP mode ("madvise") honours the advice;
 * "never" ignores it.
 *
 * Exports (Linux only; elsewhere the module exports nothing):
 *   alloc(bytes, pieceBytes): ArrayBuffer[] | undefined
 *       `bytes` of zero-filled memory, not yet faulted in, at a 2 MiB boundary, as
 *       bytes / pieceBytes ArrayBuffers of pieceBytes each (one object each, so a piece
 *       can be told from its neighbours); undefined when the mapping fails. The region
 *       is unmapped once every one of its ArrayBuffers has been collected.
 *   ALIGN: number
 *       the alignment (2 MiB); bytes must be a positive multiple of it, at most 1 GiB,
 *       and pieceBytes a positive divisor of bytes
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __linux__
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#define ALIGN ((size_t)2 << 20)
/* The largest region one call maps: larger asks are a caller's mistake, not memory. */
#define MAX_BYTES ((size_t)1 << 30)

/* A mapped region and the number of its pieces not yet collected. */
struct region {
  uint8_t *start;
  size_t bytes;
  atomic_size_t pieces;
};

/* `bytes` (a multiple of ALIGN) mapped at an ALIGN boundary and advised MADV_HUGEPAGE, or NULL. */
static uint8_t *map_aligned(size_t bytes) {
  /* Map ALIGN more than asked, then unmap the head and tail around the aligned region. */
  uint8_t *mapped = mmap(NULL, bytes + ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return NULL;
  uint8_t *start = (uint8_t *)(((uintptr_t)mapped + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
  size_t head = (size_t)(start - mapped);
  if (head > 0) munmap(mapped, head);
  munmap(start + bytes, ALIGN - head); /* head < ALIGN: the tail is at least a page */
  madvise(start, bytes, MADV_HUGEPAGE); /* advice: a kernel without THP refuses it, harmlessly */
  return start;
}

/* Drops `n` pieces' hold on `r`; the last unmaps it. */
static void drop_pieces(struct region *r, size_t n) {
  if (atomic_fetch_sub(&r->pieces, n) == n) {
    munmap(r->start, r->bytes);
    free(r);
  }
}

static void piece_collected(napi_env env, void *data, void *hint) {
  (void)env;
  (void)data;
  drop_pieces(hint, 1);
}

static napi_value js_alloc(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  int64_t bytes = 0, piece = 0;
  if (argc < 2 || napi_get_value_int64(env, argv[0], &bytes) != napi_ok || bytes <= 0 ||
      (uint64_t)bytes > MAX_BYTES || (uint64_t)bytes % ALIGN != 0) {
    napi_throw_range_error(env, NULL, "memory alloc: bytes must be a positive multiple of 2 MiB, at most 1 GiB");
    return NULL;
  }
  if (napi_get_value_int64(env, argv[1], &piece) != napi_ok || piece <= 0 || bytes % piece != 0) {
    napi_throw_range_error(env, NULL, "memory alloc: pieceBytes must be a positive divisor of bytes");
    return NULL;
  }
  size_t count = (size_t)(bytes / piece);
  napi_value result;
  struct region *r = malloc(sizeof *r);
  uint8_t *start = r == NULL ? NULL : map_aligned((size_t)bytes);
  if (start == NULL) {
    free(r);
    napi_get_undefined(env, &result);
    return result;
  }
  r->start = start;
  r->bytes = (size_t)bytes;
  atomic_init(&r->pieces, count);
  if (napi_create_array_with_length(env, count, &result) != napi_ok) {
    drop_pieces(r, count);
    return NULL;
  }
  for (size_t i = 0; i < count; i++) {
    napi_value ab;
    if (napi_create_external_arraybuffer(env, start + i * (size_t)piece, (size_t)piece, piece_collected, r, &ab) !=
        napi_ok) {
      drop_pieces(r, count - i); /* the pieces made so far unmap the region when collected */
      return NULL;
    }
    if (napi_set_element(env, result, (uint32_t)i, ab) != napi_ok) {
      drop_pieces(r, count - i - 1);
      return NULL;
    }
  }
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value f_alloc, n_align;
  if (napi_create_function(env, "alloc", NAPI_AUTO_LENGTH, js_alloc, NULL, &f_alloc) != napi_ok ||
      napi_create_int64(env, (int64_t)ALIGN, &n_align) != napi_ok ||
      napi_set_named_property(env, exports, "alloc", f_alloc) != napi_ok ||
      napi_set_named_property(env, exports, "ALIGN", n_align) != napi_ok)
    return NULL;
  return exports;
}
#else
static napi_value init(napi_env env, napi_value exports) {
  (void)env;
  return exports;
}
#endif

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
