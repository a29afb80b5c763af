// libstdc++ members that GCC 12's C++20 headers call out of line but that manylinux_2_28's
// libstdc++ (symbol versions up to GLIBCXX_3.4.24) does not export. Each is instantiated here
// from the header's own inline definition, and scripts/manylinux/exports.map keeps it local
// to the extension: the library then carries its own copy instead of requiring a newer
// libstdc++ at load time. This is what the manylinux toolchains themselves do (gcc-toolset's
// libstdc++_nonshared.a links the members newer than the system's libstdc++ into each
// binary; torch's own x86-64 libraries carry this very member that way).
//
// Only what the extension references is listed; `make test` checks every variant against
// manylinux_2_28 (scripts/abi_check.py), so a new reference fails there with its name.
#include <sstream>

// std::basic_stringbuf<char>::str() const & (GLIBCXX_3.4.29, GCC 11): C++20's
// lvalue-qualified str(), which std::ostringstream::str() (c10::str, TORCH_CHECK's messages)
// calls.
template std::string std::stringbuf::str() const &;

// The stable-ABI binding (torch-ext/stable/) and the stable headers' STD_TORCH_CHECK build
// their messages in std::ostringstream / std::stringstream too, which references three more:
// std::basic_stringbuf<char>::str() && (GLIBCXX_3.4.29, C++20's rvalue str()), the default
// constructors of std::ostringstream and std::stringstream (GLIBCXX_3.4.26: C++11's split of
// the default constructor from the one taking a mode), and std::__throw_bad_array_new_length
// (GLIBCXX_3.4.29: what GCC 12's std::allocator calls on an impossible size).
template std::string std::stringbuf::str() &&;
template std::basic_ostringstream<char>::basic_ostringstream();
template std::basic_stringstream<char>::basic_stringstream();

#include <new>

namespace std {
// As libstdc++'s functexcept.cc defines it.
[[noreturn]] void __throw_bad_array_new_length() { throw std::bad_array_new_length(); }
}  // namespace std
