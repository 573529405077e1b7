"""Every binary's flags as its --help prints them are what docs/configuration.md documents (the same flags, the
same defaults), and the Python worker's flags (python/kestrel/worker.py add_flags) are kestrel_worker's with its
defaults: the defaults have one home, the flag definitions (which take them from the Options structs)."""

import argparse
import os
import re
import subprocess
import sys
import unittest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "kestrel") if RUNFILES else os.path.join(os.path.dirname(__file__), "..")

# The binaries whose flags docs/configuration.md lists, by the heading of their section.
BINARIES = {
    "kestrel_server": "server/kestrel_server",
    "kestrel_scheduler": "scheduler/kestrel_scheduler",
    "kestrel_worker": "cmd/kestrel_worker",
    "kestrel_ctl": "scheduler/kestrel_ctl",
    "kestrel_export": "export/kestrel_export",
    "kestrel_predict": "export/kestrel_predict",
    "kestrel_serve": "serving/kestrel_serve",
    "kestrel_publish": "serving/kestrel_publish",
    "kestrel_datagen": "worker/data/kestrel_datagen",
    "kestrel_schema_guess": "worker/data/kestrel_schema_guess",
}
# The section of flags every process of a running job shares, and which binaries those are.
SHARED_SECTION = "Flags every process of a job shares"
GRPC_BINARIES = ("kestrel_server", "kestrel_scheduler", "kestrel_worker")

DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
SIZE_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def normalize(value):
    """A default as a comparable string: quotes, backticks and units gone ("10m" -> "600", "64 MiB" -> bytes,
    "none" -> "")."""
    value = value.strip().strip("`").strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if value in ("none", "required"):
        return ""
    m = re.fullmatch(r"(-?[0-9.]+) ?(KiB|MiB|GiB)", value)
    if m:
        return str(int(float(m.group(1)) * SIZE_UNITS[m.group(2)]))
    m = re.fullmatch(r"(?:(-?[0-9.]+)(ms|s|m|h))+", value)
    if m:
        total = sum(float(n) * DURATION_UNITS[u] for n, u in re.findall(r"(-?[0-9.]+)(ms|s|m|h)", value))
        return format_number(total)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", value):
        return format_number(float(value))
    return value


def format_number(x):
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def help_flags(binary):
    """{flag: default} as `binary --help` prints them."""
    path = os.path.join(WORKSPACE, BINARIES[binary])
    result = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    text = result.stdout + result.stderr
    flags = {}
    for entry in re.split(r"\n {4}(?=--\w)", text):  # continuation lines are indented further
        entry = entry.split("\n\n")[0]  # a blank line ends the entry (then a section heading or the footer)
        m = re.match(r"--(\w+) \(.*\);\s+default: ([^;]*);", entry.strip(), re.S)
        if m:
            flags[m.group(1)] = normalize(m.group(2))
    if not flags:
        raise AssertionError(f"{binary} --help printed no flags:\n{text[:2000]}")
    return flags


def doc_sections():
    """{section heading: {flag: default}} of docs/configuration.md's flag tables."""
    with open(os.path.join(WORKSPACE, "docs/configuration.md")) as f:
        text = f.read()
    sections = {}
    for heading, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        heading = heading.strip().strip("`")
        flags = {}
        for line in body.splitlines():
            if not line.startswith("| `--"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = re.findall(r"`--(\w+)`", cells[0])
            defaults = [d for d in re.split(r",\s*", cells[1])] if len(names) > 1 else [cells[1]]
            if len(defaults) != len(names):
                defaults = [cells[1]] * len(names)
            for name, default in zip(names, defaults):
                # A default described in words starts with its value: "`0` (half --heartbeat_interval)".
                first = re.match(r"\s*(`[^`]*`|[^(]*?)\s*(\(|$)", default)
                flags[name] = normalize(first.group(1) if first else default)
        if flags:
            sections[heading] = flags
    return sections


class FlagsDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = doc_sections()
        cls.help = {binary: help_flags(binary) for binary in BINARIES}

    def test_every_binary_documents_exactly_its_flags_with_their_defaults(self):
        shared = self.docs.get(SHARED_SECTION, {})
        self.assertTrue(shared, "docs/configuration.md lost its shared flags section")
        for binary, flags in self.help.items():
            with self.subTest(binary=binary):
                documented = dict(self.docs.get(binary, {}))
                if binary in GRPC_BINARIES:
                    for name, default in shared.items():
                        documented.setdefault(name, default)
                missing = sorted(set(flags) - set(documented))
                stale = sorted(set(documented) - set(flags))
                self.assertEqual(missing, [], f"{binary}: flags --help prints that docs/configuration.md lacks")
                self.assertEqual(stale, [], f"{binary}: flags docs/configuration.md lists that {binary} lacks")
                wrong = {name: (documented[name], flags[name]) for name in flags
                         if documented[name] != flags[name]}
                self.assertEqual(wrong, {}, f"{binary}: defaults documented differently (docs, --help)")

    def test_the_python_workers_flags_are_kestrel_workers(self):
        sys.path.insert(0, os.path.join(WORKSPACE, "python", "site"))
        import kestrel.worker  # noqa: E402 (needs the built package)

        parser = argparse.ArgumentParser()
        kestrel.worker.add_flags(parser)
        worker = self.help["kestrel_worker"]
        checked = 0
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            name = action.option_strings[0][2:]
            with self.subTest(flag=name):
                self.assertIn(name, worker, f"--{name} is not a kestrel_worker flag")
                default = action.default
                if default is None:
                    continue  # no default of its own: "not given"
                if isinstance(default, bool):
                    default = "true" if default else "false"
                self.assertEqual(normalize(str(default)), worker[name], f"--{name}'s default")
                checked += 1
        self.assertGreater(checked, 5)


if __name__ == "__main__":
    unittest.main()
