"""Client of the CPU manager's API, used by the launcher, `vmrun`, `vmcpu` and the tests."""

from __future__ import annotations

from typing import Any

from vmsched.config import Config
from vmsched.protocol import Client


class CpuManagerClient(Client):
    def __init__(self, cfg: Config, timeout_s: float = 5.0) -> None:
        super().__init__(cfg.cpumanager_socket, timeout_s, what="CPU manager")

    def admit(self, job: int, nranks: int, max_mpl: int = 1, **opts: Any) -> list[int]:
        return self.call("admit", job=job, nranks=nranks, max_mpl=max_mpl, **opts)["cpus"]

    def release(self, job: int) -> None:
        self.call("release", job=job)

    def set_queue_waiting(self, waiting: bool) -> None:
        self.call("queue_state", waiting=waiting)

    def set_max_mpl(self, job: int, max_mpl: int) -> list[int]:
        return self.call("set_mpl", job=job, max_mpl=max_mpl)["cpus"]

    def set_leader(self, job: int, pid: int) -> None:
        self.call("set_leader", job=job, pid=pid)

    def register(self, job: int, rank: int, pid: int) -> None:
        self.call("register", job=job, rank=rank, pid=pid)

    def forget(self, pid: int) -> None:
        self.call("forget", pid=pid)

    def suspend(self, job: int) -> int:
        return self.call("suspend", job=job)["stopped"]

    def resume(self, job: int) -> int:
        return self.call("resume", job=job)["continued"]

    def free(self) -> dict[str, int]:
        return self.call("free")

    def status(self) -> dict[str, Any]:
        return self.call("status")

    def partitions(self) -> dict[int, list[int]]:
        return {j["job"]: j["cpus"] for j in self.status()["jobs"]}
