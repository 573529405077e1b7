"""tools/check_layering.py finds what it promises: a dependency across the star, an include across the star,
and an include whose target is not a direct dependency; a tree that keeps the rules passes."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layering  # noqa: E402


def rule(kind, name, srcs=(), hdrs=(), deps=(), outs=()):
    lists = ""
    for list_name, labels in (("srcs", srcs), ("hdrs", hdrs), ("deps", deps), ("outs", outs)):
        lists += f'<list name="{list_name}">' + "".join(f'<label value="{l}"/>' for l in labels) + "</list>"
    return f'<rule class="{kind}" name="{name}">{lists}</rule>'


# A small tree in the star's shape: common <- client <- server, worker <- inprocess.
RULES = [
    rule("cc_library", "//common:hash", hdrs=["//common:hash.h"]),
    rule("cc_library", "//client:heartbeater", srcs=["//client:heartbeater.cc"], hdrs=["//client:heartbeater.h"],
         deps=["//common:hash"]),
    rule("cc_library", "//server:shard", srcs=["//server:shard.cc"], hdrs=["//server:shard.h"],
         deps=["//common:hash", "//client:heartbeater"]),
    rule("cc_library", "//worker:trainer", srcs=["//worker:trainer.cc"], hdrs=["//worker:trainer.h"],
         deps=["//common:hash"]),
    rule("cc_library", "//worker/data:batch", hdrs=["//worker/data:batch.h"]),
    rule("cc_library", "//inprocess:local", srcs=["//inprocess:local.cc"], deps=["//server:shard", "//worker:trainer"]),
    rule("genrule", "//worker/compute:kernels_o_nvcc", srcs=["//worker/compute:kernels.cu"],
         outs=["//worker/compute:kernels.o"]),
    rule("cc_library", "//worker/compute:kernels", srcs=["//worker/compute:kernels.o"],
         hdrs=["//worker/compute:kernels.h"]),
]
FILES = {
    "common/hash.h": "#pragma once\n",
    "client/heartbeater.h": '#include "common/hash.h"\n',
    "client/heartbeater.cc": '#include "client/heartbeater.h"\n#include "absl/status/status.h"\n',
    "server/shard.h": '#include "client/heartbeater.h"\n',
    "server/shard.cc": '#include "server/shard.h"\n#include "common/hash.h"\n',
    "worker/trainer.h": "",
    "worker/trainer.cc": '#include "worker/trainer.h"\n',
    "worker/data/batch.h": "",
    "worker/compute/kernels.h": "",
    "worker/compute/kernels.cu": '#include "worker/compute/kernels.h"\n',
    "inprocess/local.cc": '#include "server/shard.h"\n#include "worker/trainer.h"\n',
}
PACKAGES = {"common", "client", "server", "worker", "worker/data", "worker/compute", "inprocess"}


def run(rules, files):
    targets = check_layering.parse_query_xml("<query>" + "".join(rules) + "</query>")
    return check_layering.check(targets, files.get, PACKAGES)


class CheckLayeringTest(unittest.TestCase):
    def test_a_tree_in_the_star_passes(self):
        self.assertEqual(run(RULES, FILES), [])

    def test_a_planted_include_across_the_star_is_found(self):
        files = dict(FILES)
        files["worker/trainer.cc"] += '#include "server/shard.h"\n'
        problems = run(RULES, files)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("worker/trainer.cc:2: includes server/shard.h across the star", problems[0])

    def test_a_subpackage_may_not_include_its_parent(self):
        files = dict(FILES)
        files["worker/data/batch.h"] = '#include "worker/trainer.h"\n'
        problems = run(RULES, files)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("//worker/data may not use //worker", problems[0])

    def test_an_include_that_arrives_through_another_target_is_found(self):
        files = dict(FILES)
        files["inprocess/local.cc"] += '#include "client/heartbeater.h"\n'  # only through //server:shard
        problems = run(RULES, files)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("without depending on //client:heartbeater", problems[0])

    def test_a_dependency_across_the_star_is_found(self):
        rules = list(RULES)
        rules[3] = rule("cc_library", "//worker:trainer", srcs=["//worker:trainer.cc"], hdrs=["//worker:trainer.h"],
                        deps=["//common:hash", "//server:shard"])
        problems = run(rules, FILES)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("//worker may not depend on //server", problems[0])

    def test_cuda_sources_are_checked_as_their_library(self):
        files = dict(FILES)
        files["worker/compute/kernels.cu"] += '#include "worker/trainer.h"\n'
        problems = run(RULES, files)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("worker/compute/kernels.cu:2", problems[0])

    def test_a_header_no_target_provides_is_found(self):
        files = dict(FILES)
        files["server/stray.h"] = ""
        files["server/shard.cc"] += '#include "server/stray.h"\n'
        problems = run(RULES, files)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("no target provides", problems[0])

    def test_the_star(self):
        allowed = check_layering.dependency_allowed
        self.assertTrue(allowed("server", "client"))
        self.assertTrue(allowed("worker", "worker/data"))
        self.assertFalse(allowed("worker/data", "worker"))
        self.assertFalse(allowed("worker/data", "worker/compute"))
        self.assertFalse(allowed("server", "scheduler"))
        self.assertFalse(allowed("worker", "server"))
        self.assertFalse(allowed("scheduler", "worker"))
        self.assertFalse(allowed("client", "server"))
        self.assertFalse(allowed("common", "client"))
        self.assertTrue(allowed("inprocess", "server"))
        self.assertTrue(allowed("export", "worker/data"))
        self.assertTrue(allowed("export", "inprocess"))
        self.assertFalse(allowed("inprocess", "export"))
        self.assertTrue(allowed("tests", "inprocess"))


if __name__ == "__main__":
    unittest.main()
