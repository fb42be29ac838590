"""The project's benchmarks: exact speeds, printed and written as JSON, never asserted by
the test suite. `python -m bench.stoppers` is the stop benchmark (`make bench`); the
scripts beside it (membership_cost.py, ...) are run by the Makefile as files. The
reliability harnesses (the soak and its fault trials) are in reliability/."""
