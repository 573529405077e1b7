// Dense blocks: every block of a tensor goes to the server owning its key, once, grouped by server and increasing
// within each; gathering a tensor into its blocks pads the last one with zeros and scattering them back gives the
// tensor exactly. Randomized sizes and partitions (the seed is printed; replay with KESTREL_TEST_SEED).
#include "worker/dense_blocks.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"

namespace kestrel {
namespace {

TableConfig Dense(const std::string& name, uint64_t size, int dim) {
  TableConfig config;
  config.set_name(name);
  config.set_kind(TableConfig::DENSE);
  config.set_dense_size(size);
  config.set_dim(dim);
  return config;
}

TEST(DenseBlocksTest, EveryBlockOnceOnItsOwnerGroupedAndIncreasing) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  for (int round = 0; round < 50; ++round) {
    const int servers = 1 + static_cast<int>(rng() % 5);
    const Partition partition = *Partition::Uniform(servers, 1 + static_cast<int>(rng() % 4));
    const int dim = 1 + static_cast<int>(rng() % 64);
    const TableConfig config = Dense("dense", 1 + rng() % 5000, dim);
    CallBuffers b;
    GroupDenseBlocks(partition, config, &b);
    const uint64_t blocks = Partition::DenseBlockCount(config.dense_size(), dim);
    ASSERT_EQ(b.ids.size(), blocks);
    ASSERT_EQ(b.offsets.size(), static_cast<size_t>(servers + 1));
    EXPECT_EQ(b.offsets[0], 0u);
    EXPECT_EQ(b.offsets[servers], blocks);
    std::vector<bool> seen(blocks, false);
    for (int s = 0; s < servers; ++s) {
      for (size_t i = b.offsets[s]; i < b.offsets[s + 1]; ++i) {
        EXPECT_EQ(partition.OwnerOf(Partition::DenseBlockKey("dense", b.ids[i])), s);
        if (i > b.offsets[s]) {
          EXPECT_LT(b.ids[i - 1], b.ids[i]);
        }
        ASSERT_LT(b.ids[i], blocks);
        EXPECT_FALSE(seen[b.ids[i]]);
        seen[b.ids[i]] = true;
      }
    }
  }
}

TEST(DenseBlocksTest, GatherPadsWithZerosAndScatterRestoresTheTensor) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  std::uniform_real_distribution<float> value(-1, 1);
  for (int round = 0; round < 50; ++round) {
    const Partition partition = *Partition::Uniform(1 + static_cast<int>(rng() % 4));
    const int dim = 1 + static_cast<int>(rng() % 32);
    const size_t size = 1 + rng() % 3000;
    std::vector<float> tensor(size);
    for (float& x : tensor) x = value(rng);
    CallBuffers b;
    GroupDenseBlocks(partition, Dense("w", size, dim), &b);
    GatherDenseBlocks(tensor.data(), size, dim, &b);
    ASSERT_EQ(b.rows.size(), b.ids.size() * dim);
    for (size_t i = 0; i < b.ids.size(); ++i) {
      for (int j = 0; j < dim; ++j) {
        const size_t at = b.ids[i] * dim + j;
        EXPECT_EQ(b.rows[i * dim + j], at < size ? tensor[at] : 0.0f);
      }
    }
    std::vector<float> back(size, 7.0f);
    ScatterDenseBlocks(b, dim, back.data(), size);
    EXPECT_EQ(back, tensor);
  }
}

TEST(DenseBlocksTest, NoBlocksLeavesEveryServerEmpty) {
  CallBuffers b;
  b.ids = {1, 2, 3};
  NoDenseBlocks(*Partition::Uniform(3), &b);
  EXPECT_TRUE(b.ids.empty());
  EXPECT_EQ(b.offsets, std::vector<size_t>(4, 0));
}

}  // namespace
}  // namespace kestrel
