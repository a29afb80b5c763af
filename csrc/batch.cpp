// Note [Ragged batches] (spec_verify.h): a batch of sequences, each verified by the
// single-sequence round on its own rows, on one thread or on a small pool of threads.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "spec_verify.h"

namespace spec_verify {
namespace {

// Relative cost of reading one row at a given V, for choosing how many threads are worth
// starting (results never depend on it). Single-row calls at V = 32000 on the Xeon, their
// call overhead included, took about 1 (argmax), 5 (a warp with temperature), 12 (and
// top-p) and 50 (and top-k) times the argmax call; a probability row's float64 mass pass
// costs about twice a float32 read.
int64_t row_cost(const Batch& in, int64_t b) {
  if (batch_greedy(in, b)) return 1;
  if (in.params == nullptr) return 2;
  const WarpParams& p = in.params[b];
  return p.top_k > 0 ? 50 : p.top_p < 1.0 ? 12 : 5;
}

}  // namespace

int64_t batch_cost(const Batch& in) {
  int64_t total = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    const int64_t k = batch_k(in, b);
    const bool greedy = batch_greedy(in, b);
    const int64_t rows = !greedy && in.draft.data != nullptr ? 2 * k + 1 : k + 1;
    total += rows * in.vocab * row_cost(in, b);
  }
  return total;
}

int64_t batch_uniform_offsets(const Batch& in, int64_t* uniform_begin) {
  int64_t total = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    if (batch_greedy(in, b)) {
      uniform_begin[b] = -1;
    } else {
      uniform_begin[b] = total;
      total += batch_k(in, b) + 1;
    }
  }
  return total;
}

namespace {

// Sequence b: its round, its output row and num_accepted[b]; or the malformed row it met.
BatchFailure run_sequence(const KernelTable& kt, const Batch& in, const double* uniforms,
                          const int64_t* uniform_begin, int64_t b, int64_t width, int64_t* out,
                          int64_t* num_accepted) {
  const int64_t k = batch_k(in, b);
  const int64_t first_draft = batch_draft_begin(in, b);
  const int64_t first_target = batch_target_begin(in, b);
  const Rows target{in.target.row(first_target).data, in.target.stride, in.target.type};
  const Rows draft = in.draft.data == nullptr ? Rows{nullptr, 0}
                                              : Rows{in.draft.row(first_draft).data, in.draft.stride, in.draft.type};
  const int64_t* tokens = in.tokens + first_draft;
  Outcome o;
  if (batch_greedy(in, b)) {
    o = verify_greedy_round(kt, target, tokens, k, in.vocab, in.params != nullptr);
  } else if (in.params != nullptr) {
    o = accept_logits_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab, in.params[b],
                            in.method);
  } else {
    o = accept_round(kt, target, draft, tokens, uniforms + uniform_begin[b], k, in.vocab, in.method);
  }
  BatchFailure failure;
  if (o.error != InputError::kNone) {
    failure.sequence = b;
    failure.outcome = o;
    failure.outcome.row += o.in_draft ? first_draft : first_target;
    return failure;
  }
  int64_t* row = out + b * width;
  std::copy(tokens, tokens + o.n_accepted, row);
  row[o.n_accepted] = o.token;
  std::fill(row + o.n_accepted + 1, row + width, int64_t{-1});
  num_accepted[b] = o.n_accepted;
  return failure;
}

}  // namespace

BatchFailure run_batch(const KernelTable& kt, const Batch& in, const double* uniforms,
                       const int64_t* uniform_begin, int64_t width, int64_t* out, int64_t* num_accepted,
                       std::atomic<int64_t>* next) {
  if (next == nullptr) {
    for (int64_t b = 0; b < in.batch; ++b) {
      const BatchFailure f = run_sequence(kt, in, uniforms, uniform_begin, b, width, out, num_accepted);
      if (f.sequence >= 0) return f;
    }
    return BatchFailure{};
  }
  for (int64_t b = next->fetch_add(1, std::memory_order_relaxed); b < in.batch;
       b = next->fetch_add(1, std::memory_order_relaxed)) {
    const BatchFailure f = run_sequence(kt, in, uniforms, uniform_begin, b, width, out, num_accepted);
    if (f.sequence >= 0) return f;
  }
  return BatchFailure{};
}

namespace {

// Note [Batch threads]
// A pool of worker threads for run_batch_threads, started as they are first needed and
// kept, parked, for the life of the process, so that a call pays a wake-up, not a thread
// start. Every worker takes part in every job (those beyond the threads asked for do
// nothing), so no worker ever has to decide whether a job is for it. One job at a time: a
// call that finds the pool busy (another thread's batch, or a batch inside a batch) runs
// inline instead of waiting. The pool is never destroyed (workers are still parked at exit),
// and a forked child, which has none of the parent's workers, makes a new one.
// Workers park on C++20 atomic waits (a futex, inline in libstdc++'s headers), not on a
// std::condition_variable or a mutex's try_lock, whose GCC 12 and glibc 2.34 symbol
// versions (GLIBCXX_3.4.30, GLIBC_2.34) lie beyond the manylinux_2_28 floor (README,
// "Build notes").
// Why not torch's own intra-op threads through at::parallel_for: in torch's OpenMP builds
// (the CPU wheels) at::parallel_for is an inline `#pragma omp parallel` in torch's headers,
// which runs on one thread unless the extension itself is compiled with -fopenmp, and that
// would put a second OpenMP runtime beside torch's and need flags that every build of the
// kernel (kernel-builder included) would have to carry. The caller sizes each job from
// torch's thread setting (at::get_num_threads in the binding), so torch.set_num_threads
// still decides.
struct Pool {
  std::atomic<bool> busy{false};         // set by the call that owns the pool for its job
  std::atomic<int64_t> generation{0};    // one more per job: wakes the workers
  std::atomic<int64_t> remaining{0};     // workers not finished with the current job
  const std::function<void(int64_t)>* job = nullptr;  // published by `generation`
  int64_t threads = 0;                   // of the current job, the caller included
  int64_t started = 0;                   // workers, numbered 1..started (owner only)
  pid_t pid = getpid();
};

void work(Pool* pool, int64_t index, int64_t seen) {
  for (;;) {
    pool->generation.wait(seen, std::memory_order_acquire);
    const int64_t now = pool->generation.load(std::memory_order_acquire);
    if (now == seen) continue;  // woken for nothing
    seen = now;
    if (index < pool->threads) (*pool->job)(index);
    if (pool->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) pool->remaining.notify_one();
  }
}

Pool* the_pool() {
  static std::mutex m;
  static Pool* pool = nullptr;
  std::lock_guard<std::mutex> lock(m);
  if (pool == nullptr || pool->pid != getpid()) pool = new Pool;  // never freed: see the Note
  return pool;
}

// Runs job(0) on this thread and job(1) .. job(threads - 1) on pool workers, returning when
// all have; false, without running anything, if the pool is busy.
bool run_on_threads(int64_t threads, const std::function<void(int64_t)>& job) {
  Pool* pool = the_pool();
  bool idle = false;
  if (!pool->busy.compare_exchange_strong(idle, true, std::memory_order_acquire)) return false;
  const int64_t generation = pool->generation.load(std::memory_order_relaxed);
  while (pool->started < threads - 1) std::thread(work, pool, ++pool->started, generation).detach();
  pool->job = &job;
  pool->threads = threads;
  pool->remaining.store(pool->started, std::memory_order_relaxed);
  pool->generation.store(generation + 1, std::memory_order_release);
  pool->generation.notify_all();
  job(0);
  for (int64_t left; (left = pool->remaining.load(std::memory_order_acquire)) != 0;) {
    pool->remaining.wait(left, std::memory_order_acquire);
  }
  pool->busy.store(false, std::memory_order_release);
  return true;
}

}  // namespace

BatchFailure run_batch_threads(const KernelTable& kt, const Batch& in, const double* uniforms,
                               const int64_t* uniform_begin, int64_t width, int64_t* out,
                               int64_t* num_accepted, int64_t threads) {
  threads = std::min(threads, in.batch);
  if (threads > 1) {
    std::atomic<int64_t> next{0};
    std::vector<BatchFailure> failures(static_cast<size_t>(threads));
    const std::function<void(int64_t)> job = [&](int64_t t) {
      failures[t] = run_batch(kt, in, uniforms, uniform_begin, width, out, num_accepted, &next);
    };
    if (run_on_threads(threads, job)) {
      BatchFailure first;
      for (const BatchFailure& f : failures) {
        if (f.sequence >= 0 && (first.sequence < 0 || f.sequence < first.sequence)) first = f;
      }
      return first;
    }
  }
  return run_batch(kt, in, uniforms, uniform_begin, width, out, num_accepted);
}

}  // namespace spec_verify
