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
 * to never overwrite bytes a later run still reads (a shift). When neither
 * order is safe (an in-place transpose, a shifted one, views a part of an
 * element apart) src's distinct elements are first copied into one
 * temporary, as NumPy copies every overlap: two tiled copies, no search.
 * A dst dim of stride 0 (dst writes one place many times) is written once,
 * with the value an element loop in index order would leave. */

#include "copy.h"

#include <stdlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
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
} copy_geom;

/* Normalise a copy whose strides are in units of dmul and smul bytes (the
 * element sizes, or 1 for byte strides): 0 ready, 1 nothing to copy (an
 * empty shape), -1 a byte stride or offset overflows int64. A dim where dst
 * has stride 0 (dst writes one place many times) keeps its last write, as an
 * element loop in index order would. */
static int geom_init_scaled(copy_geom *g, char *dst, const char *src, int nd, const int64_t *shape,
                            const int64_t *dstr, const int64_t *sstr, int dmul, int smul, int disz, int sisz) {
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
  if (g->nd > 1) {
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
  return geom_init_scaled(g, dst, src, nd, shape, dstr, sstr, disz, sisz, disz, sisz);
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
    for (int64_t i = 0; i < nbytes; i += 16)
      _mm_storeu_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
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
      else bridge_move_elems(out, row, 1, nk, 0, sisz, 0, p->sK, sisz);
    } else if (p->sK == sisz) {
      bad |= bridge_cast_run(p->cast, row, out, nk, disz);
    } else {
      char tmp[1024] __attribute__((aligned(64)));
      bridge_move_elems(tmp, row, 1, nk, 0, sisz, 0, p->sK, sisz);
      bad |= bridge_cast_run(p->cast, tmp, out, nk, disz);
    }
  }
  bridge_move_tile(d, scratch, nk, nj, p->dK, p->dJ, disz, pitch, disz);
  return bad;
}

/* One tile of the plan; 1 when a cast met an element it leaves to NumPy. */
static int do_tile(const copy_plan *p, char *d, const char *s, int64_t nk, int64_t nj, char *scratch) {
  int sisz = p->g.sisz, bad = 0;
  if (p->transpose && p->stage) return transpose_staged(p, d, s, nk, nj, scratch);
  if (p->cast == NULL) {
    bridge_move_tile(d, s, nk, nj, p->dK, p->dJ, p->sK, p->sJ, sisz);
    return 0;
  }
  if (p->sJ == sisz) { /* src rows contiguous: convert them where they are */
    for (int64_t k = 0; k < nk; k++) bad |= bridge_cast_run(p->cast, s + k * p->sK, d + k * p->dK, nj, p->dJ);
    return bad;
  }
  bridge_move_tile(scratch, s, nk, nj, nj * sisz, sisz, p->sK, p->sJ, sisz);
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

/* Copies of at least this many bytes are split into parts that the pool's
 * threads run (threads.c); smaller ones never wake one. */
#define THREAD_MIN_BYTES (8 << 20)

typedef struct {
  const copy_plan *p;
  int nt;
  int bad[64];
} tile_job;

static void tile_part(void *arg, int part) {
  tile_job *j = arg;
  int64_t work = j->p->work;
  j->bad[part] = run_tiles(j->p, work * part / j->nt, work * (part + 1) / j->nt);
}

/* Run a plan, on several threads when it is large; 1 when a cast flagged. */
static int run_plan(const copy_plan *p, int64_t nbytes) {
  int nt = nbytes >= THREAD_MIN_BYTES ? bridge_copy_parts(nbytes) : 1;
  if (nt > p->work) nt = (int)p->work;
  if (nt <= 1) return run_tiles(p, 0, p->work);
  tile_job j = {p, nt, {0}};
  bridge_pool_run(tile_part, &j, nt);
  int bad = 0;
  for (int i = 0; i < nt; i++) bad |= j.bad[i];
  return bad;
}

/* Contiguous spans, split between threads by bytes: part i runs from byte
 * total * i / nt to total * (i + 1) / nt of the spans laid end to end. */
typedef struct {
  const bridge_span *spans;
  int n, nt;
  int64_t total;
} span_job;

static void span_part(void *arg, int part) {
  const span_job *j = arg;
  int64_t b0 = j->total / j->nt * part, b1 = part == j->nt - 1 ? j->total : j->total / j->nt * (part + 1);
  int64_t at = 0;
  for (int i = 0; i < j->n && at < b1; i++) {
    int64_t end = at + j->spans[i].nbytes;
    int64_t lo = b0 > at ? b0 - at : 0, hi = (b1 < end ? b1 : end) - at;
    if (hi > lo) memcpy(j->spans[i].dst + lo, j->spans[i].src + lo, (size_t)(hi - lo));
    at = end;
  }
}

/* Spans of at least this many bytes together are split between threads. */
#define SPANS_THREAD_MIN_BYTES (2 << 20)

void bridge_copy_spans(const bridge_span *spans, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++)
    if (add_ovf(total, spans[i].nbytes, &total)) { /* (blocks that exist cannot sum past int64; said anyway) */
      for (int k = 0; k < n; k++) memcpy(spans[k].dst, spans[k].src, (size_t)spans[k].nbytes);
      return;
    }
  span_job j = {spans, n, total >= SPANS_THREAD_MIN_BYTES ? bridge_copy_parts(total) : 1, total};
  bridge_pool_run(span_part, &j, j.nt);
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

/* Walk the runs of dim J (at most `chunk` elements each) in one direction.
 * scratch NULL: whether every run is safe in that order (1) or not (0);
 * else copy, each run staged through `scratch` (1 when a cast flagged, else
 * 0). */
static int staged_walk(const copy_geom *g, const bridge_cast *cast, int dir, int64_t chunk, char *scratch) {
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
      if (scratch == NULL) {
        if (run_clobbers(g, idx, j0, len, dir, inner_lo, inner_hi)) return 0;
        continue;
      }
      int64_t doff = j0 * g->d[J], soff = j0 * g->s[J];
      for (int q = 0; q < J; q++) doff += idx[q] * g->d[q], soff += idx[q] * g->s[q];
      if (cast == NULL && g->d[J] == g->disz && g->s[J] == g->disz) { /* both rows dense: memmove stages */
        memmove(g->dst + doff, g->src + soff, (size_t)(len * g->disz));
        continue;
      }
      bridge_move_tile(scratch, g->src + soff, 1, len, 0, g->sisz, 0, g->s[J], g->sisz);
      if (cast) bad |= bridge_cast_run(cast, scratch, g->dst + doff, len, g->d[J]);
      else bridge_move_tile(g->dst + doff, scratch, 1, len, 0, g->d[J], 0, g->sisz, g->disz);
    }
    int q = J - 1;
    for (; q >= 0; q--) {
      if (dir > 0 ? ++idx[q] < g->n[q] : --idx[q] >= 0) break;
      idx[q] = dir > 0 ? 0 : g->n[q] - 1;
    }
    if (q < 0) break;
  }
  return scratch == NULL ? 1 : bad;
}

/* ------------------------------------------------------------- copying */

static int copy_geometry(copy_geom *g, const bridge_cast *cast, int64_t numel);

/* Many short dims (16 dims of 2: a tile would hold 4 elements, and set
 * itself up for longer than it moves them): the two innermost dims as an
 * element loop under an odometer of the others. */
static void copy_elements(const copy_geom *g) {
  int nd = g->nd, I = nd - 2, J = nd - 1;
  int64_t idx[MAXD], doff = 0, soff = 0;
  for (int q = 0; q < I; q++) idx[q] = 0;
  for (;;) {
    bridge_move_elems(g->dst + doff, g->src + soff, g->n[I], g->n[J], g->d[I], g->d[J], g->s[I], g->s[J], g->disz);
    int q = I - 1;
    for (; q >= 0; q--) {
      doff += g->d[q];
      soff += g->s[q];
      if (++idx[q] < g->n[q]) break;
      doff -= g->d[q] * g->n[q]; /* in range: geom_init checked each dim's extent */
      soff -= g->s[q] * g->n[q];
      idx[q] = 0;
    }
    if (q < 0) return;
  }
}

/* Copy a normalised geometry whose dst elements no src element overlaps:
 * whole rows, or tiles, split between threads when large. 0 done, 1 a cast
 * flagged, -1 overflow. */
static inline __attribute__((always_inline)) int copy_apart(copy_geom *g, const bridge_cast *cast, int64_t nbytes) {
  int isz = g->disz > g->sisz ? g->disz : g->sisz;
  if (g->nd == 1 && cast == NULL && g->d[0] == isz && g->s[0] == isz &&
      (nbytes < THREAD_MIN_BYTES || bridge_copy_thread_count() == 1)) {
    memcpy(g->dst, g->src, (size_t)nbytes); /* contiguous: the plain copy */
    return 0;
  }
  if (cast == NULL && g->nd >= 3 && g->n[g->nd - 1] * g->n[g->nd - 2] <= 16) {
    copy_elements(g);
    return 0;
  }
  copy_plan p; /* about 4 KiB: on the stack, small copies pay no malloc */
  p.g = *g;
  p.cast = cast;
  return plan_copy(&p) < 0 ? -1 : run_plan(&p, nbytes);
}

/* No order of staged runs is safe: src's distinct elements (a broadcast
 * dim once) go into one temporary, converted to dst's type on the way, and
 * from there into dst, as NumPy copies every overlap. The temporary is laid
 * out in dst's order, so the second copy walks both sides alike. 0 done, 1 a
 * cast flagged (dst untouched), -1 overflow or out of memory. */
static int copy_through_temporary(const copy_geom *g, const bridge_cast *cast) {
  int64_t n[MAXD], d[MAXD], s[MAXD], ts[MAXD], count = 1, acc = g->disz;
  int m = 0;
  for (int i = g->nd - 1; i >= 0; i--) {
    ts[i] = 0; /* a broadcast dim reads the temporary's one copy */
    if (g->s[i] == 0) continue;
    ts[i] = acc;
    if (mul_ovf(acc, g->n[i], &acc)) return -1;
    count *= g->n[i]; /* at most numel */
  }
  for (int i = 0; i < g->nd; i++)
    if (g->s[i] != 0) n[m] = g->n[i], d[m] = ts[i], s[m] = g->s[i], m++;
  char *tmp = malloc((size_t)acc);
  if (tmp == NULL) return -1;
  BUMP(STAT_COPY_TEMPORARIES);
  copy_geom in, out;
  int rc = geom_init_scaled(&in, tmp, g->src, m, n, d, s, 1, 1, g->disz, g->sisz);
  if (rc == 0) rc = copy_geometry(&in, cast, count);
  if (rc == 0) rc = geom_init_scaled(&out, g->dst, tmp, g->nd, g->n, g->d, ts, 1, 1, g->disz, g->disz);
  if (rc == 0) {
    int64_t numel = 1;
    for (int i = 0; i < out.nd; i++) numel *= out.n[i];
    rc = copy_geometry(&out, NULL, numel);
  }
  free(tmp);
  return rc;
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
  /* A cast that may leave elements to NumPy goes through the temporary,
   * which it fills before dst is touched: NumPy then starts from the source
   * as it was. Runs of a few elements are not worth staging one by one (nor
   * checking: 16 dims of 2 are 32,768 runs), so they take the temporary too. */
  if ((cast == NULL || !cast->can_flag) && g->n[g->nd - 1] * isz >= 64) {
    int64_t chunk = TILE_BYTES / isz;
    for (int dir = 1; dir >= -1; dir -= 2) {
      if (!staged_walk(g, cast, dir, chunk, NULL)) continue;
      char *scratch = malloc(TILE_BYTES);
      if (scratch == NULL) return -1;
      BUMP(STAT_COPY_STAGED);
      int bad = staged_walk(g, cast, dir, chunk, scratch);
      free(scratch);
      return bad;
    }
  }
  return copy_through_temporary(g, cast);
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
  int old = n < 0 ? bridge_copy_threads_set() : bridge_copy_set_threads((int)n);
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
