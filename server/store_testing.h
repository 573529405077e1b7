// Working stores for the server package's unit tests: a fresh directory per test, and an empty RocksDB in it.
#ifndef KESTREL_SERVER_STORE_TESTING_H_
#define KESTREL_SERVER_STORE_TESTING_H_

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"

namespace kestrel {

// An empty directory of the running test's own: <test tmpdir>/<prefix>_<test name>.
inline std::string FreshTestDir(absl::string_view prefix) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/", prefix, "_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A RocksDB created at `dir` (and the directories above it; `dir` must not hold one) with default options; null,
// and a test failure, if it cannot be opened.
inline std::unique_ptr<rocksdb::DB> OpenTestStore(const std::string& dir) {
  std::filesystem::create_directories(dir);
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened = rocksdb::DB::Open(options, dir, &raw);
  EXPECT_TRUE(opened.ok()) << dir << ": " << opened.ToString();
  return std::unique_ptr<rocksdb::DB>(raw);
}

}  // namespace kestrel

#endif  // KESTREL_SERVER_STORE_TESTING_H_
