"""The run directory and the files in it: read and written by every process that acts on a run."""
