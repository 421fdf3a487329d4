"""Ray's helper processes die with the sweep that started them.

A local Ray started by ``ray.init`` shares its fate with the driver, except for the raylet's agents
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``): killed with SIGKILL, a sweep would leave them running.
The sweep starts this small watcher (``python -m clustertwin.ray_reaper DRIVER_PID``) after Ray is up. It
keeps the list of the driver's descendants current and, once the driver is gone, kills those still alive.
"""

from __future__ import annotations

import subprocess
import sys
import time

POLL_S = 0.5


def start(driver_pid: int) -> subprocess.Popen:
    """Watch ``driver_pid`` from a separate process; terminate it once Ray has been shut down cleanly."""
    return subprocess.Popen(
        [sys.executable, "-m", "clustertwin.ray_reaper", str(driver_pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C of the sweep must not reach the watcher before it has cleaned up
    )


def watch(driver_pid: int, poll_s: float = POLL_S) -> None:
    """Until ``driver_pid`` ends, remember its descendants; then kill the ones still running."""
    import psutil  # installed with the sweep extra, as Ray is

    try:
        driver = psutil.Process(driver_pid)
    except psutil.NoSuchProcess:
        return
    known: dict[int, psutil.Process] = {}
    me = psutil.Process().pid
    while True:
        try:
            for child in driver.children(recursive=True):
                if child.pid != me:
                    known.setdefault(child.pid, child)
            if driver.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(poll_s)
    for process in known.values():
        try:
            if process.is_running():  # same pid and creation time: not a reused pid
                process.kill()
        except psutil.NoSuchProcess:
            continue


if __name__ == "__main__":
    watch(int(sys.argv[1]))
