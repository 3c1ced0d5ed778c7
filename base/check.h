// LMF_CHECK: invariants of the program itself (not user input: user input gets an absl::Status that names
// the file or field). A failed check prints the condition, the place and an optional message, then aborts.
//
//   LMF_CHECK(n % heads == 0) << "n=" << n;
//   LMF_CHECK_EQ(a.size(), b.size());
#ifndef LMFORGE_BASE_CHECK_H_
#define LMFORGE_BASE_CHECK_H_

#include <sstream>

namespace lmf::internal {

// Collects the message of a failed check and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream << ...` type-check: & binds looser than <<.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace lmf::internal

#define LMF_CHECK(condition) \
  (condition) ? (void)0      \
              : ::lmf::internal::Voidify() & ::lmf::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define LMF_CHECK_OP(a, op, b) \
  LMF_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define LMF_CHECK_EQ(a, b) LMF_CHECK_OP(a, ==, b)
#define LMF_CHECK_NE(a, b) LMF_CHECK_OP(a, !=, b)
#define LMF_CHECK_LT(a, b) LMF_CHECK_OP(a, <, b)
#define LMF_CHECK_LE(a, b) LMF_CHECK_OP(a, <=, b)
#define LMF_CHECK_GT(a, b) LMF_CHECK_OP(a, >, b)
#define LMF_CHECK_GE(a, b) LMF_CHECK_OP(a, >=, b)

#endif  // LMFORGE_BASE_CHECK_H_
