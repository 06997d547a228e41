/* Score a LightGBM forest over float32 rows: the compiled walker of predictor/compiled_walk.py.

   Model independent: it reads TextForest's flat slot arrays (predictor/lgbm_text.py), numerical splits that treat
   NaN as 0 ("x > threshold goes right"), trees of at most 64 leaves. Bit for bit the scores of TextForest's numpy
   walk: the same float32 comparisons, and each row's leaves summed in numpy's pairwise order.

   The walk is QuickScorer's (Lucchese et al., SIGIR 2015), vectorised over rows: a row's leaf is the leftmost leaf
   that no split sending the row right has ruled out, so every split becomes one compare and one mask update for a
   whole column of rows, with no data-dependent branch or load chain. Splits that send every row the same way (on a
   feature that holds one value in every row, as a problem's own in the hook, or with a threshold outside the
   rows' range) are decided once, and what they cut off is never looked at. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 64  /* rows scored together (a multiple of 8 * BLOCK): their features and leaf values stay in L1/L2 */
#define MAX_LEAVES 64

/* A TextForest as the walker reads it (predictor/compiled_walk.py fills it; gp_prepare the last three fields). */
typedef struct {
    int64_t trees, width, split_nodes, features;  /* tree t owns slots [t * width, (t + 1) * width), splits first */
    const int32_t *roots, *children, *feature;    /* per tree; two per slot (a leaf's are itself); per slot */
    const float *threshold;                       /* per slot: x > threshold goes right (float32, rounded down) */
    const double *value;                          /* per slot: a leaf's value */
    uint64_t *left_leaves;                        /* per slot: the leaves of its left subtree, as bits */
    double *by_bit;                               /* MAX_LEAVES per tree: the value of the leaf of each bit */
    int64_t wide;                                 /* some tree has over 32 leaves */
} forest_t;

/* Numbers the leaves under `slot` left to right from *next; returns them as bits, 0 past MAX_LEAVES leaves. */
static uint64_t number_leaves(forest_t *f, int64_t base, int32_t slot, int *next) {
    if (slot - base >= f->split_nodes) {
        if (*next >= MAX_LEAVES) return 0;
        f->by_bit[base / f->width * MAX_LEAVES + *next] = f->value[slot];
        return (uint64_t)1 << (*next)++;
    }
    const uint64_t left = number_leaves(f, base, f->children[2 * slot], next);
    const uint64_t right = left ? number_leaves(f, base, f->children[2 * slot + 1], next) : 0;
    f->left_leaves[slot] = left;
    return right ? left | right : 0;
}

/* Once per forest: left_leaves, by_bit and wide. -1 for a tree of over MAX_LEAVES leaves, -2 for a split whose
   child split comes before it (gp_predict decides the splits of a tree in slot order: LightGBM numbers a split
   after its parent's). */
int gp_prepare(forest_t *f) {
    memset(f->left_leaves, 0, (size_t)(f->trees * f->width) * sizeof *f->left_leaves);
    memset(f->by_bit, 0, (size_t)(f->trees * MAX_LEAVES) * sizeof *f->by_bit);
    f->wide = 0;
    for (int64_t t = 0; t < f->trees; t++) {
        const int64_t base = t * f->width;
        int leaves = 0;
        if (!number_leaves(f, base, f->roots[t], &leaves)) return -1;
        f->wide |= leaves > 32;
        for (int64_t s = base; s < base + f->split_nodes; s++)
            if (f->children[2 * s] <= s || f->children[2 * s + 1] <= s) return -2;
    }
    return 0;
}

/* numpy's pairwise summation (pairwise_sum in numpy/_core/src/umath/loops_utils.h.src) of a[0..n) for each of
   `cols` columns at once: a[i * CHUNK + c] is term i of column c. */
static void pairwise_columns(const double *a, int64_t n, int64_t cols, double *out) {
    if (n < 8) {
        for (int64_t c = 0; c < cols; c++) out[c] = 0.;
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < cols; c++) out[c] += a[i * CHUNK + c];
    } else if (n <= 128) {
        double r[8][CHUNK];
        int64_t i;
        for (int j = 0; j < 8; j++) memcpy(r[j], a + j * CHUNK, (size_t)cols * sizeof(double));
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                for (int64_t c = 0; c < cols; c++) r[j][c] += a[(i + j) * CHUNK + c];
        for (int64_t c = 0; c < cols; c++)
            out[c] = ((r[0][c] + r[1][c]) + (r[2][c] + r[3][c])) + ((r[4][c] + r[5][c]) + (r[6][c] + r[7][c]));
        for (; i < n; i++)
            for (int64_t c = 0; c < cols; c++) out[c] += a[i * CHUNK + c];
    } else {
        double left[CHUNK];
        int64_t n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_columns(a, n2, cols, left);
        pairwise_columns(a + n2 * CHUNK, n - n2, cols, out);
        for (int64_t c = 0; c < cols; c++) out[c] = left[c] + out[c];
    }
}

/* One chunk of rows through every tree: leaf[t * CHUNK + c] = tree t's leaf value for row c. A leaf mask is two
   32-bit halves (the second only for trees of over 32 leaves); BLOCK vectors of rows stay in registers while every
   split of a tree updates them. Written with GCC/Clang vector extensions, so it needs no machine flag: SSE2 on
   x86-64 (plus an AVX2 copy, picked at run time where the CPU has it: ~1.5x faster), NEON on ARM. */
#define BLOCK 8

#define TREE_PASS(NAME, BYTES, ATTR)                                                                                  \
    typedef float NAME##_f __attribute__((vector_size(BYTES), aligned(4)));                                          \
    typedef uint32_t NAME##_u __attribute__((vector_size(BYTES)));                                                   \
    ATTR static void NAME(const forest_t *f, const float *xt, int64_t cols, const int32_t *active,                  \
                          const int64_t *first, const uint64_t *start, double *leaf) {                               \
        enum { LANES = BYTES / 4, ROWS = LANES * BLOCK };                                                             \
        const int32_t *feature = f->feature;                                                                         \
        const float *threshold = f->threshold;                                                                       \
        const uint64_t *left_leaves = f->left_leaves;                                                                \
        const int64_t trees = f->trees, wide = f->wide;                                                              \
        for (int64_t t = 0; t < trees; t++) {                                                                        \
            const double *value = f->by_bit + t * MAX_LEAVES;                                                        \
            for (int64_t r0 = 0; r0 < cols; r0 += ROWS) {                                                            \
                NAME##_u lo[BLOCK], hi[BLOCK];                                                                       \
                for (int b = 0; b < BLOCK; b++) {                                                                    \
                    lo[b] = (NAME##_u){0} + (uint32_t)start[t];                                                       \
                    hi[b] = (NAME##_u){0} + (uint32_t)(start[t] >> 32);                                               \
                }                                                                                                    \
                for (int64_t a = first[t]; a < first[t + 1]; a++) {                                                  \
                    const int32_t s = active[a];                                                                     \
                    const NAME##_f *x = (const NAME##_f *)(xt + (int64_t)feature[s] * CHUNK + r0);                   \
                    const NAME##_f th = (NAME##_f){0} + threshold[s];                                                 \
                    const NAME##_u cut = (NAME##_u){0} + (uint32_t)left_leaves[s];                                    \
                    for (int b = 0; b < BLOCK; b++) lo[b] &= ~((NAME##_u)(x[b] > th) & cut);                         \
                    if (wide) {                                                                                      \
                        const NAME##_u cut_hi = (NAME##_u){0} + (uint32_t)(left_leaves[s] >> 32);                     \
                        for (int b = 0; b < BLOCK; b++) hi[b] &= ~((NAME##_u)(x[b] > th) & cut_hi);                  \
                    }                                                                                                \
                }                                                                                                    \
                uint32_t l[ROWS], h[ROWS];                                                                           \
                memcpy(l, lo, sizeof l);                                                                             \
                memcpy(h, hi, sizeof h);                                                                             \
                for (int64_t c = 0; c < ROWS && r0 + c < cols; c++)                                                  \
                    leaf[t * CHUNK + r0 + c] = value[l[c] ? __builtin_ctz(l[c]) : 32 + __builtin_ctz(h[c])];        \
            }                                                                                                        \
        }                                                                                                            \
    }
TREE_PASS(tree_pass, 16, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GP_NO_AVX2)
TREE_PASS(tree_pass_avx2, 32, __attribute__((target("avx2"))))
#endif

/* The range of x[0], x[step], ... x[(n - 1) * step], NaN counting as 0 (as in every split here); eight running
   minima and maxima where the values are contiguous (the hook's column-major matrices), so they vectorise. */
static void range_of(const float *x, int64_t n, int64_t step, float *low, float *high) {
    float l[8], h[8];
    int64_t r = 0;
    for (int k = 0; k < 8; k++) l[k] = h[k] = x[0] != x[0] ? 0.f : x[0];
    if (step == 1)
        for (; r + 8 <= n; r += 8)
            for (int k = 0; k < 8; k++) {
                const float v = x[r + k] != x[r + k] ? 0.f : x[r + k];
                l[k] = v < l[k] ? v : l[k];
                h[k] = v > h[k] ? v : h[k];
            }
    for (; r < n; r++) {
        const float v = x[r * step] != x[r * step] ? 0.f : x[r * step];
        l[0] = v < l[0] ? v : l[0];
        h[0] = v > h[0] ? v : h[0];
    }
    for (int k = 1; k < 8; k++) {
        l[0] = l[k] < l[0] ? l[k] : l[0];
        h[0] = h[k] > h[0] ? h[k] : h[0];
    }
    *low = l[0];
    *high = h[0];
}

/* Raw scores of `rows` rows into out: feature j of row r at X[r * row_step + j * feature_step] (any layout: the
   hook's matrices are column-major). 0, or -1 when out of memory. */
int gp_predict(const forest_t *f, const float *X, int64_t rows, int64_t row_step, int64_t feature_step, double *out) {
    if (rows <= 0) return 0;
    const int64_t trees = f->trees, width = f->width, split_nodes = f->split_nodes, features = f->features;
    const int32_t *children = f->children, *feature = f->feature;
    float *lo = malloc((size_t)features * sizeof *lo), *hi = malloc((size_t)features * sizeof *hi);
    char *reach = malloc((size_t)width);
    int32_t *active = malloc((size_t)(trees * split_nodes + 1) * sizeof *active);
    int64_t *first = malloc((size_t)(trees + 1) * sizeof *first);
    uint64_t *start = malloc((size_t)trees * sizeof *start);
    float *xt = calloc((size_t)features * CHUNK, sizeof *xt);
    double *leaf = malloc((size_t)trees * CHUNK * sizeof *leaf);
    int status = -1;
    if (!lo || !hi || !reach || !active || !first || !start || !xt || !leaf) goto done;

    for (int64_t j = 0; j < features; j++) range_of(X + j * feature_step, rows, row_step, lo + j, hi + j);

    /* per tree, in slot order (parents first): the splits a row can reach once those that send every row the same
       way are decided (a feature constant over the rows, as a problem's own in the hook, or a threshold outside the
       feature's range), and the leaves the decided ones rule out. Branch-free: reachability is data. */
    int64_t n_active = 0;
    for (int64_t t = 0; t < trees; t++) {
        const int64_t base = t * width;
        uint64_t mask = ~(uint64_t)0;
        first[t] = n_active;
        memset(reach, 0, (size_t)width);
        reach[f->roots[t] - base] = 1;
        for (int64_t s = base; s < base + split_nodes; s++) {
            const int32_t j = feature[s];
            const char r = reach[s - base], right = lo[j] > f->threshold[s], fixed = right | (hi[j] <= f->threshold[s]);
            reach[children[2 * s] - base] = r & !(fixed & right);
            reach[children[2 * s + 1] - base] = r & !(fixed & !right);
            mask &= ~(f->left_leaves[s] & -(uint64_t)(r & fixed & right));
            active[n_active] = (int32_t)s;
            n_active += r & !fixed;
        }
        start[t] = mask;
    }
    first[trees] = n_active;

    for (int64_t r0 = 0; r0 < rows; r0 += CHUNK) {
        const int64_t n = rows - r0 < CHUNK ? rows - r0 : CHUNK;
        for (int64_t j = 0; j < features; j++) {
            if (lo[j] == hi[j]) continue;  /* read by no active split */
            const float *x = X + j * feature_step + r0 * row_step;
            for (int64_t c = 0; c < n; c++) {
                const float v = x[c * row_step];
                xt[j * CHUNK + c] = v != v ? 0.f : v;
            }
        }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GP_NO_AVX2)
        if (__builtin_cpu_supports("avx2"))
            tree_pass_avx2(f, xt, n, active, first, start, leaf);
        else
#endif
            tree_pass(f, xt, n, active, first, start, leaf);
        pairwise_columns(leaf, trees, n, out + r0);
    }
    status = 0;
done:
    free(lo); free(hi); free(reach); free(active); free(first); free(start); free(xt); free(leaf);
    return status;
}
