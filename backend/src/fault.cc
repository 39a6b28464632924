#include "fault.h"

#include <cstdlib>
#include <stdexcept>

namespace bertserve::fault {
namespace {

constexpr std::string_view kPrefix = "bertserve-fault:";

// The points, each where an exception used to escape or lose its request:
//   execute  InstanceState::Execute, after the request is read (the catch that answers what is left)
//   respond  Pending::Respond, between creating the response and sending it
//   serve    InstanceState::ServeQueued, on the compute pool, outside the batch's own try
bool Enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("BERTSERVE_FAULT_INJECTION");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return enabled;
}

}  // namespace

std::string PointOf(std::string_view text) {
  if (!Enabled() || text.substr(0, kPrefix.size()) != kPrefix) return {};
  return std::string(text.substr(kPrefix.size()));
}

void At(std::string_view requested, const char* point) {
  if (!requested.empty() && requested == point) throw std::runtime_error(std::string("injected fault at ") + point);
}

}  // namespace bertserve::fault
