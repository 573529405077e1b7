"""tools/code_shape.py's scanner finds functions, their lengths and names, and ignores what only looks like code."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import code_shape  # noqa: E402

SOURCE = r'''
#include "a.h"
#define BODY(x) { return x; }
namespace kestrel {
namespace {
// A comment with braces { and a function call f() {
const char* kText = "not { a body } (";
int Small(int x) { return x; }
}  // namespace

class Widget {
 public:
  Widget(int a, int b)
      : a_(a),
        b_(b) {
    if (a > b) {
      a_ = b;
    }
  }
  int get() const override { return a_; }
  auto Lambda() -> int {
    auto f = [](int v) {
      return v + 1;
    };
    return f(1'000);
  }
 private:
  int a_ = 0, b_ = 0;
  struct Inner {
    int x;
  };
};

absl::Status Widget::Long(const std::vector<int>& v) {
''' + "  Step();\n" * 130 + '''  return absl::OkStatus();
}

std::vector<int> table = {1, 2, 3};
}  // namespace kestrel
'''


class CodeShapeTest(unittest.TestCase):
    def test_finds_each_function_with_its_lines(self):
        found = {name: (first, last) for name, first, last in code_shape.functions(SOURCE)}
        self.assertEqual(set(found), {"Small", "Widget", "get", "Lambda", "Widget::Long"})
        first, last = found["Widget"]
        self.assertEqual(last - first + 1, 7)  # the signature, the initializer list and the body
        first, last = found["Widget::Long"]
        self.assertEqual(last - first + 1, 133)

    def test_blanks_comments_strings_and_preprocessor_lines_but_keeps_lines(self):
        blanked = code_shape.blank_code(SOURCE)
        self.assertEqual(blanked.count("\n"), SOURCE.count("\n"))
        self.assertNotIn("not {", blanked)
        self.assertNotIn("#define", blanked)
        self.assertNotIn("f() {", blanked)

    def test_a_status_declaration_needs_nodiscard(self):
        self.assertTrue(code_shape.STATUS_DECLARATION.match("  absl::Status Pull(int a);"))
        self.assertTrue(code_shape.STATUS_DECLARATION.match("  virtual absl::StatusOr<int> Count() = 0;"))
        self.assertTrue(code_shape.STATUS_DECLARATION.match("static absl::StatusOr<std::unique_ptr<X>> Create("))
        self.assertFalse(code_shape.STATUS_DECLARATION.match("  [[nodiscard]] absl::Status Pull(int a);"))
        self.assertFalse(code_shape.STATUS_DECLARATION.match("  absl::Status status = Pull();"))
        self.assertFalse(code_shape.STATUS_DECLARATION.match("  std::function<absl::Status()> done;"))

    def test_grpc_includes_are_allowed_only_at_the_edge(self):
        self.assertTrue(code_shape.GRPC_INCLUDE.match('#include "grpcpp/grpcpp.h"'))
        self.assertTrue(code_shape.GRPC_INCLUDE.match('#include "proto/ps.grpc.pb.h"'))
        self.assertFalse(code_shape.GRPC_INCLUDE.match('#include "proto/ps.pb.h"'))
        self.assertTrue(code_shape.EDGE_PATTERNS.search("server/ps_service.cc"))
        self.assertTrue(code_shape.EDGE_PATTERNS.search("client/grpc_scheduler_client.h"))
        self.assertTrue(code_shape.EDGE_PATTERNS.search("common/pull_wire.h"))
        self.assertTrue(code_shape.EDGE_PATTERNS.search("cmd/worker_main.cc"))
        self.assertFalse(code_shape.EDGE_PATTERNS.search("server/replication.cc"))
        self.assertFalse(code_shape.EDGE_PATTERNS.search("worker/worker_session.h"))


if __name__ == "__main__":
    unittest.main()
