"""Views of a run for people: status, overview, progress, logs, the list of runs."""
