/* The one strided-copy kernel: every copy bridge makes of host memory
 * (contiguous(), clone(), copy_(), to(dtype), the compact copies before
 * pickling and Arrow IPC, DLPack's copy=True) moves its bytes here.
 *
 * A copy is dst[i] = src[i] for every index i of dst's shape, src broadcast
 * to it, any byte strides on either side (negative, zero, overlapping), any
 * element size (1 to 16 bytes), any number of dims. The geometry is first
 * normalised (copy_geom): size-1 dims dropped, dims where dst runs backwards
 * flipped on both sides, dims ordered by dst stride and merged where both
 * sides step evenly across them, so a contiguous copy is one dim and one
 * memcpy. Then two dims are chosen: J, dst's fastest, and K, src's fastest
 * other dim when it beats J (a transposing copy), else the next dim of dst.
 * The copy walks dst in 2-d tiles over (K, J), small enough for both sides'
 * lines to stay in the L1 cache, tile after tile in dst's address order
 * (plan_copy); each tile is rows of memcpy, a SIMD transpose, or an element
 * loop (move_tile). A cast converts each tile's rows (casts.c) after
 * gathering them in a tile-sized scratch buffer. Large copies are split
 * between threads (each a range of tiles) and run without the GIL.
 *
 * A dst whose bytes meet src's (copy_ between views of one storage) is
 * detected from the two byte ranges and copied in runs staged through a
 * tile-sized buffer, in an order (forward, or backward) checked beforehand
 * to never overwrite bytes a later run still reads. When neither order is
 * safe and src is dst's own elements read in another order (an in-place
 * transpose, permutation or reversal: permute_in_place), each element moves
 * along its cycle of that permutation, one element held at a time; other
 * overlaps of two views of distinct elements (a shifted transpose, a cast
 * between equal sizes, views a part of an element apart) are written along
 * chains, each element right after its one reader, and around cycles, from
 * each cycle's leader (walk_in_place). A src repeated along some dims
 * (stride 0) fills one slice of dst so, and the rest of dst copies that
 * slice (broadcast_in_place); a src whose own elements overlap otherwise
 * (sliding windows), a dst whose own elements do (the last in index order
 * writes each address) or lattices that do not nest are written as a
 * forest, children before parents (forest_in_place). What is left, a cast between
 * overlapping views of two element sizes, or a part of an element apart,
 * first copies src whole into a temporary, as NumPy does every overlap. */

#include "copy.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_BLOCKS 1 /* compiled with target attributes, used when the CPU has AVX2 */
#endif
#endif

#define MAXD BRIDGE_MAX_NDIM
/* Scratch of one thread: a tile of source elements gathered for a cast, and
 * the runs an overlapping copy stages. */
#define TILE_BYTES 16384
/* A thread's scratch for transposing tiles (src rows, padded apart). */
#define SCRATCH_BYTES (4 * TILE_BYTES)
/* A transposing tile: this many bytes along K from each of this many src rows. */
#define TRANSPOSE_ROW_BYTES 256
#define TRANSPOSE_ROWS 64
/* Bytes of a tile of whole rows (a plain copy needs no scratch). */
#define ROW_TILE_BYTES (256 << 10)

static inline int mul_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline int add_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }
static inline uint64_t uabs(int64_t v) { return v < 0 ? -(uint64_t)v : (uint64_t)v; }

/* ------------------------------------------------------------ geometry */

typedef struct {
  int nd;
  int64_t n[MAXD], d[MAXD], s[MAXD]; /* sizes (>= 2) and byte strides, dst's >= 1 */
  char *dst;
  const char *src;
  int disz, sisz;
  /* the caller's description, for the overlap test that needs dims unmerged
   * (permute_in_place); raw_shape NULL for a geometry made here */
  char *raw_dst;
  const char *raw_src;
  int raw_nd;
  const int64_t *raw_shape, *raw_dstr, *raw_sstr;
  int raw_dmul, raw_smul; /* bytes per unit of raw_dstr, raw_sstr */
} copy_geom;

/* Normalise a copy whose strides are in units of dmul and smul bytes (the
 * element sizes, or 1 for byte strides): 0 ready, 1 nothing to copy (an
 * empty shape), -1 a byte stride or offset overflows int64. A dim where dst
 * has stride 0 (dst writes one place many times) keeps its last write, as an
 * element loop in index order would. */
static int geom_init_scaled(copy_geom *g, char *dst, const char *src, int nd, const int64_t *shape,
                            const int64_t *dstr, const int64_t *sstr, int dmul, int smul, int disz, int sisz,
                            int merge) {
  g->raw_dmul = dmul;
  g->raw_smul = smul;
  g->raw_dst = dst;
  g->raw_src = src;
  g->raw_nd = nd;
  g->raw_shape = shape;
  g->raw_dstr = dstr;
  g->raw_sstr = sstr;
  g->nd = 0;
  g->dst = dst;
  g->src = src;
  g->disz = disz;
  g->sisz = sisz;
  for (int i = 0; i < nd; i++)
    if (shape[i] == 0) return 1;
  for (int i = 0; i < nd; i++) {
    if (shape[i] == 1) continue;
    int64_t db, sb, last = shape[i] - 1, dd, sd;
    if (mul_ovf(dstr[i], dmul, &db) || mul_ovf(sstr[i], smul, &sb) || mul_ovf(last, db, &dd) ||
        mul_ovf(last, sb, &sd))
      return -1;
    if (db < 0) { /* walk this dim from its other end on both sides */
      g->dst += dd;
      g->src += sd;
      db = -db;
      sb = -sb;
    }
    if (db == 0) {
      g->src += sb == 0 ? 0 : sd;
      continue;
    }
    g->n[g->nd] = shape[i];
    g->d[g->nd] = db;
    g->s[g->nd] = sb;
    g->nd++;
  }
  /* outermost first: by dst stride, then by |src stride| (insertion sort: few dims) */
  for (int i = 1; i < g->nd; i++) {
    int64_t n = g->n[i], d = g->d[i], s = g->s[i];
    int j = i - 1;
    while (j >= 0 && (g->d[j] < d || (g->d[j] == d && uabs(g->s[j]) < uabs(s)))) {
      g->n[j + 1] = g->n[j], g->d[j + 1] = g->d[j], g->s[j + 1] = g->s[j];
      j--;
    }
    g->n[j + 1] = n, g->d[j + 1] = d, g->s[j + 1] = s;
  }
  /* merge an outer dim into the inner one where both sides step evenly across */
  if (merge && g->nd > 1) {
    int w = g->nd - 1;
    for (int i = g->nd - 2; i >= 0; i--) {
      int64_t dn, sn;
      if (!mul_ovf(g->d[w], g->n[w], &dn) && !mul_ovf(g->s[w], g->n[w], &sn) && dn == g->d[i] &&
          sn == g->s[i]) {
        g->n[w] *= g->n[i]; /* a product of sizes: at most the element count */
      } else {
        w--;
        g->n[w] = g->n[i], g->d[w] = g->d[i], g->s[w] = g->s[i];
      }
    }
    int kept = g->nd - w;
    memmove(g->n, g->n + w, kept * sizeof(int64_t));
    memmove(g->d, g->d + w, kept * sizeof(int64_t));
    memmove(g->s, g->s + w, kept * sizeof(int64_t));
    g->nd = kept;
  }
  return 0;
}

static int geom_init(copy_geom *g, char *dst, const char *src, int nd, const int64_t *shape,
                     const int64_t *dstr, const int64_t *sstr, int disz, int sisz) {
  return geom_init_scaled(g, dst, src, nd, shape, dstr, sstr, disz, sisz, disz, sisz, 1);
}

/* [lo, hi) byte addresses each side reaches. */
static void geom_span(const copy_geom *g, uintptr_t *dlo, uintptr_t *dhi, uintptr_t *slo,
                      uintptr_t *shi) {
  uintptr_t dl = (uintptr_t)g->dst, dh = dl, sl = (uintptr_t)g->src, sh = sl;
  for (int i = 0; i < g->nd; i++) {
    int64_t sd = g->s[i] * (g->n[i] - 1); /* checked in geom_init */
    dh += (uintptr_t)(g->d[i] * (g->n[i] - 1));
    if (sd < 0) sl -= uabs(sd);
    else sh += (uintptr_t)sd;
  }
  *dlo = dl, *dhi = dh + g->disz, *slo = sl, *shi = sh + g->sisz;
}

/* --------------------------------------------------------------- tiles */

/* The SIMD level in use: 0 element loops, 1 SSE2, 2 AVX2 (-1: not yet known). */
static int simd_level = -1;

static int cpu_simd(void) {
#ifdef HAVE_AVX2_BLOCKS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return 2;
#endif
#if defined(__SSE2__)
  return 1;
#else
  return 0;
#endif
}

static int simd(void) {
  int v = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
  if (v < 0) {
    v = cpu_simd();
    __atomic_store_n(&simd_level, v, __ATOMIC_RELAXED);
  }
  return v;
}

int bridge_copy_set_simd(int level) {
  int best = cpu_simd(), old = simd();
  __atomic_store_n(&simd_level, level < 0 || level > best ? best : level, __ATOMIC_RELAXED);
  return old;
}


/* Element loops, one per element size known at compile time. */
#define ELEMS(N)                                                                                   \
  for (int64_t k = 0; k < nk; k++) {                                                               \
    char *dp = d + k * dK;                                                                         \
    const char *sp = s + k * sK;                                                                   \
    for (int64_t j = 0; j < nj; j++, dp += dJ, sp += sJ) memcpy(dp, sp, N);                        \
  }

static void move_elems(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ,
                       int64_t sK, int64_t sJ, int isz) {
  switch (isz) {
    case 1: ELEMS(1) break;
    case 2: ELEMS(2) break;
    case 4: ELEMS(4) break;
    case 8: ELEMS(8) break;
    case 16: ELEMS(16) break;
    default: ELEMS(isz) break;
  }
}

#if defined(__SSE2__)
/* Transposing tiles: dst rows (along J) are contiguous, src is contiguous
 * along K. Blocks of B x B elements are loaded as B src rows, transposed in
 * registers and stored as B dst rows; the edges go element by element. */
/* The blocks' loops run whole, their arrays in registers. */
#define UNROLL _Pragma("GCC unroll 16")
#define LD128(p) _mm_loadu_si128((const __m128i *)(p))
#define ST128(p, v) _mm_storeu_si128((__m128i *)(p), (v))
#define LD64(p) _mm_loadl_epi64((const __m128i *)(p))
#define ST64(p, v) _mm_storel_epi64((__m128i *)(p), (v))

static inline __attribute__((always_inline)) void block_4x4(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m128i r0 = LD128(s), r1 = LD128(s + sJ), r2 = LD128(s + 2 * sJ), r3 = LD128(s + 3 * sJ);
  __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);
  __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);
  ST128(d, _mm_unpacklo_epi64(t0, t1));
  ST128(d + dK, _mm_unpackhi_epi64(t0, t1));
  ST128(d + 2 * dK, _mm_unpacklo_epi64(t2, t3));
  ST128(d + 3 * dK, _mm_unpackhi_epi64(t2, t3));
}

static inline __attribute__((always_inline)) void block_2x2(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m128i r0 = LD128(s), r1 = LD128(s + sJ);
  ST128(d, _mm_unpacklo_epi64(r0, r1));
  ST128(d + dK, _mm_unpackhi_epi64(r0, r1));
}

static inline __attribute__((always_inline)) void block_8x8_16(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m128i r[8], a[8], b[8];
  UNROLL for (int i = 0; i < 8; i++) r[i] = LD128(s + i * sJ);
  UNROLL for (int i = 0; i < 4; i++) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  /* a0..a3 hold rows 0-3, a4..a7 rows 4-7; even: k 0-3, odd: k 4-7 */
  b[0] = _mm_unpacklo_epi32(a[0], a[2]), b[1] = _mm_unpackhi_epi32(a[0], a[2]);
  b[2] = _mm_unpacklo_epi32(a[1], a[3]), b[3] = _mm_unpackhi_epi32(a[1], a[3]);
  b[4] = _mm_unpacklo_epi32(a[4], a[6]), b[5] = _mm_unpackhi_epi32(a[4], a[6]);
  b[6] = _mm_unpacklo_epi32(a[5], a[7]), b[7] = _mm_unpackhi_epi32(a[5], a[7]);
  UNROLL for (int i = 0; i < 4; i++) {
    ST128(d + (2 * i) * dK, _mm_unpacklo_epi64(b[i], b[i + 4]));
    ST128(d + (2 * i + 1) * dK, _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
}

/* A reversed row: dst's n elements from src's, read downwards from `s`.
 * Each 16 bytes of dst are one load of src with its lanes reversed. */
static void reverse_row(char *d, const char *s, int64_t n, int isz) {
  int64_t m = 16 / isz, j = 0;
  for (; j + m <= n; j += m) {
    __m128i v = LD128(s - (j + m - 1) * isz);
    switch (isz) {
      case 1:
        v = _mm_shuffle_epi32(_mm_shufflehi_epi16(_mm_shufflelo_epi16(v, 0x1B), 0x1B), 0x4E);
        v = _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));
        break;
      case 2: v = _mm_shuffle_epi32(_mm_shufflehi_epi16(_mm_shufflelo_epi16(v, 0x1B), 0x1B), 0x4E); break;
      case 4: v = _mm_shuffle_epi32(v, 0x1B); break;
      default: v = _mm_shuffle_epi32(v, 0x4E); break;
    }
    ST128(d + j * isz, v);
  }
  if (j < n) move_elems(d + j * isz, s - j * isz, 1, n - j, 0, isz, 0, -(int64_t)isz, isz);
}

static inline __attribute__((always_inline)) void block_16x16_8(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m128i r[16], a[16], b[4][4], c[2][4][2];
  UNROLL for (int i = 0; i < 16; i++) r[i] = LD128(s + i * sJ);
  /* a[2p], a[2p + 1]: rows 2p and 2p + 1 interleaved, k 0-7 and 8-15 */
  UNROLL for (int p = 0; p < 8; p++) {
    a[2 * p] = _mm_unpacklo_epi8(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi8(r[2 * p], r[2 * p + 1]);
  }
  /* b[q][g]: rows 4q..4q+3 for k 4g..4g+3 */
  UNROLL for (int q = 0; q < 4; q++)
    UNROLL for (int h = 0; h < 2; h++) {
      b[q][2 * h] = _mm_unpacklo_epi16(a[4 * q + h], a[4 * q + 2 + h]);
      b[q][2 * h + 1] = _mm_unpackhi_epi16(a[4 * q + h], a[4 * q + 2 + h]);
    }
  /* c[h][g][y]: rows 8h..8h+7 for k 4g+2y and 4g+2y+1 */
  UNROLL for (int h = 0; h < 2; h++)
    UNROLL for (int g = 0; g < 4; g++) {
      c[h][g][0] = _mm_unpacklo_epi32(b[2 * h][g], b[2 * h + 1][g]);
      c[h][g][1] = _mm_unpackhi_epi32(b[2 * h][g], b[2 * h + 1][g]);
    }
  UNROLL for (int g = 0; g < 4; g++)
    UNROLL for (int y = 0; y < 2; y++) {
      int k = 4 * g + 2 * y;
      ST128(d + k * dK, _mm_unpacklo_epi64(c[0][g][y], c[1][g][y]));
      ST128(d + (k + 1) * dK, _mm_unpackhi_epi64(c[0][g][y], c[1][g][y]));
    }
}

#ifdef HAVE_AVX2_BLOCKS
#include <immintrin.h>
/* AVX2 blocks (chosen at run time): 8 x 8 four-byte and 4 x 4 eight-byte
 * elements per block, half the instructions of the SSE2 ones. */
__attribute__((target("avx2"), always_inline)) static inline void block_8x8_32(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m256 r[8], t[8], u[8];
  UNROLL for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps((const float *)(s + i * sJ));
  UNROLL for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  UNROLL for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  UNROLL for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps((float *)(d + i * dK), _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps((float *)(d + (i + 4) * dK), _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

__attribute__((target("avx2"), always_inline)) static inline void block_4x4_64(char *d, const char *s, int64_t dK, int64_t sJ) {
  __m256d r0 = _mm256_loadu_pd((const double *)s), r1 = _mm256_loadu_pd((const double *)(s + sJ));
  __m256d r2 = _mm256_loadu_pd((const double *)(s + 2 * sJ)), r3 = _mm256_loadu_pd((const double *)(s + 3 * sJ));
  __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd((double *)d, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd((double *)(d + dK), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd((double *)(d + 2 * dK), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd((double *)(d + 3 * dK), _mm256_permute2f128_pd(t1, t3, 0x31));
}

/* Two 16 x 16 byte blocks side by side (k 0-15 in the low lanes, k 16-31 in
 * the high ones): SSE2's unpack steps, each doing both blocks at once. */
__attribute__((target("avx2"), always_inline)) static inline void block_32x16_8(char *d, const char *s, int64_t dK,
                                                                               int64_t sJ) {
  __m256i r[16], a[16], b[4][4], c[2][4][2];
  UNROLL for (int i = 0; i < 16; i++) r[i] = _mm256_loadu_si256((const __m256i *)(s + i * sJ));
  UNROLL for (int p = 0; p < 8; p++) {
    a[2 * p] = _mm256_unpacklo_epi8(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm256_unpackhi_epi8(r[2 * p], r[2 * p + 1]);
  }
  UNROLL for (int q = 0; q < 4; q++)
    UNROLL for (int h = 0; h < 2; h++) {
      b[q][2 * h] = _mm256_unpacklo_epi16(a[4 * q + h], a[4 * q + 2 + h]);
      b[q][2 * h + 1] = _mm256_unpackhi_epi16(a[4 * q + h], a[4 * q + 2 + h]);
    }
  UNROLL for (int h = 0; h < 2; h++)
    UNROLL for (int g = 0; g < 4; g++) {
      c[h][g][0] = _mm256_unpacklo_epi32(b[2 * h][g], b[2 * h + 1][g]);
      c[h][g][1] = _mm256_unpackhi_epi32(b[2 * h][g], b[2 * h + 1][g]);
    }
  UNROLL for (int g = 0; g < 4; g++)
    UNROLL for (int y = 0; y < 2; y++) {
      int k = 4 * g + 2 * y;
      __m256i lo = _mm256_unpacklo_epi64(c[0][g][y], c[1][g][y]), hi = _mm256_unpackhi_epi64(c[0][g][y], c[1][g][y]);
      _mm_storeu_si128((__m128i *)(d + k * dK), _mm256_castsi256_si128(lo));
      _mm_storeu_si128((__m128i *)(d + (k + 1) * dK), _mm256_castsi256_si128(hi));
      _mm_storeu_si128((__m128i *)(d + (k + 16) * dK), _mm256_extracti128_si256(lo, 1));
      _mm_storeu_si128((__m128i *)(d + (k + 17) * dK), _mm256_extracti128_si256(hi, 1));
    }
}

/* Two 8 x 8 blocks of two-byte elements side by side (k 0-7 and 8-15). */
__attribute__((target("avx2"), always_inline)) static inline void block_16x8_16(char *d, const char *s, int64_t dK,
                                                                               int64_t sJ) {
  __m256i r[8], a[8], b[8];
  UNROLL for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(s + i * sJ));
  UNROLL for (int i = 0; i < 4; i++) {
    a[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  b[0] = _mm256_unpacklo_epi32(a[0], a[2]), b[1] = _mm256_unpackhi_epi32(a[0], a[2]);
  b[2] = _mm256_unpacklo_epi32(a[1], a[3]), b[3] = _mm256_unpackhi_epi32(a[1], a[3]);
  b[4] = _mm256_unpacklo_epi32(a[4], a[6]), b[5] = _mm256_unpackhi_epi32(a[4], a[6]);
  b[6] = _mm256_unpacklo_epi32(a[5], a[7]), b[7] = _mm256_unpackhi_epi32(a[5], a[7]);
  UNROLL for (int i = 0; i < 4; i++) {
    __m256i lo = _mm256_unpacklo_epi64(b[i], b[i + 4]), hi = _mm256_unpackhi_epi64(b[i], b[i + 4]);
    _mm_storeu_si128((__m128i *)(d + (2 * i) * dK), _mm256_castsi256_si128(lo));
    _mm_storeu_si128((__m128i *)(d + (2 * i + 1) * dK), _mm256_castsi256_si128(hi));
    _mm_storeu_si128((__m128i *)(d + (2 * i + 8) * dK), _mm256_extracti128_si256(lo, 1));
    _mm_storeu_si128((__m128i *)(d + (2 * i + 9) * dK), _mm256_extracti128_si256(hi, 1));
  }
}

#endif


/* The loop over a tile's blocks (BK along K by BJ along J), one loop per
 * block so that the block is inlined; the edges go element by element. */
#define DEF_TRANSPOSE(NAME, ATTR, BLOCK, BK, BJ, ISZ)                                              \
  ATTR static void NAME(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t sJ) {  \
    int64_t kf = nk - nk % BK, jf = nj - nj % BJ;                                                  \
    for (int64_t k = 0; k < kf; k += BK)                                                           \
      for (int64_t j = 0; j < jf; j += BJ) BLOCK(d + k * dK + j * ISZ, s + j * sJ + k * ISZ, dK, sJ); \
    if (jf < nj) move_elems(d + jf * ISZ, s + jf * sJ, kf, nj - jf, dK, ISZ, ISZ, sJ, ISZ);       \
    if (kf < nk) move_elems(d + kf * dK, s + kf * ISZ, nk - kf, nj, dK, ISZ, ISZ, sJ, ISZ);       \
  }

DEF_TRANSPOSE(transpose_1, , block_16x16_8, 16, 16, 1)
DEF_TRANSPOSE(transpose_2, , block_8x8_16, 8, 8, 2)
DEF_TRANSPOSE(transpose_4, , block_4x4, 4, 4, 4)
DEF_TRANSPOSE(transpose_8, , block_2x2, 2, 2, 8)
#ifdef HAVE_AVX2_BLOCKS
#define AVX2 __attribute__((target("avx2")))
DEF_TRANSPOSE(transpose_1_avx2, AVX2, block_32x16_8, 32, 16, 1)
DEF_TRANSPOSE(transpose_2_avx2, AVX2, block_16x8_16, 16, 8, 2)
DEF_TRANSPOSE(transpose_4_avx2, AVX2, block_8x8_32, 8, 8, 4)
DEF_TRANSPOSE(transpose_8_avx2, AVX2, block_4x4_64, 4, 4, 8)
#endif

/* A transposing tile (dst rows along J contiguous, src contiguous along K):
 * 1 done, 0 no block for this element size. */
static int transpose_tile(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t sJ,
                          int isz) {
  typedef void (*fn)(char *, const char *, int64_t, int64_t, int64_t, int64_t);
  fn f;
  switch (isz) {
    case 1: f = transpose_1; break;
    case 2: f = transpose_2; break;
    case 4: f = transpose_4; break;
    case 8: f = transpose_8; break;
    default: return 0;
  }
  if (simd() < 1) return 0;
#ifdef HAVE_AVX2_BLOCKS
  if (simd() >= 2)
    f = isz == 1 ? transpose_1_avx2 : isz == 2 ? transpose_2_avx2 : isz == 4 ? transpose_4_avx2 : transpose_8_avx2;
#endif
  f(d, s, nk, nj, dK, sJ);
  return 1;
}
#endif

/* One tile: nk rows along K of nj elements along J. */
static void move_tile(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ,
                      int64_t sK, int64_t sJ, int isz) {
  if (dJ == isz && sJ == isz) { /* rows contiguous on both sides */
    size_t row = (size_t)(nj * isz);
    for (int64_t k = 0; k < nk; k++) memcpy(d + k * dK, s + k * sK, row);
    return;
  }
#if defined(__SSE2__)
  if (dJ == isz && sK == isz && transpose_tile(d, s, nk, nj, dK, sJ, isz)) return;
  if (dJ == isz && sJ == -(int64_t)isz && isz <= 8 && simd() >= 1) {
    for (int64_t k = 0; k < nk; k++) reverse_row(d + k * dK, s + k * sK, nj, isz);
    return;
  }
#endif
  move_elems(d, s, nk, nj, dK, dJ, sK, sJ, isz);
}

/* ---------------------------------------------------------------- plan */

typedef struct {
  copy_geom g;
  const bridge_cast *cast; /* NULL: the bytes move as they are */
  int64_t NK, NJ, TK, TJ;  /* sizes of the tile dims, and of a tile */
  int64_t dK, dJ, sK, sJ;  /* their byte strides */
  int m;                   /* iteration dims (the other dims and the tile steps), outer first */
  int64_t it_n[MAXD], it_d[MAXD], it_s[MAXD], wrap_d[MAXD], wrap_s[MAXD];
  int kb, jb;    /* the iteration dims stepping from tile to tile (-1: one tile spans it) */
  int64_t work;  /* tiles */
  int transpose; /* K is src's fastest dim, not dst's next */
  int stage;
  int prefetch;  /* bits: 1 the next tile's src lines, 2 its dst lines */
} copy_plan;


/* Choose the tile dims and the order of the tiles; -1 when a step overflows. */
static int plan_copy(copy_plan *p) {
  copy_geom *g = &p->g;
  while (g->nd < 2) { /* pad to two dims with size-1 ones */
    memmove(g->n + 1, g->n, g->nd * sizeof(int64_t));
    memmove(g->d + 1, g->d, g->nd * sizeof(int64_t));
    memmove(g->s + 1, g->s, g->nd * sizeof(int64_t));
    g->n[0] = 1, g->d[0] = 0, g->s[0] = 0;
    g->nd++;
  }
  int nd = g->nd, J = nd - 1, K = -1;
  int isz = g->disz > g->sisz ? g->disz : g->sisz;
  uint64_t best = UINT64_MAX;
  /* a dim where src stands still (broadcast) is no partner: its rows are copies of one */
  for (int i = 0; i < J; i++)
    if (g->n[i] > 1 && g->s[i] != 0 && uabs(g->s[i]) <= best) best = uabs(g->s[i]), K = i;
  int transpose = K >= 0 && best < uabs(g->s[J]);
  if (!transpose) K = nd - 2;
  p->transpose = transpose;
  /* src rows a multiple of 64 KiB apart share every cache set of L1 and L2:
   * they go through the padded scratch buffer first, each line read once */
  p->stage = transpose && uabs(g->s[J]) % (64 << 10) == 0;
  p->prefetch = transpose ? 3 : 0;
#ifdef BRIDGE_COPY_TUNING
  if (getenv("BRIDGE_STAGE")) p->stage = atoi(getenv("BRIDGE_STAGE"));
  if (getenv("BRIDGE_PF") && transpose) p->prefetch = atoi(getenv("BRIDGE_PF"));
#endif
  p->NK = g->n[K], p->NJ = g->n[J];
  p->dK = g->d[K], p->dJ = g->d[J], p->sK = g->s[K], p->sJ = g->s[J];
  if (transpose) {
    /* a tile reads TK elements (256 bytes: whole lines) from each of TJ src rows */
    int64_t ek = TRANSPOSE_ROW_BYTES / isz, ej = TRANSPOSE_ROWS;
#ifdef BRIDGE_COPY_TUNING /* a build for measuring tile shapes */
    if (getenv("BRIDGE_TK")) ek = atoi(getenv("BRIDGE_TK")) / isz;
    if (getenv("BRIDGE_TJ")) ej = atoi(getenv("BRIDGE_TJ"));
#endif
    if (ek < 1) ek = 1;
    if (ek * isz > 1024) ek = 1024 / isz; /* transpose_staged's row buffer */
    int64_t pitch = ((ek * isz + 63) & ~(int64_t)63) + 64;
    if (ej * pitch > SCRATCH_BYTES) ej = SCRATCH_BYTES / pitch;
    p->TK = p->NK < ek ? p->NK : ek;
    p->TJ = p->NJ < ej ? p->NJ : ej;
  } else {
    /* rows: a cast converts at most a scratch buffer of them at a time; a
     * plain copy takes larger tiles, small enough to share between threads */
    int64_t cap = (p->cast == NULL ? ROW_TILE_BYTES : TILE_BYTES) / isz;
    p->TJ = p->NJ < cap ? p->NJ : cap;
    int64_t rows = cap / p->TJ;
    p->TK = p->NK < rows ? p->NK : rows < 1 ? 1 : rows;
  }
  /* the iteration dims, outer first by dst stride: tiles follow dst's addresses */
  int m = 0, tag[MAXD];
  for (int i = 0; i < nd; i++) {
    int64_t n = g->n[i], ds = g->d[i], ss = g->s[i];
    if (i == K || i == J) {
      int64_t t = i == K ? p->TK : p->TJ;
      n = (n + t - 1) / t;
      if (mul_ovf(ds, t, &ds) || mul_ovf(ss, t, &ss)) return -1;
    }
    if (n == 1) continue;
    p->it_n[m] = n, p->it_d[m] = ds, p->it_s[m] = ss;
    tag[m] = i == K ? 1 : i == J ? 2 : 0;
    m++;
  }
  for (int i = 1; i < m; i++) {
    int64_t n = p->it_n[i], ds = p->it_d[i], ss = p->it_s[i];
    int t = tag[i], j = i - 1;
    while (j >= 0 && p->it_d[j] < ds) {
      p->it_n[j + 1] = p->it_n[j], p->it_d[j + 1] = p->it_d[j], p->it_s[j + 1] = p->it_s[j];
      tag[j + 1] = tag[j];
      j--;
    }
    p->it_n[j + 1] = n, p->it_d[j + 1] = ds, p->it_s[j + 1] = ss, tag[j + 1] = t;
  }
  p->m = m;
  p->kb = p->jb = -1;
  p->work = 1;
  for (int i = 0; i < m; i++) {
    if (tag[i] == 1) p->kb = i;
    if (tag[i] == 2) p->jb = i;
    if (mul_ovf(p->it_d[i], p->it_n[i], &p->wrap_d[i]) || mul_ovf(p->it_s[i], p->it_n[i], &p->wrap_s[i]))
      return -1;
    p->work *= p->it_n[i]; /* at most the element count */
  }
  return 0;
}

/* A short contiguous row (a call to memcpy costs as much as moving it). */
static inline void copy_row(char *d, const char *s, int64_t nbytes) {
#if defined(__SSE2__)
  if (nbytes % 16 == 0) {
    for (int64_t i = 0; i < nbytes; i += 16) ST128(d + i, LD128(s + i));
    return;
  }
#endif
  memcpy(d, s, (size_t)nbytes);
}

/* A transposing tile through the scratch buffer: src's rows (along K)
 * copied or converted into scratch rows, then transposed into dst. */
static int transpose_staged(const copy_plan *p, char *d, const char *s, int64_t nk, int64_t nj,
                            char *scratch) {
  int disz = p->g.disz, sisz = p->g.sisz, bad = 0;
  int64_t pitch = ((nk * disz + 63) & ~(int64_t)63) + 64;
  for (int64_t j = 0; j < nj; j++) {
    const char *row = s + j * p->sJ;
    char *out = scratch + j * pitch;
    if (p->cast == NULL) {
      if (p->sK == sisz) copy_row(out, row, nk * sisz);
      else move_elems(out, row, 1, nk, 0, sisz, 0, p->sK, sisz);
    } else if (p->sK == sisz) {
      bad |= bridge_cast_run(p->cast, row, out, nk, disz);
    } else {
      char tmp[1024] __attribute__((aligned(64)));
      move_elems(tmp, row, 1, nk, 0, sisz, 0, p->sK, sisz);
      bad |= bridge_cast_run(p->cast, tmp, out, nk, disz);
    }
  }
  move_tile(d, scratch, nk, nj, p->dK, p->dJ, disz, pitch, disz);
  return bad;
}

/* One tile of the plan; 1 when a cast met an element it leaves to NumPy. */
static int do_tile(const copy_plan *p, char *d, const char *s, int64_t nk, int64_t nj, char *scratch) {
  int sisz = p->g.sisz, bad = 0;
  if (p->transpose && p->stage) return transpose_staged(p, d, s, nk, nj, scratch);
  if (p->cast == NULL) {
    move_tile(d, s, nk, nj, p->dK, p->dJ, p->sK, p->sJ, sisz);
    return 0;
  }
  if (p->sJ == sisz) { /* src rows contiguous: convert them where they are */
    for (int64_t k = 0; k < nk; k++) bad |= bridge_cast_run(p->cast, s + k * p->sK, d + k * p->dK, nj, p->dJ);
    return bad;
  }
  move_tile(scratch, s, nk, nj, nj * sisz, sisz, p->sK, p->sJ, sisz);
  for (int64_t k = 0; k < nk; k++)
    bad |= bridge_cast_run(p->cast, scratch + k * nj * sisz, d + k * p->dK, nj, p->dJ);
  return bad;
}

/* Tiles [w0, w1) of the plan, in order. */
/* Touch the lines a tile will read (and write) before it runs: transposing
 * tiles jump between rows, where the hardware prefetchers do not follow. */
static void prefetch_tile(const copy_plan *p, const char *d, const char *s, int64_t nk, int64_t nj) {
  int64_t srow = nk * (p->sK < 0 ? -p->sK : p->sK), drow = nj * p->dJ;
  int64_t sback = p->sK < 0 ? (nk - 1) * p->sK : 0;
  if (p->prefetch & 1)
    for (int64_t j = 0; j < nj; j++)
      for (int64_t o = 0; o < srow; o += 64) __builtin_prefetch(s + j * p->sJ + sback + o, 0, 3);
  if (p->prefetch & 2)
    for (int64_t k = 0; k < nk; k++)
      for (int64_t o = 0; o < drow; o += 64) __builtin_prefetch(d + k * p->dK + o, 1, 3);
}

/* Tiles [w0, w1) of the plan, in order. */
static int run_tiles(const copy_plan *p, int64_t w0, int64_t w1) {
  char scratch[SCRATCH_BYTES] __attribute__((aligned(64)));
  int64_t idx[MAXD], doff = 0, soff = 0, rest = w0;
  int bad = 0;
  for (int q = p->m - 1; q >= 0; q--) {
    idx[q] = rest % p->it_n[q];
    rest /= p->it_n[q];
    doff += idx[q] * p->it_d[q];
    soff += idx[q] * p->it_s[q];
  }
  int64_t nk = p->kb < 0 ? p->NK : p->NK - idx[p->kb] * p->TK;
  int64_t nj = p->jb < 0 ? p->NJ : p->NJ - idx[p->jb] * p->TJ;
  for (int64_t w = w0; w < w1; w++) {
    char *d = p->g.dst + doff;
    const char *s = p->g.src + soff;
    int64_t tk = nk < p->TK ? nk : p->TK, tj = nj < p->TJ ? nj : p->TJ;
    for (int q = p->m - 1; q >= 0; q--) { /* on to the next tile, fetched while this one runs */
      doff += p->it_d[q];
      soff += p->it_s[q];
      if (++idx[q] < p->it_n[q]) break;
      doff -= p->wrap_d[q];
      soff -= p->wrap_s[q];
      idx[q] = 0;
    }
    nk = p->kb < 0 ? p->NK : p->NK - idx[p->kb] * p->TK;
    nj = p->jb < 0 ? p->NJ : p->NJ - idx[p->jb] * p->TJ;
    if (p->prefetch && w + 1 < w1)
      prefetch_tile(p, p->g.dst + doff, p->g.src + soff, nk < p->TK ? nk : p->TK, nj < p->TJ ? nj : p->TJ);
    bad |= do_tile(p, d, s, tk, tj, scratch);
  }
  return bad;
}

/* ------------------------------------------------------------- threads */

/* Copies of at least this many bytes are split between threads; smaller
 * ones never start one. */
#define THREAD_MIN_BYTES (8 << 20)

static int copy_threads = 0; /* 0: one per online CPU (bridge_copy_set_threads) */

static int thread_count(void) {
  int n = __atomic_load_n(&copy_threads, __ATOMIC_RELAXED);
  if (n > 0) return n;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
}

typedef struct {
  const copy_plan *p;
  int64_t w0, w1;
  int bad;
} tile_range;

static void *tile_worker(void *arg) {
  tile_range *r = arg;
  r->bad = run_tiles(r->p, r->w0, r->w1);
  return NULL;
}

/* Run a plan, on several threads when it is large; 1 when a cast flagged. */
static int run_plan(const copy_plan *p, int64_t nbytes) {
  int nt = nbytes >= THREAD_MIN_BYTES ? thread_count() : 1;
  if (nt > p->work) nt = (int)p->work;
  if (nt <= 1) return run_tiles(p, 0, p->work);
  tile_range r[64];
  pthread_t th[64];
  int started[64] = {0}, bad = 0;
  for (int i = 0; i < nt; i++) {
    r[i].p = p;
    r[i].w0 = p->work * i / nt;
    r[i].w1 = p->work * (i + 1) / nt;
    r[i].bad = 0;
  }
  /* this thread takes the first range; a thread that cannot start leaves its
   * range to this one */
  for (int i = 1; i < nt; i++) {
    started[i] = pthread_create(&th[i], NULL, tile_worker, &r[i]) == 0;
    if (started[i]) BUMP(STAT_COPY_THREADS);
  }
  bad |= run_tiles(p, r[0].w0, r[0].w1);
  for (int i = 1; i < nt; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    else r[i].bad = run_tiles(p, r[i].w0, r[i].w1);
    bad |= r[i].bad;
  }
  return bad;
}

int bridge_copy_set_threads(int n) {
  int old = __atomic_exchange_n(&copy_threads, n < 0 ? 0 : n, __ATOMIC_RELAXED);
  return old;
}

/* ------------------------------------------------------------- overlap */

/* Does the run of dim J at index idx (elements [j0, j0 + len)) write bytes
 * that a run after it (dir 1: later in index order; -1: earlier) still
 * reads? Runs never straddle rows, so what comes after is one part of this
 * row and, for each outer dim q, the boxes past idx[q] with every dim
 * inside q whole. */
static int run_clobbers(const copy_geom *g, const int64_t *idx, int64_t j0, int64_t len, int dir,
                        const int64_t *inner_lo, const int64_t *inner_hi) {
  int J = g->nd - 1;
  uintptr_t dlo = (uintptr_t)g->dst, shi_pad = (uintptr_t)g->sisz;
  for (int q = 0; q < J; q++) dlo += (uintptr_t)(idx[q] * g->d[q]);
  dlo += (uintptr_t)(j0 * g->d[J]);
  uintptr_t dhi = dlo + (uintptr_t)((len - 1) * g->d[J]) + (uintptr_t)g->disz;
  int64_t base = 0; /* src offset of the current prefix */
  for (int q = 0; q <= J; q++) {
    /* the box: prefix idx[0..q-1], dim q over the indices after idx[q]
     * (q == J: after the run), dims inside q whole */
    int64_t first, count;
    int64_t at = q == J ? j0 : idx[q];
    if (dir > 0) {
      first = q == J ? j0 + len : at + 1;
      count = g->n[q] - first;
    } else {
      first = 0;
      count = at;
    }
    if (count > 0) {
      int64_t o = base + first * g->s[q], span = (count - 1) * g->s[q];
      uintptr_t lo = (uintptr_t)g->src + (uintptr_t)(o + (span < 0 ? span : 0) + (q < J ? inner_lo[q + 1] : 0));
      uintptr_t hi = (uintptr_t)g->src + (uintptr_t)(o + (span > 0 ? span : 0) + (q < J ? inner_hi[q + 1] : 0)) + shi_pad;
      if (lo < dhi && dlo < hi) return 1;
    }
    if (q < J) base += idx[q] * g->s[q];
  }
  return 0;
}

enum { WALK_COPY, WALK_CHECK, WALK_PROBE };

/* Walk the runs of dim J (at most `chunk` elements each) in one direction.
 * WALK_CHECK: whether every run is safe (1) or not (0); WALK_COPY: copy,
 * each run staged through `scratch` (1 when a cast flagged, else 0);
 * WALK_PROBE: convert src into scratch only, writing nothing (1 when a cast
 * would flag). */
static int staged_walk(const copy_geom *g, const bridge_cast *cast, int dir, int64_t chunk, int mode,
                       char *scratch) {
  int J = g->nd - 1, bad = 0;
  int64_t idx[MAXD], inner_lo[MAXD + 1], inner_hi[MAXD + 1];
  inner_lo[g->nd] = inner_hi[g->nd] = 0;
  for (int q = g->nd - 1; q >= 0; q--) {
    int64_t span = (g->n[q] - 1) * g->s[q];
    inner_lo[q] = inner_lo[q + 1] + (span < 0 ? span : 0);
    inner_hi[q] = inner_hi[q + 1] + (span > 0 ? span : 0);
  }
  for (int q = 0; q < J; q++) idx[q] = dir > 0 ? 0 : g->n[q] - 1;
  int64_t nruns = (g->n[J] + chunk - 1) / chunk;
  for (;;) {
    for (int64_t r = 0; r < nruns; r++) {
      int64_t ri = dir > 0 ? r : nruns - 1 - r, j0 = ri * chunk;
      int64_t len = g->n[J] - j0 < chunk ? g->n[J] - j0 : chunk;
      if (mode == WALK_CHECK) {
        if (run_clobbers(g, idx, j0, len, dir, inner_lo, inner_hi)) return 0;
        continue;
      }
      int64_t doff = j0 * g->d[J], soff = j0 * g->s[J];
      for (int q = 0; q < J; q++) doff += idx[q] * g->d[q], soff += idx[q] * g->s[q];
      move_tile(scratch, g->src + soff, 1, len, 0, g->sisz, 0, g->s[J], g->sisz);
      if (mode == WALK_PROBE) {
        if (bridge_cast_run(cast, scratch, scratch + TILE_BYTES, len, g->disz)) return 1;
      } else if (cast) bad |= bridge_cast_run(cast, scratch, g->dst + doff, len, g->d[J]);
      else move_tile(g->dst + doff, scratch, 1, len, 0, g->d[J], 0, g->sisz, g->disz);
    }
    int q = J - 1;
    for (; q >= 0; q--) {
      if (dir > 0 ? ++idx[q] < g->n[q] : --idx[q] >= 0) break;
      idx[q] = dir > 0 ? 0 : g->n[q] - 1;
    }
    if (q < 0) break;
  }
  return mode == WALK_CHECK ? 1 : bad;
}

/* ------------------------------------------------- in-place permutations */

/* Swap n pairs (a, b), a stepping da and b db bytes, where a < b: the
 * pairs of an order-2 permutation, each taken once, from its lower end.
 * One loop per element size, so that each swap is a register move. */
#define SWAP_RUN(T)                                            \
  for (int64_t j = 0; j < n; j++, a += da, b += db) {          \
    if (a >= b) continue; /* itself, or taken at its other end */ \
    T x, y;                                                    \
    memcpy(&x, a, sizeof x);                                   \
    memcpy(&y, b, sizeof y);                                   \
    memcpy(a, &y, sizeof y);                                   \
    memcpy(b, &x, sizeof x);                                   \
  }
typedef struct {
  uint64_t lo, hi;
} bytes16;
static void swap_run(char *a, char *b, int64_t n, int64_t da, int64_t db, int isz) {
  switch (isz) {
    case 1: SWAP_RUN(uint8_t) return;
    case 2: SWAP_RUN(uint16_t) return;
    case 4: SWAP_RUN(uint32_t) return;
    case 8: SWAP_RUN(uint64_t) return;
    case 16: SWAP_RUN(bytes16) return;
    default:
      for (int64_t j = 0; j < n; j++, a += da, b += db) {
        if (a >= b) continue;
        char x[16];
        memcpy(x, a, (size_t)isz);
        memcpy(a, b, (size_t)isz);
        memcpy(b, x, (size_t)isz);
      }
  }
}
#undef SWAP_RUN

/* One order-2 permutation of dst's elements in place: dst[i] = src[i]
 * where src reads, for each element, the element that reads it back (a
 * transpose of two equal dims, reversed dims, or both). Each pair is swapped
 * once, from its lower address, walking tiles of the two inner dims so that
 * a transposed partner's lines stay in cache. */
static void swap_pairs(const copy_geom *g) {
  int nd = g->nd, J = nd - 1, K = nd >= 2 ? nd - 2 : -1;
  int64_t x[MAXD] = {0}, nK = K >= 0 ? g->n[K] : 1, dK = K >= 0 ? g->d[K] : 0, sK = K >= 0 ? g->s[K] : 0;
  const int64_t T = 64;
  for (;;) {
    char *bd = g->dst;
    const char *bs = g->src;
    for (int q = 0; q < K; q++) bd += x[q] * g->d[q], bs += x[q] * g->s[q];
    for (int64_t k0 = 0; k0 < nK; k0 += T)
      for (int64_t j0 = 0; j0 < g->n[J]; j0 += T) {
        int64_t kn = nK - k0 < T ? nK - k0 : T, jn = g->n[J] - j0 < T ? g->n[J] - j0 : T;
        for (int64_t k = k0; k < k0 + kn; k++)
          swap_run(bd + k * dK + j0 * g->d[J], (char *)bs + k * sK + j0 * g->s[J], jn, g->d[J], g->s[J], g->disz);
      }
    int q = K - 1;
    for (; q >= 0 && ++x[q] == g->n[q]; q--) x[q] = 0;
    if (q < 0) return;
  }
}

/* dst[i] = src[i] where src is dst's own elements in another order: src's
 * dims are dst's permuted (equal sizes, the same byte strides), some run
 * backwards, over the same bytes. Index map f (element i takes the element
 * dst holds at f(i): f(i)[sigma[k]] = i[k], or n - 1 - i[k] where src's dim
 * k runs backwards) is done as order-2 passes, each swapping pairs in place:
 * f = flips o a permutation of dims, and the permutation, cycle by cycle, as
 * swaps of two dims (a pass for f then one for g gives f o g). One element
 * is held at a time; a transpose or a reversal is one pass, a cyclic
 * permutation of n dims n - 1, plus one when it also reverses dims.
 * 1 when g is such a copy (done), 0 when it is not. */
static int permute_in_place(const copy_geom *g) {
  int nd = g->nd, isz = g->disz, sigma[MAXD], flip[MAXD], used[MAXD] = {0};
  if (g->disz != g->sisz || nd == 0 || isz > 16) return 0;
  for (int k = nd - 1; k >= 0; k--) { /* dst's elements are distinct: each dim steps past the ones inside */
    int64_t inner = isz;
    if (k + 1 < nd && mul_ovf(g->d[k + 1], g->n[k + 1], &inner)) return 0;
    if (g->d[k] < inner) return 0;
  }
  int64_t shift = 0;
  for (int k = 0; k < nd; k++) {
    uint64_t a = uabs(g->s[k]);
    int m = 0;
    while (m < nd && (used[m] || (uint64_t)g->d[m] != a || g->n[m] != g->n[k])) m++;
    if (m == nd) return 0;
    used[m] = 1;
    sigma[k] = m;
    flip[k] = g->s[k] < 0;
    if (flip[k]) shift += (int64_t)a * (g->n[k] - 1); /* within dst's span: no overflow */
  }
  if (g->src != g->dst + shift) return 0; /* the same bytes, not a shifted lattice */
  BUMP(STAT_COPY_PERMUTED);
  int involution = 1;
  for (int k = 0; k < nd; k++) involution &= sigma[sigma[k]] == k && flip[k] == flip[sigma[k]];
  if (involution) {
    swap_pairs(g);
    return 1;
  }
  copy_geom pass = *g;
  /* the flips first: dims sigma[k] of dst, reversed onto themselves */
  memcpy(pass.s, g->d, (size_t)nd * sizeof(int64_t));
  pass.src = g->dst;
  int flips = 0;
  for (int k = 0; k < nd; k++) {
    if (!flip[k]) continue;
    int m = sigma[k];
    pass.s[m] = -g->d[m];
    pass.src += g->d[m] * (g->n[m] - 1);
    flips = 1;
  }
  if (flips) swap_pairs(&pass);
  /* then each cycle c0 -> c1 -> ... -> c(L-1) of sigma: swaps of dims
   * (c0, c(L-1)), (c0, c(L-2)), ..., (c0, c1), in that order */
  int seen[MAXD] = {0};
  pass.src = g->dst;
  for (int c0 = 0; c0 < nd; c0++) {
    if (seen[c0]) continue;
    int cyc[MAXD], len = 0;
    for (int m = c0; !seen[m]; m = sigma[m]) seen[m] = 1, cyc[len++] = m;
    for (int step = len - 1; step >= 1; step--) {
      memcpy(pass.s, g->d, (size_t)nd * sizeof(int64_t));
      pass.s[cyc[0]] = g->d[cyc[step]];
      pass.s[cyc[step]] = g->d[cyc[0]];
      swap_pairs(&pass);
    }
  }
  return 1;
}

/* ------------------------------------------------- overlaps in place */

/* A lattice of element addresses: base + sum(st[k] * x[k]) for x in the
 * index box n. When its strides nest (sorted by size, each one past the
 * span of all the smaller ones), each address has one index, found by
 * division: lattice_index; any lattice is searched: lattice_next. */
typedef struct {
  int nd, order[MAXD];        /* dims by |stride|, largest first */
  int nests;                  /* every address one index, found by division */
  int64_t n[MAXD], st[MAXD];  /* sizes and byte strides */
  uint64_t inner[MAXD + 1];   /* bytes spanned by the dims after order[i] */
  const char *base, *lo;      /* index 0, and the lowest address */
} lattice;

/* 1 when the strides nest over elements of isz bytes, else 0 (L is set up
 * either way). */
static int lattice_init(lattice *L, int nd, const int64_t *n, const int64_t *st, const char *base, int isz) {
  L->nd = nd;
  L->base = L->lo = base;
  for (int k = 0; k < nd; k++) {
    L->n[k] = n[k];
    L->st[k] = st[k];
    L->order[k] = k;
    if (st[k] < 0) L->lo += st[k] * (n[k] - 1); /* within the copy's checked span */
  }
  for (int i = 1; i < nd; i++) /* insertion sort by |stride|, descending */
    for (int j = i; j > 0 && uabs(st[L->order[j - 1]]) < uabs(st[L->order[j]]); j--) {
      int t = L->order[j];
      L->order[j] = L->order[j - 1];
      L->order[j - 1] = t;
    }
  L->nests = 1;
  L->inner[nd] = 0;
  for (int i = nd - 1; i >= 0; i--) {
    int k = L->order[i];
    uint64_t a = uabs(st[k]);
    if (a < (uint64_t)isz || a <= L->inner[i + 1]) L->nests = 0;
    L->inner[i] = L->inner[i + 1] + a * (uint64_t)(n[k] - 1); /* within the checked span */
  }
  return L->nests;
}

static const char *lattice_at(const lattice *L, const int64_t *x) {
  const char *p = L->base;
  for (int k = 0; k < L->nd; k++) p += L->st[k] * x[k];
  return p;
}

/* The index of address p on the lattice: 1 with x, 0 when p is not on it. */
static int lattice_index(const lattice *L, const char *p, int64_t *x) {
  if (p < L->lo) return 0;
  uint64_t off = (uint64_t)(p - L->lo);
  for (int i = 0; i < L->nd; i++) {
    int k = L->order[i];
    uint64_t a = uabs(L->st[k]), q = off / a;
    if (q >= (uint64_t)L->n[k]) return 0;
    off -= q * a;
    x[k] = L->st[k] < 0 ? L->n[k] - 1 - (int64_t)q : (int64_t)q;
  }
  return off == 0;
}

/* One element of dst from the bytes at `from`, held first (from may be to,
 * or be written meanwhile). A cast that could flag was probed beforehand. */
static inline void put_one(char *to, const char *from, int isz, const bridge_cast *cast) {
  char held[16];
  memcpy(held, from, (size_t)isz);
  if (cast == NULL) memcpy(to, held, (size_t)isz);
  else (void)bridge_cast_run(cast, held, to, 1, isz);
}

static int64_t lin_index(const int64_t *x, const int64_t *w, int nd) {
  int64_t v = 0;
  for (int k = 0; k < nd; k++) v += x[k] * w[k];
  return v;
}

/* A bijective mix of an element's index (splitmix64's finaliser): ranked by
 * it, elements are in random order, so a walk looking for a lower-ranked
 * element meets one after a few steps on average, whichever way a chain
 * runs. A cycle is led by its lowest-ranked element. */
static uint64_t rank_of(const int64_t *x, const int64_t *w, int nd) {
  uint64_t z = (uint64_t)lin_index(x, w, nd);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Does x (an element some other element reads) lead a cycle? Its
 * successors (the element whose address it reads) and its predecessors (the
 * element reading its address) are walked a step each in turn: an end of a
 * chain, or an element of lower rank, says no; x again says yes. */
static int cycle_leader(const lattice *D, const lattice *S, const int64_t *x, const int64_t *w, int nd,
                        int64_t numel) {
  int64_t f[MAXD], b[MAXD];
  uint64_t rx = rank_of(x, w, nd);
  memcpy(f, x, (size_t)nd * sizeof(int64_t));
  memcpy(b, x, (size_t)nd * sizeof(int64_t));
  for (int64_t steps = 0; steps < numel; steps++) {
    if (!lattice_index(D, lattice_at(S, f), f)) return 0;
    uint64_t rf = rank_of(f, w, nd);
    if (rf <= rx) return rf == rx;
    if (!lattice_index(S, lattice_at(D, b), b)) return 0;
    uint64_t rb = rank_of(b, w, nd);
    if (rb <= rx) return rb == rx;
  }
  return 0;
}

/* dst[i] = src[i] in place for any overlap of two nesting lattices of one
 * element size (a cast between equal sizes too), with one element held.
 * Element i reads the address where element next(i) of dst sits, so i must
 * be written before next(i); each element has at most one predecessor (the
 * one reading its address), so the elements form chains and cycles. Each
 * chain is walked from its head (an element whose address no other element
 * reads), writing as it goes; each cycle is rotated from its leader
 * (cycle_leader), whose old value is held for the last. A first walk counts
 * the chains' elements: when they are all, no element is tested for a cycle.
 * 1 when done, 0 when the lattices do not nest (left to the caller). */
static int walk_in_place(const copy_geom *u, const bridge_cast *cast) {
  int nd = u->nd, isz = u->disz;
  lattice D, S;
  if (u->disz != u->sisz || nd == 0 || isz > 16 || (u->src - u->dst) % isz) return 0;
  for (int k = 0; k < nd; k++) /* elements on one grid: two that overlap coincide */
    if (u->d[k] % isz || u->s[k] % isz) return 0;
  if (!lattice_init(&D, nd, u->n, u->d, u->dst, isz) || !lattice_init(&S, nd, u->n, u->s, u->src, isz)) return 0;
  int64_t numel = 1, w[MAXD];
  for (int k = nd - 1; k >= 0; k--) w[k] = numel, numel *= u->n[k];
  int cycles = 0;
  for (int write = 0; write <= 1; write++) {
    int64_t x[MAXD] = {0}, y[MAXD], r[MAXD], covered = 0;
    for (;;) {
      const char *dp = lattice_at(&D, x);
      if (!lattice_index(&S, dp, r) || memcmp(r, x, (size_t)nd * sizeof(int64_t)) == 0) { /* a head */
        memcpy(y, x, (size_t)nd * sizeof(int64_t));
        for (int64_t steps = 0;; steps++) {
          if (steps == numel) return 0; /* (cannot happen on a chain: a guard) */
          char *to = (char *)lattice_at(&D, y);
          const char *from = lattice_at(&S, y);
          if (write) put_one(to, from, isz, cast);
          covered++;
          if (from == to || !lattice_index(&D, from, y)) break;
        }
      } else if (write && cycles && cycle_leader(&D, &S, x, w, nd, numel)) {
        char first[16];
        memcpy(first, dp, (size_t)isz); /* read by the cycle's last element */
        memcpy(y, x, (size_t)nd * sizeof(int64_t));
        for (int64_t steps = 0; steps < numel; steps++) {
          char *to = (char *)lattice_at(&D, y);
          const char *from = lattice_at(&S, y);
          if (from == dp) {
            put_one(to, first, isz, cast);
            break;
          }
          put_one(to, from, isz, cast);
          if (!lattice_index(&D, from, y)) break; /* (a cycle's: a guard) */
        }
      }
      int k = nd - 1;
      for (; k >= 0 && ++x[k] == u->n[k]; k--) x[k] = 0;
      if (k < 0) break;
    }
    if (!write) cycles = covered != numel;
  }
  BUMP(STAT_COPY_CHAINED);
  return 1;
}

/* The first index after `after` in index order (a row-major position; -1:
 * from the start) whose address on lattice L is p: 1 with it in x, else 0.
 * A depth-first search over the dims in index order; each dim takes, in
 * order, only the values that leave an offset the dims after it can still
 * reach (the last dim: the one exact value), so on nesting strides it
 * never backtracks. */
typedef struct {
  const lattice *L;
  int64_t lb[MAXD], rmin[MAXD + 1], rmax[MAXD + 1];
} lattice_search;

static int search_from(const lattice_search *q, int k, int64_t rem, int tight, int64_t *x) {
  const lattice *L = q->L;
  int64_t st = L->st[k], n = L->n[k], lo = tight ? q->lb[k] : 0, hi = n - 1;
  /* rmin[k+1] <= rem - st * v <= rmax[k+1]: every term within the checked span */
  int64_t a = rem - q->rmax[k + 1], b = rem - q->rmin[k + 1];
  if (st == 0) {
    if (a > 0 || b < 0) return 0;
  } else {
    int64_t vlo, vhi; /* ceil(a / st) .. floor(b / st), or flipped when st < 0 */
    if (st < 0) {
      int64_t t = -a;
      a = -b, b = t, st = -st;
    }
    vlo = a >= 0 ? (a + st - 1) / st : -((-a) / st);
    vhi = b >= 0 ? b / st : -((-b + st - 1) / st);
    if (vlo > lo) lo = vlo, tight = 0;
    if (vhi < hi) hi = vhi;
  }
  for (int64_t v = lo; v <= hi; v++) {
    x[k] = v;
    if (k + 1 == L->nd || search_from(q, k + 1, rem - L->st[k] * v, tight && v == q->lb[k], x)) return 1;
  }
  return 0;
}

static int lattice_next(const lattice *L, const char *p, const int64_t *w, int64_t after, int64_t *x) {
  lattice_search q;
  int nd = L->nd;
  q.L = L;
  q.rmin[nd] = q.rmax[nd] = 0;
  for (int k = nd - 1; k >= 0; k--) {
    int64_t far = L->st[k] * (L->n[k] - 1);
    q.rmin[k] = q.rmin[k + 1] + (far < 0 ? far : 0);
    q.rmax[k] = q.rmax[k + 1] + (far > 0 ? far : 0);
  }
  int64_t start = after + 1;
  if (start >= w[0] * L->n[0]) return 0;
  for (int k = 0; k < nd; k++) q.lb[k] = start / w[k], start %= w[k];
  int64_t rem = p - L->base;
  if (rem < q.rmin[0] || rem > q.rmax[0]) return 0;
  return search_from(&q, 0, rem, 1, x);
}

/* The forest of a copy whose src elements may overlap each other (so an
 * element's address can be read by many) or whose lattices do not nest.
 * Element x reads the address of next(x) and must be written before it;
 * those reading x's address are its children. Where dst's own elements
 * share an address (as_strided), only the last of them in index order
 * writes it (a writer), as an element loop's last write would win; the
 * others are no nodes. Each tree is written children first (post-order,
 * walked with no stack: a child's next sibling is the first child after it
 * in index order); a cycle, once the trees hanging from it are written, is
 * rotated from its leader (rank_of). */
typedef struct {
  lattice D, S;
  int64_t w[MAXD], numel;
  int nd, isz, write;
  const bridge_cast *cast;
  int64_t done;
} forest;

/* Does x write its address: no later index of dst has it? */
static int forest_writer(const forest *F, const int64_t *x) {
  int64_t z[MAXD];
  return F->D.nests || !lattice_next(&F->D, lattice_at(&F->D, x), F->w, lin_index(x, F->w, F->nd), z);
}

/* next(x) (the writer of the address x reads) into y: 1, or 0 when x reads
 * no address dst writes, or its own. */
static int forest_next(const forest *F, const int64_t *x, int64_t *y) {
  int64_t z[MAXD], t[MAXD];
  const char *p = lattice_at(&F->S, x);
  size_t sz = (size_t)F->nd * sizeof(int64_t);
  if (F->D.nests) {
    if (!lattice_index(&F->D, p, z)) return 0;
  } else { /* the last index at p */
    if (!lattice_next(&F->D, p, F->w, -1, z)) return 0;
    while (lattice_next(&F->D, p, F->w, lin_index(z, F->w, F->nd), t)) memcpy(z, t, sz);
  }
  if (memcmp(z, x, sz) == 0) return 0; /* reads itself */
  memcpy(y, z, sz);                    /* (y may be x) */
  return 1;
}

/* The first child of v (a writer reading v's address) after `after` in
 * index order, other than `skip` (NULL for none), into c: 1, or 0. */
static int forest_child(const forest *F, const int64_t *v, int64_t after, const int64_t *skip, int64_t *c) {
  int64_t lv = lin_index(v, F->w, F->nd), ls = skip ? lin_index(skip, F->w, F->nd) : -1;
  const char *p = lattice_at(&F->D, v);
  while (lattice_next(&F->S, p, F->w, after, c)) {
    after = lin_index(c, F->w, F->nd);
    if (after != lv && after != ls && forest_writer(F, c)) return 1;
  }
  return 0;
}

static void forest_put(forest *F, const int64_t *x) {
  if (F->write) put_one((char *)lattice_at(&F->D, x), lattice_at(&F->S, x), F->isz, F->cast);
  F->done++;
}

/* Write the tree under r (r last), children before parents. */
static void forest_tree(forest *F, const int64_t *r, const int64_t *skip) {
  int nd = F->nd;
  size_t sz = (size_t)nd * sizeof(int64_t);
  int64_t v[MAXD], p[MAXD], c[MAXD];
  memcpy(v, r, sz);
  while (forest_child(F, v, -1, skip && memcmp(v, r, sz) == 0 ? skip : NULL, c)) memcpy(v, c, sz);
  for (;;) {
    forest_put(F, v);
    if (memcmp(v, r, sz) == 0) return;
    forest_next(F, v, p);
    if (forest_child(F, p, lin_index(v, F->w, nd), memcmp(p, r, sz) == 0 ? skip : NULL, c)) {
      memcpy(v, c, sz);
      while (forest_child(F, v, -1, NULL, c)) memcpy(v, c, sz);
    } else {
      memcpy(v, p, sz);
    }
  }
}

/* Is x on a cycle, and its lowest-ranked element? An element of lower rank,
 * or the end of a chain, on the way says no; x again says yes; a cycle met
 * that x is not on (Brent's walk) says no. */
static int forest_leader(const forest *F, const int64_t *x) {
  int64_t y[MAXD], mark[MAXD], power = 1, lam = 0;
  uint64_t rx = rank_of(x, F->w, F->nd);
  size_t sz = (size_t)F->nd * sizeof(int64_t);
  memcpy(y, x, sz);
  memcpy(mark, x, sz);
  for (int64_t steps = 0; steps <= 2 * F->numel; steps++) {
    if (!forest_next(F, y, y)) return 0;
    uint64_t ry = rank_of(y, F->w, F->nd);
    if (ry <= rx) return ry == rx;
    if (memcmp(y, mark, sz) == 0) return 0;
    if (++lam == power) memcpy(mark, y, sz), power *= 2, lam = 0;
  }
  return 0;
}

static void forest_cycle(forest *F, const int64_t *x0) {
  int nd = F->nd, isz = F->isz;
  size_t sz = (size_t)nd * sizeof(int64_t);
  int64_t prev[MAXD], c[MAXD], y[MAXD], ch[MAXD];
  memcpy(prev, x0, sz); /* the cycle's last element: the one reading x0 */
  while (forest_next(F, prev, y) && memcmp(y, x0, sz) != 0) memcpy(prev, y, sz);
  memcpy(c, x0, sz);
  do { /* the trees hanging from each element of the cycle first */
    int64_t after = -1;
    while (forest_child(F, c, after, prev, ch)) {
      forest_tree(F, ch, NULL);
      after = lin_index(ch, F->w, nd);
    }
    memcpy(prev, c, sz);
    forest_next(F, c, c);
  } while (memcmp(c, x0, sz) != 0);
  const char *at0 = lattice_at(&F->D, x0);
  char first[16];
  memcpy(first, at0, (size_t)isz);
  memcpy(y, x0, sz);
  for (;;) {
    const char *from = lattice_at(&F->S, y);
    if (F->write) put_one((char *)lattice_at(&F->D, y), from == at0 ? first : from, isz, F->cast);
    F->done++;
    if (from == at0 || !forest_next(F, y, y)) return;
  }
}

/* 1 when done, 0 when left to the caller (elements of two sizes or grids). */
static int forest_in_place(const copy_geom *u, const bridge_cast *cast) {
  forest F;
  int nd = u->nd, isz = u->disz;
  if (u->disz != u->sisz || nd == 0 || isz > 16 || (u->src - u->dst) % isz) return 0;
  for (int k = 0; k < nd; k++)
    if (u->d[k] % isz || u->s[k] % isz) return 0;
  lattice_init(&F.D, nd, u->n, u->d, u->dst, isz);
  lattice_init(&F.S, nd, u->n, u->s, u->src, isz);
  F.nd = nd, F.isz = isz, F.cast = cast, F.numel = 1;
  for (int k = nd - 1; k >= 0; k--) F.w[k] = F.numel, F.numel *= u->n[k];
  int cycles = 0;
  int64_t writers = 0;
  for (F.write = 0; F.write <= 1; F.write++) {
    int64_t x[MAXD] = {0}, y[MAXD];
    F.done = 0;
    for (;;) {
      if (forest_writer(&F, x)) {
        writers += !F.write;
        if (!forest_next(&F, x, y)) forest_tree(&F, x, NULL);
        else if (F.write && cycles && forest_leader(&F, x)) forest_cycle(&F, x);
      }
      int k = nd - 1;
      for (; k >= 0 && ++x[k] == u->n[k]; k--) x[k] = 0;
      if (k < 0) break;
    }
    if (!F.write) cycles = F.done != writers;
  }
  BUMP(STAT_COPY_CHAINED);
  return 1;
}

/* ------------------------------------------------------------- copying */

static int copy_geometry(copy_geom *g, const bridge_cast *cast, int64_t numel);

/* Copy a normalised geometry whose dst elements no src element overlaps:
 * whole rows, or tiles, split between threads when large. 0 done, 1 a cast
 * flagged, -1 overflow. */
static inline __attribute__((always_inline)) int copy_apart(copy_geom *g, const bridge_cast *cast, int64_t nbytes) {
  int isz = g->disz > g->sisz ? g->disz : g->sisz;
  if (g->nd == 1 && cast == NULL && g->d[0] == isz && g->s[0] == isz &&
      (nbytes < THREAD_MIN_BYTES || thread_count() == 1)) {
    memcpy(g->dst, g->src, (size_t)nbytes); /* contiguous: the plain copy */
    return 0;
  }
  copy_plan p; /* about 4 KiB: on the stack, small copies pay no malloc */
  p.g = *g;
  p.cast = cast;
  return plan_copy(&p) < 0 ? -1 : run_plan(&p, nbytes);
}

/* An overlapping copy whose src repeats along some dims (stride 0): the
 * slice of dst at index 0 of those dims takes src (an overlapping copy of
 * fewer dims), then the rest of dst takes that slice, one broadcast dim at
 * a time: dst's own elements, which the earlier writes no longer touch. */
static int broadcast_in_place(const copy_geom *u, const bridge_cast *cast) {
  int nd = u->nd, m = 0, isz = u->disz;
  int64_t n[MAXD], d[MAXD], s[MAXD], numel = 1;
  for (int k = 0; k < nd; k++)
    if (u->s[k] != 0) n[m] = u->n[k], d[m] = u->d[k], s[m] = u->s[k], numel *= u->n[k], m++;
  copy_geom g;
  int rc = geom_init_scaled(&g, u->dst, u->src, m, n, d, s, 1, 1, u->disz, u->sisz, 1);
  if (rc == 0) rc = copy_geometry(&g, cast, numel);
  for (int b = 0; rc == 0 && b < nd; b++) {
    if (u->s[b] != 0) continue;
    int r = 0;
    int64_t count = 1;
    for (int k = 0; k < nd; k++) {
      if (u->s[k] == 0 && k > b) continue; /* still at index 0 */
      n[r] = k == b ? u->n[k] - 1 : u->n[k];
      d[r] = u->d[k];
      s[r] = k == b ? 0 : u->d[k];
      count *= n[r++];
    }
    int64_t nbytes;
    rc = geom_init_scaled(&g, u->dst + u->d[b], u->dst, r, n, d, s, 1, 1, isz, isz, 1);
    if (rc == 0) rc = mul_ovf(count, isz, &nbytes) ? -1 : copy_apart(&g, NULL, nbytes);
  }
  return rc;
}

/* An overlap no staged order suits, in place: 0 done, 1 not (the lattices
 * do not nest, or a cast changes the element size), -1 overflow. u has the
 * caller's dims, sorted and flipped but not merged. */
static int overlap_in_place(const copy_geom *u, const bridge_cast *cast) {
  lattice D; /* the slices broadcast_in_place copies between must be dst's distinct elements */
  if (lattice_init(&D, u->nd, u->n, u->d, u->dst, u->disz))
    for (int k = 0; k < u->nd; k++)
      if (u->s[k] == 0) return broadcast_in_place(u, cast);
  if (cast == NULL && permute_in_place(u)) return 0;
  if (walk_in_place(u, cast) || forest_in_place(u, cast)) return 0;
  if (cast == NULL && u->disz == u->sisz && u->nd < MAXD) {
    /* elements on two grids (views at offsets apart by part of an element):
     * the same walk over their bytes */
    copy_geom b = *u;
    b.n[b.nd] = u->disz;
    b.d[b.nd] = b.s[b.nd] = 1;
    b.nd++;
    b.disz = b.sisz = 1;
    if (walk_in_place(&b, NULL) || forest_in_place(&b, NULL)) return 0;
  }
  return 1;
}

/* A copy whose two byte ranges meet (see the top of this file); kept out of
 * copy_geometry's way, which small copies take. */
static __attribute__((noinline)) int copy_overlapping(copy_geom *g, const bridge_cast *cast, int64_t numel,
                                                      int isz) {
  int same = cast == NULL && g->dst == g->src;
  for (int i = 0; same && i < g->nd; i++) same = g->d[i] == g->s[i];
  if (same) return 0; /* every element onto itself */
  if (g->nd == 0) {   /* one element: read it before writing */
    char one[16], out[16];
    memcpy(one, g->src, g->sisz);
    if (cast && bridge_cast_run(cast, one, out, 1, g->disz)) return 1; /* nothing written */
    memcpy(g->dst, cast ? out : one, g->disz);
    return 0;
  }
  int64_t chunk = TILE_BYTES / isz;
  char *scratch = malloc(2 * TILE_BYTES);
  if (scratch == NULL) return -1;
  /* a cast that may leave elements to NumPy checks them all before writing
   * any: NumPy then starts from the source as it is (a copy of it) */
  if (cast != NULL && cast->can_flag && staged_walk(g, cast, 1, chunk, WALK_PROBE, scratch)) {
    free(scratch);
    return 1;
  }
  for (int dir = 1; dir >= -1; dir -= 2) {
    if (staged_walk(g, cast, dir, chunk, WALK_CHECK, NULL)) {
      BUMP(STAT_COPY_STAGED);
      int bad = staged_walk(g, cast, dir, chunk, WALK_COPY, scratch);
      free(scratch);
      return bad;
    }
  }
  free(scratch);
  if (g->raw_shape != NULL) { /* the caller's dims, sorted and flipped but not merged */
    copy_geom u;
    if (geom_init_scaled(&u, g->raw_dst, g->raw_src, g->raw_nd, g->raw_shape, g->raw_dstr, g->raw_sstr,
                         g->raw_dmul, g->raw_smul, g->disz, g->sisz, 0) == 0) {
      int rc = overlap_in_place(&u, cast);
      if (rc <= 0) return rc;
    }
  }
  /* left: a cast between element sizes or grids: src whole into a
   * temporary, then from there, as NumPy does every overlap */
  int64_t tbytes;
  if (mul_ovf(numel, g->sisz, &tbytes)) return -1;
  char *tmp = malloc((size_t)tbytes);
  if (tmp == NULL) return -1;
  BUMP(STAT_COPY_TEMPORARIES);
  copy_geom in = *g, out = *g;
  in.raw_shape = out.raw_shape = NULL;
  in.dst = tmp;
  in.disz = g->sisz;
  int64_t acc = g->sisz;
  for (int i = g->nd - 1; i >= 0; i--) {
    in.d[i] = out.s[i] = acc;
    acc *= g->n[i];
  }
  out.src = tmp;
  int rc = copy_geometry(&in, NULL, numel);
  if (rc == 0) rc = copy_geometry(&out, cast, numel);
  free(tmp);
  return rc;
}

/* Copy (and cast) a normalised geometry. 0 done, 1 a cast left it to NumPy,
 * -1 overflow or out of memory (no exception set: the caller raises). */
static int copy_geometry(copy_geom *g, const bridge_cast *cast, int64_t numel) {
  int64_t nbytes;
  int isz = g->disz > g->sisz ? g->disz : g->sisz;
  if (mul_ovf(numel, isz, &nbytes)) return -1;
  uintptr_t dlo, dhi, slo, shi;
  geom_span(g, &dlo, &dhi, &slo, &shi);
  if (dlo < shi && slo < dhi) return copy_overlapping(g, cast, numel, isz);
  return copy_apart(g, cast, nbytes);
}

int bridge_copy_strided(char *dst, const int64_t *dst_strides, int dst_itemsize, const char *src,
                        const int64_t *src_strides, int src_itemsize, int ndim, const int64_t *shape,
                        const bridge_cast *cast) {
  copy_geom g;
  int rc = geom_init(&g, dst, src, ndim, shape, dst_strides, src_strides, dst_itemsize, src_itemsize);
  if (rc != 0) return rc > 0 ? 0 : -1;
  int64_t numel = 1;
  for (int i = 0; i < g.nd; i++) numel *= g.n[i];
  return copy_geometry(&g, cast, numel);
}

/* ------------------------------------------------------------- tensors */

static int host_or_raise(TensorObject *t) {
  if (bridge_host_accessible(t->storage->dev_type)) return 0;
  PyObject *dev = bridge_storage_device(t->storage);
  if (dev != NULL) {
    PyErr_Format(PyExc_RuntimeError, "storage on %S cannot be read or written from the host", dev);
    Py_DECREF(dev);
  }
  return -1;
}

/* Copies of at least this many bytes run without the GIL. */
#define NOGIL_MIN_BYTES (1 << 20)

int bridge_copy_tensor(TensorObject *dst, TensorObject *src) {
  if (host_or_raise(dst) < 0 || host_or_raise(src) < 0) return -1;
  if (dst->storage->readonly) {
    PyErr_SetString(PyExc_ValueError,
                    "cannot write to a read-only tensor (its memory was borrowed read-only)");
    return -1;
  }
  if (bridge_tensor_check_bounds(dst, PyExc_RuntimeError) < 0 ||
      bridge_tensor_check_bounds(src, PyExc_RuntimeError) < 0)
    return -1;
  /* src broadcast to dst's shape: its dims right-aligned, size 1 repeated */
  int nd = dst->ndim, extra = src->ndim - nd;
  int64_t sstr[MAXD];
  int fits = extra <= 0;
  for (int i = 0; fits && i < nd; i++) {
    int k = i + extra;
    if (k < 0 || src->shape[k] == 1) sstr[i] = 0;
    else if (src->shape[k] == dst->shape[i]) sstr[i] = src->strides[k];
    else fits = 0;
  }
  if (!fits) {
    PyObject *from = bridge_dims_tuple(src->ndim, src->shape), *to = bridge_dims_tuple(nd, dst->shape);
    if (from && to) PyErr_Format(PyExc_ValueError, "cannot broadcast a value of shape %R to shape %R", from, to);
    Py_XDECREF(from);
    Py_XDECREF(to);
    return -1;
  }
  bridge_cast cast, *castp = NULL;
  if (dst->dtype != src->dtype) {
    if (!bridge_cast_lookup(src->dtype, dst->dtype, &cast)) return 0;
    castp = &cast;
  } else if (dst->dtype->itemsize > 16) {
    return 0;
  }
  copy_geom g;
  int rc = geom_init(&g, bridge_tensor_data(dst), bridge_tensor_data(src), nd, dst->shape, dst->strides,
                     sstr, dst->dtype->itemsize, src->dtype->itemsize);
  if (rc > 0) return 1;
  int64_t numel = 1, nbytes = 0;
  for (int i = 0; i < g.nd; i++) numel *= g.n[i];
  if (rc == 0 && !mul_ovf(numel, g.disz > g.sisz ? g.disz : g.sisz, &nbytes) && nbytes >= NOGIL_MIN_BYTES) {
    /* the owners keep both blocks alive whatever other threads do to the
     * tensors or storages meanwhile (set_, resize_: a new record) */
    PyObject *keep_d = Py_NewRef(bridge_storage_owner(dst->storage));
    PyObject *keep_s = Py_NewRef(bridge_storage_owner(src->storage));
    Py_BEGIN_ALLOW_THREADS
    rc = copy_geometry(&g, castp, numel);
    Py_END_ALLOW_THREADS
    Py_DECREF(keep_d);
    Py_DECREF(keep_s);
  } else if (rc == 0) {
    rc = copy_geometry(&g, castp, numel);
  }
  if (rc < 0) {
    PyErr_SetString(PyExc_MemoryError, "out of memory (or a byte offset past int64) in a copy");
    return -1;
  }
  return rc == 0;
}

/* _C.copy_into(dst, src): src's elements into dst, broadcast and cast. */
static PyObject *py_copy_into(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !Tensor_Check(args[0]) || !Tensor_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "copy_into(dst, src) takes two tensors");
  int rc = bridge_copy_tensor((TensorObject *)args[0], (TensorObject *)args[1]);
  return rc < 0 ? NULL : PyBool_FromLong(rc);
}

/* _C.copy_threads(n=-1): set the copy threads (0: one per CPU), return the old value. */
static PyObject *py_copy_threads(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "copy_threads(n=-1)");
  long n = nargs ? PyLong_AsLong(args[0]) : -1;
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n > 64) return PyErr_Format(PyExc_ValueError, "copy_threads: at most 64 threads, got %ld", n);
  int old = n < 0 ? __atomic_load_n(&copy_threads, __ATOMIC_RELAXED) : bridge_copy_set_threads((int)n);
  return PyLong_FromLong(old);
}

static PyMethodDef copy_functions[] = {
    {"copy_into", (PyCFunction)(void (*)(void))py_copy_into, METH_FASTCALL,
     "copy_into(dst, src, /)\n--\n\nCopy src's elements into dst (host memory), src broadcast to "
     "dst's shape and cast to its dtype. True when done; False (nothing promised about dst) for a "
     "cast C leaves to NumPy. Overlapping tensors are copied as if through a temporary."},
    {"copy_threads", (PyCFunction)(void (*)(void))py_copy_threads, METH_FASTCALL,
     "copy_threads(n=-1, /)\n--\n\nThe threads a large copy may use (0: one per CPU); n >= 0 sets "
     "it. Returns the value before."},
    {NULL, NULL, 0, NULL},
};

int bridge_copy_init(PyObject *mod) { return PyModule_AddFunctions(mod, copy_functions); }
