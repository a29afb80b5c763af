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
// every field, with designated initialisers in field order (kernels_<isa>.cpp).
struct KernelTable {
  const char* name;
  // Index of the largest value, ties to the lowest index (+0.0 and -0.0 are equal).
  // Returns false if the row holds a NaN (then *index is unspecified).
  bool (*row_argmax)(const float* row, int64_t n, int64_t* index);
  // Block masses of a row (Note [Canonical mass order]) into block_mass[num_blocks(n)],
  // and the row mass into *mass. Returns false if any value is negative, NaN or infinite
  // (then the outputs are unspecified); -0.0 is allowed and counts as zero.
  bool (*row_mass)(const float* row, int64_t n, double* block_mass, double* mass);
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
  // Half values widened exactly to float32 (Note [Half rows]): IEEE binary16, bfloat16.
  void (*widen_f16)(const uint16_t* h, int64_t n, float* out);
  void (*widen_bf16)(const uint16_t* h, int64_t n, float* out);
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
enum class InputError : int { kNone = 0, kNaN, kNegative, kInfinite, kZeroMass, kNoFinite, kOverflow };

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
enum class Method : int { kToken = 0, kBlock = 1 };

// Rejection sampling with the given uniforms u[0..k] (each in [0, 1)); draft.data ==
// nullptr for one-hot drafts (Note [One-hot drafts]). Token-wise, it reads target rows
// 0..i and draft rows 0..min(i, k-1) only, where i decides the round; block verification
// reads every row.
Outcome accept_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                     const double* uniforms, int64_t k, int64_t vocab,
                     Method method = Method::kToken);

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
// The pass warp_row_lazy left out: values[v] < floor become +0.0 (nothing if floor <= 0).
void materialize(const KernelTable& kt, float* values, int64_t n, float floor);

// One token from warped logits row x with uniform u in [0, 1); temperature 0: the argmax.
Outcome sample_round(const KernelTable& kt, RowRef x, int64_t n, const WarpParams& params, double u);

// accept_round on the warped rows of target and draft logits (temperature > 0; draft.data
// == nullptr for one-hot drafts), warped as they are read: token-wise, rows after the
// deciding position are never read.
Outcome accept_logits_round(const KernelTable& kt, Rows target, Rows draft, const int64_t* tokens,
                            const double* uniforms, int64_t k, int64_t vocab,
                            const WarpParams& params, Method method = Method::kToken);

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
// (and the row of the node the path ends at).

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
