#include "parameters.h"

#include <string>
#include <string_view>

#include "triton_util.h"

namespace bertserve {

bool FindParameter(TRITONBACKEND_Request* request, const char* key, TRITONSERVER_ParameterType* type,
                   const void** value) {
  uint32_t count = 0;
  Check(TRITONBACKEND_RequestParameterCount(request, &count), "request parameters");
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    Check(TRITONBACKEND_RequestParameter(request, i, &name, type, value), "request parameter");
    if (name != nullptr && *value != nullptr && std::string_view(name) == key) return true;
  }
  return false;
}

std::optional<RequestError> ReadTruncate(TRITONBACKEND_Request* request, bool* truncate) {
  TRITONSERVER_ParameterType type;
  const void* value = nullptr;
  if (FindParameter(request, "truncate", &type, &value)) {
    std::string got;
    switch (type) {
      case TRITONSERVER_PARAMETER_BOOL:
        *truncate = *static_cast<const bool*>(value);
        return std::nullopt;
      case TRITONSERVER_PARAMETER_INT: {
        const int64_t v = *static_cast<const int64_t*>(value);
        if (v == 0 || v == 1) {
          *truncate = v == 1;
          return std::nullopt;
        }
        got = std::to_string(v);
        break;
      }
      case TRITONSERVER_PARAMETER_STRING: {
        const std::string_view v(static_cast<const char*>(value));
        if (v == "true" || v == "True" || v == "1" || v == "false" || v == "False" || v == "0") {
          *truncate = v == "true" || v == "True" || v == "1";
          return std::nullopt;
        }
        got.append(1, '"').append(v.substr(0, 64)).append(1, '"');
        break;
      }
      default:
        got = "a value of another type";
    }
    return RequestError{FailureReason::kBadParameter, "truncate must be true or false, got " + got};
  }
  return std::nullopt;
}

}  // namespace bertserve
