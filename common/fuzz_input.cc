// FuzzInput/FuzzOutput framing, FUZZ_CHECK's failure report and the scratch directory (see fuzz_input.h).
#include "common/fuzz_input.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace kestrel {

void FuzzCheckFailed(const char* file, int line, const char* cond, absl::string_view message) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s %.*s\n", file, line, cond, static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

uint64_t FuzzInput::Little(int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes && pos_ < size_; ++i) v |= static_cast<uint64_t>(data_[pos_++]) << (8 * i);
  return v;
}

std::string FuzzInput::Bytes() {
  const size_t length = U16();  // read before remaining() is taken
  const size_t n = std::min(length, remaining());
  std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
  pos_ += n;
  return s;
}

std::string FuzzInput::Rest() {
  std::string s(reinterpret_cast<const char*>(data_ + pos_), remaining());
  pos_ = size_;
  return s;
}

FuzzOutput& FuzzOutput::Little(uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

FuzzOutput& FuzzOutput::Bytes(absl::string_view s) {
  s = s.substr(0, 0xffff);
  U16(static_cast<uint16_t>(s.size()));
  return Raw(s);
}

void FuzzWriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  FUZZ_CHECK(out.good(), "cannot write a fuzz input's file");
}

namespace {

std::string* MakeScratchDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = std::string(base) + "/kestrel-fuzz-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  auto* dir = new std::string(pattern);
  std::atexit([] {
    std::error_code error;
    std::filesystem::remove_all(FuzzScratchDir(), error);
  });
  return dir;
}

}  // namespace

const std::string& FuzzScratchDir() {
  static const std::string* dir = MakeScratchDir();
  return *dir;
}

}  // namespace kestrel
