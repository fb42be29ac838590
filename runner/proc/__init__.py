"""Processes: identity, membership, signals, sweeps, containment. Run in the engine and in the stopper."""
