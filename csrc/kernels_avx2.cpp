// x86-64 AVX2 path. (Filled in by the SIMD work; until then this build has no AVX2 path.)
#include "spec_verify.h"

namespace spec_verify {
const KernelTable* avx2_kernels() { return nullptr; }
}  // namespace spec_verify
