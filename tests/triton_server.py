"""A real Triton Inference Server for the tests: the `tritonserver` binary and Python backend
that the `nvidia-pytriton` wheel ships (installed by .ci/run with --no-deps; its own Python
library is not used), bound to 127.0.0.1 on free ports, stopped by its process id.

The wheel's backend directory is assembled in a temporary folder, as the wheel's own launcher
does: the Python backend needs the stub built for this Python beside `libtriton_python.so`.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

WHEEL = "nvidia-pytriton==0.7.0"
STARTUP_S = 120
STOP_S = 20
REPO = Path(__file__).resolve().parent.parent


def unsupported_platform() -> Optional[str]:
    """Why the wheel's binaries cannot run here (manylinux_2_35 x86_64 builds, stubs for
    Python 3.8-3.13), or None."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"the {WHEEL} server runs on x86_64 Linux only, not {sys.platform}/{platform.machine()}"
    libc, version = platform.libc_ver()
    if libc != "glibc" or tuple(int(p) for p in version.split(".")[:2]) < (2, 35):
        return f"the {WHEEL} server needs glibc >= 2.35, this system has {libc} {version}"
    if not (3, 8) <= sys.version_info[:2] <= (3, 13):
        return f"{WHEEL} ships Python backend stubs for Python 3.8-3.13 only"
    return None


def wheel_root() -> Path:
    """The installed pytriton package folder (found without importing the library)."""
    reason = unsupported_platform()
    if reason:
        pytest.skip(reason)
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"the Triton tests need the real server: pip install --no-deps '{WHEEL}'")
    return Path(list(spec.submodule_search_locations)[0])


def free_ports(count: int) -> List[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class TritonServer:
    """One running `tritonserver` over `repositories`, models loaded explicitly (so tests can
    reload them); `http_url`/`grpc_url` are host:port addresses."""

    def __init__(self, repositories: Sequence[Path], models: Sequence[str], workdir: Path,
                 python_env: Path):
        root = wheel_root() / "tritonserver"
        backends = workdir / "backends"
        python = backends / "python"
        python.mkdir(parents=True, exist_ok=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            target = python / name
            if not target.exists():
                target.symlink_to(root / "backends" / "python" / name)
        stub = python / "triton_python_backend_stub"
        if not stub.exists():
            version = f"{sys.version_info[0]}.{sys.version_info[1]}"
            stub.symlink_to(root / "python_backend_stubs" / version / stub.name)
        http, grpc, metrics = free_ports(3)
        self.http_url, self.grpc_url = f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
        env = dict(os.environ)
        libs = str(root.parent.parent / "nvidia_pytriton.libs")
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [env.get("LD_LIBRARY_PATH"), libs]))
        # the backend's stub runs the models in the Python environment it finds first on PATH,
        # with this checkout's laya_edge
        env["PATH"] = f"{python_env / 'bin'}:{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(REPO)
        command = [str(root / "bin" / "tritonserver"), "--backend-directory", str(backends),
                   "--http-address", "127.0.0.1", "--http-port", str(http),
                   "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
                   "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
                   "--allow-metrics", "false", "--model-control-mode", "explicit",
                   "--exit-timeout-secs", "5", "--log-verbose", "0"]
        command += [f"--model-repository={repo}" for repo in repositories]
        command += [f"--load-model={model}" for model in models]
        self.log = workdir / "tritonserver.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._kill_group()  # backend stubs the server started may outlive it
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready",
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"tritonserver not ready within {STARTUP_S} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM the server's process group (the server and its backend stubs), then SIGKILL
        whatever is left after STOP_S."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                pass
        self._kill_group()
        self.process.wait(timeout=STOP_S)

    def _kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def backend_python() -> Path:
    """A Python environment for the backend's stub: this package's runtime dependencies with
    numpy<2, the numpy ABI the wheel's stub was built for (docs/serving.md, "Triton"). Taken from
    LAYA_EDGE_TRITON_PYTHON when set, else built once under ~/.cache (about 15 s from PyPI)."""
    import fcntl
    import hashlib
    import tomllib

    if os.environ.get("LAYA_EDGE_TRITON_PYTHON"):
        return Path(os.environ["LAYA_EDGE_TRITON_PYTHON"])
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = sorted(project["dependencies"]) + ["numpy<2"]
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    env = Path.home() / ".cache" / "laya-edge-tests" / f"triton-python-{version}-{key}"
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{env}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (env / "ready").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
            subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            *requirements], check=True, timeout=600)
            (env / "ready").write_text("\n".join(requirements))
    return env
