/* Score a LightGBM forest over float32 rows: the compiled walker of predictor/compiled_walk.py.

   Model independent: it reads TextForest's flat slot arrays (predictor/lgbm_text.py), numerical splits that treat
   NaN as 0 ("x > threshold goes right"), trees of at most 64 leaves. Bit for bit the scores of TextForest's numpy
   walk: the same float32 comparisons, and each row's leaves summed in numpy's pairwise order.

   The walk is QuickScorer's (Lucchese et al., SIGIR 2015), vectorised over rows: a row's leaf is the leftmost leaf
   that no split sending the row right has ruled out, so every split becomes one compare and one mask update for a
   whole column of rows, with no data-dependent branch or load chain. Splits on a feature that holds one value in
   every row (a problem's own features, in the hook) are decided once, and what they cut off is never looked at. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 64  /* rows scored together (a multiple of 8 * BLOCK): their features and leaf values stay in L1/L2 */
#define MAX_LEAVES 64

/* Per split slot, the leaves of its left subtree as bits (leaves numbered left to right), and per tree the value
   of each leaf by bit. Returns the tree's leaf mask; 0 for more than MAX_LEAVES leaves. */
static uint64_t number_leaves(int32_t slot, int64_t base, int64_t split_nodes, const int32_t *children,
                              const double *value, uint64_t *left_leaves, double *by_bit, int *next) {
    if (slot - base >= split_nodes) {
        if (*next >= MAX_LEAVES) return 0;
        by_bit[*next] = value[slot];
        return (uint64_t)1 << (*next)++;
    }
    uint64_t left = number_leaves(children[2 * slot], base, split_nodes, children, value, left_leaves, by_bit, next);
    if (!left) return 0;
    uint64_t right = number_leaves(children[2 * slot + 1], base, split_nodes, children, value, left_leaves, by_bit,
                                   next);
    if (!right) return 0;
    left_leaves[slot] = left;
    return left | right;
}

/* Once per forest: left_leaves (one per slot) and by_bit (MAX_LEAVES per tree). -1 for a tree over MAX_LEAVES. */
int gp_prepare(int64_t trees, int64_t width, int64_t split_nodes, const int32_t *roots, const int32_t *children,
               const double *value, uint64_t *left_leaves, double *by_bit) {
    memset(left_leaves, 0, (size_t)(trees * width) * sizeof *left_leaves);
    memset(by_bit, 0, (size_t)(trees * MAX_LEAVES) * sizeof *by_bit);
    for (int64_t t = 0; t < trees; t++) {
        int next = 0;
        if (!number_leaves(roots[t], t * width, split_nodes, children, value, left_leaves, by_bit + t * MAX_LEAVES,
                           &next))
            return -1;
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
    ATTR static void NAME(const float *xt, int64_t cols, int64_t trees, const int32_t *active, const int64_t *first, \
                          const uint64_t *start, const int32_t *feature, const float *threshold,                    \
                          const uint64_t *left_leaves, const double *by_bit, int wide, double *leaf) {             \
        enum { LANES = BYTES / 4, ROWS = LANES * BLOCK };                                                             \
        for (int64_t t = 0; t < trees; t++) {                                                                        \
            const double *value = by_bit + t * MAX_LEAVES;                                                           \
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
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
TREE_PASS(tree_pass_avx2, 32, __attribute__((target("avx2"))))
#endif

/* Raw scores of `rows` rows into out: feature f of row r at X[r * row_step + f * feature_step] (any layout: the
   hook's matrices are column-major). 0, or -1 when out of memory. */
int gp_predict(const float *X, int64_t rows, int64_t n_features, int64_t row_step, int64_t feature_step,
               int64_t trees, int64_t width,
               int64_t split_nodes, const int32_t *roots, const int32_t *children, const int32_t *feature,
               const float *threshold, const uint64_t *left_leaves, const double *by_bit, int wide, double *out) {
    if (rows <= 0) return 0;
    float *x0 = malloc((size_t)n_features * sizeof *x0);
    char *constant = malloc((size_t)n_features);
    int32_t *active = malloc((size_t)(trees * split_nodes + 1) * sizeof *active);
    int32_t *stack = malloc((size_t)(split_nodes + 2) * sizeof *stack);
    int64_t *first = malloc((size_t)(trees + 1) * sizeof *first);
    uint64_t *start = malloc((size_t)trees * sizeof *start);
    float *xt = calloc((size_t)n_features * CHUNK, sizeof *xt);
    double *leaf = malloc((size_t)trees * CHUNK * sizeof *leaf);
    int status = -1;
    if (!x0 || !constant || !active || !stack || !first || !start || !xt || !leaf) goto done;

    /* the features constant over all rows (NaN counts as 0, as in every split here) */
    for (int64_t f = 0; f < n_features; f++) {
        const float *x = X + f * feature_step, v0 = x[0] != x[0] ? 0.f : x[0];
        char same = 1;
        for (int64_t r = 1; r < rows; r++) {
            const float v = x[r * row_step];
            same &= (v != v ? 0.f : v) == v0;
        }
        x0[f] = v0;
        constant[f] = same;
    }

    /* per tree: the splits a row can reach once the constant ones are decided, and the leaves those rule out */
    int64_t n_active = 0;
    for (int64_t t = 0; t < trees; t++) {
        const int64_t base = t * width;
        uint64_t mask = ~(uint64_t)0;
        int64_t depth = 0;
        first[t] = n_active;
        stack[depth++] = roots[t];
        while (depth) {
            const int32_t s = stack[--depth];
            if (s - base >= split_nodes) continue;  /* a leaf */
            if (constant[feature[s]]) {
                const int right = x0[feature[s]] > threshold[s];
                if (right) mask &= ~left_leaves[s];
                stack[depth++] = children[2 * s + right];
            } else {
                active[n_active++] = s;
                stack[depth++] = children[2 * s];
                stack[depth++] = children[2 * s + 1];
            }
        }
        start[t] = mask;
    }
    first[trees] = n_active;

    for (int64_t r0 = 0; r0 < rows; r0 += CHUNK) {
        const int64_t n = rows - r0 < CHUNK ? rows - r0 : CHUNK;
        for (int64_t f = 0; f < n_features; f++) {
            if (constant[f]) continue;  /* read by no active split */
            const float *x = X + f * feature_step + r0 * row_step;
            for (int64_t c = 0; c < n; c++) {
                const float v = x[c * row_step];
                xt[f * CHUNK + c] = v != v ? 0.f : v;
            }
        }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (__builtin_cpu_supports("avx2"))
            tree_pass_avx2(xt, n, trees, active, first, start, feature, threshold, left_leaves, by_bit, wide, leaf);
        else
#endif
            tree_pass(xt, n, trees, active, first, start, feature, threshold, left_leaves, by_bit, wide, leaf);
        pairwise_columns(leaf, trees, n, out + r0);
    }
    status = 0;
done:
    free(x0); free(constant); free(active); free(stack); free(first); free(start); free(xt); free(leaf);
    return status;
}
