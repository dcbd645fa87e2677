/* Element conversions for casts (Tensor.to(dtype), copy_ between dtypes),
 * applied by the copy kernel (copy.c) to contiguous runs it has gathered:
 * same tiling as a copy, a conversion where a copy moves bytes. The results
 * are NumPy's (and ml_dtypes' for bfloat16), bit for bit: integers wrap
 * modulo 2**bits, float16 rounds to nearest even as NumPy's
 * npy_floatbits_to_halfbits / npy_doublebits_to_halfbits do (NaN payloads
 * included), bfloat16 as ml_dtypes (float64 through float32, NaN made quiet).
 *
 * What C leaves to NumPy (bridge_cast_lookup says no, or a conversion
 * reports the element): a float that does not fit the integer type it is
 * cast to, or NaN to an integer (C leaves it undefined and NumPy's answer
 * depends on its build; it also warns); complex to real (NumPy drops the
 * imaginary part with a ComplexWarning); the float8/6/4 types (ml_dtypes'
 * rounding and saturation, one codec per format). */

#include "copy.h"

#define LOAD(T, p) ({ T v_; memcpy(&v_, (p), sizeof(T)); v_; })
#define STORE(T, p, v)                                                                             \
  do {                                                                                             \
    T w_ = (v);                                                                                    \
    memcpy((p), &w_, sizeof(T));                                                                   \
  } while (0)

/* Kinds of the native element types. */
#define K_BOOL 0
#define K_INT 1
#define K_FLOAT 2

/* One conversion between native C types, for a contiguous destination (a
 * loop the compiler vectorises) and a strided one. A float goes to an
 * integer only when it lies in the open interval (LO, HI), the values whose
 * truncation fits; any other (NaN too) marks the run for NumPy. */
#define DEF_PAIR(SN, S, SK, DN, D, DK, LO, HI)                                                     \
  static int conv_##SN##_##DN(const char *src, char *dst, int64_t n, int64_t ds) {                \
    int bad = 0;                                                                                   \
    if (ds == (int64_t)sizeof(D)) {                                                                \
      for (int64_t i = 0; i < n; i++) {                                                            \
        S v = LOAD(S, src + i * (int64_t)sizeof(S));                                               \
        D w;                                                                                       \
        CONVERT(D, SK, DK, LO, HI);                                                                   \
        STORE(D, dst + i * (int64_t)sizeof(D), w);                                                 \
      }                                                                                            \
    } else {                                                                                       \
      for (int64_t i = 0; i < n; i++) {                                                            \
        S v = LOAD(S, src + i * (int64_t)sizeof(S));                                               \
        D w;                                                                                       \
        CONVERT(D, SK, DK, LO, HI);                                                                   \
        STORE(D, dst + i * ds, w);                                                                 \
      }                                                                                            \
    }                                                                                              \
    return bad;                                                                                    \
  }

#define CONVERT(D, SK, DK, LO, HI)                                                                    \
  if ((DK) == K_BOOL || (SK) == K_BOOL) {                                                          \
    w = (D)(v != 0);                                                                               \
  } else if ((SK) == K_FLOAT && (DK) == K_INT) {                                                   \
    int ok_ = (double)v > (LO) && (double)v < (HI);                                                \
    bad |= !ok_;                                                                                   \
    w = (D)(ok_ ? v : 0);                                                                          \
  } else {                                                                                         \
    w = (D)v;                                                                                      \
  }

/* The destinations, with the open interval of the floats each integer type
 * takes (doubles: every bound is exact; the int64 lower bound is the double
 * just below -2**63). */
#define DSTS(F, SN, S, SK)                                                                         \
  F(SN, S, SK, B, uint8_t, K_BOOL, 0.0, 0.0)                                                       \
  F(SN, S, SK, I8, int8_t, K_INT, -129.0, 128.0)                                                   \
  F(SN, S, SK, I16, int16_t, K_INT, -32769.0, 32768.0)                                             \
  F(SN, S, SK, I32, int32_t, K_INT, -2147483649.0, 2147483648.0)                                   \
  F(SN, S, SK, I64, int64_t, K_INT, -9223372036854777856.0, 9223372036854775808.0)                 \
  F(SN, S, SK, U8, uint8_t, K_INT, -1.0, 256.0)                                                    \
  F(SN, S, SK, U16, uint16_t, K_INT, -1.0, 65536.0)                                                \
  F(SN, S, SK, U32, uint32_t, K_INT, -1.0, 4294967296.0)                                           \
  F(SN, S, SK, U64, uint64_t, K_INT, -1.0, 18446744073709551616.0)                                 \
  F(SN, S, SK, F32, float, K_FLOAT, 0.0, 0.0)                                                      \
  F(SN, S, SK, F64, double, K_FLOAT, 0.0, 0.0)

/* A bool byte other than 0 is true, whatever its value (NumPy's reading). */
#define SRCS(F)                                                                                    \
  F(B, uint8_t, K_BOOL)                                                                            \
  F(I8, int8_t, K_INT)                                                                             \
  F(I16, int16_t, K_INT)                                                                           \
  F(I32, int32_t, K_INT)                                                                           \
  F(I64, int64_t, K_INT)                                                                           \
  F(U8, uint8_t, K_INT)                                                                            \
  F(U16, uint16_t, K_INT)                                                                          \
  F(U32, uint32_t, K_INT)                                                                          \
  F(U64, uint64_t, K_INT)                                                                          \
  F(F32, float, K_FLOAT)                                                                           \
  F(F64, double, K_FLOAT)

#define DEF_ROW(SN, S, SK) DSTS(DEF_PAIR, SN, S, SK)
SRCS(DEF_ROW)

/* The element types C converts, in the order of the table below. */
enum { T_B, T_I8, T_I16, T_I32, T_I64, T_U8, T_U16, T_U32, T_U64, T_F32, T_F64, N_NATIVE,
       T_F16 = N_NATIVE, T_BF16, T_C64, T_C128, T_NONE };

#define TABLE_ENTRY(SN, S, SK, DN, D, DK, LO, HI) conv_##SN##_##DN,
#define TABLE_ROW(SN, S, SK) {DSTS(TABLE_ENTRY, SN, S, SK)},
static const bridge_conv_fn native[N_NATIVE][N_NATIVE] = {SRCS(TABLE_ROW)};

/* ------------------------------------------------------- float16 bits */

/* NumPy's npy_halfbits_to_floatbits: exact; NaN payloads kept. */
static uint32_t half_to_float_bits(uint16_t h) {
  uint32_t sgn = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = h & 0x7c00u, sig = h & 0x03ffu;
  if (exp == 0x7c00u) return sgn | 0x7f800000u | (sig << 13);
  if (exp != 0) return sgn | (((uint32_t)(h & 0x7fffu) + 0x1c000u) << 13);
  if (sig == 0) return sgn;
  uint32_t shift = 0; /* subnormal: normalise */
  sig <<= 1;
  while ((sig & 0x0400u) == 0) {
    sig <<= 1;
    shift++;
  }
  return sgn | ((127 - 15 - shift) << 23) | ((sig & 0x03ffu) << 13);
}

/* NumPy's npy_halfbits_to_doublebits (direct: a float in between would make
 * signalling NaNs quiet). */
static uint64_t half_to_double_bits(uint16_t h) {
  uint64_t sgn = (uint64_t)(h & 0x8000u) << 48;
  uint64_t exp = h & 0x7c00u, sig = h & 0x03ffu;
  if (exp == 0x7c00u) return sgn | 0x7ff0000000000000ull | (sig << 42);
  if (exp != 0) return sgn | (((uint64_t)(h & 0x7fffu) + 0xfc000u) << 42);
  if (sig == 0) return sgn;
  uint64_t shift = 0;
  sig <<= 1;
  while ((sig & 0x0400u) == 0) {
    sig <<= 1;
    shift++;
  }
  return sgn | ((1023 - 15 - shift) << 52) | ((sig & 0x03ffu) << 42);
}

/* q + (the dropped bits round it up), rounding half to even. */
static inline uint64_t round_even(uint64_t q, uint64_t rem, uint64_t half) {
  return q + (rem > half || (rem == half && (q & 1)));
}

/* float32 bits to float16 bits, rounded to nearest even; overflow to
 * infinity; NaN keeps the top of its payload (NumPy's rule). */
static uint16_t float_to_half_bits(uint32_t f) {
  uint16_t sgn = (uint16_t)((f >> 16) & 0x8000u);
  uint32_t e = (f >> 23) & 0xffu, m = f & 0x007fffffu;
  if (e == 0xffu) {
    if (m == 0) return sgn | 0x7c00u;
    uint16_t r = (uint16_t)(0x7c00u + (m >> 13));
    return sgn | (r == 0x7c00u ? 0x7c01u : r);
  }
  if (e >= 143) return sgn | 0x7c00u; /* >= 2**16 */
  if (e < 102) return sgn;            /* < 2**-25: rounds to zero */
  if (e < 113) {                      /* a float16 subnormal (the carry may make it normal) */
    uint32_t sig = m | 0x00800000u, shift = 126 - e;
    return sgn | (uint16_t)round_even(sig >> shift, sig & ((1u << shift) - 1), 1u << (shift - 1));
  }
  /* normal: the carry out of the significand bumps the exponent, up to infinity */
  uint32_t bits = ((e - 112) << 10) | (m >> 13);
  return sgn | (uint16_t)round_even(bits, m & 0x1fffu, 0x1000u);
}

/* float64 bits to float16 bits in one rounding (NumPy's
 * npy_doublebits_to_halfbits), NaN as above. */
static uint16_t double_to_half_bits(uint64_t d) {
  uint16_t sgn = (uint16_t)((d >> 48) & 0x8000u);
  uint64_t e = (d >> 52) & 0x7ffu, m = d & 0x000fffffffffffffull;
  if (e == 0x7ffu) {
    if (m == 0) return sgn | 0x7c00u;
    uint16_t r = (uint16_t)(0x7c00u + (m >> 42));
    return sgn | (r == 0x7c00u ? 0x7c01u : r);
  }
  if (e >= 1039) return sgn | 0x7c00u;
  if (e < 998) return sgn;
  if (e < 1009) {
    uint64_t sig = m | 0x0010000000000000ull, shift = 1051 - e;
    return sgn | (uint16_t)round_even(sig >> shift, sig & ((1ull << shift) - 1), 1ull << (shift - 1));
  }
  uint64_t bits = ((e - 1008) << 10) | (m >> 42);
  return sgn | (uint16_t)round_even(bits, m & 0x3ffffffffffull, 0x20000000000ull);
}

/* float32 bits to bfloat16 bits as ml_dtypes (Eigen's float_to_bfloat16_rtne):
 * nearest even, NaN becomes the quiet NaN of its sign. */
static uint16_t float_to_bf16_bits(uint32_t f) {
  if ((f & 0x7fffffffu) > 0x7f800000u) return (f & 0x80000000u) ? 0xffc0u : 0x7fc0u;
  return (uint16_t)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

#define DEF_BITS(NAME, S, D, EXPR)                                                                 \
  static int NAME(const char *src, char *dst, int64_t n, int64_t ds) {                             \
    for (int64_t i = 0; i < n; i++) {                                                              \
      S v = LOAD(S, src + i * (int64_t)sizeof(S));                                                 \
      STORE(D, dst + i * ds, EXPR);                                                                \
    }                                                                                              \
    return 0;                                                                                      \
  }

DEF_BITS(conv_F16_F32, uint16_t, uint32_t, half_to_float_bits(v))
DEF_BITS(conv_F16_F64, uint16_t, uint64_t, half_to_double_bits(v))
DEF_BITS(conv_F32_F16, uint32_t, uint16_t, float_to_half_bits(v))
DEF_BITS(conv_F64_F16, uint64_t, uint16_t, double_to_half_bits(v))
DEF_BITS(conv_BF16_F32, uint16_t, uint32_t, (uint32_t)v << 16)
DEF_BITS(conv_F32_BF16, uint32_t, uint16_t, float_to_bf16_bits(v))

/* bfloat16 to float64 through float32, as ml_dtypes (and its NaNs quiet). */
static int conv_BF16_F64(const char *src, char *dst, int64_t n, int64_t ds) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)LOAD(uint16_t, src + 2 * i) << 16;
    float f;
    memcpy(&f, &bits, 4);
    STORE(double, dst + i * ds, (double)f);
  }
  return 0;
}

/* A real part into a complex number (imaginary part 0), and complex widths. */
#define DEF_COMPLEX(NAME, S, D, IM_OF)                                                             \
  static int NAME(const char *src, char *dst, int64_t n, int64_t ds) {                             \
    for (int64_t i = 0; i < n; i++) {                                                              \
      const char *p = src + i * (int64_t)(IM_OF ? 2 * sizeof(S) : sizeof(S));                      \
      D pair[2] = {(D)LOAD(S, p), IM_OF ? (D)LOAD(S, p + sizeof(S)) : (D)0};                       \
      memcpy(dst + i * ds, pair, sizeof pair);                                                     \
    }                                                                                              \
    return 0;                                                                                      \
  }

DEF_COMPLEX(conv_F32_C64, float, float, 0)
DEF_COMPLEX(conv_F64_C128, double, double, 0)
DEF_COMPLEX(conv_C64_C128, float, double, 1)
DEF_COMPLEX(conv_C128_C64, double, float, 1)

/* ---------------------------------------------------------- the table */

static int type_of(const DTypeObject *dt) {
  switch (dt->code) {
    case kDLBool: return dt->bits == 8 ? T_B : T_NONE;
    case kDLInt:
      switch (dt->bits) {
        case 8: return T_I8;
        case 16: return T_I16;
        case 32: return T_I32;
        case 64: return T_I64;
      }
      break;
    case kDLUInt:
      switch (dt->bits) {
        case 8: return T_U8;
        case 16: return T_U16;
        case 32: return T_U32;
        case 64: return T_U64;
      }
      break;
    case kDLFloat:
      switch (dt->bits) {
        case 16: return T_F16;
        case 32: return T_F32;
        case 64: return T_F64;
      }
      break;
    case kDLBfloat: return dt->bits == 16 ? T_BF16 : T_NONE;
    case kDLComplex: return dt->bits == 64 ? T_C64 : dt->bits == 128 ? T_C128 : T_NONE;
  }
  return T_NONE;
}

static int is_integer(int t) { return t <= T_U64 && t != T_B; }

int bridge_cast_lookup(const DTypeObject *from, const DTypeObject *to, bridge_cast *out) {
  int s = type_of(from), d = type_of(to);
  bridge_conv_fn first = NULL, second = NULL;
  int mid = 0;
  if (s == T_NONE || d == T_NONE || s == d) return 0;
  if ((s == T_C64 || s == T_C128) && d != T_C64 && d != T_C128) return 0; /* NumPy warns */
  out->can_flag = (s == T_F16 || s == T_BF16 || s == T_F32 || s == T_F64) && is_integer(d);
  if (s < N_NATIVE && d < N_NATIVE) {
    first = native[s][d];
  } else if (s == T_F16 || s == T_BF16) {
    /* exact into float32 (float64 directly), then on from there */
    bridge_conv_fn widen = s == T_F16 ? conv_F16_F32 : conv_BF16_F32;
    if (d == T_F32) first = widen;
    else if (d == T_F64) first = s == T_F16 ? conv_F16_F64 : conv_BF16_F64;
    else if (d == T_C128) first = s == T_F16 ? conv_F16_F64 : conv_BF16_F64, mid = 8, second = conv_F64_C128;
    else {
      first = widen, mid = 4;
      second = d < N_NATIVE ? native[T_F32][d] : d == T_F16 ? conv_F32_F16 : d == T_BF16 ? conv_F32_BF16
                                                                             : conv_F32_C64;
    }
  } else if (d == T_F16) { /* s native */
    if (s == T_F32) first = conv_F32_F16;
    else if (s == T_F64) first = conv_F64_F16;
    else first = native[s][T_F32], mid = 4, second = conv_F32_F16;
  } else if (d == T_BF16) {
    /* ml_dtypes reads a bool's byte as a number (2 stays 2), NumPy's casts as true */
    if (s == T_F32) first = conv_F32_BF16;
    else first = native[s == T_B ? T_U8 : s][T_F32], mid = 4, second = conv_F32_BF16;
  } else if (d == T_C64) {
    if (s == T_C128) first = conv_C128_C64;
    else if (s == T_F32) first = conv_F32_C64;
    else first = native[s][T_F32], mid = 4, second = conv_F32_C64;
  } else { /* d == T_C128 */
    if (s == T_C64) first = conv_C64_C128;
    else if (s == T_F64) first = conv_F64_C128;
    else first = native[s][T_F64], mid = 8, second = conv_F64_C128;
  }
  out->src_itemsize = from->itemsize;
  out->first = first;
  out->second = second;
  out->mid_itemsize = mid;
  return 1;
}

int bridge_cast_run(const bridge_cast *c, const char *src, char *dst, int64_t n, int64_t dstride) {
  if (c->second == NULL) return c->first(src, dst, n, dstride);
  enum { CHUNK = 512 };
  char mid[CHUNK * 8] __attribute__((aligned(64)));
  int bad = 0;
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t m = n - i < CHUNK ? n - i : CHUNK;
    bad |= c->first(src + i * c->src_itemsize, mid, m, c->mid_itemsize);
    bad |= c->second(mid, dst + i * dstride, m, dstride);
  }
  return bad;
}
