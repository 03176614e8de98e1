"""`vm-cpumanager`: the CPU-manager daemon. A small loop: serve requests, run a quantum, repeat."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from vmsched.config import Config, ConfigError, format_cpu_list, load_config, parse_cpu_list
from vmsched.cpumanager.manager import FAULTS_ENV, CpuManager, open_table, parse_faults
from vmsched.cpumanager.table import TableError
from vmsched.daemon import request_socket, serve_forever, setup_logging

log = logging.getLogger("vm-cpumanager")


def choose_cpus(cfg: Config) -> tuple[tuple[int, ...], int | None]:
    """Managed CPUs and the CPU kept for the daemons (if any)."""
    mine = tuple(sorted(os.sched_getaffinity(0)))
    cpus = cfg.cpumanager.cpus or mine
    outside = sorted(set(cpus) - set(mine))
    if outside:
        raise ConfigError(f"CPUs {format_cpu_list(outside)} are not available to this process "
                          f"(allowed: {format_cpu_list(mine)})")  # fmt: skip
    if cfg.cpumanager.reserve_cpu:
        if len(cpus) < 2:
            raise ConfigError("reserve_cpu needs at least two CPUs")
        return cpus[1:], cpus[0]
    return cpus, None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vm-cpumanager", description="vmsched CPU manager daemon")
    p.add_argument("--config", help="TOML config file (default: $VMSCHED_CONFIG or <state-dir>/vmsched.toml)")
    p.add_argument("--state-dir", help="directory for sockets and logs (default: $VMSCHED_STATE_DIR)")
    p.add_argument("--cpus", help="CPUs to manage, e.g. 0-15 (default: this process's affinity mask)")
    p.add_argument("--reserve-cpu", action="store_true", default=None, help="keep one CPU for the daemons")
    p.add_argument("--quantum-ms", type=float, help="quantum in milliseconds (default 10)")
    p.add_argument("--default-queue", choices=("lbd", "local", "global"), help="queue type of new jobs")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        overrides = {"cpumanager": {
            "cpus": format_cpu_list(parse_cpu_list(args.cpus)) if args.cpus else None,
            "reserve_cpu": args.reserve_cpu, "quantum_ms": args.quantum_ms, "default_queue": args.default_queue,
        }}  # fmt: skip
        cfg = load_config(args.config, args.state_dir, overrides)
        cpus, reserved = choose_cpus(cfg)
        faults = parse_faults(os.environ.get(FAULTS_ENV))
    except (ConfigError, ValueError) as e:
        print(f"vm-cpumanager: {e}", file=sys.stderr)
        return 2
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(args.log_level, cfg.cpumanager_log)
    if reserved is not None:
        os.sched_setaffinity(0, {reserved})
    try:
        table, recovered = open_table(cfg, cpus)
    except TableError as e:
        log.error("%s", e)
        return 1
    mgr = CpuManager(cfg, table, recovered, faults)
    quantum = cfg.cpumanager.quantum_ms / 1000
    next_q = time.monotonic()

    def tick() -> float:
        nonlocal next_q
        now = time.monotonic()
        if now >= next_q:
            try:
                mgr.reconcile()
            except Exception:  # a failing quantum is logged; the next one runs
                log.exception("quantum %d failed", mgr.quanta)
            next_q += quantum
            if next_q < now:  # fell behind (e.g. the daemon was stopped): do not burst
                next_q = now + quantum
        return max(0.0, next_q - time.monotonic())

    try:
        with request_socket(cfg.cpumanager_socket) as sock:
            # Root's launcher and administrators only (the handlers check SO_PEERCRED as well).
            os.chmod(cfg.cpumanager_socket, 0o600)
            log.info("managing CPUs %s (reserved %s), quantum %.1f ms, shm %s, socket %s%s",
                     format_cpu_list(cpus), reserved, cfg.cpumanager.quantum_ms, cfg.shm_name,
                     cfg.cpumanager_socket, " (recovered)" if recovered else "")  # fmt: skip
            serve_forever(sock, mgr.handlers(), tick, log)
    except BaseException:
        # Not an orderly stop: keep the table and the job segments, so that a restarted manager
        # recovers every job's partition instead of the node dropping to plain MPI.
        log.exception("CPU manager failed; leaving %s for a restarted manager to recover", cfg.shm_name)
        table.close()
        raise
    log.info("shutting down: continuing stopped ranks, waking blocked ones, removing %s", cfg.shm_name)
    mgr.shutdown()
    table.unlink()
    table.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
