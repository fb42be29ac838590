"""`runner dashboard`: one page for every run under a base directory, live, with the
CLI's stop, pause and resume behind its buttons.

    server.py    the HTTP server and its routes; `serve()`, the command
    security.py  the token, the origin check, loopback
    runs.py      the runs under the base, and the run a URL names (no escape, no link)
    snapshot.py  what the page shows of each run (status_of, journal tail, PAUSE)
    actions.py   the buttons: the CLI's code, in threads, and each run's last result
    static/      the page, its script and its style sheet
"""

from runner.dashboard.server import serve

__all__ = ["serve"]
