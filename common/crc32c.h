// CRC-32C: the Castagnoli CRC (reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF), the
// checksum used by iSCSI, ext4, RocksDB, LevelDB and TFRecord. Crc32c("123456789") == 0xE3069283.
//
// On x86-64 CPUs with SSE4.2 the CRC32 instruction is used (three interleaved streams for large inputs), chosen
// once at run time; elsewhere a portable slicing-by-8 table implementation. Both give identical results.
//
// Thread-safe: everything here is a pure function (Crc32cOfFile only reads the file it is given).
#ifndef KESTREL_COMMON_CRC32C_H_
#define KESTREL_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kestrel {

// The CRC-32C of (the bytes whose CRC-32C is `crc`) followed by data[0, n). Start with crc = 0, so that
// Crc32cExtend(Crc32cExtend(0, a, na), b, nb) == CRC-32C of a||b. data may be null when n == 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// The CRC-32C of `s`.
inline uint32_t Crc32c(absl::string_view s) { return Crc32cExtend(0, s.data(), s.size()); }

// For tests and benchmarks: the same function as Crc32cExtend, always computed by the portable table-driven
// code, so the hardware path can be checked against it. Production code should call Crc32cExtend.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

// Whether Crc32cExtend uses the SSE4.2 CRC32 instruction on this machine (for logs and tests).
bool Crc32cIsHardwareAccelerated();

// LevelDB/TFRecord masking, for CRCs stored next to the data they cover (a CRC of a string that itself contains
// CRCs is weak): ((crc >> 15) | (crc << 17)) + 0xa282ead8. Crc32cUnmask(Crc32cMask(x)) == x for every x.
uint32_t Crc32cMask(uint32_t crc);
uint32_t Crc32cUnmask(uint32_t masked);

struct FileCrc {
  uint32_t crc = 0;   // CRC-32C of the whole file (unmasked)
  uint64_t size = 0;  // bytes read
};

// Streams the file at `path` in 1 MiB chunks and returns its CRC-32C and size. Errors name the path and the
// errno text: NotFound when it does not exist, otherwise the code absl::ErrnoToStatus gives (e.g.
// PermissionDenied, FailedPrecondition for a directory).
[[nodiscard]] absl::StatusOr<FileCrc> Crc32cOfFile(const std::string& path);

}  // namespace kestrel

#endif  // KESTREL_COMMON_CRC32C_H_
