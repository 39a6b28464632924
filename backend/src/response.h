// Writing a response, shared by every request kind (request.h, task_request.h): an output copied in, a failed
// output's error, and the status an error goes back with.
#pragma once

#include <cstdint>

#include "batching.h"
#include "triton_api.h"

namespace bertserve {

// One [rows, n] output of the response (`shape` holds the two dims), copied from `data`.
TRITONSERVER_Error* WriteOutput(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType dtype,
                                const int64_t* shape, const void* data, uint64_t bytes);

// A failed output allocation: the client's fault when the output shared-memory region it registered is too small
// for the result (tritonserver 2.51's frontends report that as INTERNAL, "... should be at least N bytes to hold
// the results"), else the server's.
RequestError OutputError(TRITONSERVER_Error* e);

// The status a request's error goes back with: INVALID_ARG for bad input, UNAVAILABLE for a refusal, INTERNAL.
TRITONSERVER_Error_Code CodeOf(const RequestError& e);

}  // namespace bertserve
