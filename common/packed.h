// Packed little-endian wire arrays: keys as uint64, values as float32, carried in protobuf `bytes` fields.
//
// Kestrel runs on little-endian hosts only (x86-64, AArch64), so packing is a memcpy. A view aliases the
// string's storage when it is suitably aligned (std::string heap buffers are) and copies otherwise.
#ifndef KESTREL_COMMON_PACKED_H_
#define KESTREL_COMMON_PACKED_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/config.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

static_assert(ABSL_IS_LITTLE_ENDIAN, "Kestrel's wire format assumes a little-endian host");

namespace kestrel {

// A read-only view of a packed array. `scratch` backs the view when `bytes` is misaligned for T.
// Fails with InvalidArgument when the byte count is not a multiple of sizeof(T).
template <typename T>
[[nodiscard]] absl::StatusOr<absl::Span<const T>> UnpackView(absl::string_view bytes, absl::string_view what,
                                               std::vector<T>* scratch) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (bytes.size() % sizeof(T) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d bytes is not a whole number of %d-byte elements",
                                                      what, bytes.size(), sizeof(T)));
  }
  const size_t n = bytes.size() / sizeof(T);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) == 0) {
    return absl::Span<const T>(reinterpret_cast<const T*>(bytes.data()), n);
  }
  scratch->resize(n);
  std::memcpy(scratch->data(), bytes.data(), bytes.size());
  return absl::Span<const T>(scratch->data(), n);
}

// Resizes `out` to hold n elements of T and returns a writable pointer into it (std::string storage is
// suitably aligned for uint64/float since it is heap-allocated for any size above the small-string buffer,
// and the small buffer is aligned too on libstdc++).
template <typename T>
T* ResizePacked(std::string* out, size_t n) {
  out->resize(n * sizeof(T));
  return reinterpret_cast<T*>(out->data());
}

}  // namespace kestrel

#endif  // KESTREL_COMMON_PACKED_H_
