"""What runs in a command's own process (runner run/resume/stop): the stops, the life cycle, run views."""
