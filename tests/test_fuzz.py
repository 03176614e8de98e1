"""Fuzzing with hypothesis: SWF lines, thesis parameter files, config files, CLI arguments and the
daemons' socket messages. Every input is either accepted or rejected with a clear message (a
WorkloadError naming file and line, a ConfigError, a usage error with exit status 2, an error reply);
nothing crashes, a rejected input changes no stored state, and both daemons keep serving.
The number of generated cases is printed at the end of the run (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import signal
import sqlite3
import string
import subprocess
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_CASES
from vmsched.config import ConfigError, load_config
from vmsched.protocol import Client, encode
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.params import job_requests, read_params
from vmsched.workloads.swf import parse_swf


def fuzz(n: int) -> settings:
    """n cases, the same ones every run (derandomized): a failure found is a failure kept."""
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


numbers = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["-1", "0", "1e309", "nan", "-0", "0x10", "1_000", "", "--", "+3"]),
)
words = st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), max_size=12)
tokens = st.one_of(numbers, numbers, words)
lines = st.lists(tokens, max_size=22).map(" ".join)
header = st.builds(lambda k, v: f"; {k}: {v}", st.sampled_from(["MaxProcs", "MaxNodes", "Version", "X"]), tokens)
swf_text = st.lists(st.one_of(lines, header, st.just("")), max_size=8).map("\n".join)


def count(what: str) -> None:
    FUZZ_CASES[what] = FUZZ_CASES.get(what, 0) + 1


@fuzz(3000)
@given(swf_text)
def test_swf_lines(text: str) -> None:
    count("SWF logs")
    try:
        log = parse_swf(text, "fuzz.swf")
    except WorkloadError as e:
        assert str(e).startswith("fuzz.swf:"), str(e)  # names the file and the line
        return
    assert len(log.jobs) <= text.count("\n") + 1


@fuzz(1500)
@given(
    st.lists(st.one_of(words, st.just("mpiexec -n N python -m vmsched.apps.ep --class S")), max_size=3),
    st.lists(lines, max_size=3),
    st.lists(st.one_of(st.sampled_from(["1", "2"]), tokens), max_size=3),
    swf_text,
)
def test_thesis_parameter_files(tmp_path_factory, template, allowed, types, trace) -> None:
    count("thesis parameter files")
    d = tmp_path_factory.mktemp("params")
    files = []
    for name, text in (("template.txt", template), ("allowed_procs.txt", allowed), ("job_types.txt", types),
                       ("trace.swf", [trace])):  # fmt: skip
        (d / name).write_text("\n".join(text) + "\n")
        files.append(d / name)
    try:
        job_requests(read_params(*files))
    except WorkloadError as e:
        assert str(d) in str(e) and str(e).split(": ", 1)[1], str(e)  # names the file, says what is wrong


toml_values = st.one_of(
    st.integers(-10, 10**5), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
    st.sampled_from(['"lbd"', '"local"', '"global"', '"kill"', '"keep"', '"fjt+easy:malleable"', '"0-1"', '"x"']),
    words.map(json.dumps), st.just("[1, 2]"), st.just("{a = 1}"),
)  # fmt: skip
toml_keys = st.sampled_from(["policy", "quantum_ms", "cpus", "default_queue", "overrun", "queue_type", "sample_ms",
                             "sched_interval_ms", "max_ranks", "lbd_threshold", "reserve_cpu", "state_dir",
                             "nope"])  # fmt: skip
toml_sections = st.sampled_from(["cpumanager", "launcher", "metrics", "bogus", ""])
config_text = st.one_of(
    st.lists(st.tuples(toml_sections, st.lists(st.tuples(toml_keys, toml_values), max_size=4)), max_size=3).map(
        lambda secs: "\n".join((f"[{s}]\n" if s else "") + "\n".join(f"{k} = {v}" for k, v in kv) for s, kv in secs)
    ),
    st.text(max_size=80),
)


@fuzz(2000)
@given(config_text)
def test_config_files(tmp_path_factory, text: str) -> None:
    count("config files")
    path = tmp_path_factory.mktemp("cfg") / "vmsched.toml"
    path.write_text(text, errors="surrogateescape")
    try:
        load_config(config_file=path, state_dir=path.parent)
    except ConfigError as e:
        assert str(e), "an empty error message"


# -- CLI arguments and socket messages against a real node ----------------------------------------


@pytest.fixture(scope="module")
def node():
    from tests.launcher_harness import Node

    n = Node("fcfs+easy:abort").start()
    # Accepted submissions stay queued: nothing fuzzed ever runs (no generated message can carry the
    # 'paused' argument, and every case checks that the queue is still held).
    Client(n.cfg.launcher_socket).call("pause", paused=True)
    yield n
    n.stop()


def db_state(node) -> str:
    """A digest of what the launcher stored about jobs (jobs, events, settings); the node's energy
    meter in `meta` is left out: the launcher adds to it every interval, whatever requests come."""
    con = sqlite3.connect(f"file:{node.state / 'vmsched.db'}?mode=ro", uri=True)
    try:
        rows = [*con.execute("SELECT * FROM jobs ORDER BY id"), *con.execute("SELECT * FROM events ORDER BY rowid"),
                *con.execute("SELECT * FROM meta WHERE key NOT LIKE 'energy_%' ORDER BY key")]  # fmt: skip
        return hashlib.sha256(repr(rows).encode()).hexdigest()
    finally:
        con.close()


def run_cli(main, argv: list[str]) -> tuple[int, str]:  # noqa: ANN001
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return rc, err.getvalue()


cli_tokens = st.one_of(
    st.sampled_from(["-n", "--procs", "--time", "--class", "--max-mpl", "--deadline", "--name", "--json", "-j",
                     "--", "true", "long", "short", "10m", "-1", "0", "4,2", "x", "--all", "--limit", "999999",
                     "--policy", "fjt", "--cpus", "--jobs", "--estimates", "--moldability", "perfect"]),
    words, numbers,
)  # fmt: skip


@fuzz(1500)
@given(st.sampled_from(["vmsubmit", "vmq", "vmcancel", "vmacct"]), st.lists(cli_tokens, max_size=8))
def test_cli_arguments(node, monkeypatch_module, prog: str, argv: list[str]) -> None:
    from vmsched.launcher import cli

    count("CLI arguments")
    main = {"vmsubmit": cli.submit_main, "vmq": cli.q_main, "vmcancel": cli.cancel_main, "vmacct": cli.acct_main}[prog]
    before = db_state(node)
    rc, err = run_cli(main, argv)
    assert isinstance(rc, int)
    if rc != 0:
        assert err.strip() and "Traceback" not in err, (argv, err)
        assert db_state(node) == before, f"{prog} {argv} failed ({err.strip()}) but changed the store"


@pytest.fixture(scope="module")
def monkeypatch_module(node):
    mp = pytest.MonkeyPatch()
    mp.setenv("VMSCHED_STATE_DIR", str(node.state))
    yield mp
    mp.undo()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), words),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(words, inner, max_size=3)),
    max_leaves=6,
)
arg_names = st.sampled_from(["job", "jobs", "procs", "command", "cwd", "env", "time_limit", "job_class", "max_mpl",
                             "name", "nranks", "queue", "heuristic", "rank", "waiting", "limit", "policy",
                             "x"])  # fmt: skip
PID_ARGS = ("pid", "leader_pid")


def messages(ops: list[str], pids: list[int] | None = None):
    """Requests with known and unknown ops and arguments, plus non-JSON and malformed JSON. Process ids
    are drawn from `pids` only (a process the test owns, and ids no process has): root may name any
    process to the CPU manager, and a fuzzer must not make it pin or stop the machine's own."""
    args = st.dictionaries(arg_names, json_values, max_size=4)
    if pids:
        args = st.builds(lambda a, p: {**a, **p}, args, st.dictionaries(st.sampled_from(PID_ARGS),
                                                                        st.sampled_from(pids), max_size=2))  # fmt: skip
    op = st.one_of(st.sampled_from(ops), words)
    request = st.builds(lambda o, a: encode({"op": o, **a}), op, args)
    return st.one_of(request, request, st.binary(max_size=64), st.just(b'{"op": 1}'), st.just(b"[]"))


LAUNCHER_OPS = ["submit", "queue", "job", "acct", "cancel", "pause", "set_policy", "info", "ping"]
CPU_OPS = ["admit", "release", "queue_state", "status", "free", "register", "forget", "suspend", "resume", "set_mpl",
           "set_leader", "ping"]  # fmt: skip


def table_jobs(c: Client) -> list[tuple]:
    return [(j["job"], j["nranks"], j["max_mpl"], j["suspended"], j["leader_pid"]) for j in c.call("status")["jobs"]]


def send(c: Client, payload: bytes, state: Callable[[], object]) -> tuple[dict, object]:
    """Send one fuzzed request: the reply is well formed, and a refusal says why and changes nothing
    in `state`. Returns the reply and the state from before."""
    before = state()
    reply = c.request_raw(payload)
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
    if not reply["ok"]:
        assert isinstance(reply.get("error"), str) and reply["error"], reply
        assert state() == before, f"{payload!r} was refused ({reply['error']}) but changed the daemon's state"
    return reply, before


@fuzz(1500)
@given(messages(LAUNCHER_OPS))
def test_launcher_socket_messages(node, payload: bytes) -> None:
    count("launcher socket messages")
    c = Client(node.cfg.launcher_socket, timeout_s=10)
    try:
        send(c, payload, lambda: db_state(node))
        assert c.call("ping")["ok"] and c.call("info")["paused"]
    finally:
        c.close()


@pytest.fixture(scope="module")
def victim():
    """The one existing process the CPU manager fuzz may name: ours, continued and checked after each case."""
    p = subprocess.Popen(["sleep", "3600"])
    yield p
    p.send_signal(signal.SIGCONT)
    p.kill()
    p.wait()


NO_SUCH_PIDS = [2**22 + 7, 99_999_999]  # above the kernel's largest pid_max


@fuzz(1000)
@given(st.data())
def test_cpumanager_socket_messages(node, victim, data) -> None:
    count("CPU manager socket messages")
    payload = data.draw(messages(CPU_OPS, [victim.pid, *NO_SUCH_PIDS, 0, -3]))
    c = Client(node.cfg.cpumanager_socket, timeout_s=10)
    try:
        reply, before = send(c, payload, lambda: table_jobs(c))
        if reply["ok"]:  # accepted (a valid admit, say): undo it so that later cases see the same table
            for job in {j[0] for j in table_jobs(c)} - {j[0] for j in before}:
                c.call("release", job=job)
        assert node.cm.proc.poll() is None and node.launcher.poll() is None
    finally:
        c.close()
        victim.send_signal(signal.SIGCONT)
    assert victim.poll() is None
