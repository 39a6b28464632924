// The request parameters more than one request kind reads (request.h, task_request.h), a bad value the client's
// error. Triton glue; no torch types.
#pragma once

#include <optional>

#include "batching.h"
#include "triton_api.h"

namespace bertserve {

// Whether the request carries parameter `key`, with its type and value.
bool FindParameter(TRITONBACKEND_Request* request, const char* key, TRITONSERVER_ParameterType* type,
                   const void** value);

// The `truncate` request parameter: true (the default) or false (refuse a text too long to keep), as a boolean,
// 0 or 1, or one of "true", "false", "True", "False", "1", "0"; anything else is the client's error. Leaves
// `truncate` as it is when the request does not send it.
std::optional<RequestError> ReadTruncate(TRITONBACKEND_Request* request, bool* truncate);

}  // namespace bertserve
