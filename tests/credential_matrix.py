#!/usr/bin/env python3
"""Every credential against every RPC of a live mutual-TLS cluster, from a non-C++ client (Python grpcio with
stubs generated from proto/). Run by tests/credential_matrix_test.sh, which starts the cluster and makes the
certificates; prints the matrix and exits 1 unless every wrong credential is refused, every right one gets
through, and the server's table fingerprints are unchanged by every refused call.

usage: credential_matrix.py STUBS_DIR CERTS_DIR OTHER_CA_DIR OTHER_JOB_DIR SCHEDULER_ADDR SERVER_ADDR JOB
"""
import struct
import sys

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
from proto import ps_pb2, ps_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc, table_pb2  # noqa: E402

certs, other_ca, other_job, scheduler_addr, server_addr, job = sys.argv[2:8]
DEADLINE = 3


def read(path):
    with open(path, "rb") as f:
        return f.read()


def credentials(ca_dir, name):
    """mTLS credentials presenting `name`'s certificate from `ca_dir` and trusting the job's CA."""
    return grpc.ssl_channel_credentials(read(f"{certs}/ca.pem"), read(f"{ca_dir}/{name}.key"),
                                        read(f"{ca_dir}/{name}.pem"))


def channel(addr, creds):
    return grpc.insecure_channel(addr) if creds is None else grpc.secure_channel(addr, creds)


def header(rank=0):
    return ps_pb2.RequestHeader(job_id=job, worker_rank=rank)


KEY = struct.pack("<Q", 7)
ROW = struct.pack("<2f", 0.5, 0.5)
TABLE = "mx"

# (service, method, request, roles allowed)
PS = [
    ("Pull", lambda: ps_pb2.PullRequest(header=header(), table=TABLE, dim=2, keys=KEY), {"worker"}),
    ("Push", lambda: ps_pb2.PushRequest(header=header(), table=TABLE, dim=2, keys=KEY, values=ROW), {"worker"}),
    ("PullDense", lambda: ps_pb2.PullRequest(header=header(), table=TABLE, dim=2, keys=KEY), {"worker"}),
    ("PushDense", lambda: ps_pb2.PushRequest(header=header(), table=TABLE, dim=2, keys=KEY, values=ROW),
     {"worker"}),
    ("CreateTable", lambda: ps_pb2.CreateTableRequest(
        header=header(), config=table_pb2.TableConfig(name="mx2", kind=table_pb2.TableConfig.SPARSE, dim=2)),
     {"worker"}),
    ("DescribeTables", lambda: ps_pb2.DescribeTablesRequest(header=header()), {"worker", "scheduler", "admin"}),
    ("Stats", lambda: ps_pb2.StatsRequest(header=header()), {"worker", "scheduler", "admin"}),
    ("Checkpoint", lambda: ps_pb2.CheckpointShardRequest(header=header(), name="ckpt-00000001"), {"scheduler"}),
    ("Restore", lambda: ps_pb2.RestoreShardRequest(header=header(), name="ckpt-00000001"), {"scheduler"}),
    # Server to server (a primary forwarding to its backups); this unreplicated job refuses it even then.
    ("Replicate", lambda: ps_pb2.PushRequest(header=ps_pb2.RequestHeader(job_id=job, worker_rank=0, owner=0),
                                             table=TABLE, dim=2, keys=KEY, values=ROW), {"server"}),
    ("ReplicateDense", lambda: ps_pb2.PushRequest(header=ps_pb2.RequestHeader(job_id=job, worker_rank=0, owner=0),
                                                  table=TABLE, dim=2, keys=KEY, values=ROW), {"server"}),
    # Re-replication and rescales: the scheduler asks, servers send each other rows. Harmless requests: a copy
    # this unreplicated job refuses, rows of a rescale nobody started (staged, then dropped by the abort below),
    # and an abort of that rescale.
    ("CopyGroup", lambda: ps_pb2.CopyGroupRequest(header=header(-1), owner=0, target=1, target_address="x:1"),
     {"scheduler"}),
    ("ReceiveGroup", lambda: ps_pb2.GroupChunk(header=header(-1), owner=0, sequence=0, layout_generation=1,
                                               sender=0), {"server"}),
    ("RescaleShard", lambda: ps_pb2.RescaleShardRequest(header=header(-1), phase=ps_pb2.RescaleShardRequest.ABORT,
                                                        layout_generation=1), {"scheduler"}),
]
SCHEDULER = [
    ("Register", lambda role: scheduler_pb2.RegisterRequest(
        job_id=job, role=scheduler_pb2.ROLE_SERVER if role == "server" else scheduler_pb2.ROLE_WORKER,
        address="127.0.0.1:1", requested_rank=0), {"worker", "server"}),
    ("Heartbeat", lambda role: scheduler_pb2.HeartbeatRequest(
        job_id=job, role=scheduler_pb2.ROLE_SERVER if role == "server" else scheduler_pb2.ROLE_WORKER, id=0,
        incarnation=bytes(16)), {"worker", "server"}),
    ("WaitToStart", lambda role: scheduler_pb2.WaitToStartRequest(job_id=job, rank=0, clock=0), {"worker"}),
    ("Advance", lambda role: scheduler_pb2.AdvanceRequest(job_id=job, rank=0, finished=0), {"worker"}),
    ("Describe", lambda role: scheduler_pb2.DescribeRequest(job_id=job), {"worker", "server", "admin"}),
    ("Rejoin", lambda role: scheduler_pb2.RejoinRequest(job_id=job, id=0, incarnation=bytes(16)), {"worker"}),
    # A made-up incarnation: refused (FAILED_PRECONDITION) once the caller is let through; nothing rolls back.
    ("RequestRollback", lambda role: scheduler_pb2.RequestRollbackRequest(job_id=job, id=0, incarnation=bytes(16)),
     {"worker"}),
    ("RequestCheckpoint", lambda role: scheduler_pb2.RequestCheckpointRequest(job_id=job), {"admin"}),
    # Counts out of range: refused as such (INVALID_ARGUMENT) once the caller is let through.
    ("Scale", lambda role: scheduler_pb2.ScaleRequest(job_id=job, servers=0, workers=0), {"admin"}),
]


def fingerprint():
    stub = ps_pb2_grpc.ParameterServerStub(channel(server_addr, credentials(certs, "admin-0")))
    answer = stub.Stats(ps_pb2.StatsRequest(header=header(), fingerprints=True), timeout=DEADLINE)
    return sorted((t.config.name, t.rows, t.fingerprint) for t in answer.tables)


def call(stub, method, request):
    try:
        getattr(stub, method)(request, timeout=DEADLINE)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def main():
    # A table with a row, so fingerprints mean something.
    worker = ps_pb2_grpc.ParameterServerStub(channel(server_addr, credentials(certs, "worker-0")))
    worker.CreateTable(ps_pb2.CreateTableRequest(
        header=header(), config=table_pb2.TableConfig(name=TABLE, kind=table_pb2.TableConfig.SPARSE, dim=2)),
        timeout=DEADLINE)
    worker.Push(ps_pb2.PushRequest(header=header(), table=TABLE, dim=2, keys=KEY, values=ROW), timeout=DEADLINE)

    # Wrong credentials: none, another CA's, another job's; and every right-CA role outside an RPC's list.
    wrong = [("no certificate", None, None), ("another CA", other_ca, "worker-0"),
             ("another job", other_job, "worker-0")]  # same CA, another job: refused by the job check
    roles = ["worker", "server", "scheduler", "admin"]
    refused = accepted_wrong = right_ok = right_refused = 0
    before = fingerprint()
    lines = []

    def check(label, role, allowed, addr, make_stub, method, request, creds):
        nonlocal refused, accepted_wrong, right_ok, right_refused
        code = call(make_stub(channel(addr, creds)), method, request)
        denied = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED,
                          grpc.StatusCode.UNAUTHENTICATED)
        if allowed:
            if denied:
                right_refused += 1
            else:
                right_ok += 1
        else:
            if denied:
                refused += 1
            else:
                accepted_wrong += 1
            after = fingerprint()
            if after != before:
                print(f"FAIL: {label} {method} changed the tables", file=sys.stderr)
                accepted_wrong += 1
        lines.append(f"{label:>16} {method:<18} {code.name:<20} {'ok' if allowed != denied else 'WRONG'}")

    # The refused ones first: nothing they do may change the tables.
    for label, ca_dir, name in wrong:
        creds = None if ca_dir is None else credentials(ca_dir, name)
        for method, request, _ in PS:
            check(label, None, False, server_addr, ps_pb2_grpc.ParameterServerStub, method, request(), creds)
        for method, request, _ in SCHEDULER:
            check(label, None, False, scheduler_addr, scheduler_pb2_grpc.SchedulerStub, method, request("worker"),
                  creds)
    for role in roles:
        creds = credentials(certs, f"{role}-0")
        for method, request, allowed in PS:
            if role not in allowed:
                check(role, role, False, server_addr, ps_pb2_grpc.ParameterServerStub, method, request(), creds)
        for method, request, allowed in SCHEDULER:
            if role not in allowed:
                check(role, role, False, scheduler_addr, scheduler_pb2_grpc.SchedulerStub, method, request(role),
                      creds)
    # Then the right ones (they may change state: the last thing this test does).
    for role in roles:
        creds = credentials(certs, f"{role}-0")
        for method, request, allowed in PS:
            if role in allowed:
                check(role, role, True, server_addr, ps_pb2_grpc.ParameterServerStub, method, request(), creds)
        for method, request, allowed in SCHEDULER:
            if role in allowed:
                check(role, role, True, scheduler_addr, scheduler_pb2_grpc.SchedulerStub, method, request(role),
                      creds)
    print("\n".join(lines))
    total_wrong = refused + accepted_wrong
    print(f"wrong credentials refused: {refused}/{total_wrong} ({100.0 * refused / max(total_wrong, 1):.0f}%); "
          f"right credentials through: {right_ok}/{right_ok + right_refused}; tables unchanged by every refusal")
    return 0 if accepted_wrong == 0 and right_refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
