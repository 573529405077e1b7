// Reads a protobuf message field by field straight from the slices gRPC received it in (the raw handlers' and
// the raw client's readers, common/pull_wire.h and common/step_wire.h), without protobuf's parse, which copies
// every bytes field into a string.
//
// Hand-written because protobuf's own readers (CodedInputStream, the generated parsers) read one contiguous
// buffer or copy into strings: neither hands out views of a field that lies inside one received slice.
#ifndef KESTREL_COMMON_SLICE_READER_H_
#define KESTREL_COMMON_SLICE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace kestrel {

// A cursor over bytes held in a list of slices, bounded by a byte budget (the whole list, or one nested message
// of it: Sub). Does not own the slices: they must outlive the reader and every view it hands out.
// Thread-compatible.
class SliceReader {
 public:
  // Reads every byte of `slices`.
  explicit SliceReader(const std::vector<grpc::Slice>* slices);
  // Reads nothing, until Sub() makes it a reader of a nested message.
  SliceReader() = default;

  // No bytes left within the budget.
  bool done();
  // Bytes left within the budget.
  size_t remaining() const { return limit_; }
  bool Byte(uint8_t* b);
  // A varint of at most 10 bytes (as protobuf reads them).
  bool Varint(uint64_t* v);
  // The next n bytes: a view into the current slice when they lie inside it, else a copy in `scratch`. False
  // (nothing allocated) when fewer than n bytes are left.
  bool View(size_t n, absl::string_view* out, std::string* scratch);
  // Copies the next n bytes to dst, or skips them when dst is null.
  bool Bytes(size_t n, char* dst);
  // A reader of the next n bytes (a nested message); this reader moves past them. False when fewer are left.
  bool Sub(size_t n, SliceReader* sub);

 private:
  void SkipEmpty();

  const std::vector<grpc::Slice>* slices_ = nullptr;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t limit_ = 0;
};

// Skips a field the reader does not know, as protobuf skips unknown fields: `tag` (already read) gives its wire
// type. A group (wire type 3, deprecated but still parsed) is skipped through its matching end tag. False when
// truncated, of field number 0, an end tag without its start, nested past protobuf's recursion limit (100), or
// of a wire type protobuf refuses (6, 7).
bool SkipField(SliceReader& reader, uint64_t tag);

// The slices of `buffer` (none for an invalid buffer). False when gRPC cannot read it.
bool DumpSlices(const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices);

}  // namespace kestrel

#endif  // KESTREL_COMMON_SLICE_READER_H_
