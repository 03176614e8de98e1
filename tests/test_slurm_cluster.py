"""The test Slurm cluster itself (tests/slurm_cluster.py): munge, slurmctld and two slurmd on this one
machine run an MPI job across both nodes, and stop without leaving a daemon, a step or a directory."""

from __future__ import annotations

import sys

import psutil

from tests.launcher_harness import vmapp_result
from tests.slurm_cluster import SlurmCluster


def test_two_node_cluster_runs_mpi_across_nodes_and_stops_clean():
    cluster = SlurmCluster().start()
    try:
        r = cluster.run("srun", "-O", "--mpi=pmi2", "-N2", "-n4", "sh", "-c", "echo $SLURMD_NODENAME")
        assert sorted(r.stdout.split()) == ["n1", "n1", "n2", "n2"]
        r = cluster.run("srun", "-O", "--mpi=pmi2", "-N2", "-n4", sys.executable, "-m", "vmsched.apps.cg",
                        "--class", "S")  # fmt: skip
        result = vmapp_result(r.stdout)
        assert result["verified"] and result["ranks"] == 4
        daemons = [psutil.Process(p.pid) for p in cluster.procs.values()]
    finally:
        cluster.stop()
    assert not [d for d in daemons if d.is_running() and d.status() != psutil.STATUS_ZOMBIE]
    assert not cluster.root.exists()
