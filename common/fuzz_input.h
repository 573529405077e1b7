// Helpers shared by Kestrel's fuzz targets (the *_fuzz.cc files, each a LLVMFuzzerTestOneInput) and the seed
// corpus generator (tests/fuzz_seeds.cc).
//
// FuzzInput reads a fuzz input front to back as little-endian integers and length-prefixed byte strings;
// past the end it reads zeros and empty strings, so every byte sequence is a valid input. FuzzOutput writes the
// same framing, so the seed generator can make inputs that decode to meaningful operations. FUZZ_CHECK aborts
// with a message when an invariant does not hold: libFuzzer reports it as a crash and saves the input, and the
// corpus replay test (common/fuzz_replay_main.cc) fails. FuzzScratchDir() gives file-based targets a private
// temporary directory.
//
// Built with both toolchains: gcc for the replay tests, clang with -fsanitize=fuzzer for scripts/fuzz.sh.
#ifndef KESTREL_COMMON_FUZZ_INPUT_H_
#define KESTREL_COMMON_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"

// Aborts (a crash to libFuzzer, a failure to the replay test) when `cond` is false.
#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) ::kestrel::FuzzCheckFailed(__FILE__, __LINE__, #cond, "" __VA_ARGS__); \
  } while (0)

namespace kestrel {

[[noreturn]] void FuzzCheckFailed(const char* file, int line, const char* cond, absl::string_view message);

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t U8() { return static_cast<uint8_t>(Little(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Little(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Little(4)); }
  uint64_t U64() { return Little(8); }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  bool Bool() { return (U8() & 1) != 0; }
  // A byte string of U16() bytes (clipped to what remains).
  std::string Bytes();
  // Everything not read yet.
  std::string Rest();

 private:
  uint64_t Little(int bytes);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Writes what FuzzInput reads.
class FuzzOutput {
 public:
  FuzzOutput& U8(uint8_t v) { return Little(v, 1); }
  FuzzOutput& U16(uint16_t v) { return Little(v, 2); }
  FuzzOutput& U32(uint32_t v) { return Little(v, 4); }
  FuzzOutput& U64(uint64_t v) { return Little(v, 8); }
  FuzzOutput& I64(int64_t v) { return Little(static_cast<uint64_t>(v), 8); }
  // A byte string as FuzzInput::Bytes reads it (at most 65535 bytes; longer ones are cut).
  FuzzOutput& Bytes(absl::string_view s);
  FuzzOutput& Raw(absl::string_view s) {
    out_.append(s.data(), s.size());
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  FuzzOutput& Little(uint64_t v, int bytes);

  std::string out_;
};

// Writes `contents` to `path` (replacing it); aborts when it cannot.
void FuzzWriteFile(const std::string& path, absl::string_view contents);

// A directory private to this process, created on first use under $TEST_TMPDIR (Bazel tests), else $TMPDIR or
// /tmp, and removed at exit. File-based targets write each input below it and clean up after themselves.
const std::string& FuzzScratchDir();

}  // namespace kestrel

#endif  // KESTREL_COMMON_FUZZ_INPUT_H_
