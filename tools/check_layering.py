#!/usr/bin/env python3
"""Checks that Kestrel's packages form the star docs/architecture.md draws, by what the code includes as much
as by what the BUILD files declare.

    tools/check_layering.py          # runs `bazel query` on the workspace; exits 1 on any problem

Two rules, for every C++ target (cc_library, cc_binary, cc_test, and the .cu sources of CUDA libraries):
  1. Every dependency it declares stays inside the star (ALLOWED): a package depends only on the packages
     below it, and a subpackage never on the package above it (worker/data never on worker).
  2. Every project header its files include (#include "pkg/file.h") belongs to the target itself or to one of
     its *direct* dependencies. A header that compiles only because it arrives through another target is a
     dependency nobody declared, and so one the first rule never saw.
Bazel's visibility (tools/BUILD) checks the first rule for declared dependencies only; this script is what makes
the includes a checked fact too. scripts/test.sh runs it before the tests; tools/check_layering_test.py plants
a crossing include and a missing dependency and checks both are found.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# Which packages a package may depend on, besides itself and its own subpackages. Top-level directories; a
# subpackage (worker/data) has its parent's row but never its parent (or a sibling) in it.
BASE = ["proto", "common"]
CLIENT = BASE + ["client"]
ROLES = CLIENT + ["scheduler", "server", "worker"]
ALLOWED = {
    "proto": [],
    "common": ["proto"],
    "client": BASE,
    # The three roles, side by side: none includes another.
    "scheduler": CLIENT,
    "server": CLIENT,
    "worker": CLIENT,
    # Above the roles: the servers in process (for tests and one-process training), export and predict, then the
    # Python package and kestrel_worker (cmd/), which use both.
    "inprocess": ROLES,
    "export": ROLES + ["inprocess"],  # predict scores an export on in-process servers
    "serving": ROLES + ["inprocess", "export"],  # kestrel_serve and kestrel_publish, over exports
    "python": ROLES + ["inprocess", "export", "serving"],
    "cmd": ROLES + ["inprocess", "export"],
    # The top: anything.
    "bench": None,
    "tests": None,
    "scripts": None,
    "examples": None,
    "tools": None,
    "deploy": None,
    "third_party": None,
    "": None,
}
# Packages every package may use: the offline build's own pieces.
INFRASTRUCTURE = ("third_party", "tools")

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def top(package):
    return package.split("/", 1)[0]


def dependency_allowed(from_package, to_package):
    """Whether a target in `from_package` may depend on one in `to_package` (workspace packages, no '//')."""
    if to_package == from_package or to_package.startswith(from_package + "/"):
        return True
    if top(to_package) in INFRASTRUCTURE:
        return True
    allowed = ALLOWED.get(top(from_package), [])
    if allowed is None:
        return True
    if top(to_package) == top(from_package):
        return False  # a subpackage's parent or sibling
    return top(to_package) in allowed


def package_of(label):
    return label[2:].split(":", 1)[0] if label.startswith("//") else None


def file_of(label):
    """'//a/b:c/d.h' -> 'a/b/c/d.h' (None for external labels)."""
    if not label.startswith("//"):
        return None
    package, _, name = label[2:].partition(":")
    return f"{package}/{name}" if package else name


class Target:
    def __init__(self, label, kind, files, deps, srcs):
        self.label = label
        self.kind = kind
        self.files = files  # workspace-relative paths of its srcs and hdrs (and the .cu sources of its objects)
        self.deps = deps    # labels
        self.srcs = srcs    # labels of its srcs, generated ones included


def parse_query_xml(xml_text):
    """The C++ targets of a `bazel query --output=xml` answer; .cu files join the library their objects build."""
    root = ET.fromstring(xml_text)
    targets = {}
    genrule_sources = {}  # output label -> .cu source files
    for rule in root.iter("rule"):
        kind, label = rule.get("class"), rule.get("name")
        lists = {node.get("name"): [v.get("value") for v in node.iter("label")] for node in rule.iter("list")}
        if kind == "genrule":
            cu = [file_of(s) for s in lists.get("srcs", []) if s.endswith(".cu")]
            for out in lists.get("outs", []):
                genrule_sources[out] = cu
            continue
        if kind not in ("cc_library", "cc_binary", "cc_test"):
            continue
        files = [file_of(f) for name in ("srcs", "hdrs", "textual_hdrs") for f in lists.get(name, [])]
        targets[label] = Target(label, kind, [f for f in files if f], lists.get("deps", []), lists.get("srcs", []))
    for target in targets.values():
        for src in target.srcs:
            target.files.extend(genrule_sources.get(src, []))
    return targets


def preferred_owner(header, owners):
    """The target to name for a header several targets list: the one named after it, else the first."""
    base = os.path.splitext(os.path.basename(header))[0]
    named = sorted(o for o in owners if o.rsplit(":", 1)[-1] in (base, base + "_proto", base.replace(".pb", "_proto")))
    return named[0] if named else sorted(owners)[0]


def check(targets, read_file, packages):
    """The problems found, as lines. `read_file(path)` returns a file's text (None if it is not in the
    workspace: a generated file); `packages` is the set of workspace packages (directories with a BUILD)."""
    owners = {}
    for target in targets.values():
        for f in target.files:
            owners.setdefault(f, set()).add(target.label)
    problems = []
    for target in sorted(targets.values(), key=lambda t: t.label):
        package = package_of(target.label)
        for dep in target.deps:
            dep_package = package_of(dep)
            if dep_package is not None and not dependency_allowed(package, dep_package):
                problems.append(f"{target.label} depends on {dep}: //{package} may not depend on //{dep_package} "
                                f"(the star in tools/check_layering.py)")
        direct = set(target.deps) | {target.label}
        # Deps may be written without the package ('//a:b' for ':b' is normalized by bazel query already).
        for f in sorted(set(target.files)):
            text = read_file(f)
            if text is None:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                header = m.group(1)
                if top(header) not in packages and not any(header.startswith(p + "/") for p in packages):
                    continue  # a system header written with quotes
                header_owners = owners.get(header)
                if not header_owners:
                    problems.append(f"{f}:{number}: includes {header}, which no target provides")
                    continue
                if header_owners & direct:
                    continue
                owner = preferred_owner(header, header_owners)
                owner_package = package_of(owner)
                if not dependency_allowed(package, owner_package):
                    problems.append(f"{f}:{number}: includes {header} across the star: //{package} may not use "
                                    f"//{owner_package}")
                else:
                    problems.append(f"{f}:{number}: includes {header} without depending on {owner} "
                                    f"(add it to {target.label}'s deps)")
    return problems


def main():
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    query = subprocess.run(
        ["bazel", "query", 'kind("cc_library|cc_binary|cc_test|genrule", //...)', "--output=xml",
         "--noshow_progress"], cwd=root, capture_output=True, text=True)
    if query.returncode != 0:
        print(query.stderr)
        print("check_layering: bazel query failed")
        return 2
    targets = parse_query_xml(query.stdout)
    packages = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if "BUILD" in filenames:
            packages.add(os.path.relpath(dirpath, root))

    def read_file(path):
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            return None
        with open(full, encoding="utf-8", errors="replace") as f:
            return f.read()

    problems = check(targets, read_file, packages)
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} problem(s) in {len(targets)} targets" if problems
          else f"layering: ok ({len(targets)} targets)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
