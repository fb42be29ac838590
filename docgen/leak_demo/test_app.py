"""The leaks of everyday code, for the first section of docs/plugin.md: docgen/leak_demo.py runs this
file under --process-leaks (`make leak-demo`) and keeps what the terminal showed."""

import subprocess
import time

import pytest


@pytest.fixture(scope="session")
def server():
    subprocess.Popen(["sleep", "600"], start_new_session=True)  # a server for the session, never stopped
    yield


def test_forgets_its_child():
    subprocess.Popen(["sleep", "600"])  # never waited for, never stopped


def test_starts_a_daemon():
    subprocess.run(["sh", "-c", "sleep 600 &"], check=True)  # the shell exits, its child lives on
    time.sleep(0.2)  # the test's own work


def test_uses_the_server(server):
    pass


def test_clean():
    subprocess.run(["true"], check=True)
