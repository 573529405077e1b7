#!/usr/bin/env python3
"""Checks Kestrel's deployment files (deploy/) for structure, cross-references and the binaries' real flags.

Run by tests/deploy_test.sh (Bazel sh_test //tests:deploy_test), which finds the files in the runfiles:

  deploy_check.py --deploy DIR --bin DIR [--scripts DIR] [--self FILE] [--site DIR] [--examples DIR]

DIR for --deploy is a writable copy of deploy/ (kustomize refuses symlinks that leave a kustomization's
directory, and runfiles are symlinks); --bin holds scheduler/kestrel_scheduler, server/kestrel_server and
cmd/kestrel_worker; --scripts is scripts/ (its shell scripts are shellchecked, its kestrel makes the
certificates the TLS groups inspect, with the openssl command); --site is the kestrel Python package's directory
(//python:site: the Python worker's flags, kestrel.worker.add_flags, and _kestrel.so's libraries); --examples is
examples/torch (the PyTorch workers the launchers are given). Every group of checks is one JUnit test case
(written to $XML_OUTPUT_FILE when set); a group whose tool is missing (PyYAML, kubectl, shellcheck, openssl,
scripts/kestrel) is skipped with the reason, but when every group that needs a tool skips, the case
tool_groups_ran fails naming the missing tools: such a run checked no Kubernetes manifest, certificate or
shell script. Exit 1 when any check fails.
Python 3 standard library plus PyYAML (Debian: python3-yaml).
"""
import argparse
import base64
import copy
import glob
import importlib.util
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import types
import xml.etree.ElementTree as ET

try:
    import yaml
except ImportError:  # reported as skips by the groups that need it
    yaml = None

BINARIES = {
    "kestrel_scheduler": "scheduler/kestrel_scheduler",
    "kestrel_server": "server/kestrel_server",
    "kestrel_worker": "cmd/kestrel_worker",
}
OVERLAYS = ["base", "overlays/cpu", "overlays/gpu"]
SCHEDULER_NAME = "kestrel-scheduler"
SERVER_NAME = "kestrel-server"
WORKER_NAME = "kestrel-worker"
CONTRACT_ENV = ["KESTREL_SCHEDULER", "KESTREL_NUM_SERVERS", "KESTREL_NUM_WORKERS"]
TLS_FLAGS = ("tls_ca", "tls_cert", "tls_key")
# Each role's TLS Secret (mounted at /tls) and the keys `kestrel k8s-secrets` names a process's files by: the
# scheduler's, the server pods' names, and worker-<Job completion index>.
TLS_SECRETS = {SCHEDULER_NAME: "kestrel-tls-scheduler", SERVER_NAME: "kestrel-tls-server",
               WORKER_NAME: "kestrel-tls-worker"}
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
PLAINTEXT_COMPONENT = "components/plaintext"


class Skip(Exception):
    pass


# The tools each kind of group needs.
K8S_TOOLS = ("PyYAML", "kubectl")
CERT_TOOLS = ("scripts/kestrel", "openssl")
SHELLCHECK_TOOLS = ("shellcheck",)


class Case:
    def __init__(self, name):
        self.name = name
        self.errors = []
        self.skipped = None
        self.seconds = 0.0

    def check(self, cond, message):
        if not cond:
            self.errors.append(message)
        return cond


# ---------------------------------------------------------------------------------------------- flags


def parse_helpfull(text):
    """Flag names listed by an Abseil binary's --helpfull ("    --name (description); default: ...")."""
    return set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", text, re.M))


def flag_items(argv):
    """(name, value or None) of every --flag in argv (after the program name)."""
    items = []
    for arg in argv[1:]:
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        items.append((name, value if eq else None))
    return items


def check_flags(case, where, argv, helpfull):
    """Every --flag in argv is one the binary argv[0] accepts; no flag twice."""
    binary = os.path.basename(argv[0]) if argv else ""
    if not case.check(binary in helpfull, f"{where}: runs '{argv[0] if argv else ''}', not a Kestrel binary"):
        return
    known = helpfull[binary]
    seen = set()
    for name, _ in flag_items(argv):
        base = name[2:] if name.startswith("no") and name[2:] in known else name
        case.check(base in known, f"{where}: {binary} does not accept --{name} (not in its --helpfull)")
        case.check(name not in seen, f"{where}: --{name} given twice")
        seen.add(name)


def flag(argv, name):
    for n, v in flag_items(argv):
        if n == name:
            return v if v is not None else True
    return None


def launcher_env(case, bin_dir):
    """The Kubernetes manifests give servers no --rank and workers no --rank, and every process its
    counts and scheduler through KESTREL_*: the binaries must resolve their identity from the environment
    (common/cluster_env). Heuristic: the variable names it reads are string constants in each binary."""
    for name, rel in BINARIES.items():
        with open(os.path.join(bin_dir, rel), "rb") as f:
            data = f.read()
        missing = [v.decode() for v in (b"KESTREL_NUM_SERVERS", b"KESTREL_NUM_WORKERS", b"KESTREL_SCHEDULER",
                                         b"JOB_COMPLETION_INDEX", b"SLURM_PROCID") if v not in data]
        case.check(not missing, f"{name} does not resolve its identity from the environment (common/cluster_env "
                   f"not linked: no {', '.join(missing)} in the binary); the Kubernetes manifests rely on it")


# ----------------------------------------------------------------------------------------- kubernetes


def expand(text, env):
    """Kubernetes' $(VAR) expansion in command/args/env: defined names replaced, $$ escapes, others kept."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, text)


class Render:
    def __init__(self, name, docs):
        self.name = name
        self.docs = [d for d in docs if d]
        self.by_kind = {}
        for d in self.docs:
            self.by_kind.setdefault(d.get("kind"), []).append(d)

    def get(self, kind, name):
        for d in self.by_kind.get(kind, []):
            if d["metadata"]["name"] == name:
                return d
        return None

    def configmap(self, name):
        return self.get("ConfigMap", name)

    def workloads(self):
        """(kind/name, pod template) of every StatefulSet and Job."""
        out = []
        for kind in ("StatefulSet", "Job", "Deployment", "DaemonSet"):
            for d in self.by_kind.get(kind, []):
                out.append((f"{kind}/{d['metadata']['name']}", d, d["spec"]["template"]))
        return out

    def container_env(self, workload_name, container):
        """The container's environment as the kubelet builds it (envFrom, then env), downward API faked."""
        env, errors = {}, []
        for source in container.get("envFrom", []) or []:
            ref = source.get("configMapRef")
            if ref:
                cm = self.configmap(ref["name"])
                if cm is None:
                    errors.append(f"envFrom names ConfigMap {ref['name']}, which is not in the render")
                else:
                    prefix = source.get("prefix", "")
                    env.update({prefix + k: str(v) for k, v in (cm.get("data") or {}).items()})
        for var in container.get("env", []) or []:
            if "value" in var:
                env[var["name"]] = expand(str(var["value"]), env)
            elif "valueFrom" in var:
                vf = var["valueFrom"]
                if "configMapKeyRef" in vf:
                    ref = vf["configMapKeyRef"]
                    cm = self.configmap(ref["name"])
                    if cm is None or ref["key"] not in (cm.get("data") or {}):
                        errors.append(f"env {var['name']} refers to missing ConfigMap key {ref['name']}/{ref['key']}")
                    else:
                        env[var["name"]] = str(cm["data"][ref["key"]])
                elif "fieldRef" in vf:
                    field = vf["fieldRef"]["fieldPath"]
                    env[var["name"]] = {"metadata.name": f"{workload_name}-0",
                                        COMPLETION_INDEX_FIELD: "0"}.get(field, f"<{field}>")
                else:
                    env[var["name"]] = f"<{var['name']}>"
        return env, errors


def render_kustomize(kubectl, deploy_dir, overlay):
    path = os.path.join(deploy_dir, "k8s", overlay)
    proc = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed: {proc.stderr.strip()}")
    return Render(overlay, list(yaml.safe_load_all(proc.stdout)))


def pod_containers(template):
    return template["spec"].get("containers", []) or []


def argv_of(container):
    return list(container.get("command", []) or []) + list(container.get("args", []) or [])


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def named_port(container, name):
    for p in container.get("ports", []) or []:
        if p.get("name") == name:
            return p.get("containerPort")
    return None


def resolve_target_port(template, target):
    if isinstance(target, int):
        return target
    for c in pod_containers(template):
        port = named_port(c, target)
        if port is not None:
            return port
    return None


class K8s:
    """The three renders, each workload's containers with their expanded argv and environment."""

    def __init__(self, renders):
        self.renders = renders

    def containers(self, render):
        """(where, workload doc, template, container, env, expanded argv, env errors)."""
        out = []
        for where, doc, template in render.workloads():
            for c in pod_containers(template):
                env, errors = render.container_env(doc["metadata"]["name"], c)
                argv = [expand(a, env) for a in argv_of(c)]
                out.append((f"{render.name}: {where} container {c['name']}", doc, template, c, env, argv, errors))
        return out

    def one(self, render, kind, name):
        doc = render.get(kind, name)
        if doc is None:
            return None, None, None, None
        template = doc["spec"]["template"]
        c = pod_containers(template)[0]
        env, _ = render.container_env(name, c)
        return doc, template, c, [expand(a, env) for a in argv_of(c)]


def k8s_kinds(case, k8s):
    for r in k8s.renders:
        counts = {kind: len(docs) for kind, docs in r.by_kind.items()}
        for kind, want in (("StatefulSet", 2), ("Job", 1), ("Service", 2), ("PersistentVolumeClaim", 1),
                           ("ConfigMap", 1)):
            case.check(counts.get(kind, 0) >= want, f"{r.name}: {counts.get(kind, 0)} {kind}, want >= {want}")
        case.check(counts.get("StatefulSet", 0) == 2, f"{r.name}: want exactly 2 StatefulSets")
        for kind, name in (("StatefulSet", SCHEDULER_NAME), ("StatefulSet", SERVER_NAME), ("Job", WORKER_NAME),
                           ("Service", SCHEDULER_NAME), ("Service", SERVER_NAME)):
            case.check(r.get(kind, name) is not None, f"{r.name}: no {kind} {name}")
        for d in r.docs:
            case.check("namespace" not in d["metadata"],
                       f"{r.name}: {d['kind']}/{d['metadata']['name']} sets a namespace (the base is namespace-agnostic)")
        images = {c.get("image") for _, _, t in r.workloads() for c in pod_containers(t)}
        case.check(len(images) == 1, f"{r.name}: containers use several images {sorted(images)}")


def k8s_services(case, k8s):
    for r in k8s.renders:
        for svc_name, sts_name in ((SCHEDULER_NAME, SCHEDULER_NAME), (SERVER_NAME, SERVER_NAME)):
            svc, sts = r.get("Service", svc_name), r.get("StatefulSet", sts_name)
            if svc is None or sts is None:
                case.errors.append(f"{r.name}: Service or StatefulSet {svc_name} missing")
                continue
            template = sts["spec"]["template"]
            labels = template["metadata"].get("labels", {})
            selector = svc["spec"].get("selector", {})
            case.check(labels_match(selector, labels),
                       f"{r.name}: Service {svc_name} selector {selector} does not select {sts_name}'s pods {labels}")
            case.check(labels_match(sts["spec"]["selector"].get("matchLabels", {}), labels),
                       f"{r.name}: StatefulSet {sts_name} selector does not match its pod labels")
            case.check(sts["spec"].get("serviceName") == svc_name,
                       f"{r.name}: StatefulSet {sts_name} serviceName {sts['spec'].get('serviceName')} != {svc_name}")
            # Only this workload's pods are selected.
            for where, doc, t in r.workloads():
                if doc is not sts:
                    case.check(not labels_match(selector, t["metadata"].get("labels", {})),
                               f"{r.name}: Service {svc_name} also selects {where}'s pods")
            # Every service port reaches a container port of the same number (the --port the binary listens on).
            c = pod_containers(template)[0]
            argv = argv_of(c)
            for p in svc["spec"].get("ports", []):
                target = resolve_target_port(template, p.get("targetPort", p["port"]))
                case.check(target is not None,
                           f"{r.name}: Service {svc_name} port {p.get('name')} targets {p.get('targetPort')}, "
                           f"not a container port of {sts_name}")
                case.check(target == p["port"],
                           f"{r.name}: Service {svc_name} port {p['port']} forwards to container port {target}")
                if p.get("name") == "grpc":
                    case.check(str(flag(argv, "port")) == str(p["port"]),
                               f"{r.name}: Service {svc_name} grpc port {p['port']} != {sts_name} --port={flag(argv, 'port')}")
        server_svc = r.get("Service", SERVER_NAME)
        if server_svc is not None:
            case.check(server_svc["spec"].get("clusterIP") == "None",
                       f"{r.name}: Service {SERVER_NAME} is not headless (clusterIP: None)")
            case.check(server_svc["spec"].get("publishNotReadyAddresses") is True,
                       f"{r.name}: Service {SERVER_NAME} should publish not-ready addresses (servers register "
                       "before they are ready)")


def k8s_ports_probes(case, k8s):
    """The gRPC ports speak mutual TLS, which Kubernetes' grpc probes cannot: startup and readiness are TCP
    connections to --port, liveness GET /metrics on --metrics_port (reachable: not on loopback)."""
    for r in k8s.renders:
        for name in (SCHEDULER_NAME, SERVER_NAME):
            doc, template, c, argv = k8s.one(r, "StatefulSet", name)
            if doc is None:
                continue
            port = flag(argv, "port")
            grpc_port = named_port(c, "grpc")
            case.check(port is not None and str(port) == str(grpc_port),
                       f"{r.name}: {name} --port={port} but its container port 'grpc' is {grpc_port}")
            metrics_port = flag(argv, "metrics_port")
            for probe, kind in (("startupProbe", "tcpSocket"), ("readinessProbe", "tcpSocket"),
                                ("livenessProbe", "httpGet")):
                p = c.get(probe)
                if not case.check(p is not None, f"{r.name}: {name} has no {probe}"):
                    continue
                case.check("grpc" not in p, f"{r.name}: {name} {probe} is a grpc probe on a mutual-TLS port (it "
                           "connects without a certificate and always fails)")
                if not case.check(kind in p, f"{r.name}: {name} {probe} is not a {kind} probe"):
                    continue
                target = resolve_target_port(template, p[kind].get("port"))
                if kind == "tcpSocket":
                    case.check(str(target) == str(port), f"{r.name}: {name} {probe} connects to port {target}, "
                               f"--port={port}")
                else:
                    case.check(p[kind].get("path") == "/metrics" and str(target) == str(metrics_port),
                               f"{r.name}: {name} {probe} gets {p[kind].get('path')} on port {target}, want "
                               f"/metrics on --metrics_port={metrics_port}")
                    host = flag(argv, "metrics_host")
                    case.check(isinstance(host, str) and host not in ("127.0.0.1", "localhost", "::1"),
                               f"{r.name}: {name} --metrics_host={host}: the kubelet's probe cannot reach loopback")
        # Workers serve no gRPC: a gRPC probe there would kill them.
        doc, template, c, argv = k8s.one(r, "Job", WORKER_NAME)
        if doc is not None:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                case.check("grpc" not in (c.get(probe) or {}), f"{r.name}: worker has a grpc {probe}")


def k8s_env(case, k8s):
    for r in k8s.renders:
        sched_svc = r.get("Service", SCHEDULER_NAME)
        sched_port = None
        if sched_svc is not None:
            sched_port = next((p["port"] for p in sched_svc["spec"]["ports"] if p.get("name") == "grpc"), None)
        want = f"{SCHEDULER_NAME}:{sched_port}"
        for where, doc, template, c, env, argv, errors in k8s.containers(r):
            for e in errors:
                case.errors.append(f"{where}: {e}")
            for name in CONTRACT_ENV:
                case.check(name in env, f"{where}: no {name} in the environment")
            case.check(env.get("KESTREL_SCHEDULER") == want,
                       f"{where}: KESTREL_SCHEDULER={env.get('KESTREL_SCHEDULER')}, want {want} (the scheduler Service)")
            for a in argv:
                case.check("$(" not in a, f"{where}: '{a}' refers to a variable the container does not define")
            sched = flag(argv, "scheduler")
            if sched is not None:
                case.check(sched == want, f"{where}: --scheduler={sched}, want {want}")
            adv = flag(argv, "advertise_host")
            if adv is not None:
                sts = r.get("StatefulSet", SERVER_NAME)
                service = sts["spec"].get("serviceName") if sts else None
                case.check(adv.endswith("." + str(service)) and r.get("Service", str(service)) is not None,
                           f"{where}: --advertise_host={adv} is not <pod>.<headless service {service}>")


def k8s_counts(case, k8s):
    for r in k8s.renders:
        sched, _, _, sched_argv = k8s.one(r, "StatefulSet", SCHEDULER_NAME)
        server, _, server_c, server_argv = k8s.one(r, "StatefulSet", SERVER_NAME)
        job, _, worker_c, worker_argv = k8s.one(r, "Job", WORKER_NAME)
        if not (sched and server and job):
            case.errors.append(f"{r.name}: scheduler, server or worker workload missing")
            continue
        env, _ = r.container_env(SERVER_NAME, server_c)
        num_servers, num_workers = env.get("KESTREL_NUM_SERVERS"), env.get("KESTREL_NUM_WORKERS")
        case.check(sched["spec"].get("replicas") == 1, f"{r.name}: scheduler replicas {sched['spec'].get('replicas')} != 1")
        case.check(str(server["spec"].get("replicas")) == str(num_servers),
                   f"{r.name}: server replicas {server['spec'].get('replicas')} != KESTREL_NUM_SERVERS {num_servers}")
        spec = job["spec"]
        case.check(spec.get("completionMode") == "Indexed", f"{r.name}: worker Job is not completionMode: Indexed")
        case.check(str(spec.get("completions")) == str(num_workers) == str(spec.get("parallelism")),
                   f"{r.name}: Job completions {spec.get('completions')} / parallelism {spec.get('parallelism')} "
                   f"!= KESTREL_NUM_WORKERS {num_workers}")
        restart = spec["template"]["spec"].get("restartPolicy")
        case.check(restart in ("Never", "OnFailure"), f"{r.name}: worker restartPolicy {restart}")
        case.check((spec.get("backoffLimit") or 0) > 0, f"{r.name}: worker Job backoffLimit must let failed pods be replaced")
        for rule in (spec.get("podFailurePolicy") or {}).get("rules", []):
            codes = (rule.get("onExitCodes") or {}).get("values", [])
            case.check(not (rule.get("action") == "FailJob" and 3 in codes),
                       f"{r.name}: podFailurePolicy fails the Job on exit 3 (superseded workers must be replaced)")
        for argv, name, want in ((sched_argv, "num_servers", num_servers), (sched_argv, "num_workers", num_workers),
                                 (server_argv, "num_servers", num_servers), (server_argv, "bsp_workers", num_workers)):
            value = flag(argv, name)
            if value is not None:
                case.check(str(value) == str(want), f"{r.name}: --{name}={value}, want {want}")
        if flag(sched_argv, "consistency") in (None, "bsp"):
            case.check(flag(server_argv, "bsp_workers") is not None,
                       f"{r.name}: BSP scheduler but the servers have no --bsp_workers")
        # One pod template for every replica: a fixed index would give them all the same one.
        case.check(flag(server_argv, "rank") is None,
                   f"{r.name}: servers pass --rank (the StatefulSet ordinal gives it)")
        case.check(flag(worker_argv, "rank") is None, f"{r.name}: workers pass --rank (the Job completion index gives it)")


def volume_mounts(template, container):
    """mountPath -> (volume dict, readOnly) for the container."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", []) or []}
    out = {}
    for m in container.get("volumeMounts", []) or []:
        out[m["mountPath"]] = (volumes.get(m["name"]), bool(m.get("readOnly")), m)
    return out


def under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def k8s_checkpoints(case, k8s):
    for r in k8s.renders:
        dirs = {}
        for name in (SCHEDULER_NAME, SERVER_NAME):
            doc, template, c, argv = k8s.one(r, "StatefulSet", name)
            if doc is None:
                continue
            ckpt = flag(argv, "checkpoint_dir")
            if not case.check(isinstance(ckpt, str) and ckpt, f"{r.name}: {name} has no --checkpoint_dir"):
                continue
            dirs[name] = ckpt
            mounts = volume_mounts(template, c)
            hits = [(path, vol, ro) for path, (vol, ro, _) in mounts.items() if under(ckpt, path)]
            if not case.check(hits, f"{r.name}: {name} --checkpoint_dir={ckpt} is on no mounted volume"):
                continue
            path, vol, ro = max(hits, key=lambda h: len(h[0]))
            claim = ((vol or {}).get("persistentVolumeClaim") or {}).get("claimName")
            pvc = r.get("PersistentVolumeClaim", claim) if claim else None
            case.check(pvc is not None, f"{r.name}: {name} mounts {path} from {vol}, not a PVC of the render")
            case.check(not ro, f"{r.name}: {name} mounts the checkpoint volume read-only")
            if pvc is not None:
                case.check("ReadWriteMany" in pvc["spec"].get("accessModes", []),
                           f"{r.name}: PVC {claim} is not ReadWriteMany (scheduler and servers share it)")
            dirs[name + " claim"] = claim
        if len(dirs) == 4:
            case.check(dirs[SCHEDULER_NAME] == dirs[SERVER_NAME],
                       f"{r.name}: scheduler --checkpoint_dir={dirs[SCHEDULER_NAME]} != servers' {dirs[SERVER_NAME]}")
            case.check(dirs[SCHEDULER_NAME + " claim"] == dirs[SERVER_NAME + " claim"],
                       f"{r.name}: scheduler and servers mount different checkpoint volumes")
        _, _, _, sched_argv = k8s.one(r, "StatefulSet", SCHEDULER_NAME)
        if sched_argv:
            case.check(flag(sched_argv, "resume") is True,
                       f"{r.name}: the scheduler lacks --resume (a restarted scheduler must continue the job)")


def k8s_job_config(case, k8s, deploy_dir):
    with open(os.path.join(deploy_dir, "jobs", "deepfm.pbtxt")) as f:
        deepfm = f.read()
    with open(os.path.join(deploy_dir, "k8s", "base", "job.pbtxt")) as f:
        case.check(f.read() == deepfm, "deploy/k8s/base/job.pbtxt differs from deploy/jobs/deepfm.pbtxt (copy it again)")
    for r in k8s.renders:
        doc, template, c, argv = k8s.one(r, "Job", WORKER_NAME)
        if doc is None:
            continue
        config = flag(argv, "config")
        case.check(argv[:2] == ["kestrel_worker", "--config=/config/job.pbtxt"],
                   f"{r.name}: worker command starts {argv[:2]}, want kestrel_worker --config=/config/job.pbtxt")
        mounts = volume_mounts(template, c)
        found = False
        for path, (vol, _, mount) in mounts.items():
            if not isinstance(config, str) or not under(config, path) or not (vol or {}).get("configMap"):
                continue
            key = config[len(path.rstrip("/")) + 1:]
            cm = r.configmap(vol["configMap"]["name"])
            if case.check(cm is not None, f"{r.name}: worker mounts ConfigMap {vol['configMap']['name']}, not in the render"):
                data = cm.get("data") or {}
                if case.check(key in data, f"{r.name}: ConfigMap {cm['metadata']['name']} has no key {key} (--config={config})"):
                    found = True
                    case.check(data[key] == deepfm, f"{r.name}: the job ConfigMap is not deploy/jobs/deepfm.pbtxt")
        case.check(found, f"{r.name}: worker --config={config} is not a file of a mounted ConfigMap")
        for name in ("train_files", "test_files"):
            for path in str(flag(argv, name) or "").split(","):
                case.check(path and any(under(path, m) for m in mounts),
                           f"{r.name}: worker --{name} file '{path}' is on no mounted volume")


def k8s_prometheus(case, k8s):
    for r in k8s.renders:
        for where, doc, template, c, env, argv, _ in k8s.containers(r):
            ann = template["metadata"].get("annotations", {}) or {}
            port = flag(argv, "metrics_port")
            case.check(port is not None, f"{where}: no --metrics_port")
            case.check(ann.get("prometheus.io/scrape") == "true", f"{where}: pod lacks prometheus.io/scrape: \"true\"")
            case.check(str(ann.get("prometheus.io/port")) == str(port),
                       f"{where}: prometheus.io/port {ann.get('prometheus.io/port')} != --metrics_port={port}")
            case.check(ann.get("prometheus.io/path", "/metrics") == "/metrics", f"{where}: prometheus.io/path is not /metrics")
            case.check(str(named_port(c, "metrics")) == str(port),
                       f"{where}: container port 'metrics' {named_port(c, 'metrics')} != --metrics_port={port}")


def k8s_resources(case, k8s):
    for r in k8s.renders:
        for where, doc, template, c, env, argv, _ in k8s.containers(r):
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                for what in ("cpu", "memory"):
                    case.check(what in (res.get(kind) or {}), f"{where}: no {kind}.{what}")


def k8s_flags(case, k8s, helpfull):
    for r in k8s.renders:
        for where, doc, template, c, env, argv, _ in k8s.containers(r):
            case.check(bool(c.get("command")) and not os.path.dirname(c["command"][0]),
                       f"{where}: command must start with the binary's name")
            check_flags(case, where, argv, helpfull)


def replica_env(render, workload_name, container, index):
    """The container's environment in replica `index`: the pod name (kestrel-server-N) and the Job completion
    index that the downward API gives each pod."""
    env, _ = render.container_env(workload_name, container)
    for var in container.get("env", []) or []:
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.name":
            env[var["name"]] = f"{workload_name}-{index}"
        elif field == COMPLETION_INDEX_FIELD:
            env[var["name"]] = str(index)
    return env


def tls_workloads(render):
    """(name, workload doc, template, container, replica count) of the scheduler, the servers and the workers."""
    out = []
    for kind, name in (("StatefulSet", SCHEDULER_NAME), ("StatefulSet", SERVER_NAME), ("Job", WORKER_NAME)):
        doc = render.get(kind, name)
        if doc is not None:
            count = doc["spec"].get("replicas", 1) if kind == "StatefulSet" else doc["spec"].get("completions", 1)
            out.append((name, doc, doc["spec"]["template"], pod_containers(doc["spec"]["template"])[0], int(count)))
    return out


def k8s_tls(case, k8s):
    """Mutual TLS by default: every scheduler, server and worker container passes --tls_ca/--tls_cert/--tls_key
    (in args, which components/plaintext replaces; never --insecure), files of its role's Secret mounted
    read-only and readable by the pod's user only, each replica its own certificate: scheduler-0.pem,
    kestrel-server-<ordinal>.pem, worker-<completion index>.pem (what `kestrel k8s-secrets` writes)."""
    k8s.secret_keys = {}
    for r in k8s.renders:
        found = tls_workloads(r)
        case.check(len(found) == 3, f"{r.name}: scheduler, server or worker workload missing")
        for name, doc, template, c, count in found:
            where = f"{r.name}: {name}"
            env, _ = r.container_env(name, c)
            argv = [expand(a, env) for a in argv_of(c)]
            case.check(flag(argv, "insecure") is None, f"{where} passes --insecure: the base must run mutual TLS")
            in_args = sorted(n for n, _ in flag_items([""] + list(c.get("args") or [])))
            case.check(in_args == sorted(TLS_FLAGS), f"{where}: args has {in_args}, want exactly the TLS flags "
                       f"{sorted(TLS_FLAGS)} (components/plaintext replaces args)")
            paths = {f: flag(argv, f) for f in TLS_FLAGS}
            if not case.check(all(isinstance(v, str) and v for v in paths.values()), f"{where}: TLS flags {paths}"):
                continue
            mounts = volume_mounts(template, c)
            hits = [(mp, vol, ro) for mp, (vol, ro, _) in mounts.items() if all(under(v, mp) for v in paths.values())]
            if not case.check(hits, f"{where}: the TLS files {sorted(paths.values())} are not on one mounted volume"):
                continue
            mount_path, vol, ro = max(hits, key=lambda h: len(h[0]))
            secret = (vol or {}).get("secret") or {}
            want_secret = TLS_SECRETS[name]
            case.check(secret.get("secretName") == want_secret,
                       f"{where}: the TLS files come from {vol}, want the Secret {want_secret}")
            case.check(ro, f"{where}: the TLS Secret is mounted writable")
            case.check(not secret.get("optional"), f"{where}: the TLS Secret is optional (a pod without it would "
                       "start and fail instead of waiting for it)")
            mode = secret.get("defaultMode", 0o644)
            security = template["spec"].get("securityContext") or {}
            case.check(mode & 0o007 == 0, f"{where}: TLS Secret defaultMode {oct(mode)} lets any user read the keys")
            case.check(bool(mode & 0o040) and security.get("fsGroup") is not None,
                       f"{where}: the Secret's files (root-owned, mode {oct(mode)}) are not readable by the pod's user "
                       f"{security.get('runAsUser')}: give them group read and the pod an fsGroup")
            rel = {f: v[len(mount_path.rstrip("/")) + 1:] for f, v in paths.items()}
            case.check(rel["tls_ca"] == "ca.pem", f"{where}: --tls_ca={paths['tls_ca']}, want {mount_path}/ca.pem")
            keys = k8s.secret_keys.setdefault(r.name, {}).setdefault(want_secret, {"ca.pem": None})
            for index in range(count):
                argv_i = [expand(a, replica_env(r, name, c, index)) for a in argv_of(c)]
                stem = {SCHEDULER_NAME: "scheduler-0", SERVER_NAME: f"{SERVER_NAME}-{index}",
                        WORKER_NAME: f"worker-{index}"}[name]
                got = [str(flag(argv_i, f))[len(mount_path.rstrip("/")) + 1:] for f in ("tls_cert", "tls_key")]
                case.check(got == [stem + ".pem", stem + ".key"],
                           f"{where} replica {index}: certificate and key {got}, want {stem}.pem and {stem}.key")
                keys[stem + ".pem"] = keys[stem + ".key"] = (name, index)
            if name == WORKER_NAME:
                var = next((v for v in c.get("env", []) or [] if v.get("name") == "JOB_COMPLETION_INDEX"), {})
                field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                case.check(field == COMPLETION_INDEX_FIELD,
                           f"{where}: JOB_COMPLETION_INDEX is not the downward API's {COMPLETION_INDEX_FIELD}")


def render_dir(kubectl, path, name):
    proc = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {name} failed: {proc.stderr.strip()}")
    return Render(name, list(yaml.safe_load_all(proc.stdout)))


def render_with_component(deploy_dir, *components):
    """overlays/cpu with `components` (paths under k8s/) added, as a user's own overlay would."""
    kubectl = find_tool("kubectl")
    tmp = tempfile.mkdtemp(prefix="kestrel-component-")
    try:
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            # kustomize takes only relative paths to other kustomizations.
            f.write("resources:\n  - %s\ncomponents:\n" % os.path.relpath(
                os.path.join(deploy_dir, "k8s", "overlays", "cpu"), tmp))
            for component in components:
                f.write("  - %s\n" % os.path.relpath(os.path.join(deploy_dir, "k8s", component), tmp))
        return render_dir(kubectl, tmp, " + ".join(("overlays/cpu",) + components))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def k8s_replicas(case, k8s, deploy_dir, helpfull):
    """components/replicas: the scheduler and every server run with the same --replicas=2 (they refuse to start
    otherwise), the workers unchanged, every flag one the binaries know."""
    r = render_with_component(deploy_dir, "components/replicas")
    seen = set()
    for where, doc, template, c, env, argv, errors in K8s([r]).containers(r):
        check_flags(case, where, argv, helpfull)
        for e in errors:
            case.errors.append(f"{where}: {e}")
        name = doc["metadata"]["name"]
        if name in ("kestrel-scheduler", "kestrel-server"):
            case.check(flag(argv, "replicas") == "2", f"{where}: --replicas={flag(argv, 'replicas')}, expected 2")
            seen.add(name)
        elif name == WORKER_NAME:
            case.check(flag(argv, "replicas") is None, f"{where}: workers take the replicas from the scheduler")
    case.check(seen == {"kestrel-scheduler", "kestrel-server"}, f"{r.name}: --replicas set on {sorted(seen)} only")


def k8s_elastic(case, k8s, deploy_dir, helpfull):
    """components/elastic: the scheduler alone runs with --elastic and a timeout (servers and workers take what
    they need from it), every flag one the binaries know."""
    r = render_with_component(deploy_dir, "components/elastic")
    seen = False
    for where, doc, template, c, env, argv, errors in K8s([r]).containers(r):
        check_flags(case, where, argv, helpfull)
        for e in errors:
            case.errors.append(f"{where}: {e}")
        if doc["metadata"]["name"] == "kestrel-scheduler":
            case.check("--elastic" in argv, f"{where}: no --elastic")
            case.check(flag(argv, "elastic_timeout") == "10m",
                       f"{where}: --elastic_timeout={flag(argv, 'elastic_timeout')}, expected 10m")
            seen = True
        else:
            case.check("--elastic" not in argv and flag(argv, "elastic_timeout") is None,
                       f"{where}: only the scheduler takes --elastic")
    case.check(seen, f"{r.name}: no scheduler")


def k8s_plaintext(case, k8s, deploy_dir, helpfull):
    """The documented opt-out: an overlay with components/plaintext runs the same commands with --insecure in
    place of the TLS flags, and no TLS Secret volumes (which would keep the pods waiting)."""
    base = next(r for r in k8s.renders if r.name == "overlays/cpu")
    r = render_with_component(deploy_dir, PLAINTEXT_COMPONENT)
    plain = {name: (c, template) for name, _, template, c, _ in tls_workloads(r)}
    for name, _, _, c, _ in tls_workloads(base):
        if not case.check(name in plain, f"{r.name}: {name} missing"):
            continue
        pc, template = plain[name]
        env, _ = r.container_env(name, pc)
        argv = [expand(a, env) for a in argv_of(pc)]
        case.check(pc.get("command") == c.get("command"), f"{r.name}: {name}'s command differs from overlays/cpu's")
        case.check(not any(flag(argv, f) for f in TLS_FLAGS), f"{r.name}: {name} still passes TLS flags")
        if name != WORKER_NAME:  # listeners on the pod IP need the explicit opt-out
            case.check(flag(argv, "insecure") is True, f"{r.name}: {name} lacks --insecure")
        secrets = [v for v in template["spec"].get("volumes", []) or []
                   if ((v.get("secret") or {}).get("secretName") in TLS_SECRETS.values())]
        case.check(not secrets, f"{r.name}: {name} still mounts {secrets}")
        case.check(not any(m.get("mountPath") == "/tls" for m in pc.get("volumeMounts", []) or []),
                   f"{r.name}: {name} still mounts /tls")
    for where, doc, template, c, env, argv, errors in K8s([r]).containers(r):
        check_flags(case, where, argv, helpfull)
        for e in errors:
            case.errors.append(f"{where}: {e}")


def cert_names(openssl, path):
    """(URIs, DNS names) of a PEM certificate's subjectAltName."""
    proc = subprocess.run([openssl, "x509", "-in", path, "-noout", "-ext", "subjectAltName"], capture_output=True,
                          text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl cannot read {path}: {proc.stderr.strip()}")
    entries = [e.strip() for line in proc.stdout.splitlines()[1:] for e in line.split(",")]
    return [e[4:] for e in entries if e.startswith("URI:")], [e[4:] for e in entries if e.startswith("DNS:")]


def key_matches(openssl, cert, key):
    a = subprocess.run([openssl, "x509", "-in", cert, "-noout", "-pubkey"], capture_output=True, timeout=30)
    b = subprocess.run([openssl, "pkey", "-in", key, "-pubout"], capture_output=True, timeout=30)
    return a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout


def need_cli(kestrel_cli):
    if not kestrel_cli or not os.path.isfile(kestrel_cli):
        raise Skip("scripts/kestrel not found (it makes the certificates)")
    openssl = find_tool("openssl")
    if not openssl:
        raise Skip("the openssl command is missing (kestrel certs uses it)")
    return openssl


def k8s_secrets_command(case, k8s, kestrel_cli):
    """`kestrel certs` (with the names the manifests dial) + `kestrel k8s-secrets`: Secrets that parse, named as
    the manifests mount them, holding exactly the keys they reference: ca.pem and each replica's certificate
    (its role, rank and job in the SAN URI, the name it is dialled by among its DNS names) and matching key;
    never the CA key or the admin's. Certificates without those names are refused."""
    openssl = need_cli(kestrel_cli)
    r = next(x for x in k8s.renders if x.name == "base")
    wanted = getattr(k8s, "secret_keys", {}).get(r.name)
    if not wanted:
        raise Skip("k8s_tls found no TLS Secret keys to compare with")
    found = {name: (c, count) for name, _, _, c, count in tls_workloads(r)}
    env, _ = r.container_env(SERVER_NAME, found[SERVER_NAME][0])
    job, servers, workers = env.get("KESTREL_JOB_ID"), found[SERVER_NAME][1], found[WORKER_NAME][1]
    scheduler_host = env.get("KESTREL_SCHEDULER", "").rpartition(":")[0]
    server_hosts = [flag([expand(a, replica_env(r, SERVER_NAME, found[SERVER_NAME][0], i))
                          for a in argv_of(found[SERVER_NAME][0])], "advertise_host") for i in range(servers)]
    tmp = tempfile.mkdtemp(prefix="kestrel-secrets-")
    try:
        def kestrel(*argv):
            return subprocess.run([sys.executable, kestrel_cli] + list(argv), capture_output=True, text=True,
                                  timeout=120)

        certs = os.path.join(tmp, "certs")
        made = kestrel("certs", "--job", job, "--out", certs, "--servers", str(servers), "--workers", str(workers),
                       "--hosts", ",".join([scheduler_host] + server_hosts))
        if not case.check(made.returncode == 0, f"kestrel certs failed: {made.stderr.strip()}"):
            return
        proc = kestrel("k8s-secrets", certs)
        if not case.check(proc.returncode == 0, f"kestrel k8s-secrets failed: {proc.stderr.strip()}"):
            return
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        secrets = {d.get("metadata", {}).get("name"): d for d in docs}
        case.check(sorted(secrets) == sorted(wanted), f"k8s-secrets wrote Secrets {sorted(secrets)}, the manifests "
                   f"mount {sorted(wanted)}")
        with open(os.path.join(certs, "ca.key"), "rb") as f:
            ca_key = f.read()
        role_of = {v: k for k, v in TLS_SECRETS.items()}
        for name, d in secrets.items():
            case.check(d.get("apiVersion") == "v1" and d.get("kind") == "Secret" and d.get("type") == "Opaque",
                       f"Secret {name}: apiVersion/kind/type {d.get('apiVersion')}/{d.get('kind')}/{d.get('type')}")
            case.check("namespace" not in d.get("metadata", {}), f"Secret {name} sets a namespace")
            data = d.get("data") or {}
            if name not in wanted:
                continue
            case.check(set(data) == set(wanted[name]), f"Secret {name} holds {sorted(data)}, the manifests read "
                       f"{sorted(wanted[name])}")
            files = {}
            for key, value in data.items():
                content = base64.b64decode(value, validate=True)
                case.check(ca_key not in content and "admin" not in key, f"Secret {name}: {key} is the CA key or the "
                           "admin's: neither belongs in the cluster")
                files[key] = os.path.join(tmp, f"{name}.{key}")
                with open(files[key], "wb") as f:
                    f.write(content)
            if "ca.pem" in files:
                with open(files["ca.pem"], "rb") as a, open(os.path.join(certs, "ca.pem"), "rb") as b:
                    case.check(a.read() == b.read(), f"Secret {name}: ca.pem is not the job's CA")
            for key, owner in wanted[name].items():
                if owner is None or not key.endswith(".pem") or key not in files:
                    continue
                workload, index = owner
                role = {SCHEDULER_NAME: "scheduler", SERVER_NAME: "server", WORKER_NAME: "worker"}[role_of[name]]
                uris, dns = cert_names(openssl, files[key])
                case.check(uris == [f"spiffe://kestrel/{job}/{role}/{index}"],
                           f"Secret {name}: {key} names {uris}, want spiffe://kestrel/{job}/{role}/{index}")
                host = {SCHEDULER_NAME: scheduler_host,
                        SERVER_NAME: server_hosts[index] if role == "server" else None}.get(workload)
                if host:
                    case.check(host in dns, f"Secret {name}: {key} lacks DNS:{host}, the name it is dialled by")
                stem = key[:-len(".pem")]
                if stem + ".key" in files:
                    case.check(key_matches(openssl, files[key], files[stem + ".key"]),
                               f"Secret {name}: {stem}.key is not the key of {key}")
        # Certificates without the Services' names would fail every handshake: refused up front.
        other = os.path.join(tmp, "nohosts")
        made = kestrel("certs", "--job", job, "--out", other, "--servers", str(servers), "--workers", str(workers))
        if case.check(made.returncode == 0, f"kestrel certs failed: {made.stderr.strip()}"):
            proc = kestrel("k8s-secrets", other)
            case.check(proc.returncode == 2 and not proc.stdout and "kestrel-server-0.kestrel-server" in proc.stderr,
                       f"k8s-secrets accepted certificates without the names the manifests dial (exit "
                       f"{proc.returncode}): {proc.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def k8s_devices(case, k8s):
    for r in k8s.renders:
        doc, template, c, argv = k8s.one(r, "Job", WORKER_NAME)
        if doc is None:
            continue
        limits = (c.get("resources") or {}).get("limits") or {}
        device = flag(argv, "device")
        for where, d, t, other, _, _, _ in k8s.containers(r):
            if other is not c:
                case.check("nvidia.com/gpu" not in ((other.get("resources") or {}).get("limits") or {}),
                           f"{where}: asks for a GPU (only workers use one)")
        if r.name.endswith("gpu"):
            case.check(int(limits.get("nvidia.com/gpu", 0)) >= 1, f"{r.name}: workers have no nvidia.com/gpu limit")
            case.check(device == "cuda" or str(device).startswith("cuda:"), f"{r.name}: workers run --device={device}")
            spec = template["spec"]
            case.check(spec.get("nodeSelector") or spec.get("tolerations") or spec.get("affinity"),
                       f"{r.name}: no node selector / toleration / affinity for GPU nodes")
        elif r.name.endswith("cpu"):
            case.check(device == "cpu", f"{r.name}: workers run --device={device}, want cpu")
            case.check("nvidia.com/gpu" not in limits, f"{r.name}: CPU workers ask for a GPU")


# ---------------------------------------------------------------------------------------- slurm, mpi


def parse_ranks(field, total):
    if field == "*":
        return None
    ranks = []
    for part in field.split(","):
        lo, _, hi = part.partition("-")
        ranks.extend(range(int(lo), int(hi or lo) + 1))
    return ranks


def expand_multi_prog(text, total):
    """task id -> argv of an srun --multi-prog configuration (%t: task id, %o: offset within its line)."""
    tasks, claimed_star = {}, []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = shlex.split(line)
        ranks = parse_ranks(fields[0], total)
        if ranks is None:
            ranks = [t for t in range(total) if t not in tasks]
        for offset, task in enumerate(ranks):
            if task in tasks:
                raise ValueError(f"task {task} appears on two lines")
            tasks[task] = [a.replace("%t", str(task)).replace("%o", str(offset)) for a in fields[1:]]
    return tasks


def check_layout(case, where, argvs, num_servers, num_workers, scheduler_host=None):
    """argvs: global rank -> argv. Rank 0 scheduler, 1..S servers, S+1..S+W workers, all consistent."""
    total = 1 + num_servers + num_workers
    case.check(sorted(argvs) == list(range(total)), f"{where}: tasks {sorted(argvs)}, want 0..{total - 1}")
    roles = {}
    for rank, argv in sorted(argvs.items()):
        want = "kestrel_scheduler" if rank == 0 else "kestrel_server" if rank <= num_servers else "kestrel_worker"
        got = os.path.basename(argv[0]) if argv else ""
        case.check(got == want, f"{where}: task {rank} runs {got}, want {want}")
        roles.setdefault(got, []).append(argv)
    sched = (roles.get("kestrel_scheduler") or [[]])[0]
    servers, workers = roles.get("kestrel_server", []), roles.get("kestrel_worker", [])
    case.check([flag(a, "rank") for a in servers] == [str(i) for i in range(num_servers)],
               f"{where}: server --rank values {[flag(a, 'rank') for a in servers]}")
    case.check([flag(a, "rank") for a in workers] == [str(i) for i in range(num_workers)],
               f"{where}: worker --rank values {[flag(a, 'rank') for a in workers]}")
    case.check(flag(sched, "num_servers") == str(num_servers) and flag(sched, "num_workers") == str(num_workers),
               f"{where}: scheduler --num_servers/--num_workers {flag(sched, 'num_servers')}/{flag(sched, 'num_workers')}")
    case.check(flag(sched, "resume") is True, f"{where}: scheduler lacks --resume")
    address = f"{scheduler_host}:{flag(sched, 'port')}" if scheduler_host else None
    for a in servers:
        case.check(flag(a, "num_servers") == str(num_servers), f"{where}: server --num_servers={flag(a, 'num_servers')}")
        case.check(flag(a, "bsp_workers") == str(num_workers), f"{where}: server --bsp_workers={flag(a, 'bsp_workers')}")
        case.check(flag(a, "checkpoint_dir") == flag(sched, "checkpoint_dir"),
                   f"{where}: server --checkpoint_dir={flag(a, 'checkpoint_dir')} != scheduler's")
    for a in servers + workers:
        case.check(flag(a, "job_id") == flag(sched, "job_id"), f"{where}: --job_id differs from the scheduler's")
        if address:
            case.check(flag(a, "scheduler") == address, f"{where}: --scheduler={flag(a, 'scheduler')}, want {address}")
    outs = [flag(a, "metrics_out") for a in workers]
    case.check(len(set(outs)) == len(outs), f"{where}: workers share a --metrics_out file")


def tls_stem(argv, rank, num_servers):
    if rank == 0:
        return "scheduler-0"
    return f"server-{flag(argv, 'rank')}" if rank <= num_servers else f"worker-{flag(argv, 'rank')}"


def check_tls(case, where, argvs, num_servers, certs_dir, insecure=False):
    """argvs: global rank -> argv. By default every process has its own certificate from certs_dir
    (<role>-<shard or rank>.pem/.key) and no --insecure; with the opt-out, --insecure and no TLS flags."""
    for rank, argv in sorted(argvs.items()):
        if insecure:
            case.check(flag(argv, "insecure") is True and not any(flag(argv, f) for f in TLS_FLAGS),
                       f"{where} task {rank}: the plaintext opt-out should pass --insecure and no TLS flags")
            continue
        stem = tls_stem(argv, rank, num_servers)
        want = [os.path.join(certs_dir, n) for n in ("ca.pem", stem + ".pem", stem + ".key")]
        got = [flag(argv, f) for f in TLS_FLAGS]
        case.check(got == want, f"{where} task {rank}: TLS flags {got}, want {want}")
        case.check(flag(argv, "insecure") is None, f"{where} task {rank}: --insecure by default")


def check_generated_certs(case, where, openssl, certs_dir, job, argvs, num_servers, hosts):
    """A launcher's own `kestrel certs` directory: private (0700, keys 0600), no CA key left, every process's
    files present, each certificate naming its job, role and rank, the scheduler's and servers' every host name in
    `hosts` and the workers' none."""
    if not case.check(os.path.isdir(certs_dir), f"{where}: no certificates in {certs_dir}"):
        return
    case.check(stat.S_IMODE(os.stat(certs_dir).st_mode) & 0o077 == 0,
               f"{where}: {certs_dir} is open to other users ({oct(stat.S_IMODE(os.stat(certs_dir).st_mode))})")
    for name in os.listdir(certs_dir):
        mode = stat.S_IMODE(os.stat(os.path.join(certs_dir, name)).st_mode)
        if name.endswith(".key"):
            case.check(mode & 0o077 == 0, f"{where}: {name} is readable by other users ({oct(mode)})")
    case.check(not os.path.exists(os.path.join(certs_dir, "ca.key")),
               f"{where}: the CA key stays in {certs_dir} (anyone with it could mint certificates for the job)")
    for rank, argv in sorted(argvs.items()):
        paths = [flag(argv, f) for f in TLS_FLAGS]
        if not case.check(all(isinstance(p, str) and os.path.isfile(p) for p in paths),
                          f"{where} task {rank}: TLS files {paths} do not exist"):
            continue
        role, _, index = tls_stem(argv, rank, num_servers).partition("-")
        uris, dns = cert_names(openssl, paths[1])
        case.check(uris == [f"spiffe://kestrel/{job}/{role}/{index}"],
                   f"{where} task {rank}: certificate names {uris}, want spiffe://kestrel/{job}/{role}/{index}")
        if role in ("scheduler", "server"):  # the listeners: named by every host a client may dial
            missing = [h for h in hosts if h not in dns]
            case.check(not missing, f"{where} task {rank}: certificate lacks DNS names {missing} (has {dns})")
        else:  # workers only dial: a host name on their certificates would let one pass for a listener
            case.check(not dns, f"{where} task {rank}: a {role}'s certificate names hosts {dns}")
        case.check(key_matches(openssl, paths[1], paths[2]), f"{where} task {rank}: {paths[2]} is not {paths[1]}'s key")


# Fake launchers. tests/real_launchers_test.sh runs both scripts for real on this one machine (a private Slurm:
# sbatch, the multi-prog step, a step restarted after a killed server, a requeue; Open MPI's mpirun), trains a job
# over the certificates they make and compares it with `kestrel local`. What a single node cannot show stays
# here, under a fake srun/scontrol/mpirun: an allocation or hostfile of two hosts, each with a longer `hostname`
# than its Slurm or hostfile name, and every one of those names on the scheduler's and servers' certificates;
# the settings mpirun forwards (on one host every rank inherits its whole environment anyway); and the refusals
# of a given CERTS_DIR (a key others can read, a missing file), which end a run before any launcher starts.
def fake_tools(directory, tools):
    """Executables that stand in for srun, scontrol or mpirun: name -> shell body."""
    os.makedirs(directory, exist_ok=True)
    for name, body in tools.items():
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)


# What the launchers' settings leave to the test (a launcher reads them from the environment).
LAUNCHER_SETTINGS = ("CERTS_DIR", "WORKER_CMD", "KESTREL_PYTHON", "PYTHONPATH")


def slurm_env(deploy_dir, num_servers, num_workers, **settings):
    """kestrel.sbatch's environment for rendering (KESTREL_RENDER_ONLY=1) a job of this size, plus settings."""
    env = dict(os.environ, SLURM_NTASKS=str(1 + num_servers + num_workers), NUM_SERVERS=str(num_servers),
               SCHEDULER_HOST="node-a", SLURM_SUBMIT_DIR=os.path.dirname(deploy_dir), SLURM_JOB_ID="123",
               TRAIN_FILES="/d/train.tsv", TEST_FILES="/d/test.tsv", KESTREL_BIN="/opt/kestrel/bin",
               KESTREL_RENDER_ONLY="1", KESTREL_MULTI_PROG=os.path.join(deploy_dir, "slurm", "kestrel.multi-prog.conf"),
               INSECURE="0")
    for name in LAUNCHER_SETTINGS:
        env.pop(name, None)
    env.update(settings)
    return env


def render_slurm(case, where, sbatch, env):
    """task id -> argv of the multi-prog configuration kestrel.sbatch renders with env; None when it fails."""
    proc = subprocess.run(["bash", sbatch], env=env, capture_output=True, text=True, timeout=60)
    if not case.check(proc.returncode == 0, f"{where}: rendering failed: {proc.stderr.strip()}"):
        return None
    try:
        return expand_multi_prog(proc.stdout, int(env["SLURM_NTASKS"]))
    except ValueError as e:
        case.errors.append(f"{where}: {e}")
        return None


def slurm(case, deploy_dir, helpfull):
    sbatch = os.path.join(deploy_dir, "slurm", "kestrel.sbatch")
    default_certs = os.path.join(os.path.dirname(deploy_dir), "kestrel_out", "123", "certs")
    for num_servers, num_workers, certs, insecure in ((2, 4, None, "0"), (1, 1, "/shared/certs", "0"),
                                                      (3, 8, None, "0"), (2, 4, None, "1")):
        env = slurm_env(deploy_dir, num_servers, num_workers, INSECURE=insecure,
                        **({"CERTS_DIR": certs} if certs else {}))
        where = f"slurm {num_servers} servers {num_workers} workers" + (" INSECURE=1" if insecure == "1" else "")
        tasks = render_slurm(case, where, sbatch, env)
        if tasks is None:
            continue
        for task, argv in sorted(tasks.items()):
            check_flags(case, f"{where} task {task}", argv, helpfull)
        check_layout(case, where, tasks, num_servers, num_workers, scheduler_host="node-a")
        check_tls(case, where, tasks, num_servers, certs or default_certs, insecure=insecure == "1")
    with open(os.path.join(deploy_dir, "slurm", "kestrel.multi-prog.conf")) as f:
        text = f.read()
    case.check("--rank=%o" in text and "--rank=%o" in text,
               "kestrel.multi-prog.conf: servers/workers must get --rank=%o / --rank=%o")
    proc = subprocess.run(["bash", sbatch], env=dict(env, INSECURE="yes"), capture_output=True, text=True, timeout=60)
    case.check(proc.returncode == 2, f"slurm: INSECURE=yes accepted (exit {proc.returncode}), want 2")


def slurm_certs(case, deploy_dir, kestrel_cli):
    """kestrel.sbatch without CERTS_DIR, under a fake srun/scontrol on a two-node allocation: a new CA and
    certificates for every task under $OUT_DIR/certs, naming every node as Slurm names it and as its `hostname`
    says (what servers advertise), the files each rendered task reads; a given CERTS_DIR with a key others can
    read, or lacking a task's files, is refused. (One node, for real: tests/real_launchers_test.sh.)"""
    openssl = need_cli(kestrel_cli)
    tmp = tempfile.mkdtemp(prefix="kestrel-slurm-")
    try:
        fake_tools(os.path.join(tmp, "bin"), {
            "sleep": "exit 0\n",  # the script's polling, not this test's business
            "scontrol": "printf 'node-a\\nnode-b\\n'\n",
            "srun": 'for a in "$@"; do last="$a"; done\n'
                    'if [ "$last" = hostname ]; then\n'
                    '  printf \'node-a.cluster.example\\nnode-b.cluster.example\\n\'; exit 0\n'
                    'fi\n'
                    'while [ $# -gt 0 ]; do\n'
                    '  [ "$1" = --multi-prog ] && cp "$2" "$FAKE_OUT/multi-prog.conf"; shift\n'
                    'done\n',
        })
        num_servers, num_workers = 2, 3
        total = 1 + num_servers + num_workers
        env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
                   FAKE_OUT=tmp, SLURM_NTASKS=str(total), NUM_SERVERS=str(num_servers), SLURM_JOB_NODELIST="node-[a-b]",
                   SLURM_JOB_ID="77", SLURM_SUBMIT_DIR=tmp, TRAIN_FILES="/d/train.tsv", TEST_FILES="/d/test.tsv",
                   OUT_DIR=os.path.join(tmp, "out"), CKPT_DIR=os.path.join(tmp, "ckpt"), KESTREL_BIN="/opt/kestrel/bin",
                   KESTREL_MULTI_PROG=os.path.join(deploy_dir, "slurm", "kestrel.multi-prog.conf"),
                   KESTREL_CLI=kestrel_cli, MAX_RESTARTS="0", FINAL_GRACE="0", JOB_ID="ctr", CERT_HOSTS="extra.example")
        for name in ("SCHEDULER_HOST", "INSECURE", "KESTREL_RENDER_ONLY") + LAUNCHER_SETTINGS:
            env.pop(name, None)
        sbatch = os.path.join(deploy_dir, "slurm", "kestrel.sbatch")
        proc = subprocess.run(["bash", sbatch], env=env, capture_output=True, text=True, timeout=120)
        conf = os.path.join(tmp, "multi-prog.conf")
        if not case.check(proc.returncode == 1 and os.path.exists(conf),
                          f"slurm: the run under a fake srun exited {proc.returncode} without a step: "
                          f"{proc.stderr.strip()}"):
            return
        with open(conf) as f:
            tasks = expand_multi_prog(f.read(), total)
        certs = os.path.join(tmp, "out", "certs")
        check_tls(case, "slurm generated", tasks, num_servers, certs)
        check_generated_certs(case, "slurm generated", openssl, certs, "ctr", tasks, num_servers,
                              ["node-a", "node-b", "node-a.cluster.example", "node-b.cluster.example", "extra.example"])
        # A CERTS_DIR of one's own must be complete and private.
        given = dict(env, CERTS_DIR=certs)
        os.chmod(os.path.join(certs, "worker-1.key"), 0o644)
        proc = subprocess.run(["bash", sbatch], env=given, capture_output=True, text=True, timeout=60)
        case.check(proc.returncode == 2 and "worker-1.key" in proc.stderr,
                   f"slurm: a world-readable key in CERTS_DIR accepted (exit {proc.returncode}): {proc.stderr.strip()}")
        os.remove(os.path.join(certs, "worker-2.pem"))
        proc = subprocess.run(["bash", sbatch], env=given, capture_output=True, text=True, timeout=60)
        case.check(proc.returncode == 2 and "worker-2.pem" in proc.stderr,
                   f"slurm: CERTS_DIR without worker-2.pem accepted (exit {proc.returncode}): {proc.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mpi_argvs(case, where, script, env, num_servers, num_workers, helpfull=None):
    """world rank -> argv that `run_mpmd.sh launch ROLE` execs on that rank (KESTREL_ECHO=1 in env); with
    helpfull, each checked to be a Kestrel binary with its own flags."""
    argvs = {}
    for rank in range(1 + num_servers + num_workers):
        role = "scheduler" if rank == 0 else "server" if rank <= num_servers else "worker"
        proc = subprocess.run(["bash", script, "launch", role], env=dict(env, OMPI_COMM_WORLD_RANK=str(rank)),
                              capture_output=True, text=True, timeout=60)
        if case.check(proc.returncode == 0, f"{where}: rank {rank} ({role}) failed: {proc.stderr.strip()}"):
            argvs[rank] = proc.stdout.splitlines()
            if helpfull is not None:
                check_flags(case, f"{where} rank {rank}", argvs[rank], helpfull)
    return argvs


def mpi_certs(case, deploy_dir, kestrel_cli, helpfull):
    """run_mpmd.sh without CERTS_DIR, under a fake mpirun with a two-host hostfile: a new CA and certificates for
    every rank under $OUT_DIR/certs, naming every host of the hostfile and each host as its `hostname` says (asked
    through the launcher: what servers advertise); each rank's launch reads its own; CERTS_DIR and INSECURE are
    forwarded with -x (on one host a rank inherits mpirun's whole environment, so the real launch cannot show it).
    (One host, for real: tests/real_launchers_test.sh.)"""
    openssl = need_cli(kestrel_cli)
    tmp = tempfile.mkdtemp(prefix="kestrel-mpi-")
    try:
        fake_tools(os.path.join(tmp, "bin"), {
            "sleep": "exit 0\n",  # the script's polling, not this test's business
            "mpirun": 'case "$1" in --version) echo "mpirun (Open MPI) 4.1.4"; exit 0 ;; esac\n'
                      'for a in "$@"; do last="$a"; done\n'
                      'if [ "$last" = hostname ]; then printf \'host-a.example\\nhost-b.example\\n\'; exit 0; fi\n'
                      'echo "$@" >"$FAKE_OUT/mpirun.args"\n',
        })
        hostfile = os.path.join(tmp, "hosts.txt")
        with open(hostfile, "w") as f:
            f.write("# Open MPI and Hydra syntax\nhost-a slots=4\nhost-b:4\n")
        num_servers, num_workers = 2, 3
        script = os.path.join(deploy_dir, "mpi", "run_mpmd.sh")
        env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
                   MPIRUN=os.path.join(tmp, "bin", "mpirun"), FAKE_OUT=tmp, TRAIN_FILES="/d/train.tsv",
                   TEST_FILES="/d/test.tsv", OUT_DIR=os.path.join(tmp, "out"), CKPT_DIR=os.path.join(tmp, "ckpt"),
                   KESTREL_BIN="/opt/kestrel/bin", KESTREL_CLI=kestrel_cli, MAX_RESTARTS="0", FINAL_GRACE="0",
                   JOB_ID="ctr")
        for name in ("SCHEDULER_HOST", "INSECURE", "KESTREL_ECHO", "CERT_HOSTS") + LAUNCHER_SETTINGS:
            env.pop(name, None)
        proc = subprocess.run(["bash", script, "-s", str(num_servers), "-w", str(num_workers), "--", "--hostfile",
                               hostfile], env=env, capture_output=True, text=True, timeout=120)
        if not case.check(proc.returncode == 1 and os.path.exists(os.path.join(tmp, "mpirun.args")),
                          f"mpi: the run under a fake mpirun exited {proc.returncode} without a launch: "
                          f"{proc.stderr.strip()}"):
            return
        with open(os.path.join(tmp, "mpirun.args")) as f:
            forwarded = f.read().split()
        case.check("CERTS_DIR" in forwarded and "INSECURE" in forwarded,
                   "mpi: the launcher does not forward CERTS_DIR and INSECURE to the ranks")
        certs = os.path.join(tmp, "out", "certs")
        ranks = dict(env, NUM_SERVERS=str(num_servers), NUM_WORKERS=str(num_workers), CONFIG="/jobs/deepfm.pbtxt",
                     CKPT_EVERY_CLOCKS="500", DEVICE="cpu", SCHEDULER_HOST="host-a", SCHEDULER_PORT="7000",
                     METRICS_PORT="9100", CERTS_DIR=certs, INSECURE="0", KESTREL_ECHO="1", WORKER_CMD="",
                     KESTREL_PYTHON="/opt/kestrel/python/site")
        argvs = mpi_argvs(case, "mpi generated", script, ranks, num_servers, num_workers, helpfull)
        check_tls(case, "mpi generated", argvs, num_servers, certs)
        check_generated_certs(case, "mpi generated", openssl, certs, "ctr", argvs, num_servers,
                              ["host-a", "host-b", "host-a.example", "host-b.example"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mpi_env(num_servers, num_workers, **settings):
    """The environment run_mpmd.sh forwards to every rank, for `launch ROLE` with KESTREL_ECHO=1, plus settings."""
    env = dict(os.environ, NUM_SERVERS=str(num_servers), NUM_WORKERS=str(num_workers), JOB_ID="ctr",
               CONFIG="/jobs/deepfm.pbtxt", TRAIN_FILES="/d/train.tsv", TEST_FILES="/d/test.tsv",
               CKPT_DIR="/shared/ckpt", CKPT_EVERY_CLOCKS="100", OUT_DIR="/shared/out", DEVICE="cpu",
               SCHEDULER_HOST="host-a", SCHEDULER_PORT="7000", METRICS_PORT="9100", KESTREL_BIN="/opt/kestrel/bin",
               KESTREL_ECHO="1", CERTS_DIR="/shared/certs", INSECURE="0", WORKER_CMD="",
               KESTREL_PYTHON="/opt/kestrel/python/site")
    env.pop("PYTHONPATH", None)
    env.update(settings)
    return env


def mpi(case, deploy_dir, helpfull):
    script = os.path.join(deploy_dir, "mpi", "run_mpmd.sh")
    for num_servers, num_workers in ((2, 4), (1, 1), (3, 8)):
        where = f"mpi {num_servers} servers {num_workers} workers"
        base = mpi_env(num_servers, num_workers)
        argvs = mpi_argvs(case, where, script, base, num_servers, num_workers, helpfull)
        # A rank outside its role's range is refused (contexts out of order).
        proc = subprocess.run(["bash", script, "launch", "server"], env=dict(base, OMPI_COMM_WORLD_RANK="0"),
                              capture_output=True, text=True, timeout=60)
        case.check(proc.returncode != 0, f"{where}: world rank 0 accepted as a server")
        check_layout(case, where, argvs, num_servers, num_workers, scheduler_host="host-a")
        check_tls(case, where, argvs, num_servers, "/shared/certs")
        check_tls(case, where + " INSECURE=1", mpi_argvs(case, where, script, dict(base, INSECURE="1"), num_servers,
                                                         num_workers, helpfull), num_servers, None, insecure=True)
        ports = [flag(a, "metrics_port") for a in argvs.values()]
        case.check(len(set(ports)) == len(ports), f"{where}: processes share a --metrics_port")
        # The launcher's command line: three app contexts in order, -np 1, S, W.
        env = dict(os.environ, TRAIN_FILES="/d/train.tsv", TEST_FILES="/d/test.tsv", MPIRUN="true")
        proc = subprocess.run(["bash", script, "--dry-run", "-s", str(num_servers), "-w", str(num_workers)], env=env,
                              capture_output=True, text=True, timeout=60)
        if case.check(proc.returncode == 0, f"{where}: --dry-run failed: {proc.stderr.strip()}"):
            line = [l for l in proc.stdout.splitlines() if not l.startswith("#")][0]
            contexts = re.findall(r"-np (\d+) \S+ launch (\w+)", line)
            case.check(contexts == [("1", "scheduler"), (str(num_servers), "server"), (str(num_workers), "worker")],
                       f"{where}: launcher app contexts {contexts}")


# ------------------------------------------------------------------------------------- python workers

# The Python worker the launcher checks name in WORKER_CMD (its own flag first, then the launchers').
PYTHON_WORKER_CMD = ["python3", "/opt/kestrel/examples/torch/deepfm.py", "--dense=allreduce"]
PYTHON_WORKER_COMPONENT = "components/python-worker"


class FlagError(Exception):
    pass


def python_worker_flags(worker_py):
    """A function argv -> None, or why the Python worker's parser refuses argv: kestrel.worker.add_flags
    (python/kestrel/worker.py, loaded with a stand-in for the compiled kestrel module it imports)."""
    saved = sys.modules.get("kestrel")
    stand_in = types.ModuleType("kestrel")
    # Duration values are parsed by the compiled module (absl::ParseDuration; //python:client_test checks it):
    # here only the flags' names and shapes are at stake.
    stand_in.duration_seconds = lambda text: 0.0
    sys.modules["kestrel"] = stand_in
    try:
        spec = importlib.util.spec_from_file_location("kestrel_worker_flags", worker_py)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["kestrel"]
        else:
            sys.modules["kestrel"] = saved

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise FlagError(message)

    def parse(argv):
        parser = Parser(prog="python worker")
        module.add_flags(parser)
        try:
            parser.parse_args(argv)
        except FlagError as e:
            return str(e)
        return None
    return parse


def check_python_workers(case, where, default, python, num_servers, python_path, parse):
    """default, python: task -> argv of one launch without and with WORKER_CMD. The workers run
    `env PYTHONPATH=<python_path> <PYTHON_WORKER_CMD>` and then exactly kestrel_worker's flags, every one of which
    the Python worker accepts; the scheduler and the servers are unchanged."""
    case.check(sorted(python) == sorted(default),
               f"{where}: tasks {sorted(python)}, without WORKER_CMD {sorted(default)}")
    prefix = ["env", f"PYTHONPATH={python_path}"] + PYTHON_WORKER_CMD
    for task in sorted(set(default) & set(python)):
        argv = python[task]
        if task <= num_servers:
            case.check(argv == default[task], f"{where} task {task}: WORKER_CMD changed a non-worker: {argv}")
            continue
        if not case.check(argv[:len(prefix)] == prefix,
                          f"{where} task {task}: runs {argv[:len(prefix)]}, want {prefix}"):
            continue
        flags = argv[len(prefix):]
        case.check(flags == default[task][1:],
                   f"{where} task {task}: flags {flags}, kestrel_worker's {default[task][1:]}")
        error = parse(flags)
        case.check(error is None, f"{where} task {task}: the Python worker refuses its flags: {error}")


# (servers, workers, settings, the PYTHONPATH workers get) of the launches the Slurm and MPI checks make.
PYTHON_LAUNCHES = ((2, 4, {}, "/opt/kestrel/python/site"), (1, 1, {}, "/opt/kestrel/python/site"),
                   (3, 2, {"KESTREL_PYTHON": "/shared/site", "PYTHONPATH": "/mine"}, "/shared/site:/mine"))


def check_python_launches(case, launcher, make_env, launch, parse):
    """check_python_workers on each of PYTHON_LAUNCHES: launch(where, env, servers, workers) gives the tasks' argvs,
    with env = make_env(servers, workers, **settings) and then with WORKER_CMD added."""
    for num_servers, num_workers, settings, python_path in PYTHON_LAUNCHES:
        where = f"{launcher} {num_servers} servers {num_workers} workers WORKER_CMD"
        env = make_env(num_servers, num_workers, **settings)
        default = launch(where, env, num_servers, num_workers)
        python = launch(where, dict(env, WORKER_CMD=" ".join(PYTHON_WORKER_CMD)), num_servers, num_workers)
        if default and python:
            check_python_workers(case, where, default, python, num_servers, python_path, parse)


def slurm_python(case, deploy_dir, parse):
    """kestrel.sbatch with WORKER_CMD: worker tasks run `env PYTHONPATH=<KESTREL_PYTHON>[:PYTHONPATH] WORKER_CMD
    <kestrel_worker's flags>` (KESTREL_PYTHON: python/site beside KESTREL_BIN unless given), other tasks as without;
    a word with whitespace, or no package at KESTREL_PYTHON when the job starts, is refused."""
    sbatch = os.path.join(deploy_dir, "slurm", "kestrel.sbatch")
    check_python_launches(case, "slurm", lambda *sizes, **settings: slurm_env(deploy_dir, *sizes, **settings),
                          lambda where, env, *_: render_slurm(case, where, sbatch, env), parse)
    env = slurm_env(deploy_dir, 1, 1, WORKER_CMD=" ".join(PYTHON_WORKER_CMD))
    proc = subprocess.run(["bash", sbatch], env=dict(env, KESTREL_PYTHON="/my site"), capture_output=True, text=True,
                          timeout=60)
    case.check(proc.returncode == 2 and "whitespace" in proc.stderr,
               f"slurm: KESTREL_PYTHON with a space accepted (exit {proc.returncode}): {proc.stderr.strip()}")
    tmp = tempfile.mkdtemp(prefix="kestrel-slurm-python-")
    try:
        env.pop("KESTREL_RENDER_ONLY")
        proc = subprocess.run(["bash", sbatch], env=dict(env, KESTREL_PYTHON=tmp, OUT_DIR=os.path.join(tmp, "out"),
                                                        CKPT_DIR=os.path.join(tmp, "ckpt")),
                              capture_output=True, text=True, timeout=60)
        case.check(proc.returncode == 2 and f"KESTREL_PYTHON={tmp}" in proc.stderr,
                   f"slurm: WORKER_CMD without a kestrel package in KESTREL_PYTHON accepted (exit {proc.returncode}): "
                   f"{proc.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mpi_python(case, deploy_dir, parse):
    """run_mpmd.sh with WORKER_CMD: forwarded with KESTREL_PYTHON to every rank; worker ranks run
    `env PYTHONPATH=<KESTREL_PYTHON>[:the rank's PYTHONPATH] WORKER_CMD <kestrel_worker's flags>` (KESTREL_PYTHON:
    python/site beside KESTREL_BIN unless given), other ranks as without; no package at KESTREL_PYTHON when the job
    starts is refused."""
    script = os.path.join(deploy_dir, "mpi", "run_mpmd.sh")
    check_python_launches(case, "mpi", mpi_env, lambda where, env, *sizes: mpi_argvs(case, where, script, env, *sizes),
                          parse)
    # The launcher side: KESTREL_PYTHON's default, both settings forwarded, the package required.
    tmp = tempfile.mkdtemp(prefix="kestrel-mpi-python-")
    try:
        env = dict(os.environ, TRAIN_FILES="/d/train.tsv", TEST_FILES="/d/test.tsv", MPIRUN="true",
                   KESTREL_BIN="/opt/kestrel/bin", WORKER_CMD=" ".join(PYTHON_WORKER_CMD),
                   OUT_DIR=os.path.join(tmp, "out"), CKPT_DIR=os.path.join(tmp, "ckpt"))
        env.pop("KESTREL_PYTHON", None)
        proc = subprocess.run(["bash", script, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
        if case.check(proc.returncode == 0, f"mpi WORKER_CMD: --dry-run failed: {proc.stderr.strip()}"):
            forwarded = re.search(r"-genvlist (\S+)", proc.stdout)
            names = forwarded.group(1).replace("\\", "").split(",") if forwarded else []
            case.check("WORKER_CMD" in names and "KESTREL_PYTHON" in names,
                       f"mpi WORKER_CMD: the launcher forwards {names}, not WORKER_CMD and KESTREL_PYTHON")
            case.check("PYTHONPATH=/opt/kestrel/python/site" in proc.stdout,
                       f"mpi WORKER_CMD: KESTREL_PYTHON is not python/site beside KESTREL_BIN: {proc.stdout.strip()}")
        proc = subprocess.run(["bash", script], env=dict(env, KESTREL_PYTHON=tmp), capture_output=True, text=True,
                              timeout=60)
        case.check(proc.returncode == 2 and f"KESTREL_PYTHON={tmp}" in proc.stderr,
                   f"mpi: WORKER_CMD without a kestrel package in KESTREL_PYTHON accepted (exit {proc.returncode}): "
                   f"{proc.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def without_python_worker(doc, command):
    """A copy of a worker Job with what components/python-worker changes reset: the command, PYTHONPATH and the
    scrape annotation."""
    doc = copy.deepcopy(doc)
    template = doc["spec"]["template"]
    c = pod_containers(template)[0]
    c["command"] = command
    c["env"] = [v for v in c.get("env", []) or [] if v.get("name") != "PYTHONPATH"]
    template["metadata"].get("annotations", {}).pop("prometheus.io/scrape", None)
    return doc


def k8s_python_worker(case, k8s, deploy_dir, layout, examples_dir, parse):
    """components/python-worker (over overlays/cpu, with and without components/plaintext): the worker Job runs
    python3 and a PyTorch example where the image holds them, with the image's package on PYTHONPATH, then
    exactly kestrel_worker's command flags and args, each one the Python worker accepts; its pods are not scraped
    (it serves no /metrics); nothing else differs."""
    cpu = next(r for r in k8s.renders if r.name == "overlays/cpu")
    for components in ((), (PLAINTEXT_COMPONENT,)):
        r = render_with_component(deploy_dir, PYTHON_WORKER_COMPONENT, *components)
        reference = render_with_component(deploy_dir, *components) if components else cpu
        for kind, name in (("StatefulSet", SCHEDULER_NAME), ("StatefulSet", SERVER_NAME)):
            case.check(r.get(kind, name) == reference.get(kind, name), f"{r.name}: {kind} {name} differs")
        job, ref = r.get("Job", WORKER_NAME), reference.get("Job", WORKER_NAME)
        if not case.check(job is not None and ref is not None, f"{r.name}: no worker Job"):
            continue
        template = job["spec"]["template"]
        c, rc = pod_containers(template)[0], pod_containers(ref["spec"]["template"])[0]
        command = list(c.get("command") or [])
        script = command[1] if len(command) > 1 else ""
        case.check(command[:1] == ["python3"], f"{r.name}: the worker runs {command[:1]}, want python3")
        case.check(os.path.dirname(script) == layout.get("examples/torch"),
                   f"{r.name}: the worker's script {script} is not in the image's examples "
                   f"({layout.get('examples/torch')}, deploy/Dockerfile)")
        case.check(os.path.isfile(os.path.join(examples_dir, os.path.basename(script))),
                   f"{r.name}: the worker's script {script} is not one of examples/torch")
        case.check(command[2:] == rc["command"][1:] and c.get("args") == rc.get("args"),
                   f"{r.name}: the worker's flags {command[2:]} {c.get('args')}, kestrel_worker's "
                   f"{rc['command'][1:]} {rc.get('args')}")
        env, errors = r.container_env(WORKER_NAME, c)
        case.check(env.get("PYTHONPATH") == layout.get("python/site"),
                   f"{r.name}: the worker's PYTHONPATH={env.get('PYTHONPATH')}, the image's package is in "
                   f"{layout.get('python/site')}")
        for e in errors:
            case.errors.append(f"{r.name}: worker: {e}")
        flags = [expand(a, replica_env(r, WORKER_NAME, c, 0)) for a in command[2:] + list(c.get("args") or [])]
        error = parse(flags)
        case.check(error is None, f"{r.name}: the Python worker refuses its flags: {error} ({flags})")
        scrape = (template["metadata"].get("annotations") or {}).get("prometheus.io/scrape")
        case.check(scrape == "false",
                   f"{r.name}: worker pods scraped ({scrape}), but a Python worker serves no /metrics")
        case.check(without_python_worker(job, rc["command"]) == without_python_worker(ref, rc["command"]),
                   f"{r.name}: the worker Job differs from {reference.name}'s in more than command, PYTHONPATH and "
                   "scraping")


# ---------------------------------------------------------------------------------------------- image


def dockerfile(deploy_dir):
    """(instructions as (keyword, text) with continuation lines joined, COPY source -> destination)."""
    with open(os.path.join(deploy_dir, "Dockerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    instructions = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    copies = {}
    for keyword, rest in instructions:
        if keyword == "COPY":
            source, dest = rest.split()[-2:]
            copies[source.rstrip("/")] = dest.rstrip("/")
    return instructions, copies


def image_layout(case, deploy_dir, state):
    """deploy/Dockerfile against build_image.sh and the launchers: every COPY source is a directory build_image.sh
    stages; the binaries' directory is on PATH; the kestrel package is python/site beside it (the launchers'
    KESTREL_PYTHON default); the PyTorch examples are copied; PyTorch and NumPy are installed by default."""
    instructions, copies = dockerfile(deploy_dir)
    with open(os.path.join(deploy_dir, "build_image.sh")) as f:
        build = f.read()
    for source in copies:
        case.check(f'"$context/{source}' in build, f"Dockerfile copies {source}/, which build_image.sh does not stage")
    for source in ("bin", "python/site", "examples/torch"):
        case.check(source in copies, f"Dockerfile copies no {source}/ (copies {sorted(copies)})")
    bin_dir = copies.get("bin", "")
    path = " ".join(rest for keyword, rest in instructions if keyword == "ENV" and rest.startswith("PATH"))
    case.check(bool(bin_dir) and bin_dir in path.split("=", 1)[-1].split(":"),
               f"Dockerfile: the binaries' directory {bin_dir} is not on PATH ({path or 'no ENV PATH'}); the manifests "
               "run them by name")
    case.check(copies.get("python/site") == os.path.join(os.path.dirname(bin_dir), "python", "site"),
               f"Dockerfile: the kestrel package goes to {copies.get('python/site')}, not python/site beside {bin_dir} "
               "(the Slurm and MPI scripts' KESTREL_PYTHON default)")
    run = " ".join(rest for keyword, rest in instructions if keyword == "RUN" and "apt-get install" in rest)
    torch = re.search(r'1\)\s*python="([^"]*)"', run)
    case.check(torch and {"python3", "python3-numpy", "python3-torch"} <= set(torch.group(1).split()),
               "Dockerfile: PYTORCH=1 (the default) does not install python3, python3-numpy and python3-torch")
    case.check(re.search(r"ARG PYTORCH=1\b", " ".join(f"{k} {r}" for k, r in instructions)) is not None,
               "Dockerfile: PYTORCH does not default to 1")
    state["image"] = copies


# Packages every debian:bookworm-slim image holds.
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}


def debian_packages(dpkg, paths):
    """path -> the Debian package that owns that library (trying its merged-/usr aliases), for those owned."""
    aliases = {}
    for path in paths:
        real = os.path.realpath(path)
        aliases[path] = list(dict.fromkeys(
            [path, real] + [p[4:] if p.startswith("/usr/") else "/usr" + p for p in (path, real)]))
    every = sorted({a for names in aliases.values() for a in names})
    # One query for them all: dpkg -S reads its whole database each time.
    proc = subprocess.run([dpkg, "-S"] + every, capture_output=True, text=True, timeout=120)
    owner = {}
    for line in proc.stdout.splitlines():
        packages, sep, path = line.rpartition(": ")
        if sep:
            owner[path.strip()] = packages.split(",")[0].split(":")[0].strip()
    return {path: next((owner[a] for a in names if a in owner), None) for path, names in aliases.items()}


def image_libraries(case, deploy_dir, files):
    """Every shared library the binaries and the package's _kestrel.so load (ldd here) is a CUDA library
    (build_image.sh stages those) or comes from a Debian package the Dockerfile installs or the base image has."""
    ldd, dpkg = find_tool("ldd"), find_tool("dpkg")
    if not ldd or not dpkg:
        raise Skip("ldd or dpkg is missing (a Debian host tells which package holds each library)")
    instructions, _ = dockerfile(deploy_dir)
    run = " ".join(rest for keyword, rest in instructions if keyword == "RUN" and "apt-get install" in rest)
    installed = set(BASE_IMAGE_PACKAGES)
    for listed in re.findall(r"apt-get install((?:(?!&&).)*)", run):
        installed |= {w for w in listed.split() if not w.startswith(("-", "$"))}
    loads = {}  # library path -> the files that load it
    for name, path in files.items():
        proc = subprocess.run([ldd, path], capture_output=True, text=True, timeout=60)
        if not case.check(proc.returncode == 0, f"ldd {name} failed: {proc.stderr.strip()}"):
            continue
        for line in proc.stdout.splitlines():
            soname, arrow, rest = line.strip().partition(" => ")
            if not arrow:
                continue
            lib = rest.split(" (")[0].strip()
            if not case.check(lib != "not found", f"{name}: {soname} not found here"):
                continue
            if "/cuda" not in os.path.realpath(lib) and not soname.startswith("libcuda.so"):
                loads.setdefault(lib, []).append(name)
    for lib, package in sorted(debian_packages(dpkg, loads).items()):
        case.check(package in installed, f"{', '.join(loads[lib])} load {lib}, from {package or 'no Debian package'}, "
                   "which deploy/Dockerfile does not install")
    print(f"  {len(loads)} libraries of {len(files)} files checked against {len(installed)} packages")


# ----------------------------------------------------------------------------------------- shellcheck


def is_shell_script(path):
    """*.sh, *.sbatch, or a file whose #! line runs sh or bash."""
    if not os.path.isfile(path):
        return False
    if path.endswith((".sh", ".sbatch")):
        return True
    with open(path, "rb") as f:
        first = f.readline()
    return bool(re.match(rb"#!\s*\S*/(env\s+)?(ba)?sh\b", first))


def shellcheck(case, deploy_dir, scripts_dir, self_script):
    tool = find_tool("shellcheck")
    if not tool:
        raise Skip("shellcheck is not installed (apt-get install shellcheck)")
    files = sorted(p for p in glob.glob(os.path.join(deploy_dir, "**", "*"), recursive=True) if is_shell_script(p))
    if scripts_dir:
        files += sorted(p for p in glob.glob(os.path.join(scripts_dir, "*")) if is_shell_script(p))
    else:
        case.errors.append("scripts/ not found: its scripts were not checked")
    if self_script:
        files.append(self_script)
    case.check(len(files) >= 3, f"only {len(files)} scripts found")
    proc = subprocess.run([tool, "-S", "warning", "-f", "gcc"] + files, capture_output=True, text=True, timeout=120)
    for line in proc.stdout.splitlines():
        case.errors.append(line.replace(deploy_dir, "deploy"))
    case.check(proc.returncode == 0 or proc.stdout, f"shellcheck failed: {proc.stderr.strip()}")
    print(f"  shellcheck: {len(files)} scripts")


# ----------------------------------------------------------------------------------------------- main


def find_tool(name):
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/local/bin", "/bin"]:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def tool_present(tool, kestrel_cli):
    """Whether one of the tools named in K8S_TOOLS, CERT_TOOLS or SHELLCHECK_TOOLS is installed."""
    if tool == "PyYAML":
        return yaml is not None
    if tool == "scripts/kestrel":
        return bool(kestrel_cli) and os.path.isfile(kestrel_cli)
    return find_tool(tool) is not None


def write_xml(cases, path):
    suite = ET.Element("testsuite", name="deploy_test", tests=str(len(cases)),
                       failures=str(sum(1 for c in cases if c.errors)),
                       skipped=str(sum(1 for c in cases if c.skipped and not c.errors)))
    for c in cases:
        tc = ET.SubElement(suite, "testcase", name=c.name, classname="deploy_test", time=f"{c.seconds:.3f}")
        if c.errors:
            failure = ET.SubElement(tc, "failure", message=f"{len(c.errors)} problem(s)")
            failure.text = "\n".join(c.errors)
        elif c.skipped:
            ET.SubElement(tc, "skipped", message=c.skipped)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--scripts", default="")
    ap.add_argument("--self", default="")
    ap.add_argument("--site", default="", help="the kestrel Python package's directory (//python:site)")
    ap.add_argument("--examples", default="", help="examples/torch (the PyTorch workers)")
    args = ap.parse_args()
    deploy_dir = os.path.abspath(args.deploy)
    kestrel_cli = os.path.join(args.scripts, "kestrel") if args.scripts else ""

    cases = []
    state = {}
    needs_tools = {}  # group name -> the tools it needs (groups that need none are not here)

    def run(name, fn, *fargs, tools=()):
        case = Case(name)
        if tools:
            needs_tools[name] = tools
        start = time.time()
        try:
            fn(case, *fargs)
        except Skip as s:
            case.skipped = str(s)
        except Exception as e:  # a crash in a check is a failure of that group, not of the others
            case.errors.append(f"{type(e).__name__}: {e}")
        case.seconds = time.time() - start
        cases.append(case)
        status = "FAIL" if case.errors else "SKIP" if case.skipped else "PASS"
        print(f"[{status}] {name} ({case.seconds:.1f} s)"
              + (f" ({case.skipped})" if case.skipped and not case.errors else ""))
        for e in case.errors[:60]:
            print(f"    {e}")
        if len(case.errors) > 60:
            print(f"    ... {len(case.errors) - 60} more")

    def helpfull_case(case):
        flags = {}
        for name, rel in BINARIES.items():
            path = os.path.join(args.bin, rel)
            proc = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=60)
            parsed = parse_helpfull(proc.stdout + proc.stderr)
            if case.check(len(parsed) > 5, f"{name} --helpfull listed {len(parsed)} flags (exit {proc.returncode})"):
                flags[name] = parsed
        state["helpfull"] = flags
        print("  flags: " + "; ".join(f"{n}: {len(f)}" for n, f in flags.items()))

    def need_helpfull():
        if len(state.get("helpfull", {})) != len(BINARIES):
            raise Skip("the binaries' --helpfull could not be read")
        return state["helpfull"]

    def render_case(case):
        if yaml is None:
            raise Skip("PyYAML is missing (apt-get install python3-yaml)")
        kubectl = find_tool("kubectl")
        if not kubectl:
            raise Skip("kubectl is not installed (kubectl kustomize renders the manifests offline)")
        renders = []
        for overlay in OVERLAYS:
            try:
                renders.append(render_kustomize(kubectl, deploy_dir, overlay))
            except RuntimeError as e:
                case.errors.append(str(e))
        if len(renders) == len(OVERLAYS):
            state["k8s"] = K8s(renders)
            print("  rendered: " + ", ".join(f"{r.name} ({len(r.docs)} objects)" for r in renders))

    def python_flags_case(case):
        worker_py = os.path.join(args.site, "kestrel", "worker.py")
        if not case.check(os.path.isfile(worker_py), f"{worker_py} is missing (//python:site)"):
            return
        parse = python_worker_flags(worker_py)
        case.check(parse([]) is None, "the Python worker refuses an empty command line")
        case.check(parse(["--no_such_flag=1"]) is not None, "the Python worker accepts any flag (the checks need it to "
                   "refuse unknown ones)")
        state["python_parse"] = parse

    def need_python():
        if "python_parse" not in state:
            raise Skip("the Python worker's flags could not be read")
        return state["python_parse"]

    def need_image():
        if "image" not in state:
            raise Skip("the Dockerfile's layout could not be read")
        return state["image"]

    def with_k8s(fn, *extra):
        def wrapped(case):
            if "k8s" not in state:
                raise Skip("the manifests were not rendered")
            fn(case, state["k8s"], *extra)
        return wrapped

    def tool_groups_case(case):
        ran = [c.name for c in cases if c.name in needs_tools and not c.skipped]
        missing = sorted({tool for tools in needs_tools.values() for tool in tools
                          if not tool_present(tool, kestrel_cli)})
        why = f"missing: {', '.join(missing)}" if missing else "see their reasons above"
        case.check(ran, f"every group that needs a tool skipped ({why}): this run checked no Kubernetes manifest, "
                        "certificate or shell script (scripts/setup.sh installs python3-yaml and shellcheck; kubectl "
                        "and openssl come with the image)")
        print(f"  groups that needed a tool and ran: {len(ran)} of {len(needs_tools)}"
              + (f"; missing: {', '.join(missing)}" if missing else ""))

    run("binaries_helpfull", helpfull_case)
    run("binaries_read_launcher_env", launcher_env, args.bin)
    run("k8s_render", render_case, tools=K8S_TOOLS)
    run("k8s_kinds", with_k8s(k8s_kinds), tools=K8S_TOOLS)
    run("k8s_services", with_k8s(k8s_services), tools=K8S_TOOLS)
    run("k8s_ports_and_probes", with_k8s(k8s_ports_probes), tools=K8S_TOOLS)
    run("k8s_mutual_tls", with_k8s(k8s_tls), tools=K8S_TOOLS)
    run("k8s_env_and_scheduler_address", with_k8s(k8s_env), tools=K8S_TOOLS)
    run("k8s_counts_and_indexing", with_k8s(k8s_counts), tools=K8S_TOOLS)
    run("k8s_checkpoint_volume", with_k8s(k8s_checkpoints), tools=K8S_TOOLS)
    run("k8s_job_config", with_k8s(k8s_job_config, deploy_dir), tools=K8S_TOOLS)
    run("k8s_prometheus", with_k8s(k8s_prometheus), tools=K8S_TOOLS)
    run("k8s_resources", with_k8s(k8s_resources), tools=K8S_TOOLS)
    run("k8s_devices", with_k8s(k8s_devices), tools=K8S_TOOLS)
    run("k8s_flags", lambda case: with_k8s(k8s_flags, need_helpfull())(case), tools=K8S_TOOLS)
    run("k8s_plaintext_component", lambda case: with_k8s(k8s_plaintext, deploy_dir, need_helpfull())(case),
        tools=K8S_TOOLS)
    run("k8s_replicas_component", lambda case: with_k8s(k8s_replicas, deploy_dir, need_helpfull())(case),
        tools=K8S_TOOLS)
    run("k8s_elastic_component", lambda case: with_k8s(k8s_elastic, deploy_dir, need_helpfull())(case),
        tools=K8S_TOOLS)
    run("k8s_secrets_command", with_k8s(k8s_secrets_command, kestrel_cli), tools=K8S_TOOLS + CERT_TOOLS)
    run("python_worker_flags", python_flags_case)
    run("image_layout", lambda case: image_layout(case, deploy_dir, state))
    run("image_libraries", lambda case: image_libraries(case, deploy_dir, dict(
        {name: os.path.join(args.bin, rel) for name, rel in BINARIES.items()},
        _kestrel=os.path.join(args.site, "kestrel", "_kestrel.so"))))
    run("k8s_python_worker_component", lambda case: with_k8s(k8s_python_worker, deploy_dir, need_image(),
                                                             args.examples, need_python())(case), tools=K8S_TOOLS)
    run("slurm_multi_prog", lambda case: slurm(case, deploy_dir, need_helpfull()))
    run("slurm_generated_certs", lambda case: slurm_certs(case, deploy_dir, kestrel_cli), tools=CERT_TOOLS)
    run("slurm_python_worker", lambda case: slurm_python(case, deploy_dir, need_python()))
    run("mpi_mpmd", lambda case: mpi(case, deploy_dir, need_helpfull()))
    run("mpi_python_worker", lambda case: mpi_python(case, deploy_dir, need_python()))
    run("mpi_generated_certs", lambda case: mpi_certs(case, deploy_dir, kestrel_cli, need_helpfull()),
        tools=CERT_TOOLS)
    run("shellcheck", shellcheck, deploy_dir, args.scripts, args.self, tools=SHELLCHECK_TOOLS)
    run("tool_groups_ran", tool_groups_case)

    xml_path = os.environ.get("XML_OUTPUT_FILE")
    if xml_path:
        write_xml(cases, xml_path)
    failed = [c.name for c in cases if c.errors]
    skipped = [c.name for c in cases if c.skipped and not c.errors]
    print(f"{len(cases) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped"
          + (f" (failed: {', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
