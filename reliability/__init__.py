"""The reliability harnesses: hostile trials of the runner's stop, shared by the tests (a
few trials each, in `make test`) and the soak (`make soak`, `make soak-short`: many, the
figures in docs/soak.json). faults.py (stoppers interrupted, storms, run-local stops),
soak_disk.py (a full disk, pid namespaces), soak_seams.py (faults at the seams: the run
directory removed, moved or replaced during a stop), modes.py (every stop mode against
every victim, both containments) and soak.py, the soak itself (`python reliability/soak.py`).
Unlike bench/, whose figures are speeds, these count what a stop left behind."""
