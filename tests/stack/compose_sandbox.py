"""Run docker-compose.yml's services as processes on 127.0.0.1, from what compose renders (no engine).

`render(root, profiles, env)` is `docker-compose config` (Debian's 1.29; the same file `docker
compose` v2 reads). `Sandbox` then runs a rendered service as a compose engine would, with
these substitutions and nothing else:

- images -> binaries: `prom/prometheus` and `prom/alertmanager` -> the pinned builds,
  `otel-grpo:collector` -> the collector built from collector/builder-config.yaml, `otel-grpo:*` ->
  scripts/docker-entrypoint.sh (the images' entry point) with this checkout's `otel-grpo`;
- mounts -> folders: each named volume is a folder under the sandbox, owned as the image's
  mount point is (a new volume takes that owner), each bind-mounted file is copied, and in the
  argv, the environment and mounted YAML files a container path becomes its host folder;
- the network -> loopback: `service:port` becomes `127.0.0.1:<free port>`, and a server is told to
  listen there (the one flag or variable per service that compose's port mapping stands for);
- users -> uids: as root, a service runs as its `user:` or its image's user (setpriv), so every
  file it reads must be readable by that uid, as in a container. Images without torch run with
  `torch` made unimportable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from otel_grpo.stack._process import Managed

VENV_BIN = Path(sys.executable).parent

# The user each image runs as (compose's `user:` wins) and the owner of its volume mount points
# (Dockerfile: /data, /runs and the collector's queue belong to 10001; the prom images' data
# folders to nobody). A folder no image has is root's, as a new volume's root is.
IMAGE_USERS = {"prom/prometheus": 65534, "prom/alertmanager": 65534, "otel-grpo": 10001}
MOUNT_OWNERS = {"/prometheus": 65534, "/alertmanager": 65534, "/data": 10001, "/runs": 10001,
                "/var/lib/otelcol/file_storage": 10001}
NO_TORCH = ("otel-grpo:sidecar", "otel-grpo:follow")
# Each server's container port and how it is told to listen elsewhere.
PORTS = {"sidecar": [8000], "alertmanager": [9093], "prometheus": [9090],
         "otel-collector": [4317, 4318, 8889, 8888, 13133]}
_COLLECTOR_PORT_VARS = {4317: "OTELCOL_OTLP_GRPC_PORT", 4318: "OTELCOL_OTLP_HTTP_PORT", 8889: "OTELCOL_PROMETHEUS_PORT",
                        8888: "OTELCOL_METRICS_PORT", 13133: "OTELCOL_HEALTH_PORT"}


def render(root: Path, profiles: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict:
    """`docker-compose -f docker-compose.yml [--profile P ...] config`, parsed."""
    argv = ["docker-compose", "-f", str(root / "docker-compose.yml")]
    for p in profiles:
        argv += ["--profile", p]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOLLOW_DIR", "RUN_ID"))}
    out = subprocess.run(argv + ["config"], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**clean, **(env or {})})
    if out.returncode != 0:
        raise AssertionError(f"docker-compose config failed: {out.stderr}")
    return yaml.safe_load(out.stdout)


@dataclass
class Sandbox:
    """Folders, ports and binaries for running one rendered compose project on loopback."""

    rendered: dict
    base: Path
    binaries: dict[str, str]
    port: object
    host_env: dict[str, str] = field(default_factory=dict)
    """The environment `docker compose up` would run in: fills the variables compose passes through."""

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        self.ports = {(svc, p): self.port() for svc, ports in PORTS.items() for p in ports}
        self.bin = self.base / "bin"
        self.bin.mkdir()
        for name, path in self.binaries.items():  # a copy: root's cache is not readable by other uids
            shutil.copy(path, self.bin / name)
        (self.base / "no-torch").mkdir()
        (self.base / "no-torch/sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
        self.home = self.base / "home"
        self.home.mkdir(mode=0o777)
        os.chmod(self.home, 0o777)

    def url(self, service: str, port: int) -> str:
        return f"http://127.0.0.1:{self.ports[(service, port)]}"

    def volume(self, name: str) -> Path:
        return self.base / "volumes" / name

    # -- translation -------------------------------------------------------------------------

    def _mounts(self, service: str) -> list[tuple[str, Path]]:
        """(container path, host path) of a service's mounts, longest container path first; made on first use."""
        cache = self.__dict__.setdefault("_mounts_by_service", {})
        if service in cache:
            return cache[service]
        mounts = []
        for spec in self.rendered["services"][service].get("volumes", []):
            src, dst = spec.split(":")[:2]
            host = self._bind(service, Path(src), dst) if src.startswith("/") else self._new_volume(src, dst)
            mounts.append((dst, host))
        cache[service] = sorted(mounts, key=lambda m: -len(m[0]))
        for _, host in cache[service]:  # once the table is known: copied YAML names host paths
            if str(host).startswith(str(self.base / "binds")):
                for f in [host] if host.is_file() else host.rglob("*.y*ml"):
                    f.write_text(self.translate(service, f.read_text()))
        return cache[service]

    def _new_volume(self, name: str, mount_point: str) -> Path:
        path = self.volume(name)
        if not path.exists():  # the first container to mount it gives it its mount point's owner
            path.mkdir(parents=True)
            os.chmod(path, 0o755)
            owner = MOUNT_OWNERS.get(mount_point, 0)
            if os.geteuid() == 0:
                os.chown(path, owner, owner)
        return path

    def _bind(self, service: str, src: Path, dst: str) -> Path:
        """A bind mount: the source itself, or a translated copy where it holds YAML naming container
        paths or services (compose keeps the host's modes; so does the copy)."""
        if not (src.suffix in (".yml", ".yaml") if src.is_file() else src.is_dir() and any(src.rglob("*.y*ml"))):
            return src
        host = self.base / "binds" / service / dst.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, host)
        return host

    def translate(self, service: str, text: str) -> str:
        """Container paths of `service` -> host folders; `service:port` addresses -> loopback ports."""
        for (svc, port), local in self.ports.items():
            text = re.sub(rf"(?<![\w.-]){re.escape(svc)}:{port}\b", f"127.0.0.1:{local}", text)
        text = text.replace("localhost:9090", f"127.0.0.1:{self.ports[('prometheus', 9090)]}")
        for dst, host in self._mounts(service):
            text = re.sub(rf"(?<![\w.:/]){re.escape(dst)}(?=/|\b|$)", str(host), text)
        return text

    # -- processes -----------------------------------------------------------------------------

    def uid(self, service: str) -> int:
        svc = self.rendered["services"][service]
        if "user" in svc:
            return int(str(svc["user"]).split(":")[0])
        return next((u for prefix, u in IMAGE_USERS.items() if svc["image"].startswith(prefix)), 0)

    def command(self, service: str) -> tuple[list[str], dict[str, str]]:
        """The argv and environment compose would start `service` with, translated to this host."""
        svc = self.rendered["services"][service]
        self._mounts(service)
        env = {}
        for k, v in (svc.get("environment") or {}).items():
            if v is None:  # passed through from the environment of `docker compose up`
                if k in self.host_env:
                    env[k] = self.translate(service, self.host_env[k])
            else:
                env[k] = self.translate(service, str(v))
        argv = [self.translate(service, a) for a in self._image_argv(service, svc)]
        argv, env = self._listen(service, argv, env)
        return argv, env

    def _image_argv(self, service: str, svc: dict) -> list[str]:
        image, command = svc["image"], list(svc.get("command") or [])
        if "entrypoint" in svc:
            return list(svc["entrypoint"]) + command
        if image.startswith("prom/prometheus"):
            return [str(self.bin / "prometheus")] + command
        if image.startswith("prom/alertmanager"):
            return [str(self.bin / "alertmanager")] + command
        if image == "otel-grpo:collector":
            return [str(self.bin / "otelcol")] + command
        if image.startswith("otel-grpo:"):
            return ["sh", str(Path(__file__).resolve().parents[2] / "scripts/docker-entrypoint.sh")] + command
        raise AssertionError(f"{service}: no stand-in for image {image}")

    def _listen(self, service: str, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Where compose maps a port, listen on a loopback port instead."""
        p = self.ports
        if service in ("prometheus", "alertmanager"):
            port = PORTS[service][0]
            argv = argv + [f"--web.listen-address=127.0.0.1:{p[(service, port)]}"]
        elif service == "sidecar":
            argv = [{"0.0.0.0": "127.0.0.1", "8000": str(p[("sidecar", 8000)])}.get(a, a) for a in argv]
        elif service == "otel-collector":
            env = {**env, "OTELCOL_BIND": "127.0.0.1",
                   **{var: str(p[("otel-collector", port)]) for port, var in _COLLECTOR_PORT_VARS.items()}}
        return argv, env

    def environment(self, service: str, env: dict[str, str]) -> dict[str, str]:
        """The process environment: PATH to this checkout's otel-grpo, nothing of the test's OTEL_*."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PG"))}
        root = str(Path(__file__).resolve().parents[2])
        path = [root] + ([str(self.base / "no-torch")] if self.rendered["services"][service]["image"] in NO_TORCH else [])
        return {**base, **env, "PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(self.home),
                "PYTHONPATH": os.pathsep.join(path)}

    def runs_as_its_user(self, service: str) -> bool:
        """Whether `service` runs as its uid here: as root, and for our images only where this
        Python is reachable by other users (a pyenv under /root is not)."""
        if os.geteuid() != 0 or self.uid(service) == 0:
            return False
        image = self.rendered["services"][service]["image"]
        return image == "otel-grpo:collector" or not image.startswith("otel-grpo:") or _python_public()

    def readable_as_user(self, service: str, path: Path) -> bool:
        """Whether `service`'s uid can read `path` (the kernel decides: `cat` run as that uid)."""
        return subprocess.run(_setpriv(self.uid(service)) + ["cat", str(path)], capture_output=True,
                              timeout=30).returncode == 0

    def _as_user(self, service: str, argv: list[str]) -> list[str]:
        return _setpriv(self.uid(service)) + argv if self.runs_as_its_user(service) else argv

    def run_once(self, service: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A one-shot service (init): run to completion."""
        argv, env = self.command(service)
        return subprocess.run(self._as_user(service, argv), capture_output=True, text=True, timeout=timeout,
                              env=self.environment(service, env), cwd=self._workdir(service))

    def _workdir(self, service: str) -> str:
        wd = self.rendered["services"][service].get("working_dir")
        return self.translate(service, wd) if wd else str(self.base)

    def managed(self, service: str, ready_url: str) -> Managed:
        argv, env = self.command(service)
        return Managed(service, self._as_user(service, argv), ready_url, self.base / "logs" / f"{service}.log",
                       env=self.environment(service, env))

    def popen(self, service: str) -> subprocess.Popen:
        argv, env = self.command(service)
        log = open(self.base / "logs" / f"{service}.log", "ab")
        try:
            return subprocess.Popen(self._as_user(service, argv), stdout=log, stderr=subprocess.STDOUT,
                                    env=self.environment(service, env), cwd=self._workdir(service),
                                    start_new_session=True)
        finally:
            log.close()


def _setpriv(uid: int) -> list[str]:
    """The prefix that runs a command as `uid` (and that group, no others), as a container's `user:`."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _python_public() -> bool:
    """Whether every folder down to this interpreter lets other users through."""
    path = Path(os.path.realpath(sys.executable))
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


def new_base() -> Path:
    """A folder every uid can traverse (pytest's tmp_path is root's only)."""
    return Path(tempfile.mkdtemp(prefix="otel-grpo-compose-"))
