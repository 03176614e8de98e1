"""MPI application suite (mpi4py + NumPy) used to exercise and measure vmsched.

Every app is a plain mpi4py program: ``mpiexec -n N python -m vmsched.apps.<name> --class S``.
See vmsched/apps/README.md for the list, the result-line format and the checksum design.
"""

import os

# One thread per rank: a rank that spawns BLAS/OpenMP threads would use CPUs that the scheduler did not
# give it, and the runtime's folding assumes one runnable thread per rank.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
