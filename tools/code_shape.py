#!/usr/bin/env python3
"""The shape of Kestrel's production code: rooms (files) that grew past one concept, functions too long to read
at once, and gRPC outside the edge of the system.

    tools/code_shape.py            # report; exits 1 when a rule is broken
    tools/code_shape.py --list     # also every function over half the limit, longest first

The rules (docs/architecture.md, "Source layout"):
  - no production file over MAX_FILE_LINES lines;
  - no function over MAX_FUNCTION_LINES lines (its signature to its closing brace);
  - gRPC headers (grpc/, grpcpp/, *.grpc.pb.h) only in edge files: EDGE_PATTERNS and EDGE_FILES;
  - every function a header declares returning absl::Status or absl::StatusOr is [[nodiscard]] (the build makes a
    dropped one an error, -Werror=unused-result in .bazelrc).
Production files are the .h/.cc/.cu files of the packages in PACKAGES; tests, fuzz targets, test helpers,
benchmarks and generated code are not (EXCLUDED).

A C++ function is found by a scanner, not a compiler: comments, string and character literals and preprocessor
lines are blanked, then every `{` at namespace or class scope whose header (the text since the previous `;`,
`{` or `}`) ends in a parameter list (with qualifiers, an initializer list or a trailing return type) opens a
function body; lambdas and blocks inside it count toward it.
"""

import argparse
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120

# Packages whose .h/.cc/.cu files are production code.
PACKAGES = ["common", "client", "scheduler", "server", "worker", "inprocess", "export", "python"]

# Not production code: tests, fuzz targets and their helpers, test-only libraries.
EXCLUDED = re.compile(r"(_test|_fuzz|_testing|testing_certs|test_seed|fuzz_input|fuzz_replay_main|fuzz_shard)"
                      r"\.(h|cc|cu)$")

# Edge files: where the network's types may appear. A service adapts a core class to gRPC; a client implements
# a core interface over gRPC; wire files read and write gRPC's buffers without copies; main.cc builds the channels.
EDGE_PATTERNS = re.compile(r"(^|/)([a-z_]*_service|[a-z_]*_client|grpc_[a-z_]*|[a-z_]*_wire|main|[a-z_]*_main)"
                           r"\.(h|cc)$")
# Transport files: one job each, all about the network itself.
EDGE_FILES = {
    "common/tls.h": "TLS credentials for channels and listeners",
    "common/tls.cc": "",
    "common/network_policy.h": "keepalive and reconnect settings of every channel and listener",
    "common/network_policy.cc": "",
    "common/peer_identity.h": "who a peer is, from its certificate in gRPC's auth context",
    "common/peer_identity.cc": "",
    "common/slice_reader.h": "reads a message's fields out of gRPC's received slices (wire)",
    "common/slice_reader.cc": "",
    "server/ps_server.h": "the server's gRPC listener, its services and threads",
    "server/ps_server.cc": "",
}
# The Python binding is the process edge of a Python worker: it makes the channels a Python client or worker uses.
EDGE_DIRECTORIES = ("python/kestrel/",)
STATUS_DECLARATION = re.compile(
    r"^\s*(?:template\s*<[^>]*>\s*)?(?:(?:static|virtual|inline|constexpr|explicit)\s+)*"
    r"absl::Status(?:Or<.*>)?\s+(?!operator)[A-Za-z_][\w:~]*\s*\(")
GRPC_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](grpc/|grpcpp/|[^">]*\.grpc\.pb\.h)')


def production_files(root):
    for package in PACKAGES:
        top = os.path.join(root, package)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if not name.endswith((".h", ".cc", ".cu")) or EXCLUDED.search(name):
                    continue
                yield os.path.relpath(os.path.join(dirpath, name), root)


def blank_code(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its continuations.
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text[j] == "\\" and j + 1 < n else j + 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if c not in " \t":
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            # A ' between digits is a digit separator (1'000'000), not a literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_HEADER = re.compile(
    r"\)\s*(const|override|final|noexcept(\s*\([^)]*\))?|mutable|volatile|&|&&|\s)*"
    r"(->\s*[^{;]+)?"            # trailing return type
    r"(:\s*[\s\S]*)?$")           # constructor initializer list
SCOPE_HEADER = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s*\"")


def functions(text):
    """(name, first line, last line) of every function body at namespace or class scope."""
    code = blank_code(text)
    line_of = []
    line = 1
    for ch in code:
        line_of.append(line)
        if ch == "\n":
            line += 1
    stack = []  # ("scope" | "function" | "block", start offset of the header, name)
    header_start = 0
    found = []
    for i, ch in enumerate(code):
        if ch in ";{}":
            if ch == "{":
                in_function = any(kind == "function" for kind, _, _ in stack)
                header = code[header_start:i].strip()
                if in_function:
                    stack.append(("block", i, ""))
                elif SCOPE_HEADER.search(header) and not FUNCTION_HEADER.search(header):
                    stack.append(("scope", i, ""))
                elif "(" in header and FUNCTION_HEADER.search(header) and "=" not in header.split("(")[0]:
                    name = re.findall(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", header)
                    raw = code[header_start:i]
                    access = re.match(r"\s*((public|private|protected)\s*:(?!:))?\s*", raw)
                    start = header_start + access.end()
                    stack.append(("function", start, name[0] if name else "?"))
                else:
                    stack.append(("block", i, ""))
            elif ch == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    found.append((name, line_of[start], line_of[i]))
            header_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--list", action="store_true", help="also list every function over half the limit")
    args = parser.parse_args()
    root = os.path.abspath(args.root)

    broken = 0
    long_functions = []
    for path in production_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            print(f"{path}: {lines} lines (at most {MAX_FILE_LINES}): a room holding more than one concept")
            broken += 1
        edge = EDGE_PATTERNS.search(path) or path in EDGE_FILES or path.startswith(EDGE_DIRECTORIES)
        if not edge:
            for number, line in enumerate(text.splitlines(), 1):
                if GRPC_INCLUDE.match(line):
                    print(f"{path}:{number}: includes gRPC outside the edge ({line.strip()})")
                    broken += 1
        if path.endswith(".h"):
            code_lines = blank_code(text).splitlines()
            for number, line in enumerate(code_lines, 1):
                previous = code_lines[number - 2].rstrip() if number > 1 else ""
                if STATUS_DECLARATION.match(line) and not previous.endswith((",", "(")):
                    print(f"{path}:{number}: a Status-returning function without [[nodiscard]]")
                    broken += 1
        for name, first, last in functions(text):
            length = last - first + 1
            if length > MAX_FUNCTION_LINES // 2:
                long_functions.append((length, path, first, name))
            if length > MAX_FUNCTION_LINES:
                print(f"{path}:{first}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})")
                broken += 1
    if args.list:
        for length, path, first, name in sorted(long_functions, reverse=True):
            print(f"  {length:4d}  {path}:{first} {name}")
    print(f"code shape: {broken} problem(s)" if broken else "code shape: ok")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
