// Files for the data generators' tests: a scratch directory per test and a file's whole text.
#ifndef KESTREL_WORKER_DATA_DATAGEN_TESTING_H_
#define KESTREL_WORKER_DATA_DATAGEN_TESTING_H_

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kestrel {

// <the test's temporary directory>/<name>, created.
inline std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// The file's text ("" when it cannot be read).
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_DATAGEN_TESTING_H_
