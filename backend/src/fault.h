// Injected faults, for the integration tests only: each error path of the backend proven to answer its client and
// keep the server up (tests/integration/test_native_faults.py).
//
// Off unless the server's environment sets BERTSERVE_FAULT_INJECTION=1; then a text request whose first TEXT element
// is "bertserve-fault:<point>" makes the backend throw at <point> (the points are listed in fault.cc). Off, each
// point costs one test of a flag read once.
#pragma once

#include <string>
#include <string_view>

namespace bertserve::fault {

// The point a request's first text names (empty when injection is off or the text names none).
std::string PointOf(std::string_view text);
// Throws std::runtime_error("injected fault at <point>") when `requested` is `point`.
void At(std::string_view requested, const char* point);

}  // namespace bertserve::fault
