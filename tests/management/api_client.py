"""The management API driven by a client nobody here wrote: Python's grpcio, with
stubs generated from the repository's .proto now (grpc_tools.protoc).

Run by tests/management_api.rs, which starts the target and passes (environment):
  MGMT_ADDR   HOST:PORT of the API          CERTS   tests/management/make-certs output
  PROTO_DIR   target/proto                  CONFIG  the target's configuration file
  SUB         a subsystem with namespace 1  HOST_NQN the host the parent connects
  PORT2       a free TCP port for AddPort   WORK    a scratch directory
The parent connects a host when this script prints HOST-CONNECT and answers on
stdin. Each check prints PASS or FAIL; the last line is the summary; the exit
status is 0 only if every check passed.
"""

import base64
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import zlib

import grpc

ENV = os.environ
WORK = ENV["WORK"]
subprocess.run(
    [sys.executable, "-m", "grpc_tools.protoc", "-I", ENV["PROTO_DIR"],
     f"--python_out={WORK}", f"--grpc_python_out={WORK}",
     "nvmf/target/v1/management.proto"],
    check=True)
sys.path.insert(0, WORK)
from nvmf.target.v1 import management_pb2 as pb  # noqa: E402
from nvmf.target.v1 import management_pb2_grpc as rpc  # noqa: E402

ADDR = ENV["MGMT_ADDR"]
CERTS = ENV["CERTS"]
SUB = ENV["SUB"]
SUB2 = "nqn.2026-11.io.example:api-made"
HOST = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-444455556666"
TIMEOUT = 20


def read(name):
    with open(os.path.join(CERTS, name), "rb") as f:
        return f.read()


def stub(who=None, ca="ca.pem"):
    """A client as `who` (admin, reader, norole, expired, rogue; None: no certificate)."""
    if who is None:
        creds = grpc.ssl_channel_credentials(root_certificates=read(ca))
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(ca),
            private_key=read(f"{who}.key"),
            certificate_chain=read(f"{who}.pem"))
    return rpc.ManagementStub(grpc.secure_channel(ADDR, creds))


ADMIN = stub("admin")
READER = stub("reader")
results = []


def check(name):
    def run(f):
        try:
            f()
            results.append((name, None))
            print(f"PASS {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            results.append((name, e))
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        return f
    return run


def refused(call, code, contains=None, starts=None):
    """`call` must fail with `code` (and a message containing / starting with)."""
    try:
        call()
    except grpc.RpcError as e:
        assert e.code() == code, f"expected {code}, got {e.code()}: {e.details()}"
        d = e.details() or ""
        assert contains is None or contains in d, f"{contains!r} not in {d!r}"
        assert starts is None or d.startswith(starts), f"{d!r} does not start with {starts!r}"
        return d
    raise AssertionError(f"expected {code}, the call succeeded")


def nsids(sub):
    st = ADMIN.GetStatus(pb.GetStatusRequest(), timeout=TIMEOUT)
    for s in st.subsystems:
        if s.nqn == sub:
            return {n.nsid for n in s.namespaces}
    return None


def config_text():
    with open(ENV["CONFIG"]) as f:
        return f.read()


def file_nsids():
    return {int(n) for n in re.findall(r"nsid: (\d+)", config_text())}


def add_ns(sub, path, nsid=0, who=None):
    return (who or ADMIN).AddNamespace(
        pb.AddNamespaceRequest(subsystem_nqn=sub, device_path=path, nsid=nsid),
        timeout=TIMEOUT)


# --- mutual TLS ---------------------------------------------------------------

UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED)


def handshake_refused(client):
    try:
        add_ns(SUB, "ram:1M", 40, who=client)
    except grpc.RpcError as e:
        assert e.code() in UNREACHABLE, f"{e.code()}: {e.details()}"
        assert 40 not in nsids(SUB), "applied anyway"
        return
    raise AssertionError("the call went through")


@check("no_client_certificate")
def _():
    handshake_refused(stub(None))


@check("unknown_ca")
def _():
    handshake_refused(stub("rogue"))


@check("expired_certificate")
def _():
    handshake_refused(stub("expired"))


@check("reader_may_query_not_change")
def _():
    assert READER.GetStatus(pb.GetStatusRequest(), timeout=TIMEOUT).subsystems
    assert "subsystems" in READER.Export(pb.ExportRequest(), timeout=TIMEOUT).config_yaml
    before = config_text()
    refused(lambda: add_ns(SUB, "ram:1M", 41, who=READER), grpc.StatusCode.PERMISSION_DENIED)
    refused(lambda: READER.Reload(pb.ReloadRequest(), timeout=TIMEOUT),
            grpc.StatusCode.PERMISSION_DENIED)
    assert 41 not in nsids(SUB)
    assert config_text() == before, "the file changed"


@check("certificate_without_a_role")
def _():
    refused(lambda: stub("norole").GetStatus(pb.GetStatusRequest(), timeout=TIMEOUT),
            grpc.StatusCode.PERMISSION_DENIED, contains="stranger")


# --- refusals -----------------------------------------------------------------

@check("invalid_arguments_name_the_field")
def _():
    before = config_text()
    I = grpc.StatusCode.INVALID_ARGUMENT
    refused(lambda: ADMIN.AddPort(pb.AddPortRequest(portid=70000, trtype="tcp",
            traddr="127.0.0.1", trsvcid="1"), timeout=TIMEOUT), I, starts="portid:")
    refused(lambda: ADMIN.AddPort(pb.AddPortRequest(portid=9, trtype="carrier-pigeon",
            traddr="127.0.0.1", trsvcid="1"), timeout=TIMEOUT), I, starts="trtype:")
    refused(lambda: add_ns(SUB, "ram:1M", 0xFFFFFFFF), I, starts="nsid:")
    refused(lambda: ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=0),
            timeout=TIMEOUT), I, starts="nsid:")
    refused(lambda: add_ns("n" * 300, "ram:1M"), I, starts="subsystem_nqn:")
    refused(lambda: ADMIN.AddSubsystem(pb.AddSubsystemRequest(subsystem_nqn="not an nqn"),
            timeout=TIMEOUT), I, starts="subsystem_nqn:")
    refused(lambda: add_ns(SUB, ""), I, starts="device_path:")
    refused(lambda: ADMIN.AddHost(pb.HostRef(subsystem_nqn=SUB, host_nqn="x" * 300),
            timeout=TIMEOUT), I, starts="host_nqn:")
    refused(lambda: ADMIN.SetAnaState(pb.SetAnaStateRequest(portid=1, grpid=1, state=0),
            timeout=TIMEOUT), I, starts="state:")
    refused(lambda: ADMIN.SetAnaState(pb.SetAnaStateRequest(
            portid=1, grpid=0, state=pb.ANA_STATE_INACCESSIBLE), timeout=TIMEOUT),
            I, starts="grpid:")
    refused(lambda: ADMIN.SetHostKey(pb.SetHostKeyRequest(host_nqn=HOST,
            dhchap_key_file="relative/key"), timeout=TIMEOUT), I, starts="dhchap_key_file:")
    assert config_text() == before, "the file changed"


@check("missing_things_are_not_found")
def _():
    N = grpc.StatusCode.NOT_FOUND
    refused(lambda: ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(
            subsystem_nqn="nqn.2026-11.io.example:nobody", nsid=1), timeout=TIMEOUT), N)
    refused(lambda: ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=99),
            timeout=TIMEOUT), N, contains="99")
    refused(lambda: ADMIN.ResizeNamespace(pb.ResizeNamespaceRequest(subsystem_nqn=SUB, nsid=99),
            timeout=TIMEOUT), N)
    refused(lambda: ADMIN.RemovePort(pb.PortRef(portid=999), timeout=TIMEOUT), N)
    refused(lambda: ADMIN.RemoveHost(pb.HostRef(subsystem_nqn=SUB, host_nqn=HOST),
            timeout=TIMEOUT), N)
    refused(lambda: ADMIN.GetNamespaceStats(pb.GetNamespaceStatsRequest(
            subsystem_nqn=SUB, nsid=99), timeout=TIMEOUT), N)


@check("duplicates_already_exist")
def _():
    E = grpc.StatusCode.ALREADY_EXISTS
    refused(lambda: add_ns(SUB, "ram:1M", 1), E, contains="namespace 1")
    refused(lambda: ADMIN.AddSubsystem(pb.AddSubsystemRequest(subsystem_nqn=SUB),
            timeout=TIMEOUT), E)
    refused(lambda: ADMIN.AddPort(pb.AddPortRequest(portid=1, trtype="tcp",
            traddr="127.0.0.1", trsvcid=ENV["PORT2"]), timeout=TIMEOUT), E)


@check("a_backing_path_that_cannot_be_opened")
def _():
    path = os.path.join(WORK, "no-such-dir", "x.img")
    before = config_text()
    refused(lambda: add_ns(SUB, path, 5), grpc.StatusCode.FAILED_PRECONDITION, contains=path)
    assert 5 not in nsids(SUB), "applied anyway"
    assert config_text() == before, "the file changed"


# --- every operation ------------------------------------------------------------

def dhchap_key_file():
    secret = os.urandom(32)
    crc = zlib.crc32(secret).to_bytes(4, "little")
    path = os.path.join(WORK, "host.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("DHHC-1:00:" + base64.b64encode(secret + crc).decode() + ":\n")
    return path


@check("every_operation")
def _():
    A = ADMIN
    t = TIMEOUT
    r = A.AddSubsystem(pb.AddSubsystemRequest(subsystem_nqn=SUB2, serial="SNAPI0001",
                                              model="made by the API"), timeout=t)
    assert r.changes, r
    # Built step by step: the caller is told what is not finished yet.
    assert any(c.startswith("note:") and "not exported on any port" in c
               for c in r.changes), r
    assert SUB2 in config_text(), "acknowledged before it was on disk"
    A.AddHost(pb.HostRef(subsystem_nqn=SUB2, host_nqn=HOST), timeout=t)
    A.AddPort(pb.AddPortRequest(portid=7, trtype="tcp", traddr="127.0.0.1",
                                trsvcid=ENV["PORT2"]), timeout=t)
    A.LinkSubsystem(pb.PortLink(portid=7, subsystem_nqn=SUB2), timeout=t)
    r = add_ns(SUB2, "ram:4M", 3)
    assert any("namespace 3" in c for c in r.changes), r
    assert "ram:4M" in config_text()
    r = A.ResizeNamespace(pb.ResizeNamespaceRequest(subsystem_nqn=SUB2, nsid=3), timeout=t)
    assert any("size unchanged" in c for c in r.changes), r
    r = A.SetAnaState(pb.SetAnaStateRequest(portid=7, grpid=1,
                                            state=pb.ANA_STATE_INACCESSIBLE), timeout=t)
    assert r.changes, r
    A.SetHostKey(pb.SetHostKeyRequest(host_nqn=HOST, dhchap_key_file=dhchap_key_file()),
                 timeout=t)
    st = A.GetStatus(pb.GetStatusRequest(), timeout=t)
    s2 = [s for s in st.subsystems if s.nqn == SUB2]
    assert s2 and [n.nsid for n in s2[0].namespaces] == [3], st
    assert list(s2[0].allowed_hosts) == [HOST], s2
    p7 = [p for p in st.ports if p.portid == 7]
    assert p7 and list(p7[0].subsystem_nqns) == [SUB2] and p7[0].listening, st.ports
    assert '"genctr"' in st.view_json
    y = A.Export(pb.ExportRequest(), timeout=t).config_yaml
    assert "SNAPI0001" in y and HOST in y and "inaccessible" in y, y
    assert y == config_text(), "export differs from the file"
    stats = A.GetNamespaceStats(pb.GetNamespaceStatsRequest(subsystem_nqn=SUB2), timeout=t)
    assert [(n.subsystem_nqn, n.nsid) for n in stats.namespaces] == [(SUB2, 3)], stats
    assert '"cells"' in A.GetMetrics(pb.GetMetricsRequest(), timeout=t).snapshot_json
    assert A.Reload(pb.ReloadRequest(), timeout=t).changes == [], "file and state differ"
    A.SetAnaState(pb.SetAnaStateRequest(portid=7, grpid=1, state=pb.ANA_STATE_OPTIMIZED),
                  timeout=t)
    A.UnlinkSubsystem(pb.PortLink(portid=7, subsystem_nqn=SUB2), timeout=t)
    A.RemovePort(pb.PortRef(portid=7), timeout=t)
    A.RemoveHost(pb.HostRef(subsystem_nqn=SUB2, host_nqn=HOST), timeout=t)
    A.SetHostKey(pb.SetHostKeyRequest(host_nqn=HOST, clear_ctrl_key=True), timeout=t)
    A.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB2, nsid=3), timeout=t)
    A.RemoveSubsystem(pb.SubsystemRef(subsystem_nqn=SUB2), timeout=t)
    assert nsids(SUB2) is None
    assert SUB2 not in config_text()


@check("provisioning_creates_and_deletes_a_file")
def _():
    path = os.path.join(WORK, "made.img")
    ADMIN.AddNamespace(pb.AddNamespaceRequest(subsystem_nqn=SUB, device_path=path, nsid=6,
                                              create_size=16 << 20), timeout=TIMEOUT)
    assert os.path.getsize(path) == 16 << 20
    refused(lambda: ADMIN.AddNamespace(pb.AddNamespaceRequest(
            subsystem_nqn=SUB, device_path=path, nsid=7, create_size=1 << 20), timeout=TIMEOUT),
            grpc.StatusCode.ALREADY_EXISTS, contains="--reuse")
    refused(lambda: ADMIN.AddNamespace(pb.AddNamespaceRequest(
            subsystem_nqn=SUB, device_path=path, nsid=7, reuse=True), timeout=TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT, starts="reuse:")
    ADMIN.ResizeNamespace(pb.ResizeNamespaceRequest(subsystem_nqn=SUB, nsid=6,
                                                    size=32 << 20), timeout=TIMEOUT)
    assert os.path.getsize(path) == 32 << 20
    refused(lambda: ADMIN.ResizeNamespace(pb.ResizeNamespaceRequest(
            subsystem_nqn=SUB, nsid=6, size=8 << 20), timeout=TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT, starts="size:")
    ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=6,
                                                    delete_backing=True), timeout=TIMEOUT)
    assert not os.path.exists(path), "the created file is still there"


@check("namespace_visibility")
def _():
    A, t = ADMIN, TIMEOUT
    hidden = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-777777777777"

    def view(nsid):
        st = json.loads(A.GetStatus(pb.GetStatusRequest(), timeout=t).view_json)
        sub = [s for s in st["subsystems"] if s["nqn"] == SUB][0]
        return [n for n in sub["namespaces"] if n["nsid"] == nsid][0]

    A.AddNamespace(pb.AddNamespaceRequest(subsystem_nqn=SUB, device_path="ram:1M", nsid=30,
                                          no_auto_visible=True), timeout=t)
    assert view(30)["auto_visible"] is False and "visible_to" not in view(30)
    ref = pb.NamespaceHostRef(subsystem_nqn=SUB, nsid=30, host_nqn=hidden)
    r = A.AddNamespaceHost(ref, timeout=t)
    assert r.changes == [f"subsystem {SUB}: namespace 30 now visible to {hidden}"], r
    assert view(30)["visible_to"] == [hidden]
    assert "auto_visible: false" in config_text() and hidden in config_text()
    refused(lambda: A.AddNamespaceHost(ref, timeout=t), grpc.StatusCode.ALREADY_EXISTS)
    before = config_text()
    refused(lambda: A.AddNamespaceHost(pb.NamespaceHostRef(
            subsystem_nqn=SUB, nsid=30, host_nqn="host-a"), timeout=t),
            grpc.StatusCode.INVALID_ARGUMENT, starts="host_nqn:")
    # Namespace 1 is visible to every host: its hosts cannot be chosen (as in SPDK).
    refused(lambda: A.AddNamespaceHost(pb.NamespaceHostRef(
            subsystem_nqn=SUB, nsid=1, host_nqn=hidden), timeout=t),
            grpc.StatusCode.FAILED_PRECONDITION, contains="no-auto-visible")
    assert config_text() == before, "the file changed"
    A.RemoveNamespaceHost(ref, timeout=t)
    assert "visible_to" not in view(30)
    refused(lambda: A.RemoveNamespaceHost(ref, timeout=t), grpc.StatusCode.NOT_FOUND)
    A.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=30), timeout=t)


@check("namespace_qos")
def _():
    A, t = ADMIN, TIMEOUT
    r = A.SetNamespaceQos(pb.SetNamespaceQosRequest(subsystem_nqn=SUB, nsid=1,
                                                    rw_ios_per_sec=50000), timeout=t)
    assert any("QoS limits set" in c and "rw_ios_per_sec=50000" in c for c in r.changes), r
    assert "rw_ios_per_sec: 50000" in config_text()
    stats = A.GetNamespaceStats(pb.GetNamespaceStatsRequest(subsystem_nqn=SUB, nsid=1),
                                timeout=t)
    assert len(stats.namespaces) == 1 and stats.namespaces[0].qos_queued == 0, stats
    before = config_text()
    refused(lambda: A.SetNamespaceQos(pb.SetNamespaceQosRequest(
            subsystem_nqn=SUB, nsid=1, r_ios_per_sec=10 ** 12), timeout=t),
            grpc.StatusCode.INVALID_ARGUMENT, contains="r_ios")
    refused(lambda: A.SetNamespaceQos(pb.SetNamespaceQosRequest(
            subsystem_nqn=SUB, nsid=99, rw_ios_per_sec=1), timeout=t), grpc.StatusCode.NOT_FOUND)
    refused(lambda: READER.SetNamespaceQos(pb.SetNamespaceQosRequest(
            subsystem_nqn=SUB, nsid=1, rw_ios_per_sec=1), timeout=t),
            grpc.StatusCode.PERMISSION_DENIED)
    assert config_text() == before, "the file changed"
    A.SetNamespaceQos(pb.SetNamespaceQosRequest(subsystem_nqn=SUB, nsid=1, rw_ios_per_sec=0),
                      timeout=t)
    assert "rw_ios_per_sec" not in config_text()


@check("two_clients_change_one_subsystem_at_once")
def _():
    other = stub("admin")
    errors = []

    def adder(client, ids):
        for i in ids:
            try:
                add_ns(SUB, "ram:1M", i, who=client)
            except grpc.RpcError as e:
                errors.append((i, e.code(), e.details()))

    a, b = list(range(10, 18)), list(range(20, 28))
    ts = [threading.Thread(target=adder, args=(ADMIN, a)),
          threading.Thread(target=adder, args=(other, b))]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert not errors, errors
    want = set(a + b)
    assert want <= nsids(SUB), nsids(SUB)
    assert want <= file_nsids(), "not every change is on disk"
    for i in sorted(want):
        ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=i), timeout=TIMEOUT)
    assert not (want & file_nsids())


# --- the event stream -------------------------------------------------------------

@check("event_stream_sees_namespaces_and_a_host_connect")
def _():
    events = queue.Queue()
    call = READER.WatchEvents(pb.WatchEventsRequest())

    def pump():
        try:
            for e in call:
                events.put(e)
        except grpc.RpcError:
            pass

    threading.Thread(target=pump, daemon=True).start()

    def wait_for(what, pred, timeout=TIMEOUT):
        end = time.monotonic() + timeout
        while True:
            try:
                e = events.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what} event within {timeout}s")
            if pred(e):
                return e

    def added(nsid):
        return lambda e: (e.WhichOneof("kind") == "namespace_changed"
                          and e.namespace_changed.nsid == nsid
                          and e.namespace_changed.change == pb.NamespaceChanged.ADDED)

    # Subscribed once our own change shows up (the stream starts at subscription).
    for nsid in range(50, 80):
        add_ns(SUB, "ram:1M", nsid)
        try:
            e = wait_for("namespace added", added(nsid), timeout=1)
            assert e.time_unix_ns > 0, e
            break
        except AssertionError:
            ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=nsid),
                                  timeout=TIMEOUT)
    else:
        raise AssertionError("the stream never delivered an event")
    print("HOST-CONNECT", flush=True)
    answer = sys.stdin.readline().strip()
    assert answer == "connected", f"the parent answered {answer!r}"
    e = wait_for("host_connected", lambda e: e.WhichOneof("kind") == "host_connected")
    assert e.host_connected.subsystem_nqn == SUB, e
    assert e.host_connected.host_nqn == ENV["HOST_NQN"], e
    assert e.host_connected.cntlid > 0, e
    conns = READER.ListConnections(pb.ListConnectionsRequest(subsystem_nqn=SUB),
                                   timeout=TIMEOUT).connections
    assert any(c.host_nqn == ENV["HOST_NQN"] and c.cntlid == e.host_connected.cntlid
               for c in conns), conns
    ADMIN.RemoveNamespace(pb.RemoveNamespaceRequest(subsystem_nqn=SUB, nsid=nsid), timeout=TIMEOUT)
    e = wait_for("namespace removed", lambda e: e.WhichOneof("kind") == "namespace_changed")
    assert e.namespace_changed.change == pb.NamespaceChanged.REMOVED, e
    call.cancel()


failed = [n for n, e in results if e is not None]
print(f"SUMMARY passed={len(results) - len(failed)} failed={len(failed)}", flush=True)
sys.exit(1 if failed else 0)
