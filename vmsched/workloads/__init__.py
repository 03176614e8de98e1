"""Workload files and the tools around them: SWF traces, the thesis's parameter files, a Poisson
workload generator, metrics, plots, reports and log characterization.

Pure functions over plain data; the command-line front end is :mod:`vmsched.workloads.cli`.
"""

from vmsched.workloads.errors import WorkloadError

__all__ = ["WorkloadError"]
