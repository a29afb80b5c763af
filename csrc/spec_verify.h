// spec-verify core: the canonical algorithms and the kernel table.
//
// No torch in here: raw pointers and int64 sizes, so the same files build into the torch
// extension and into a plain C++ test program that also runs under aarch64 emulation.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace spec_verify {

// Note [Canonical mass order]
// Every float64 mass (a row mass, a residual mass) is summed in one order that does not
// depend on the instruction set, so every path returns the same bits.
// - The row is cut into blocks of kMassBlock elements (the last one may be shorter).
// - Inside a block, element 16*g + j goes into lane j (16 float64 lanes, from +0.0) for the
//   first floor(len/16) groups. The lanes fold in a fixed tree: l[j] += l[j+8] for j < 8,
//   then l[j] += l[j+4] for j < 4, l[j] += l[j+2] for j < 2, and the block sum is l[0] + l[1].
//   The block's last len % 16 elements are then added to it one by one, in index order.
// - The row mass is the sum of the block masses in block order, starting from +0.0.
// Block masses are kept: the sampler finds its block from them (Note [Blocked sampling]).
// blocked_mass.h holds the one implementation; the paths supply only lane arithmetic.
constexpr int64_t kLanes = 16;
constexpr int64_t kMassBlock = 256;

// Block length of the SIMD argmax (Note [Blocked argmax] in blocked_argmax.h). Its result
// is the lowest index of the maximum whatever the block length: longer blocks only spend
// less on per-block reductions and more on the final in-block search.
constexpr int64_t kArgmaxBlock = 4096;

inline int64_t num_blocks(int64_t n) { return (n + kMassBlock - 1) / kMassBlock; }

// Note [Residual in float32]
// On rejection the correction token is drawn from r(v) = max(0, p(v) * Q - q(v) * P).
// The kernels evaluate it as r'(v) = max(0, p(v) * a - q(v) * b) in float32, with
// a = 2^s / P and b = 2^s / Q rounded to float32 once per call (scalar code shared by all
// paths), so r' = r * 2^s / (P * Q) up to float32 rounding: the same law. The power of two s
// keeps a and b normal floats and p * a, q * b below 2^126 (residual_scales()). Products and
// the difference are separate IEEE operations (no FMA; the files build with
// -ffp-contract=off), and the clamp maps every value that is not > 0 to +0.0, so each r'(v)
// is the same float on every path; the float64 sums then follow Note [Canonical mass order].

// Note [Mass bounds]
// Accepting a position needs P and Q only to see that u * q(t) * P < p(t) * Q. A float32
// sum S of n values >= 0, in any order, is within gamma = (n-1) 2^-24 / (1 - (n-1) 2^-24)
// of their exact sum, relatively (no underflow harms it: sums of subnormals are exact), and
// the canonical float64 mass is within n 2^-53 of it; so P lies in S (1 -+ w) with
// w = 2 gamma + 2^-28, which also covers the roundings of both sides of the comparison.
// Token-wise rounds on float32 probability rows therefore first sum p and q in float32
// (row_sum_f32, about the cost of a float32 read), accept where u * q(t) * S_p (1 + w) <
// p(t) * S_q (1 - w), and otherwise read the position exactly (row_mass) and decide by the
// exact rule (a position that looks like a rejection tries Note [Bounded rejection] first);
// the last row is drawn from by Note [Bounded sampling] (float32 block sums, exact masses
// only if the draw is not certain). The bound only ever answers "accepted" where the exact
// rule does, so every result keeps its bits.

// Note [Bounded sampling]
// A draw (Note [Blocked sampling]) needs the canonical block masses B_b only to compare
// running sums with the threshold u * T, T their total. Block sums F_b known within
// kBlockSumBound = 2^-21 of each block's exact sum E_b (float32 adds, at most six on the way
// from any value to F_b: gamma_6 < 2^-21; then float64) place every canonical running sum,
// the threshold and every running sum of the in-block scan within about 2^-21 of what the
// F_b give, since all terms are >= 0 and the canonical sums are within 2^-43 of exact (up to
// a few thousand blocks of 256 values). bounded_sample_index (sample_index.h) walks the F_b
// and the block as sample_index walks the B_b, and answers only if every comparison it
// makes is certain by more than those margins; otherwise it answers nothing and the caller
// sums the canonical masses (row_mass, residual_mass) and calls sample_index. So an answer
// is always sample_index's, bit for bit. Token-wise rounds on float32 rows draw this way
// from the last row when every position is accepted (a float32 pass instead of row_mass)
// and from the residual on a rejection (residual_block_sums instead of residual_mass);
// both widen nothing to float64 per value. A rejection's residual is first tried from
// sums made during the exact pass over p and q, with a = b = 1 guessed (rows near mass 1
// have a and b within a few ulps of 1): each r'(v) is within |a - 1| p(v) + |b - 1| q(v) +
// 2^-23 (a p(v) + b q(v)) + 2^-24 (p(v) + q(v)) of max(0, p(v) - q(v)), so each block's sum
// is known within that much summed over the block (from the canonical block masses), an
// absolute margin bounded_sample_index adds to its relative one; the residual's own float32
// pass runs only if that draw is not certain. At a one-hot position that looks like a
// rejection (Note [Mass bounds]'s guess), the row's block sums also bound P = total (1 +- d)
// for the test u * P < p(t), and on a certain rejection the correction is drawn from them
// with t's block summed again without t: one float32 pass for the whole position. Near-ties with the threshold (within about
// 2^-20 of the total) fall back: rare unless the row is nearly flat where u lands.
constexpr double kBlockSumBound = 0x1p-21;

// Note [Bounded rejection]
// A token-wise position with draft rows that looks like a rejection (Note [Mass bounds]'s
// guess from the masses seen last) would otherwise pay the exact pass over p and q, which
// widens every value to float64 only to learn P and Q for the acceptance test and the
// residual's factors a = 1 / P, b = 1 / Q (s = 0 while P, Q lie in [2^-120, 2^120]). On
// float32 rows it first takes float32 block sums of p and of q (row_block_sums): they bound
// P and Q (bounded_mass_range), which decide the test where certain (u q(t) P_lo >= p(t) Q_hi
// rejects, monotone rounding); a and b, rounded quotients, lie between the factors of the
// bounds. The correction is then drawn from residual_block_sums at factors ga, gb guessed
// from the middle of the ranges: each r'(v) at the true factors is within |a - ga| p(v) +
// |b - gb| q(v) + 2^-23 ((a + ga) p(v) + (b + gb) q(v)) (+ 2^-149) of its guess
// (guess_block_err, sample_index.h, from the blocks' float32 sums of p and q), so every
// block sum is known within that absolute margin, and bounded_sample_index's `approximate`
// mode scans the chosen block on the guessed values with the block's whole margin: an answer
// is the canonical draw's. Where a path has pair_block_sums, the first pass also sums the
// residual at factors 1 (max(0, p - q)), the guess that serves rows of mass near 1 (softmax
// rows: |a - 1| and |b - 1| about 2^-20) without a second pass; otherwise, or if that draw
// is not certain, the second pass guesses the middle of the ranges (and the thread's next
// rejections take the two rows' sums alone until a rejection's rows are near mass 1). So a decided rejection
// costs one or two float32 reads of p and q and one block, none widened; anything uncertain
// (about 2^-19 of the masses near a comparison) goes on to the exact pass, as does a
// position the guess calls likely accepted (Note [Mass bounds]'s float32 sums first).
// On logits at temperature only (Note [Bounded warping]) every position tries the weight
// bounds first, and a rejection they make certain is drawn the same way from the
// approximate weights (the pass that bounds the masses keeps them) with each weight's
// kApproxWeightBound added to the margins, instead of warping both rows exactly.
// row_mass_pair_guess's sums sum each block in one float32 accumulator per lane (16 adds):
// within gamma_15 < 2^-20.
constexpr double kGuessSumBound = 0x1p-20;

// Note [Bounded warping]
// A round on logits at temperature only (no top-k, top-p or min-p) needs the canonical
// masses of the weights w = exp(z - max z) (Note [One exp]) for two things: to compare
// u * q(t) * P with p(t) * Q, and to draw. Like Note [Mass bounds] and Note [Bounded
// sampling], both need the masses only where the answer is close. row_weight_sums sums, per
// block, weights from a cheaper exp (exp_approx in exp_f32.h: the same reduction, a degree-6
// polynomial, ~15 vector operations for 16 values instead of ~38 with the float64 masses),
// in float32: each approximate weight is within kApproxWeightBound = 2^-20 of w
// relatively, plus 2^-148 absolutely (subnormal results), and the float32 sum of a block (at
// most 16 adds on the way from a value to its sum) within gamma_16 < 2^-20 (1 + 2^-19) more;
// so each block sum F_b is within kWeightSumBound F_b + kWeightSumFloor of the exact sum of
// the block's w. The tighter the bound, the rarer a decision it cannot make (top-p's cutoff
// falls back when the target's range straddles a tie group's running mass: about 1 row in
// 50 at 2^-19 on Gaussian logits, 1 in 3 at 2^-14). The exact
// weights are still computed where the answer reads them: w(t) for the acceptance test (one
// scalar exp_nonpositive, the same bits as every path's) and the chosen block of a draw (the
// path's row_weights over 256 values). An acceptance is decided from the bounds only when
// fl(fl(u q(t)) P_hi) < fl(p(t) Q_lo) (rounding is monotone, so the exact test agrees), a
// draw only when bounded_sample_index is certain (the block errors go in as its absolute
// margins); otherwise the row is warped exactly (row_weights) and decided as before, which a
// rejection needs anyway. So every result keeps its bits, and the exp pass costs about a
// third of the exact one wherever nothing is close.
constexpr double kApproxWeightBound = 0x1p-20;

// Note [Weight upper bounds]'s largest excess of the float over 2^(k + f): (1 + f) / 2^f <=
// 1.06146 (at f = 1 / ln 2 - 1), rounded up.
constexpr double kUpperWeightExcess = 1.0615;

// Note [Weight upper bounds]
// An accepted position at temperature only needs an upper bound on the target's mass P alone
// (u q(t) P < p(t) Q holds for every P below the bound), and the acceptances a round makes
// are mostly clear of their boundaries. row_upper_weight_sums bounds P in about the time of
// a read (4 vector operations for a vector of values, against about 17 for exp_approx): per
// value the float whose bits are trunc(max(0, x c1 + c0)) with c1 = 2^23 log2(e) / T and
// c0 = 127 2^23 - z_max 2^23 log2(e) (Schraudolph's exp: the integer part of the exponent in
// the exponent field, its fraction f as the mantissa, so the float is 2^k (1 + f) >=
// 2^(k + f), within 6.2% above). Against the exact w = exp_nonpositive(x / T - z_max):
// w <= s (1 + e) + 2^-126, with e = 2^-15 + (|z_max| + 104) 2^-21 covering exp_nonpositive's
// 2 ulp, the roundings of x / T - z_max, of c1 and c0 and of x c1 + c0 (one or two: the
// paths' mul_add), and the truncation; 2^-126 covers the subnormal floats below exponent 1,
// where the mantissa no longer reads as 1 + f. Block sums in float32 (blocked_value_sums)
// are within 2^-20 (1 + 2^-19) of their exact sums, so
// P <= (S (1 + 2^-19)(1 + e) + n 2^-126)(1 + n 2^-53)(1 + 2^-40) for S the sum of the block
// sums (n 2^-53: the canonical float64 sum; 2^-40: this expression's roundings). The bound is
// up to 6% above P (about 4% on average), so a position whose u is that close below the
// acceptance boundary goes on to Note [Bounded warping] as before. The same floats bound P
// from below, less tightly: w >= s (1 - e) / 1.0615 - 2^-126 (the float is at most 1.06146
// times 2^(k + f)), so P >= (S (1 - 2^-19)(1 - e) / 1.0615 - n 2^-126)(1 - n 2^-53)(1 - 2^-40):
// enough for the draft's Q in u q(t) P < p(t) Q where no draft bounds were handed over.
// Note [Top-p upper bounds]
// A position at top-p and/or min-p (no top-k) that accepts needs no warp either: with
// M the canonical mass of the row's weights w, G(t) that of the w(v) > w(t), and the rule
// of Note [Warping] (t kept iff G(t) < top_p M, the kept mass P summed canonically with the
// rest as +0.0):
//  - t is surely kept where an upper bound on G(t) is below top_p times a lower bound on M;
//    then the warped p(t) is the exact w(t);
//  - P <= M (a canonical sum of fewer non-negative terms is no larger), so M's upper bound
//    bounds P; and a draft's kept mass Q >= top_p M_q (its first token left out has at
//    least top_p M_q strictly above it, and what is above it is the kept set), so top_p
//    times a lower bound on M_q bounds Q from below, while q(t) <= w_q(t), kept or not;
//  - so u q(t) P < p(t) Q holds where u w_q(t) M_hi < w(t) top_p M_q,lo (or, with the
//    draft's bound handed over, u q(t) M_hi < w(t) Q_lo; one-hot, u M_hi < w(t)).
// min-p after top-p (or alone) keeps t iff also w(t) >= min_p's float m, and P is at most
// the mass of the weights >= m (the same kernel's masked sum, above the float below m).
// Both cuts keep a top stretch of the weights, so a draft's Q is the smaller of its two
// kept masses: Q >= min(top_p M_q,lo, the mass of its weights >= m from below), and >= 1
// (its largest weight, 1, is always kept); mass_at_least_lower bounds that mass from the
// floats s(v) > tau, tau >= (m + 2^-126) 1.0615 / (1 - e), whose weights surely reach m.
// One pass of Note [Weight upper bounds]' floats s(v) gives both M's bounds and G(t)'s:
// row_upper_weight_sums_above also sums the s(v) > tau, tau <= (w(t) - 2^-126) / (1 + e)
// rounded down, which include every v with w(v) > w(t) (w(v) <= s(v) (1 + e) + 2^-126), so
// the upper bound formula over those sums bounds G(t). The tests (an argmax pass and this
// one) cost about two reads of the target row, where the warp they spare costs an argmax,
// the approximate exp pass, a gather and the cutoff search; the bounds are loose (M_hi up to
// 6% above M, and P is about top_p M), so positions whose u is within some 10-20% of the
// acceptance boundary, and tokens whose G(t) is within as much of top_p M, go on to the
// exact warp as before, having paid the two passes on top.
constexpr double kWeightSumBound = 0x1.2p-19;  // >= (1 + 2^-20)(1 + gamma_16 = 2^-20 (1 + 2^-19)) - 1
constexpr double kWeightSumFloor = 0x1p-138;   // >= 256 values * 2^-148 * (1 + 2^-19)

// Note [Warping]
// Logits become an unnormalised row by one warp, a pure function of the row and
// WarpParams, applied identically to every row a round reads (target and draft alike):
// 1. z(v) = x(v) / temperature (float32 division); -inf is a masked token; NaN, +inf, a
//    row with no finite value, or a z that overflows to +inf are errors.
// 2. w(v) = exp(z(v) - max z) in float32 by exp_nonpositive (Note [One exp], exp_f32.h):
//    the largest weight is exactly 1.
// 3. top_k (0 = off): keep v iff fewer than top_k tokens have z strictly greater than z(v)
//    (ties at the k-th value are kept).
// 4. top_p (1 = off): among the kept, keep v iff the mass of kept tokens with w strictly
//    greater than w(v) is < top_p * the mass of all kept; masses in the canonical order
//    (Note [Canonical mass order]) with the others as +0.0, so a tie group at the cutoff
//    is kept whole and the kept set is the same on every path. The cutoff is found
//    without sorting the row and always confirmed by exact masses (warp.cpp).
// 5. min_p (0 = off): keep v iff w(v) >= min_p.
// The warped row r(v) = w(v) on the kept set, +0.0 elsewhere, is an ordinary unnormalised
// row. Temperature 0 means greedy: the argmax of x (callers never warp then).
// Note [Half rows]
// Rows may hold float32, float16 (IEEE binary16) or bfloat16 values. Every half value is a
// float32 value exactly (binary16: 11 significant bits, exponents -24..15, subnormals
// included; bfloat16: the top 16 bits of a float32), so a round on half rows is defined as
// the round on its rows widened to float32, and returns the same bits. The paths widen with
// their own instructions (vcvtph2ps of F16C or AVX-512F, NEON's fcvtl, a 16-bit shift for
// bfloat16, bit arithmetic in the scalar reference; a NaN stays a NaN, quieted), a chunk of
// kHalfChunk values at a time into a float32 buffer the float32 kernels then read while it
// is in L1 (typed_rows.cpp): a half row is read once, at 2 bytes a value. Logits rows are
// widened whole before warping (its passes dwarf the widening).
enum class Elem : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
constexpr int64_t kHalfChunk = 4096;  // a multiple of kMassBlock and of kArgmaxBlock

// One row of some element type.
struct RowRef {
  const void* data;
  Elem type;
  RowRef(const float* row) : data(row), type(Elem::kF32) {}  // NOLINT: float rows convert implicitly
  RowRef(const void* row, Elem t) : data(row), type(t) {}
};

inline int64_t elem_size(Elem t) { return t == Elem::kF32 ? 4 : 2; }

struct WarpParams {
  float temperature = 1.0f;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
};

// One instruction set's kernels. Each is a pure function of its arguments. Each path fills
// its table with designated initialisers in field order (kernels_<isa>.cpp); which path
// leaves which optional field null: DESIGN.md, "The kernel table".
struct KernelTable {
  const char* name;
  // Index of the largest value, ties to the lowest index (+0.0 and -0.0 are equal).
  // Returns false if the row holds a NaN (then *index is unspecified).
  bool (*row_argmax)(const float* row, int64_t n, int64_t* index);
  // Block masses of a row (Note [Canonical mass order]) into block_mass[num_blocks(n)],
  // and the row mass into *mass. Returns false if any value is negative, NaN or infinite
  // (then the outputs are unspecified); -0.0 is allowed and counts as zero.
  bool (*row_mass)(const float* row, int64_t n, double* block_mass, double* mass);
  // Optional fast path (nullptr if a path has none): row_mass of two rows at once; on false,
  // which says nothing about the rows, the caller takes each through row_mass.
  bool (*row_mass_pair)(const float* p, const float* q, int64_t n, double* p_blocks,
                        double* q_blocks, double* p_mass, double* q_mass);
  // Block masses and total of r'(v) = max(0, p(v) * a - q(v) * b) (Note [Residual in float32]).
  // The rows were validated by row_mass.
  void (*residual_mass)(const float* p, const float* q, float a, float b, int64_t n,
                        double* block_mass, double* mass);
  // w(v) = exp_nonpositive(x(v) / temperature - z_max) for every v (Note [One exp]) into
  // w, with w's block masses and mass (canonical); z_max is the largest x(v) / temperature,
  // finite; x holds no NaN and no +inf.
  void (*row_weights)(const float* x, int64_t n, float temperature, float z_max, float* w,
                      double* block_mass, double* mass);
  // For weights w (finite, >= +0.0): r(v) = w(v) >= t ? w(v) : +0.0 into r (which may be
  // w, or nullptr to write nothing), r's block masses and mass, and the mass of the
  // w(v) > t (others +0.0), whose block masses go to above_blocks; canonical masses.
  void (*keep_at_least)(const float* w, int64_t n, float t, float* r, double* r_blocks,
                        double* r_mass, double* above_blocks, double* above_mass);
  // The indices v with w(v) >= t (t > 0), ascending, into index (room for n); returns how
  // many.
  int64_t (*gather_at_least)(const float* w, int64_t n, float t, int64_t* index);
  // residual_mass, also storing each r'(v) into out[v] (out may be p: each value is read
  // before it is written).
  void (*residual_store)(const float* p, const float* q, float a, float b, int64_t n, float* out,
                         double* block_mass, double* mass);
  // Note [Mass bounds]: the row's float32 sum in an order of the path's choosing, into
  // *sum; false if it cannot vouch for the row (a value negative, NaN or infinite, -0.0 on
  // some paths, or the sum overflowing), which sends the caller to row_mass.
  bool (*row_sum_f32)(const float* row, int64_t n, float* sum);
  // Half values widened exactly to float32 (Note [Half rows]): IEEE binary16, bfloat16.
  void (*widen_f16)(const uint16_t* h, int64_t n, float* out);
  void (*widen_bf16)(const uint16_t* h, int64_t n, float* out);
  // Note [Bounded sampling]: approximate block sums, each within kBlockSumBound of the
  // exact sum of its block's values, into block_sum[num_blocks(n)]. Optional (nullptr if a
  // path has none). row_block_sums is false if it cannot vouch for the row (as row_sum_f32:
  // a value negative, NaN or infinite, -0.0 on some paths), which sends the caller to
  // row_mass; a sum that overflows is left infinite (the caller checks the total).
  bool (*row_block_sums)(const float* row, int64_t n, double* block_sum);
  // The same for r'(v) = max(0, p(v) * a - q(v) * b) (Note [Residual in float32]), each
  // r'(v) the float residual_mass sums; the rows were validated by row_mass.
  void (*residual_block_sums)(const float* p, const float* q, float a, float b, int64_t n,
                              double* block_sum);
  // Optional: row_mass_pair (same contract, same bits), also putting into guess_sum the
  // block sums, within kGuessSumBound, of max(0, p(v) - q(v)) (one float32 subtraction): the
  // residual with both factors guessed as 1 (Note [Bounded sampling], normalised rows).
  bool (*row_mass_pair_guess)(const float* p, const float* q, int64_t n, double* p_blocks,
                              double* q_blocks, double* p_mass, double* q_mass, double* guess_sum);
  // Optional: Note [Bounded warping]'s block sums of approximate weights exp_approx(x(v) /
  // temperature - z_max) (arguments as row_weights), each within kWeightSumBound F_b +
  // kWeightSumFloor of the exact sum of row_weights' w over its block, into
  // block_sum[num_blocks(n)]; and the approximate weights themselves into w unless it is null.
  void (*row_weight_sums)(const float* x, int64_t n, float temperature, float z_max, float* w, double* block_sum);
  // Optional: row_block_sums of p into p_sum and of q into q_sum, and residual_block_sums of
  // p and q at factors 1 and 1 (max(0, p(v) - q(v)), one float32 subtraction) into
  // guess_sum, in one pass (Note [Bounded rejection]); each sum within kBlockSumBound. False
  // if it cannot vouch for both rows, as row_block_sums.
  bool (*pair_block_sums)(const float* p, const float* q, int64_t n, double* p_sum, double* q_sum,
                          double* guess_sum);
  // Optional: Note [Weight upper bounds]'s block sums of upper_weight(x(v), c1, c0) (exp_f32.h)
  // into block_sum[num_blocks(n)], each within 2^-20 (1 + 2^-19) of the exact sum of its
  // float values.
  void (*row_upper_weight_sums)(const float* x, int64_t n, float c1, float c0, double* block_sum);
  // Optional: Note [Top-p upper bounds]: row_upper_weight_sums into block_sum and, in the same
  // pass, the block sums of the upper_weight values above tau alone (the others as +0.0)
  // into above_sum, each as within its exact sum as row_upper_weight_sums' are.
  void (*row_upper_weight_sums_above)(const float* x, int64_t n, float c1, float c0, float tau, double* block_sum,
                                      double* above_sum);
  // Optional: Note [Argmax with upper sums] (exp_f32.h): row_argmax into *index and
  // row_upper_weight_sums into block_sum, the same values, in one pass; false on a NaN.
  bool (*row_argmax_upper_weight_sums)(const float* x, int64_t n, float c1, float c0, int64_t* index,
                                       double* block_sum);
};

// ---- instruction sets and their selection (dispatch.cpp) --------------------------------
const KernelTable& scalar_kernels();
const KernelTable* avx512_kernels();  // nullptr unless built for x86-64 and the CPU has AVX-512F
const KernelTable* avx2_kernels();    // nullptr unless built for x86-64 and the CPU has AVX2
const KernelTable* neon_kernels();  // nullptr unless built for aarch64

// Names of the paths this build can run on this CPU, best first ("neon", or "avx512" and/or
// "avx2"; then "scalar").
std::vector<std::string> available_isas();
// The table in use: chosen once, from SPEC_VERIFY_ISA if set, else the best available.
// Throws std::invalid_argument if SPEC_VERIFY_ISA names an unknown or unavailable path.
const KernelTable& active_kernels();
// Forces a path by name ("" = back to the environment/default choice); for tests and
// benchmarks. Throws std::invalid_argument for an unknown or unavailable name.
void force_isa(const std::string& name);
// The rules alone: kt with every optional shortcut kernel taken out (Note [Mass bounds] and
// every bound built on an optional kernel; row_mass_pair too), or only those named in `only`
// (the field names, comma-separated; empty: all). Outcomes are the same bits either way.
// active_kernels() returns this of the chosen path when SPEC_VERIFY_EXACT is set: "1" for
// all, or a list of field names (what benchmarks/shortcuts.py measures one by one).
// Throws std::invalid_argument for a name that is not an optional kernel.
KernelTable exact_kernels(const KernelTable& kt, const std::string& only = "");
// The optional shortcut kernels exact_kernels takes out, by field name.
std::vector<std::string> shortcut_kernels();

// ---- rounds (rounds.cpp): the op contracts on raw rows ----------------------------------
struct Rows {
  const void* data;
  int64_t stride;  // elements between consecutive rows
  Elem type = Elem::kF32;
  RowRef row(int64_t i) const {
    return RowRef(static_cast<const char*>(data) + i * stride * elem_size(type), type);
  }
};

// ---- rows of any element type (typed_rows.cpp): Note [Half rows] -------------------------
// Value v of a row, widened to float32.
float value_at(RowRef row, int64_t v);
// The row's element type widened by the table's kernels, or nothing for float32.
void widen(const KernelTable& kt, RowRef row, int64_t n, float* out);
// row_argmax, row_mass and residual_mass of the table on rows of any element type: the same
// results as on the rows widened to float32.
bool typed_argmax(const KernelTable& kt, RowRef row, int64_t n, int64_t* index);
bool typed_mass(const KernelTable& kt, RowRef row, int64_t n, double* block_mass, double* mass);
void typed_residual(const KernelTable& kt, RowRef p, RowRef q, float a, float b, int64_t n,
                    double* block_mass, double* mass);
// The row as float32: itself, or widened whole into `buffer` (n floats).
const float* as_floats(const KernelTable& kt, RowRef row, int64_t n, float* buffer);

// kNoFinite: a logits row whose values are all -inf; kOverflow: a logit whose division
// by the temperature overflows to +inf.
enum class InputError : int { kNone = 0, kNaN, kNegative, kInfinite, kZeroMass, kNoFinite, kOverflow,
                              kDraftBounds };

struct Outcome {
  int64_t n_accepted = 0;
  int64_t token = -1;
  // Set when a row that was read is malformed; n_accepted/token are then meaningless.
  InputError error = InputError::kNone;
  bool in_draft = false;  // which tensor: the draft's rows (true) or the target's (false)
  int64_t row = -1;
  int64_t col = -1;  // first offending element (-1 for kZeroMass)
  float value = 0.0f;
};

// Temperature 0. Reads rows 0..i only, where i decides the round.
// tokens must already be in [0, V). Probability rows (logits false) are refused for NaN only;
// logits rows (the warping ops at temperature 0) also for +inf and for no finite value, as
// warp_row refuses them at any temperature: told by the argmax's own value (Note [Greedy
// logits rows] in rounds.cpp), so no extra pass.
Outcome verify_greedy_round(const KernelTable& kt, Rows target, const int64_t* tokens,
                            int64_t k, int64_t vocab, bool logits = false);

// Note [One-hot drafts]
// A draft without rows (draft.data == nullptr) is the one-hot draft q_i = onehot(t_i),
// Q_i = 1. Token-wise, t_i is accepted iff u_i * P_i < p_i(t_i); on rejection the residual
// max(0, p_i - onehot * P_i) is p_i without t_i, drawn with u_K from p_i's block masses
// after t_i's block is summed again with t_i as +0.0 (the same kernel, so the same bits on
// every path): one pass over each target row, none over the draft.

// Note [Block verification]
// Sun et al., "Block Verification Accelerates Speculative Decoding" (ICLR 2025). On
// normalised rows p_n = target row n / P_n, q_n = draft row n / Q_n, with rho_0 = 1:
//   rho_n = min(1, rho_{n-1} * p_{n-1}(t_{n-1}) / q_{n-1}(t_{n-1}))          n = 1..K
//   h_n = Z_n / (Z_n + 1 - rho_n), Z_n = sum_x max(0, rho_n p_n(x) - q_n(x))   n = 1..K-1
//   (h_n = 1 if the denominator is 0), h_K = rho_K;
// tau = the largest n in 1..K with u_{n-1} < h_n, else 0; the round emits t_0..t_{tau-1}
// and then, drawn with u_K, a token from p_K if tau = K, else from the residual
// max(0, rho_tau p_tau - q_tau) (the ordinary residual at tau = 0). Ratios of zero are
// 0 (p(t) = 0) and infinite (q(t) = 0 < p(t)); Z_n is summed like the token-wise residual
// with factors a = 2^s rho / P, b = 2^s / Q, and taken as 0 when rho_n < 2^-200 (h_n
// below 2^-200). One-hot drafts: rho_n = min(1, rho_{n-1} p_{n-1}(t_{n-1})),
// Z_n = rho_n (1 - p_n(t_n)) and the residual is p_tau without t_tau. The round reads
// every row (no early exit), keeps K+1 uniforms, and its law is the target's.
//
// Note [Bounded blocks]
// Block verification reads every row and used to read each exactly: the canonical P_n,
// Q_n, the residual's mass Z_n at every position, the last row's masses. Like Note [Bounded
// rejection], each of them is needed only through comparisons. On float32 probability rows
// the round is first run on intervals: P_n and Q_n from float32 block sums
// (bounded_mass_range); rho_n, Z_n and h_n as ranges of the real functions the exact code
// rounds (rho monotone in P and Q, h = Z / (Z + 1 - rho) increasing in Z and rho), each
// widened by 2^-48 for the float64 roundings of both sides; Z_n from the residual summed
// at factors guessed from the ranges, with guess_block_err's margins (bounded_mass_range
// with block errors); 0 and 1 where the exact code's branches make them so exactly
// (rho = 0, p(t) = 0, q(t) = 0, rho < 2^-200). Each u_{n-1} < h_n must be certain, and so
// must u_{K-1} < rho_K; the last draw (row K, or the residual at tau, or p_tau without
// t_tau) is bounded_sample_index's. If anything is not certain, or a row cannot be vouched
// for, block_round runs on the canonical masses from the start, so every result keeps its
// bits. A round then costs a float32 read of every row, one of the residual at positions
// 1..K-1 (and at 0 if tau = 0), and the draw's block.
enum class Method : int { kToken = 0, kBlock = 1 };

// Rejection sampling with the given uniforms u[0..k] (each in [0, 1)); draft.data ==
// nullptr for one-hot drafts (Note [One-hot drafts]). Token-wise, it reads target rows
// 0..i and draft rows 0..min(i, k-1) only, where i decides the round; block verification
// reads every row.
Outcome accept_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                     const double* uniforms, int64_t k, int64_t vocab,
                     Method method = Method::kToken);

// Note [Weight upper bounds]: an upper bound on the canonical mass of row x's weights
// exp_nonpositive(x / temperature - z_max) (n logits, temperature > 0), and z_max = max x /
// temperature; false (nothing bounded) if the path has no row_upper_weight_sums, the row is
// malformed (NaN, +inf, no finite value), or |z_max| > 2^20.
// z_max_known: *z_max already holds max x / temperature of this (well-formed) row.
bool weight_mass_upper(const KernelTable& kt, const float* x, int64_t n, float temperature, double* upper,
                       float* z_max, double* lower = nullptr, bool z_max_known = false);

// Note [Shifted upper bounds]: weight_mass_upper's bounds and z_max (the same contract,
// z_max not known) from one pass where the path has row_argmax_upper_weight_sums, else from
// weight_mass_upper's two.
bool weight_mass_bounds_one_pass(const KernelTable& kt, const float* x, int64_t n, float temperature, double* upper,
                                 float* z_max, double* lower = nullptr);

// Note [Top-p upper bounds]: weight_mass_upper's bounds of row x's mass, lower and upper
// (z_max: max x / temperature of this well-formed row), and an upper bound on the canonical
// mass of its weights strictly greater than w_t, from one pass; false (nothing bounded) if
// the path has no row_upper_weight_sums_above or |z_max| > 2^20.
bool top_p_mass_bounds(const KernelTable& kt, const float* x, int64_t n, float temperature, float z_max, float w_t,
                       double* lower, double* upper, double* above_upper);

// Note [Top-p upper bounds] with min-p: a lower bound on the canonical mass of row x's
// weights >= threshold (z_max as for top_p_mass_bounds), from the floats s(v) large enough
// that their weights surely reach it, and (unless row_lower is null) weight_mass_upper's
// lower bound on the row's mass from the same pass; false if the path has no
// row_upper_weight_sums_above or |z_max| > 2^20.
bool mass_at_least_lower(const KernelTable& kt, const float* x, int64_t n, float temperature, float z_max,
                         float threshold, double* lower, double* row_lower = nullptr);

// How many draws on this thread Note [Bounded sampling] tried and left to the canonical
// masses (not certain): a test hook (the results are the same either way).
int64_t bounded_draw_fallbacks();
// How many positions on this thread Note [Top-p upper bounds] accepted: a test hook.
int64_t top_p_bounded_acceptances();
// How many tree children on this thread Note [Tree bounds] rejected from block masses alone:
// a test hook.
int64_t tree_block_rejections();
// How many logits tree nodes on this thread were decided from Note [Weight upper bounds]'
// passes alone (no approximate weights): a test hook.
int64_t tree_cheap_nodes();
// How many draws on this thread Note [Coarse draws] decided from the block bounds of Note
// [Weight upper bounds] alone (no approximate weights): a test hook.
int64_t coarse_draws();

// ---- warping (warp.cpp): Note [Warping] on raw rows -------------------------------------
// A warped row: r(v) in `values` (n floats), its block masses and its mass. A row left
// lazy (warp_row_lazy) holds r(v) = values[v] >= floor ? values[v] : +0.0: the weights
// below the final threshold are still in `values` (floor = +0.0: none, values is r).
struct WarpedRow {
  float* values;
  double* blocks;
  double mass;
  float floor = 0.0f;
};
// min-p's threshold on the weights (Note [Warping] 5: w(v) >= min_p as reals): the smallest
// float >= min_p.
float min_p_threshold(double min_p);

// Warps logits row x (n values) into out (buffers of n floats and num_blocks(n) doubles,
// owned by the caller). params.temperature > 0. Returns kNone, or the error of a malformed
// row (kNaN, kInfinite for +inf, kNoFinite, kOverflow) with its column and value.
Outcome warp_row(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                 WarpedRow* out);
// warp_row without its last pass: the values below the final threshold are left in
// out->values and out->floor says where r starts (its masses are r's all the same). A
// round that reads few values of a row (a draw, an acceptance test) never needs that pass.
Outcome warp_row_lazy(const KernelTable& kt, const float* x, int64_t n, const WarpParams& params,
                      WarpedRow* out);
// How many top-p cutoffs on this thread Note [Refined mass range] decided (the first range
// could not): a test hook (the results are the same either way).
int64_t refined_top_p_cutoffs();
// Forgets the bounded top-p misses seen on this thread, so that the next rows try the bounds
// (warp_row_lazy skips them for a while after two misses in a row): a test hook.
void forget_top_p_misses();
// The pass warp_row_lazy left out: values[v] < floor become +0.0 (nothing if floor <= 0).
void materialize(const KernelTable& kt, float* values, int64_t n, float floor);

// Note [Draft bounds]
// A sampled round warps each draft row twice: `sample` draws the draft token from it, and
// accept_logits warps it again to test the token. sample_round can hand over what the test
// needs instead: the warped weight q(t) of the token it drew (exact, Note [One exp]'s bits)
// and a range [lo, hi] holding the warped row's canonical mass Q (lo = hi = Q where the row
// was warped exactly; Note [Bounded warping]'s range where the draw was decided from the
// weight bounds). Given them, accept_logits_round tests position i as
// u q(t) P < p(t) lo, which then holds for every Q in the range and so for the exact rule
// (each side rounded monotonically), reading only the target row (its bounds at
// temperature only, else its warp); a position that does not pass is decided as without
// them, the draft row read, and the handed-over values checked against it: q(t) bit for
// bit and Q inside [lo, hi], else kDraftBounds for that draft row. So with bounds from
// sample_round on the same rows and parameters every outcome is the same as without them;
// an acceptance from values made up otherwise goes unnoticed (the contract of the ops).
// Block verification reads every row anyway and leaves them unused.
// lo and hi from weight bounds are the one path-dependent output: row_weight_sums adds its
// float32 sums in each path's lane order, so their last bits may differ between paths (q(t),
// the token and lo == hi do not); every path's range holds the same Q and decides only what
// the exact rule would, so outcomes do not depend on the path that made the bounds.
struct DraftBound {
  float weight = 0.0f;
  double lo = 0.0, hi = 0.0;
};

// One token from warped logits row x with uniform u in [0, 1); temperature 0: the argmax
// (with bound {1, 1, 1}: the one-hot row greedy rounds verify). With bound non-null, the
// token's Note [Draft bounds].
Outcome sample_round(const KernelTable& kt, RowRef x, int64_t n, const WarpParams& params,
                     double u, DraftBound* bound = nullptr);

// accept_round on the warped rows of target and draft logits (temperature > 0; draft.data
// == nullptr for one-hot drafts), warped as they are read: token-wise, rows after the
// deciding position are never read.
// bounds (k of them, or null): the draft rows' Note [Draft bounds], token-wise only.
Outcome accept_logits_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                            const double* uniforms, int64_t k, int64_t vocab,
                            const WarpParams& params, Method method = Method::kToken,
                            const DraftBound* bounds = nullptr);

// Note [Tree verification]
// A tree of n draft nodes in topological order: tokens[j], parents[j] in [-1, j) (-1: a
// child of the root). Target row 0 is the distribution after the verified prefix, row j + 1
// after the path to node j; draft rows likewise (row j + 1: the distribution node j's
// children were drawn from), when given. Children are tried in index order; uniform u_j
// decides node j when it is tried, u_n draws the emitted token (n + 1 in all).
// - greedy: follow the first child holding the argmax of the current row; emit the argmax
//   of the row where it stops.
// - deterministic children (no draft rows; sibling tokens distinct): r = the current row;
//   child c is accepted iff u_c * mass(r) < r(t_c), else t_c is removed from r (its block
//   summed again without it); all rejected: draw from r.
// - independent children (draft rows q; repeats allowed, SpecInfer's rule): r = the current
//   row; child c is accepted iff u_c * q(t_c) * mass(r) < r(t_c) * Q, else
//   r = max(0, r / mass(r) - q / Q), stored scaled as in Note [Residual in float32]; all
//   rejected: draw from r (from the r before, if rounding left the new one no mass).
// A chain (one child per node) is accept_round (one-hot without draft rows) with the same
// uniforms, bit for bit. Only the rows of the nodes whose children are tried are read
// (and the row of the node the path ends at). The independent rule skips its float64 passes
// where float32 bounds already decide (Note [Tree bounds]); the outcome is the same.

// Note [Tree bounds]
// The independent rule needs a canonical mass only to compare with it, or to define the
// next residual's factors. Bounds decide a comparison whenever it is certain: the exact
// test u * q(t) * M < r(t) * Q is evaluated in float64 with roundings that are monotone, so
// it holds if it holds with M raised to an upper bound and Q lowered to a lower bound (and
// fails if it fails the other way round). On probability rows in float32 (rounds.cpp,
// ProbRows::bounded_node and ChainBounds):
// - A node first sums its rows in float32 blocks (Note [Bounded sampling]; with the sums of
//   max(0, p - q) in the same pass where the node will likely need them), which bound P and
//   Q. With every mass in [2^-120, 2^120] the residual scale is 2^0, so a_1 = 1 / P,
//   a_k = 1 / M_{k-1} and b = 1 / Q, each a quotient rounded once to float32 (through
//   float64): monotone in the mass. r_k(v) = max(0, r_{k-1}(v) * a_k - q(v) * b) is monotone
//   in r_{k-1}(v), a_k and b, so r_k(t) lies between the chains of p(t) through the
//   factors' lower and upper ends. Always a_k * M_{k-1} <= 1 + 2^-22, so every M_k <=
//   ceiling = (1 + 2^-22)(1 + 2^-20 + n 2^-50) + n 2^-149 and a_k >= 1 / ceiling.
// - The node's children are then decided in order: the first by the bounds on P and Q; a
//   later one whose upper r_k(t) is 0 (a token p gives 0, or one the residual has dropped,
//   q(t) / Q >= p(t) / P for certain) is rejected whatever the masses; one whose lower
//   r_k(t) makes u * q(t) * ceiling < r_k(t) * lower Q is accepted with no pass. Otherwise
//   M_1 .. M_k are bounded by summing each residual once in float32 blocks at factors
//   guessed inside their ranges: in real arithmetic r_k(v) = max(0, p(v) A_k - q(v) B_k)
//   with A_k = a_1 ... a_k and B_k = B_{k-1} a_k + b, so the sums at guessed (A, B) carry,
//   per block, the factors' distance times the block's masses of p and q, and the chain's
//   rounding, 2^-23 (1 + 2^-17) (k A_k p + B_k q) per value (guess_block_err); each M_k's
//   range bounds a_{k+1}, and the child is decided against the range of M_k where certain.
//   Every child rejected: the draw from the last residual by bounded_sample_index on the
//   guessed values with those margins (`approximate`). A decision needs every M_k before it
//   certainly in [2^-120, 2^120] (summed, or the accepted token's lower r_k(t) above 2^-120):
//   the exact rule then takes the same steps. Anything uncertain reads the node exactly.
// - Before that pass, a later child is tried against lower bounds on M_1 .. M_j from the
//   node's block sums alone (ChainBounds::block_lower): a block's sum of r_k is at least
//   max(0, a_k (its sum of r_{k-1}) - b (its sum of q)) with the roundings' margins, since a
//   sum of max(0, .) is at least the max of the sum. Rejected where u q(t) M_j,lo >= upper
//   r_j(t) Q_hi, with no pass; each level known also bounds a_{j+1} from above for the
//   children after. Tight where p and q differ block by block (a draft unrelated to the
//   target: a rejected token the first residual keeps then costs nothing more); where they
//   differ only inside blocks (a good draft) it bounds little and the pass follows.
// - The margins grow with each chained level (the per-block bound counts all of q, also
//   where the residual is clamped to 0), so past five or so rejections of tokens the
//   residual keeps, ranges get too wide to decide and the node is read exactly.
// - On logits at temperature only (Note [Bounded warping]) the same, with the approximate
//   weights (stored by the pass that sums them) in place of p and q: their block sums bound
//   P and Q, the children's values are the exact weights at their tokens, and the residual
//   sums over the approximate weights carry each weight's kApproxWeightBound in their
//   margins. Top-k, top-p and min-p rows are warped and read exactly.
// - Read exactly, a node sums each rejected child's residual exactly (residual_store) only
//   where the next step needs its mass to define the residual after it. Before the last
//   step at the node, the residual's float32 block sums (or the sums of max(0, p - q) guessed
//   during the pair pass, factors near 1) decide it where certain: the next sibling
//   accepted against an upper bound on the residual's mass (bounded_mass_upper, or the
//   ceiling a * M without a pass), or, with no sibling left, the draw by bounded_sample_index.
// - A leaf's bonus token is drawn from float32 block sums (Note [Bounded sampling]).
// Every answer is the exact rule's, bit for bit, on every path; only the time changes. The
// native tests hold each path to the scalar path with every bound switched off, with
// uniforms at the first and later children's boundaries, and so a path whose float32 sums
// are as far from exact as their contract allows (adversarial_kernels).

// Verifies a tree: the accepted path (node indices from the root down) into path (room for
// n), its length as n_accepted, the emitted token as token. params == nullptr: probability
// rows, greedy iff uniforms == nullptr; else logits rows warped by *params, greedy iff its
// temperature is 0. draft.data == nullptr: deterministic children. The caller has checked
// the tree (topological parents, tokens in range, distinct siblings without draft rows).
Outcome tree_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens, const int64_t* parents,
                   int64_t n, const double* uniforms, int64_t vocab, const WarpParams* params, int64_t* path);

// r'(v) of Note [Residual in float32]: the one definition every path reproduces.
inline float residual_value(float p, float q, float a, float b) {
  const float d = p * a - q * b;
  return d > 0.0f ? d : 0.0f;
}

// Power-of-two scaled float32 factors of Note [Residual in float32]; P, Q > 0 and finite.
// Returns s: a = 2^s / P and b = 2^s / Q rounded to float32.
int residual_scales(double P, double Q, float* a, float* b);

// ---- batches (batch.cpp): Note [Ragged batches] ----------------------------------------

// Note [Ragged batches]
// B sequences verified by one call, in vLLM's layout. cu[0..B-1] are running totals of the
// draft counts, without a leading zero: sequence b has K_b = cu[b] - cu[b-1] draft tokens
// (cu[-1] = 0), its draft tokens and draft rows are [cu[b-1], cu[b]) of the N = cu[B-1]
// draft tokens and rows, and it owns the K_b + 1 consecutive target rows starting at
// cu[b-1] + b (N + B target rows in all). num_draft = [3, 0, 2, 0, 1] gives
// cu = [3, 3, 5, 5, 6] and target rows starting at 0, 4, 5, 8, 9.
// Each sequence is one call of the single-sequence round on its rows: verify_greedy_round
// when greedy, else accept_round (probabilities) or accept_logits_round (logits) with its
// K_b + 1 uniforms, which the caller draws before any sequence runs, in batch order, K_b + 1
// per sampled sequence and none for a greedy one. So a sequence's result is that of the
// single-sequence op on its rows with the same uniforms, bit for bit, however the sequences
// are shared among threads (each thread has its own scratch: rounds.cpp, warp.cpp).
// Output row b (width >= max K_b + 1): the accepted draft tokens, the emitted token, then -1.
struct Batch {
  Rows target;            // N + B rows
  Rows draft;             // N rows; data == nullptr: one-hot drafts for every sequence
  const int64_t* tokens;  // N draft tokens, each in [0, V)
  const int64_t* cu;      // B running totals: cu[0] >= 0, non-decreasing, cu[B-1] = N
  int64_t batch;          // B
  int64_t vocab;          // V
  Method method;
  // Logits in: params[b] warps sequence b's rows, temperature 0 = greedy. Probabilities in:
  // params == nullptr and greedy[b] marks the greedy sequences (greedy == nullptr: none).
  const WarpParams* params;
  const bool* greedy;
  // Logits in: the N draft rows' Note [Draft bounds] (sequence b's start at its first draft
  // row), or none.
  const DraftBound* bounds = nullptr;
};

// Sequence b's draft count, its first draft row (and token) and its first target row.
inline int64_t batch_k(const Batch& in, int64_t b) { return in.cu[b] - (b > 0 ? in.cu[b - 1] : 0); }
inline int64_t batch_draft_begin(const Batch& in, int64_t b) { return b > 0 ? in.cu[b - 1] : 0; }
inline int64_t batch_target_begin(const Batch& in, int64_t b) { return batch_draft_begin(in, b) + b; }
inline bool batch_greedy(const Batch& in, int64_t b) {
  return in.params != nullptr ? in.params[b].temperature == 0.0f : in.greedy != nullptr && in.greedy[b];
}

// Where each sequence's uniforms start in the batch's array (uniform_begin[b], -1 for a
// greedy sequence), in batch order; returns how many uniforms the batch takes.
int64_t batch_uniform_offsets(const Batch& in, int64_t* uniform_begin);

// The elements the batch may read (every row of each sequence that is not decided early),
// weighted by a rough relative cost of the read (an argmax is 1, a warp with top-k 50): what
// the caller weighs against the cost of waking threads. Results never depend on it.
int64_t batch_cost(const Batch& in);

// The first malformed row met while running sequences: the sequence and the round's
// Outcome, its row counted in the whole tensor (target: N + B rows, draft: N).
struct BatchFailure {
  int64_t sequence = -1;  // -1: none
  Outcome outcome;
};

// Runs the batch's sequences with the uniforms laid out by batch_uniform_offsets, writing
// out[b * width .. b * width + width) and num_accepted[b] for each. next == nullptr: every
// sequence in order, on this thread. Otherwise the sequences are shared among the threads
// that call run_batch with the same counter (from 0): each claims the next unclaimed
// sequence until none is left, so the threads balance by the work the sequences turn out
// to take. A thread stops at the first malformed row it meets and returns it (the outputs
// of that sequence, and of sequences nobody ran, are then unspecified). Every sequence
// before a failing one was claimed before it and runs to its end, so the failure with the
// lowest sequence over all threads is the one a single thread meets first.
BatchFailure run_batch(const KernelTable& kt, const Batch& in, const double* uniforms,
                       const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* num_accepted,
                       std::atomic<int64_t>* next = nullptr);

// run_batch on `threads` threads (at most B): this one and workers of a pool kept for the
// process (Note [Batch threads] in batch.cpp), sharing one counter; the failure of the
// lowest sequence over all of them. threads <= 1, or a pool busy with another call's batch:
// run_batch in order on this thread.
BatchFailure run_batch_threads(const KernelTable& kt, const Batch& in, const double* uniforms,
                               const int64_t* uniform_begin, int64_t width, int64_t* out,
                               int64_t* num_accepted, int64_t threads);

}  // namespace spec_verify
