/* The copy kernel's tiles (copy.c plans them): a 2-d block of elements moved
 * from src to dst, as rows of memcpy, a SIMD transpose (SSE2, or AVX2 when
 * the CPU has it: compiled with target attributes and chosen at run time),
 * a row reversal, or an element loop. Nothing here touches Python objects. */

#include "copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_BLOCKS 1 /* compiled with target attributes, used when the CPU has AVX2 */
#endif
#endif

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

void bridge_move_elems(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ,
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
  if (j < n) bridge_move_elems(d + j * isz, s - j * isz, 1, n - j, 0, isz, 0, -(int64_t)isz, isz);
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
    if (jf < nj) bridge_move_elems(d + jf * ISZ, s + jf * sJ, kf, nj - jf, dK, ISZ, ISZ, sJ, ISZ);       \
    if (kf < nk) bridge_move_elems(d + kf * dK, s + kf * ISZ, nk - kf, nj, dK, ISZ, ISZ, sJ, ISZ);       \
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
void bridge_move_tile(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ,
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
  bridge_move_elems(d, s, nk, nj, dK, dJ, sK, sJ, isz);
}

