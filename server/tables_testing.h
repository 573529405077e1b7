// Tables for the server package's unit tests: configs whose rows a test can predict exactly, and tables made of them.
#ifndef KESTREL_SERVER_TABLES_TESTING_H_
#define KESTREL_SERVER_TABLES_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/table.h"

namespace kestrel {

// A sparse table of `dim` whose rows start at zero and take SGD with learning rate 1: a row is minus the sum of its
// gradients (exact for small integers).
inline TableConfig ZeroSgdTable(const std::string& name, int dim) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(dim);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

// The same, dense, of `blocks` blocks of `dim` values.
inline TableConfig ZeroSgdDenseTable(const std::string& name, int dim, uint64_t blocks) {
  TableConfig c = ZeroSgdTable(name, dim);
  c.set_kind(TableConfig::DENSE);
  c.set_dense_size(blocks * static_cast<uint64_t>(dim));
  return c;
}

// Table::Create(config) (over every key); null, and a test failure, when the config is refused.
inline std::unique_ptr<Table> MustCreateTable(const TableConfig& config) {
  absl::StatusOr<std::unique_ptr<Table>> table = Table::Create(config);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

}  // namespace kestrel

#endif  // KESTREL_SERVER_TABLES_TESTING_H_
