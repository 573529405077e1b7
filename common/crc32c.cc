#include "common/crc32c.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KESTREL_CRC32C_X86 1
#include <nmmintrin.h>
#else
#define KESTREL_CRC32C_X86 0
#endif

namespace kestrel {
namespace {

// All the internal functions work on the "raw" register: the CRC with the initial/final inversion removed.
// On it, appending bytes is linear over GF(2) in (register, data), which the three-stream path relies on.
constexpr uint32_t kPoly = 0x82F63B78u;  // x^32 + ... reflected (Castagnoli)
constexpr uint32_t kMaskDelta = 0xa282ead8u;

// Slicing-by-8 tables: t[0] is the classic byte table (register after one byte); t[k][i] is the register
// after byte i followed by k zero bytes.
struct SliceTables {
  uint32_t t[8][256];
};

constexpr SliceTables MakeSliceTables() {
  SliceTables r{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ kPoly : (c >> 1);
    r.t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int i = 0; i < 256; ++i) {
      const uint32_t prev = r.t[k - 1][i];
      r.t[k][i] = (prev >> 8) ^ r.t[0][prev & 0xff];
    }
  }
  return r;
}

constexpr SliceTables kSlice = MakeSliceTables();
static_assert(kSlice.t[0][1] == 0xF26B8303u, "CRC-32C byte table");

inline uint32_t PortableByte(uint32_t r, uint8_t b) { return kSlice.t[0][(r ^ b) & 0xff] ^ (r >> 8); }

uint32_t PortableRaw(uint32_t r, const uint8_t* p, size_t n) {
  // Bytes are assembled explicitly, so this is independent of endianness and alignment.
  while (n >= 8) {
    const uint32_t lo = r ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    const uint32_t hi = uint32_t{p[4]} | uint32_t{p[5]} << 8 | uint32_t{p[6]} << 16 | uint32_t{p[7]} << 24;
    r = kSlice.t[7][lo & 0xff] ^ kSlice.t[6][(lo >> 8) & 0xff] ^ kSlice.t[5][(lo >> 16) & 0xff] ^
        kSlice.t[4][lo >> 24] ^ kSlice.t[3][hi & 0xff] ^ kSlice.t[2][(hi >> 8) & 0xff] ^
        kSlice.t[1][(hi >> 16) & 0xff] ^ kSlice.t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) r = PortableByte(r, *p++);
  return r;
}

#if KESTREL_CRC32C_X86

// The three-stream path splits a run of 3*L bytes into A, B, C, computes raw(A, r), raw(B, 0), raw(C, 0) in
// parallel (the CRC32 instruction has a latency of 3 cycles but a throughput of 1 per cycle), then combines:
//   raw(X || Y, s) = Shift_|Y|(raw(X, s)) ^ raw(Y, 0)
// where Shift_L(x) is the register after feeding L zero bytes starting from x, a linear map on 32 bits that is
// tabulated per input byte.
constexpr size_t kLongBlock = 8192;  // per stream; 24 KiB per round
constexpr size_t kShortBlock = 256;  // per stream; 768 bytes per round

struct ShiftTable {
  uint32_t t[4][256];
};

ShiftTable MakeShiftTable(size_t zero_bytes) {
  // Images of the 32 basis vectors, then every byte value by linearity.
  uint32_t basis[32];
  for (int i = 0; i < 32; ++i) {
    uint32_t r = uint32_t{1} << i;
    for (size_t z = 0; z < zero_bytes; ++z) r = PortableByte(r, 0);
    basis[i] = r;
  }
  ShiftTable s{};
  for (int k = 0; k < 4; ++k) {
    for (int v = 0; v < 256; ++v) {
      uint32_t x = 0;
      for (int b = 0; b < 8; ++b) {
        if (v & (1 << b)) x ^= basis[8 * k + b];
      }
      s.t[k][v] = x;
    }
  }
  return s;
}

inline uint32_t ApplyShift(const ShiftTable& s, uint32_t x) {
  return s.t[0][x & 0xff] ^ s.t[1][(x >> 8) & 0xff] ^ s.t[2][(x >> 16) & 0xff] ^ s.t[3][x >> 24];
}

struct ShiftTables {
  ShiftTable long_block = MakeShiftTable(kLongBlock);
  ShiftTable short_block = MakeShiftTable(kShortBlock);
};

const ShiftTables& GetShiftTables() {
  static const ShiftTables* const tables = new ShiftTables();
  return *tables;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // x86 is little-endian, which is the byte order CRC32 expects
  return v;
}

// Raw register after 3 * block bytes at p, starting from r.
__attribute__((target("sse4.2"))) inline uint32_t HwThreeStreams(uint32_t r, const uint8_t* p, size_t block,
                                                                  const ShiftTable& shift) {
  const uint8_t* a = p;
  const uint8_t* b = p + block;
  const uint8_t* c = p + 2 * block;
  uint64_t ca = r;
  uint64_t cb = 0;
  uint64_t cc = 0;
  for (size_t i = 0; i < block; i += 8) {
    ca = _mm_crc32_u64(ca, Load64(a + i));
    cb = _mm_crc32_u64(cb, Load64(b + i));
    cc = _mm_crc32_u64(cc, Load64(c + i));
  }
  const uint32_t ab = ApplyShift(shift, static_cast<uint32_t>(ca)) ^ static_cast<uint32_t>(cb);
  return ApplyShift(shift, ab) ^ static_cast<uint32_t>(cc);
}

__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t r, const uint8_t* p, size_t n) {
  // Head: single bytes up to 8-byte alignment.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    r = _mm_crc32_u8(r, *p++);
    --n;
  }
  if (n >= 3 * kShortBlock) {
    const ShiftTables& tables = GetShiftTables();
    while (n >= 3 * kLongBlock) {
      r = HwThreeStreams(r, p, kLongBlock, tables.long_block);
      p += 3 * kLongBlock;
      n -= 3 * kLongBlock;
    }
    while (n >= 3 * kShortBlock) {
      r = HwThreeStreams(r, p, kShortBlock, tables.short_block);
      p += 3 * kShortBlock;
      n -= 3 * kShortBlock;
    }
  }
  uint64_t r64 = r;
  while (n >= 8) {
    r64 = _mm_crc32_u64(r64, Load64(p));
    p += 8;
    n -= 8;
  }
  r = static_cast<uint32_t>(r64);
  while (n-- > 0) r = _mm_crc32_u8(r, *p++);
  return r;
}

bool CpuHasSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

#endif  // KESTREL_CRC32C_X86

using RawFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

RawFn ChooseRaw() {
#if KESTREL_CRC32C_X86
  if (CpuHasSse42()) {
    GetShiftTables();  // build them now rather than on the first large input
    return HardwareRaw;
  }
#endif
  return PortableRaw;
}

RawFn GetRaw() {
  static const RawFn fn = ChooseRaw();
  return fn;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;
  return ~GetRaw()(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;
  return ~PortableRaw(~crc, static_cast<const uint8_t*>(data), n);
}

bool Crc32cIsHardwareAccelerated() { return GetRaw() != PortableRaw; }

uint32_t Crc32cMask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t Crc32cUnmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

absl::StatusOr<FileCrc> Crc32cOfFile(const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("Crc32cOfFile: cannot open ", path));

  constexpr size_t kChunk = size_t{1} << 20;
  std::unique_ptr<char[]> buf(new char[kChunk]);  // reused for every chunk
  FileCrc result;
  while (true) {
    const ssize_t got = read(fd, buf.get(), kChunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("Crc32cOfFile: cannot read ", path));
    }
    if (got == 0) break;
    result.crc = Crc32cExtend(result.crc, buf.get(), static_cast<size_t>(got));
    result.size += static_cast<uint64_t>(got);
  }
  close(fd);
  return result;
}

}  // namespace kestrel
