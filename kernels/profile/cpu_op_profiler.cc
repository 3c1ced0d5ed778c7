// CpuOpProfiler (see cpu_op_profiler.h): the observer of kernels/core/dispatch.h appends each op's name and
// wall time; Finish sums them.
#include "kernels/profile/cpu_op_profiler.h"

#include <algorithm>
#include <atomic>

#include "kernels/core/dispatch.h"

namespace lmf::kernels {
namespace {
std::atomic<bool> cpu_profiler_active{false};
}  // namespace

absl::StatusOr<std::unique_ptr<CpuOpProfiler>> CpuOpProfiler::Start(const Context& ctx) {
  if (!ctx.device.is_cpu()) return absl::FailedPreconditionError("CpuOpProfiler: the context is not a CPU one");
  bool expected = false;
  if (!cpu_profiler_active.compare_exchange_strong(expected, true))
    return absl::FailedPreconditionError("CpuOpProfiler: another CPU profiler is active (one per process)");
  std::unique_ptr<CpuOpProfiler> profiler(new CpuOpProfiler());
  profiler->installed_ = true;  // from here the destructor releases cpu_profiler_active
  profiler->names_.reserve(1024);
  profiler->ms_.reserve(1024);
  profiler->start_ns_ = CpuOpClockNs();
  SetCpuOpObserver(&CpuOpProfiler::Observe, profiler.get());
  return profiler;
}

CpuOpProfiler::~CpuOpProfiler() { Uninstall(); }

void CpuOpProfiler::Uninstall() {
  if (!installed_) return;
  SetCpuOpObserver(nullptr, nullptr);
  installed_ = false;
  cpu_profiler_active.store(false);
}

void CpuOpProfiler::Observe(void* self, const char* op, int64_t start_ns, int64_t end_ns) {
  CpuOpProfiler* profiler = static_cast<CpuOpProfiler*>(self);
  profiler->names_.push_back(op);
  profiler->ms_.push_back(static_cast<double>(end_ns - start_ns) * 1e-6);
}

absl::StatusOr<OpProfile> CpuOpProfiler::Finish() {
  if (!installed_) return absl::FailedPreconditionError("CpuOpProfiler: Finish called twice");
  Uninstall();
  OpProfile profile;
  profile.window_ms = static_cast<double>(CpuOpClockNs() - start_ns_) * 1e-6;
  profile.ops = SumOpTimes(names_, ms_);
  double in_ops = 0;
  for (const OpTime& op : profile.ops) in_ops += op.total_ms;
  // Clock reads are ordered, so the ops (disjoint intervals inside the window) never sum past it; the max
  // only guards the subtraction's rounding.
  profile.outside_ops_ms = std::max(0.0, profile.window_ms - in_ops);
  return profile;
}

}  // namespace lmf::kernels
