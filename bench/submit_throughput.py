"""Submission throughput and latency of the launcher, with 10 and with 10,000 jobs queued.

Real daemons on a temporary state directory; the queue is paused (root's `pause`) so that nothing
starts and the queue really grows. Measured through the API (in-process client) and through the
`vmsubmit` command; the baseline of each is the same path doing nothing (`ping`, `vmsubmit --noop`).
Target: per-submit cost at 10,000 queued at most 2x the cost at 10 queued.

    python bench/submit_throughput.py [--queued 10000] [--samples 300] [--cli-samples 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean, quantiles

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402
from rich.table import Table  # noqa: E402

from vmsched.config import load_config  # noqa: E402
from vmsched.protocol import Client, DaemonUnavailable  # noqa: E402

BIN = Path(sys.executable).parent
JOB = {"command": ["true"], "procs": [1], "cwd": "/tmp", "env": {}, "time_limit": 60}


def pct(values: list[float], q: int) -> float:
    return quantiles(values, n=100)[q - 1]


def timed(fn, n: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def wait_up(client: Client) -> None:
    for _ in range(300):
        try:
            client.call("ping")
            return
        except DaemonUnavailable:
            time.sleep(0.05)
    raise SystemExit("daemon did not come up")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queued", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--cli-samples", type=int, default=20)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="vmsched-bench-"))
    cfg = load_config(state_dir=root)
    env = {**os.environ, "VMSCHED_STATE_DIR": str(root)}
    procs = [subprocess.Popen([str(BIN / "vm-cpumanager")], env=env, stderr=subprocess.DEVNULL)]
    try:
        wait_up(Client(cfg.cpumanager_socket))
        procs.append(subprocess.Popen([str(BIN / "vm-launcher"), "--log-level", "WARNING"], env=env,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
        c = Client(cfg.launcher_socket, timeout_s=30)
        wait_up(c)
        c.call("pause", paused=True)
        submit = lambda: c.call("submit", **JOB)  # noqa: E731
        for _ in range(10):
            submit()
        noop_small = timed(lambda: c.call("ping"), args.samples)
        small = timed(submit, args.samples)
        have = c.call("info")["queued"]
        for _ in track(range(max(0, args.queued - have)), description=f"filling the queue to {args.queued}"):
            submit()
        noop_big = timed(lambda: c.call("ping"), args.samples)
        big = timed(submit, args.samples)
        queued = c.call("info")["queued"]
        cli = [str(BIN / "vmsubmit"), "-n", "1", "--time", "60s", "--", "true"]
        cli_noop = timed(lambda: subprocess.run([str(BIN / "vmsubmit"), "--noop"], env=env, check=True,
                                                stdout=subprocess.DEVNULL), args.cli_samples)  # fmt: skip
        cli_sub = timed(lambda: subprocess.run(cli, env=env, check=True, stdout=subprocess.DEVNULL, cwd="/tmp"),
                        args.cli_samples)  # fmt: skip
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    ms = 1000
    fig = {
        "queued_at_end": queued,
        "submit_per_s_10": 1 / mean(small),
        "submit_per_s_10000": 1 / mean(big),
        "api_submit_p50_ms_10": pct(small, 50) * ms,
        "api_submit_p99_ms_10": pct(small, 99) * ms,
        "api_submit_p50_ms_10000": pct(big, 50) * ms,
        "api_submit_p99_ms_10000": pct(big, 99) * ms,
        "api_noop_p50_ms": pct(noop_big, 50) * ms,
        "api_noop_p99_ms": pct(noop_big, 99) * ms,
        "api_submit_vs_noop_ratio": pct(big, 50) / pct(noop_big, 50),
        "vmsubmit_p50_ms": pct(cli_sub, 50) * ms,
        "vmsubmit_p99_ms": pct(cli_sub, 99) * ms,
        "vmsubmit_noop_p50_ms": pct(cli_noop, 50) * ms,
        "vmsubmit_vs_noop_ratio": pct(cli_sub, 50) / pct(cli_noop, 50),
        "growth_ratio": mean(big) / mean(small),  # per-submit cost at 10,000 queued / at 10; target <= 2
        "noop_growth_ratio": mean(noop_big) / mean(noop_small),
    }
    t = Table("measure", "10 queued", f"{queued} queued", title="launcher submission cost")
    t.add_row("API submit p50 / p99 (ms)", f"{fig['api_submit_p50_ms_10']:.2f} / {fig['api_submit_p99_ms_10']:.2f}",
              f"{fig['api_submit_p50_ms_10000']:.2f} / {fig['api_submit_p99_ms_10000']:.2f}")  # fmt: skip
    t.add_row("API no-op p50 (ms)", f"{pct(noop_small, 50) * ms:.2f}", f"{fig['api_noop_p50_ms']:.2f}")
    t.add_row("submissions / s", f"{fig['submit_per_s_10']:.0f}", f"{fig['submit_per_s_10000']:.0f}")
    t.add_row("vmsubmit p50 / p99 (ms)", "", f"{fig['vmsubmit_p50_ms']:.0f} / {fig['vmsubmit_p99_ms']:.0f}")
    t.add_row("vmsubmit --noop p50 (ms)", "", f"{fig['vmsubmit_noop_p50_ms']:.0f}")
    t.add_row("growth ratio (10,000 / 10)", "", f"{fig['growth_ratio']:.2f} (target <= 2)")
    Console().print(t)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in fig.items()}))


if __name__ == "__main__":
    main()
