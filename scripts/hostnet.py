"""Hosts on real network stacks for `kestrel local --hosts`: one network namespace per process, links that can be
cut, healed and rate limited.

Topology. Host i owns the address 10.213.0.(i+1)/32 on its own loopback interface, and every pair of hosts is
joined by a veth pair of its own (interface "k<j>" in host i leads to host j) carrying a /32 route to the
peer's address. So any two hosts can be cut apart independently (`ip link set k<j> down`: a switch port gone),
and a host can lose the scheduler's host (the control network) while it still reaches the others. `rate`
puts a tbf rate limiter on both ends of every link. Hand-written over the `ip`, `tc`, `unshare` and `nsenter`
commands because no maintained package drives network namespaces from Python without extra dependencies.

Lifetime. Each namespace is unnamed and held only by a keeper process (`unshare --net sleep infinity`) and the
processes started in it; the keepers and every process started through `popen_args` get SIGKILL when the
process that started them dies (PR_SET_PDEATHSIG), so the namespaces and their veths vanish with the harness,
also after `kill -9` of it. Nothing is created in the caller's namespace and no address outside 10.213.0.0/24
(assigned here, inside these namespaces) is ever targeted.

The state file (JSON, written by `HostNetwork.start`) lets another process (`kestrel net`) cut and heal links
of a running network: it names each host's keeper pid and the inode of its namespace, which is checked before
any command enters it. Not thread-safe; one controller at a time.
"""
import ctypes
import json
import os
import random
import re
import signal
import subprocess
import time

PREFIX = "10.213.0."  # the addresses the harness assigns, inside its own namespaces only
MAX_HOSTS = 200
_PR_SET_PDEATHSIG = 1
_NAME = re.compile(r"[a-z][a-z0-9]{0,31}")
_RATE = re.compile(r"[1-9][0-9]{0,5}(kbit|mbit|gbit)")


# `ip` and `tc` live in /usr/sbin, which a test runner's or a user's PATH may lack.
for _sbin in ("/usr/sbin", "/sbin"):
    if _sbin not in os.environ.get("PATH", "").split(":"):
        os.environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin") + ":" + _sbin


def die_with_parent():
    """A preexec_fn: SIGKILL this child when the process that started it dies (also by kill -9)."""
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def available():
    """'' when this process may create network namespaces here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    done = subprocess.run(["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip() or done.returncode}"
    return ""


def rate_bytes(rate):
    """Bytes per second of a tc rate such as 1gbit, 10gbit, 500mbit."""
    if not _RATE.fullmatch(rate):
        raise ValueError(f"link rate {rate!r}: want <N>kbit, <N>mbit or <N>gbit")
    scale = {"kbit": 10 ** 3, "mbit": 10 ** 6, "gbit": 10 ** 9}[rate[-4:]]
    return int(rate[:-4]) * scale // 8


class HostNetwork:
    """Hosts named `names` (lower-case letters and digits), each in a network namespace of its own, joined pairwise.

    Owns its keeper processes; `close` (or the death of this process) removes every namespace and link."""

    def __init__(self, names, rate=None, state_path=None):
        names = list(names)
        if not names or len(names) > MAX_HOSTS or len(set(names)) != len(names):
            raise ValueError(f"hosts {names}: 1-{MAX_HOSTS} distinct names")
        for n in names:
            if not _NAME.fullmatch(n):
                raise ValueError(f"host name {n!r}: lower-case letters and digits, starting with a letter")
        if rate is not None:
            rate_bytes(rate)
        self.names, self.rate, self.state_path = names, rate, state_path
        self.hosts = {}  # name -> {"index", "address", "pid", "ns"}
        self.keepers = []

    # --- building -------------------------------------------------------------------------------------------
    def start(self):
        try:
            for i, name in enumerate(self.names):
                keeper = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"], preexec_fn=die_with_parent,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                self.keepers.append(keeper)
                self.hosts[name] = {"index": i, "address": PREFIX + str(i + 1), "pid": keeper.pid, "ns": 0}
            for name, h in self.hosts.items():
                h["ns"] = self._wait_for_namespace(h["pid"])
                self._ip(name, "link", "set", "lo", "up")
                self._ip(name, "addr", "add", h["address"] + "/32", "dev", "lo")
            for a, b in self.links():
                ha, hb = self.hosts[a], self.hosts[b]
                self._ip(a, "link", "add", self.interface(a, b), "type", "veth", "peer", "name",
                         self.interface(b, a), "netns", str(hb["pid"]))
                for x, y in ((a, b), (b, a)):
                    if self.rate:
                        burst = max(64 * 1024, rate_bytes(self.rate) // 100)  # 10 ms at the rate
                        self._run(x, ["tc", "qdisc", "add", "dev", self.interface(x, y), "root", "tbf", "rate",
                                      self.rate, "burst", str(burst), "latency", "50ms"])
                self.heal(a, b)
            if self.state_path:
                tmp = self.state_path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"prefix": PREFIX, "rate": self.rate, "hosts": self.hosts}, f, indent=1)
                os.replace(tmp, self.state_path)
        except BaseException:
            self.close()
            raise
        return self

    @staticmethod
    def _wait_for_namespace(pid):
        own = os.stat("/proc/self/ns/net").st_ino
        for _ in range(400):
            try:
                ns = os.stat(f"/proc/{pid}/ns/net").st_ino
                if ns != own:
                    return ns
            except FileNotFoundError:
                raise RuntimeError(f"the namespace keeper {pid} exited")
            time.sleep(0.005)
        raise RuntimeError(f"the namespace keeper {pid} did not enter a namespace of its own")

    def close(self):
        """Kills the keepers: each namespace, with its veths, goes once its last process has exited."""
        for k in self.keepers:
            if k.poll() is None:
                k.kill()
            k.wait()
        self.keepers = []
        if self.state_path and os.path.exists(self.state_path):
            os.remove(self.state_path)

    # --- naming ---------------------------------------------------------------------------------------------
    def links(self):
        names = sorted(self.hosts, key=lambda n: self.hosts[n]["index"])
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]

    def interface(self, at, to):
        """The interface in host `at` that leads to host `to`."""
        return f"k{self.hosts[to]['index'] + 1}"

    def traffic(self):
        """Bytes sent over every link so far, by host ({name: bytes}): each byte on the wire counted once, at the
        sending end, with its TCP/IP and TLS overhead."""
        sent = {}
        for name in self.hosts:
            done = subprocess.run(self.enter(name) + ["ip", "-s", "-j", "link", "show"], capture_output=True,
                                  text=True)
            if done.returncode != 0:
                raise RuntimeError(f"ip -s link in host {name}: {done.stderr.strip()}")
            sent[name] = sum(link.get("stats64", {}).get("tx", {}).get("bytes", 0) for link in json.loads(done.stdout)
                             if re.fullmatch(r"k[0-9]+", link.get("ifname", "")))
        return sent

    def address(self, name):
        return self.hosts[name]["address"]

    def enter(self, name):
        """The command prefix that runs a program in host `name` (nsenter execs it: the pid stays the program's)."""
        return ["nsenter", f"--net=/proc/{self.hosts[name]['pid']}/ns/net", "--"]

    # --- faults ---------------------------------------------------------------------------------------------
    def cut(self, a, b):
        """The link between hosts a and b goes down at both ends: nothing passes either way until `heal`."""
        self._check_pair(a, b)
        for x, y in ((a, b), (b, a)):
            self._ip(x, "link", "set", self.interface(x, y), "down")

    def heal(self, a, b):
        self._check_pair(a, b)
        for x, y in ((a, b), (b, a)):
            self._ip(x, "link", "set", self.interface(x, y), "up")
        for x, y in ((a, b), (b, a)):  # a link that went down lost its route
            self._ip(x, "route", "replace", self.address(y) + "/32", "dev", self.interface(x, y), "src",
                     self.address(x))

    def isolate(self, name):
        """Cuts every link of host `name`: partitioned from everyone."""
        for other in self.hosts:
            if other != name:
                self.cut(name, other)

    def rejoin(self, name):
        for other in self.hosts:
            if other != name:
                self.heal(name, other)

    def heal_all(self):
        for a, b in self.links():
            self.heal(a, b)

    def _check_pair(self, a, b):
        for n in (a, b):
            if n not in self.hosts:
                raise ValueError(f"no host {n!r}; hosts: {', '.join(self.hosts)}")
        if a == b:
            raise ValueError(f"a link joins two hosts, not {a} to itself")

    # --- running commands in a host -------------------------------------------------------------------------
    def _ip(self, name, *argv):
        self._run(name, ["ip"] + list(argv))

    def _run(self, name, argv):
        done = subprocess.run(self.enter(name) + argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in host {name}: {done.stderr.strip() or done.returncode}")

    @classmethod
    def attach(cls, state_path):
        """The running network a state file describes (written by another process's `start`), for `kestrel net`.
        Each host's keeper must still hold the namespace the file names: a stale or forged file is refused."""
        with open(state_path) as f:
            state = json.load(f)
        if not isinstance(state, dict) or not isinstance(state.get("hosts"), dict):
            raise ValueError(f"{state_path}: not a host network state file")
        net = cls(list(state["hosts"]), state.get("rate"))
        for name, h in state["hosts"].items():
            if not isinstance(h, dict) or not all(isinstance(h.get(k), int) for k in ("index", "pid", "ns")):
                raise ValueError(f"{state_path}: host {name!r} is malformed")
            if h.get("address") != PREFIX + str(h["index"] + 1) or not 0 <= h["index"] < MAX_HOSTS:
                raise ValueError(f"{state_path}: host {name!r} has an address the harness does not assign")
            try:
                if os.stat(f"/proc/{h['pid']}/ns/net").st_ino != h["ns"]:
                    raise ValueError(f"{state_path}: host {name!r}'s namespace is gone (is the job still running?)")
            except FileNotFoundError:
                raise ValueError(f"{state_path}: host {name!r}'s keeper has exited (is the job still running?)")
            net.hosts[name] = {k: h[k] for k in ("index", "address", "pid", "ns")}
        if sorted(h["index"] for h in net.hosts.values()) != list(range(len(net.hosts))):
            raise ValueError(f"{state_path}: host indices are not 0..{len(net.hosts) - 1}")
        return net


def random_schedule(seed, hosts, seconds, mean_gap=1.5, mean_cut=1.5):
    """A seeded schedule of partitions over `seconds`: a list of (at_seconds, action, a, b) with action "cut" or
    "heal" (b None for a whole host: "isolate" / "rejoin"). At most one fault is in force at a time, and every
    fault is healed before the end, so a job that tolerates each fault ends as the uninterrupted one."""
    rng = random.Random(seed)
    events, t = [], 0.0
    names = sorted(hosts)
    while True:
        t += rng.expovariate(1 / mean_gap)
        length = min(rng.expovariate(1 / mean_cut), 4 * mean_cut)
        if t + length > seconds:
            return events
        if rng.random() < 0.4:
            a = rng.choice(names)
            events += [(round(t, 3), "isolate", a, None), (round(t + length, 3), "rejoin", a, None)]
        else:
            a, b = rng.sample(names, 2)
            events += [(round(t, 3), "cut", a, b), (round(t + length, 3), "heal", a, b)]
        t += length


def apply(net, action, a, b=None):
    """One fault or heal: cut/heal a link (a, b), isolate/rejoin a host (a)."""
    if action == "cut":
        net.cut(a, b)
    elif action == "heal":
        net.heal(a, b)
    elif action == "isolate":
        net.isolate(a)
    elif action == "rejoin":
        net.rejoin(a)
    else:
        raise ValueError(f"unknown action {action!r}")


def play(net, events, log=print):
    """Applies (at_seconds, action, a, b) events at their times from now, printing each as it is applied."""
    start = time.monotonic()
    for at, action, a, b in events:
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        apply(net, action, a, b)
        log(f"{time.monotonic() - start:7.3f} s  {action} {a}{' ' + b if b else ''}", flush=True)

