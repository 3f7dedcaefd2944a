"""Starting the built daemons for the SDK's tests: each on a free loopback port, with the
cluster token, its output in FOLDER/NAME.log."""
import os
import subprocess
import time


def start_daemon(argv, folder, name, token_file):
    """Starts `argv` listening on a free loopback port; (process, "127.0.0.1:PORT") once it
    serves."""
    port_file = folder / f"{name}.port"
    with (folder / f"{name}.log").open("w") as log:
        process = subprocess.Popen(
            argv + ["--address=127.0.0.1:0", f"--port_file={port_file}",
                    f"--token_file={token_file}"],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start: {(folder / f'{name}.log').read_text()}")
        time.sleep(0.05)
    return process, f"127.0.0.1:{port_file.read_text().strip()}"
