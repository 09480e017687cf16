"""docker-compose.yml as rendered, per profile: closed by default, credentials in files, nothing to prepare.

The rendered file is `docker-compose config`'s (Debian's 1.29). Compose v2's loader renders it
too: compose-go, the library `docker compose` loads files with (scripts/compose-config, built by
scripts/build-backends.sh), and `docker compose config` itself where the plugin is installed.
test_compose_stack.py runs the services.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from otel_grpo.generate._configs import SECRETS
from tests.stack.compose_sandbox import render
from tests.stack.conftest import need

PROFILES = [(), ("gpu",), ("cpu",), ("follow",), ("postgres",)]
ALL = ("gpu", "cpu", "follow", "postgres")


@pytest.fixture(scope="module")
def rendered(root) -> dict:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose not on PATH (apt-get install docker-compose; `make setup` does)")
    return render(root, ALL)


def test_init_never_prints_a_secret(root, tmp_path):
    """init's output lands in `docker compose logs`: it says where the Grafana password is, never what."""
    d = tmp_path / "s"
    out = subprocess.run([str(root / "scripts/init-secrets.sh"), str(d)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "grafana_admin_password" in out.stdout  # where to read it
    for p in d.iterdir():
        if p.name not in ("web.yml", "slack_webhook_url"):  # a hash; a placeholder
            assert p.read_text() not in out.stdout + out.stderr, p.name


@pytest.mark.parametrize("profiles", PROFILES, ids=lambda p: "+".join(p) or "default")
def test_each_profile_renders_and_binds_only_to_loopback(root, profiles):
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose not on PATH")
    services = render(root, profiles)["services"]
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert published and all(p.startswith("127.0.0.1:") for p in published), published
    opened = render(root, profiles, {"OTEL_GRPO_BIND": "0.0.0.0"})["services"]
    assert all(p.startswith("0.0.0.0:") for s in opened.values() for p in s.get("ports", []))


def test_only_the_entry_points_are_published(rendered):
    published = {n: sorted(int(p.split(":")[1]) for p in s["ports"]) for n, s in rendered["services"].items()
                 if s.get("ports")}
    # No collector exporter (:8889) or own metrics (:8888): Prometheus scrapes those inside the network.
    assert published == {"otel-collector": [4317, 4318], "sidecar": [8000], "alertmanager": [9093],
                         "prometheus": [9090], "grafana": [3000]}


def test_no_credential_is_in_the_rendered_environment_and_none_is_blank(rendered):
    """Tokens and passwords travel as files of the secrets volume: `docker compose config` and
    `docker inspect` show paths only, and an unset variable can no longer render as a blank token."""
    for name, svc in rendered["services"].items():
        for var, value in (svc.get("environment") or {}).items():
            if re.search(r"TOKEN|PASSWORD|HEADERS|WEBHOOK", var):
                assert var.endswith("_FILE"), (name, var)
                assert value.startswith(f"{SECRETS}/"), (name, var, value)


# The files each service mounts that name secrets, besides its rendered command, environment and health check.
MOUNTED_CONFIGS = {"prometheus": "prometheus/prometheus.yml", "alertmanager": "alertmanager/alertmanager.yml",
                   "otel-collector": "collector/config.yaml", "grafana": "grafana/provisioning/datasources/datasources.yml"}


def _reader_volume(svc: dict) -> str | None:
    """The volume a service mounts at /secrets."""
    return next((v.split(":")[0] for v in svc.get("volumes", []) if v.split(":")[1] == SECRETS), None)


def _shared(root, rendered, tmp_path) -> dict[str, set[str]]:
    """volume -> the files init puts in it: init's own command (its GROUP=FOLDER arguments) run here."""
    init = rendered["services"]["init"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in init["volumes"]}
    command = init["entrypoint"][-1]
    shares = re.findall(r"(\w+)=(/\S+)", command)
    assert shares and all(folder in mounts for _, folder in shares)
    args = [f"{group}={tmp_path / mounts[folder]}" for group, folder in shares]
    out = subprocess.run([str(root / "scripts/init-secrets.sh"), str(tmp_path / "all"), "", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return {mounts[folder]: {p.name for p in (tmp_path / mounts[folder]).iterdir()} for _, folder in shares}


def test_every_service_mounts_exactly_the_secrets_it_names(root, rendered, tmp_path):
    """Each reader's volume holds the files under /secrets that its rendered service and the configs
    it mounts name, and nothing else: the trainer cannot read the Grafana password or the sidecar's
    tokens, Grafana not the OTLP token."""
    shared = _shared(root, rendered, tmp_path)
    seen = set()
    for name, svc in rendered["services"].items():
        if name == "init":
            continue
        text = yaml.safe_dump({k: svc.get(k) for k in ("command", "entrypoint", "environment", "healthcheck")})
        if name in MOUNTED_CONFIGS:
            text += (root / MOUNTED_CONFIGS[name]).read_text()
        named = set(re.findall(rf"{SECRETS}/([\w.]+)", text))
        volume = _reader_volume(svc)
        if volume is None:
            assert not named, name
            continue
        seen |= named
        # web.yml comes with web_password: the wget health checks name the password, the servers the hash
        assert shared[volume] == named | ({"web.yml"} if "web.yml" in named else set()), (name, volume)
    assert {"otlp_token", "otlp_headers", "sidecar_token", "sidecar_read_token", "web_password", "web.yml",
            "grafana_admin_password", "postgres_password"} <= seen
    trainer = shared[_reader_volume(rendered["services"]["trainer"])]
    assert trainer == {"otlp_headers"}
    assert _reader_volume(rendered["services"]["follower"]) == _reader_volume(rendered["services"]["trainer-cpu"])


def test_init_withdraws_a_file_a_reader_no_longer_reads(root, tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer/grafana_admin_password").write_text("left from an older layout")
    out = subprocess.run([str(root / "scripts/init-secrets.sh"), str(tmp_path / "all"), "", f"trainer={tmp_path / 'trainer'}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {p.name for p in (tmp_path / "trainer").iterdir()} == {"otlp_headers"}


def test_init_runs_first_and_everything_that_reads_secrets_mounts_them_read_only(rendered):
    services = rendered["services"]
    init = services["init"]
    assert init["user"] == "0:0" and init["restart"] == "no"
    assert "secrets:/secrets:rw" in init["volumes"] and any(v.endswith(":/seed:ro") for v in init["volumes"])
    readers = {n for n, s in services.items() if _reader_volume(s)} - {"init"}
    assert readers == {"trainer", "trainer-cpu", "follower", "otel-collector", "sidecar", "postgres", "alertmanager",
                       "prometheus", "grafana"}
    for name in readers:
        volume = _reader_volume(services[name])
        assert f"{volume}:{SECRETS}:ro" in services[name]["volumes"], name
        assert volume != "secrets" and f"{volume}:/for/" in " ".join(init["volumes"]), name  # init fills it
        deps = services[name].get("depends_on", {})
        # Directly, or through a service that waited for it (Prometheus and Grafana come after Alertmanager).
        assert "init" in deps or {"alertmanager", "sidecar"} & set(deps), name


def test_prometheus_and_alertmanager_require_basic_auth_and_the_collector_runs_as_its_user(rendered):
    services = rendered["services"]
    for name in ("prometheus", "alertmanager"):
        assert f"--web.config.file={SECRETS}/web.yml" in services[name]["command"], name
        assert "web_password" in " ".join(services[name]["healthcheck"]["test"]), name
    collector = services["otel-collector"]
    assert collector["user"] == "10001:10001" and collector["build"]["target"] == "collector"
    assert collector["healthcheck"]["test"][:2] == ["CMD", "wget"]


def test_a_misconfigured_follower_says_so_in_one_line_and_stays_down(root, rendered, tmp_path):
    """`--profile follow up` with nothing to follow: the entry point runs `otel-grpo follow`, which
    exits 2 with one line; the service is not restarted (on-failure repeated that line forever)."""
    follower = rendered["services"]["follower"]
    assert follower["restart"] == "no"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_GRPO_FOLLOW_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # this checkout's otel-grpo
    env["PYTHONPATH"] = str(root)
    env.update({k: v for k, v in follower["environment"].items() if v is not None and not k.endswith("_FILE")})
    out = subprocess.run(["sh", str(root / "scripts/docker-entrypoint.sh"), *follower["command"]], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "otel-grpo follow: nothing to follow: give --verl-metrics, --verl-rollouts, --trl-output or --jsonl"]


def test_the_follower_uses_the_light_image_and_passes_every_follow_option(rendered):
    from otel_grpo.cli import follow as follow_cli

    follower = rendered["services"]["follower"]
    assert follower["image"] == "otel-grpo:follow" and follower["build"]["target"] == "follow"
    options = {p.envvar for p in _params(follow_cli.follow) if p.envvar}
    assert options and options <= set(follower["environment"]), options - set(follower["environment"])


def _params(command):
    import typer.main

    return typer.main.get_command_from_info(
        typer.models.CommandInfo(callback=command), pretty_exceptions_short=True, rich_markup_mode=None).params


def test_the_postgres_profile_pins_its_image_and_reads_its_password_from_the_volume(root, rendered):
    pg = rendered["services"]["postgres"]
    assert re.fullmatch(r"postgres:\d+\.\d+(-\w+)?", pg["image"])
    assert pg["environment"]["POSTGRES_PASSWORD_FILE"] == f"{SECRETS}/postgres_password"
    assert "ports" not in pg
    sidecar = rendered["services"]["sidecar"]["environment"]
    assert sidecar["OTEL_GRPO_SIDECAR_DB"] == "/data/sidecar.db" and sidecar["PGPASSWORD_FILE"].startswith(SECRETS)
    url = "postgresql://otel_grpo@postgres:5432/otel_grpo"
    chosen = render(root, ("postgres",), {"OTEL_GRPO_SIDECAR_DB": url})["services"]["sidecar"]["environment"]
    assert chosen["OTEL_GRPO_SIDECAR_DB"] == url


def _compose_go(root, profiles: tuple[str, ...], env: dict[str, str] | None = None) -> dict:
    argv = [need("compose-config")]
    for p in profiles:
        argv += ["-p", p]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FOLLOW_DIR", "RUN_ID"))}
    out = subprocess.run(argv + [str(root / "docker-compose.yml")], capture_output=True, text=True, timeout=120,
                         cwd=root, env={**clean, **(env or {})})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return yaml.safe_load(out.stdout)


@pytest.mark.parametrize("profiles", PROFILES, ids=lambda p: "+".join(p) or "default")
def test_compose_v2s_loader_accepts_every_profile_and_binds_to_loopback(root, profiles):
    """compose-go validates against the compose specification and resolves the profiles as `docker
    compose up` would: the services it enables, their dependencies, their published addresses."""
    services = _compose_go(root, profiles)["services"]
    expected = {"init", "otel-collector", "sidecar", "alertmanager", "prometheus", "grafana"} | {
        {"gpu": "trainer", "cpu": "trainer-cpu", "follow": "follower", "postgres": "postgres"}[p] for p in profiles}
    assert set(services) == expected
    for name, svc in services.items():
        assert set(svc.get("depends_on", {})) <= set(services), name  # nothing waits on a disabled service
        for port in svc.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", (name, port)
    opened = _compose_go(root, profiles, {"OTEL_GRPO_BIND": "0.0.0.0"})["services"]
    assert {p["host_ip"] for s in opened.values() for p in s.get("ports", [])} == {"0.0.0.0"}


def _compose_v2() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    out = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60)
    return docker if out.returncode == 0 else None


@pytest.mark.parametrize("profiles", PROFILES, ids=lambda p: "+".join(p) or "default")
def test_compose_v2_accepts_every_profile(root, profiles):
    docker = _compose_v2()
    if docker is None:
        pytest.skip("`docker compose` (v2) is not installed here; compose-go, its loader, renders the file above")
    argv = [docker, "compose", "-f", str(root / "docker-compose.yml")]
    for p in profiles:
        argv += ["--profile", p]
    out = subprocess.run(argv + ["config", "--quiet"], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
