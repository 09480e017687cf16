"""The pieces that keep the stack closed: the sidecar's refusal, the secrets script, the images'
entry point, and the collector cache that must not hand back a collector without the auth extension."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from otel_grpo.sidecar import SidecarSettings
from otel_grpo.stack._process import cache_name

SIDECAR = [sys.executable, "-m", "otel_grpo.cli", "sidecar"]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_GRPO_SIDECAR_")}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.example.org"])
def test_the_sidecar_refuses_to_listen_beyond_loopback_without_both_tokens(host, tmp_path):
    for tokens in ({}, {"ingest_token": "i"}, {"read_token": "r"}):
        with pytest.raises(ValueError, match="allow_unauthenticated"):
            SidecarSettings(host=host, db=tmp_path / "s.db", **tokens)
    assert SidecarSettings(host=host, db=tmp_path / "s.db", ingest_token="i", read_token="r").host == host
    assert SidecarSettings(host=host, db=tmp_path / "s.db", allow_unauthenticated=True).allow_unauthenticated


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"])
def test_the_sidecar_listens_on_loopback_without_tokens(host, tmp_path):
    assert SidecarSettings(host=host, db=tmp_path / "s.db").ingest_token is None


def test_the_sidecar_command_refuses_in_one_line_and_exits_1(tmp_path):
    for argv, env in (([ "--host", "0.0.0.0"], {}), ([], {"OTEL_GRPO_SIDECAR_HOST": "0.0.0.0"})):
        out = subprocess.run(SIDECAR + argv + ["--db", str(tmp_path / "s.db")], capture_output=True, text=True,
                             timeout=120, env={**CLEAN_ENV, **env})
        assert out.returncode == 1, out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("otel-grpo sidecar: invalid sidecar settings") and "--allow-unauthenticated" not in out.stdout
        assert "allow_unauthenticated" in line
    assert not (tmp_path / "s.db").exists()  # refused before anything was created


@pytest.mark.parametrize("argv,env,named", [
    # Kubernetes' service links hand a Service named `otel-grpo` this variable (docs/operations.md)
    ([], {"OTEL_GRPO_SIDECAR_PORT": "tcp://10.0.0.7:8000"}, "OTEL_GRPO_SIDECAR_PORT=tcp://10.0.0.7:8000: "),
    (["--port", "99999"], {}, "port=99999: "),
    ([], {"OTEL_GRPO_SIDECAR_READ_TOKEN": " "}, "OTEL_GRPO_SIDECAR_READ_TOKEN= : "),
    # set empty: was "host  is reachable beyond this machine", and "--log-file .: is a directory"
    ([], {"OTEL_GRPO_SIDECAR_HOST": ""}, "OTEL_GRPO_SIDECAR_HOST=: empty"),
    ([], {"OTEL_GRPO_SIDECAR_LOG_FILE": ""}, "OTEL_GRPO_SIDECAR_LOG_FILE=: empty"),
])
def test_a_bad_sidecar_setting_is_one_line_naming_the_variable_or_flag_it_came_from(tmp_path, argv, env, named):
    out = subprocess.run(SIDECAR + argv + ["--db", str(tmp_path / "s.db")], capture_output=True, text=True,
                         timeout=120, env={**CLEAN_ENV, **env})
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"otel-grpo sidecar: invalid sidecar settings: {named}"), line


def test_the_sidecar_flag_says_an_open_sidecar_is_intended():
    out = subprocess.run(SIDECAR + ["--help"], capture_output=True, text=True, timeout=120,
                         env={**CLEAN_ENV, "COLUMNS": "200"})
    assert "--allow-unauthenticated" in out.stdout


def _init(root, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(root / "scripts/init-secrets.sh"), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_init_secrets_makes_readable_files_keeps_values_and_lets_seeds_win(root, tmp_path):
    d, seed = tmp_path / "secrets", tmp_path / "seed"
    assert _init(root, str(d)).returncode == 0
    assert stat.S_IMODE(d.stat().st_mode) == 0o700  # on the host: only its owner reaches the files
    first = {p.name: p.read_text() for p in d.iterdir()}
    for p in d.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644 and first[p.name].strip(), p.name
    assert first["web.yml"].splitlines()[-1].startswith('  otel-grpo: "$2b$')
    assert _init(root, str(d)).returncode == 0
    again = {p.name: p.read_text() for p in d.iterdir()}
    assert {k: v for k, v in again.items() if k != "web.yml"} == {k: v for k, v in first.items() if k != "web.yml"}
    seed.mkdir()
    (seed / "sidecar_token").write_text("chosen-by-hand")
    os.chmod(seed / "sidecar_token", 0o600)  # what the old script wrote: the init service runs as root
    assert _init(root, str(d), str(seed), env={"SECRETS_DIR_MODE": "755"}).returncode == 0
    assert (d / "sidecar_token").read_text() == "chosen-by-hand"
    assert stat.S_IMODE((d / "sidecar_token").stat().st_mode) == 0o644
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    assert (d / "otlp_token").read_text() == first["otlp_token"]


def test_the_web_config_hash_is_accepted_by_prometheus(root, tmp_path, promtool):
    d = tmp_path / "secrets"
    assert _init(root, str(d)).returncode == 0
    out = subprocess.run([promtool, "check", "web-config", str(d / "web.yml")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _entrypoint(root, tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """scripts/docker-entrypoint.sh with an `otel-grpo` that prints its environment."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "otel-grpo").write_text("#!/bin/sh\nenv\n")
    os.chmod(fake / "otel-grpo", 0o755)
    return subprocess.run(["sh", str(root / "scripts/docker-entrypoint.sh"), "sidecar"], capture_output=True, text=True,
                          timeout=60, env={"PATH": f"{fake}:/usr/bin:/bin", **env})


def test_the_image_entry_point_reads_token_files_into_the_environment(root, tmp_path):
    (tmp_path / "t").write_text("s3cret")
    (tmp_path / "h").write_text("authorization=Bearer%20x")
    out = _entrypoint(root, tmp_path, {"OTEL_GRPO_SIDECAR_TOKEN_FILE": str(tmp_path / "t"),
                                       "OTEL_EXPORTER_OTLP_HEADERS_FILE": str(tmp_path / "h"),
                                       "PGPASSWORD_FILE": str(tmp_path / "t"), "OTHER_FILE": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    env = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert env["OTEL_GRPO_SIDECAR_TOKEN"] == "s3cret" and env["PGPASSWORD"] == "s3cret"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer%20x"
    assert "OTEL_GRPO_SIDECAR_TOKEN_FILE" not in env and env["OTHER_FILE"] == "/nonexistent"


def test_the_image_entry_point_stops_when_a_named_file_is_unreadable(root, tmp_path):
    out = _entrypoint(root, tmp_path, {"OTEL_GRPO_SIDECAR_TOKEN_FILE": str(tmp_path / "missing")})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == f"otel-grpo: OTEL_GRPO_SIDECAR_TOKEN_FILE: cannot read {tmp_path / 'missing'}"


def test_the_collector_cache_name_follows_its_component_list(root):
    """build-backends.sh and the tests agree on the name, so a collector built before the auth
    extension was added (otelcol-grpo-0.144.0) is never picked."""
    digest = subprocess.run(["sh", "-c", "grep -v '^[[:space:]]*#' collector/builder-config.yaml | sha256sum | cut -c1-12"],
                            capture_output=True, text=True, cwd=root, timeout=60).stdout.strip()
    assert cache_name("otelcol") == f"otelcol-grpo-0.144.0-{digest}"
    assert cache_name("prometheus") == "prometheus-3.16.0"
    script = (root / "scripts/build-backends.sh").read_text()
    assert "grep -v '^[[:space:]]*#' collector/builder-config.yaml | sha256sum | cut -c1-12" in script
