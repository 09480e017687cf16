"""The command line as a user meets it: help texts and one readable line on bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_help_lists_every_command():
    out = run("--help")
    assert out.returncode == 0
    for command in ("train", "sidecar", "up", "demo", "dashboards", "version"):
        assert command in out.stdout


def test_version_as_an_option_and_as_a_command():
    from otel_grpo import __version__

    for args in (["--version"], ["version"]):
        out = run(*args)
        assert (out.returncode, out.stdout.strip(), out.stderr) == (0, __version__, ""), args


def test_sidecar_help_shows_its_defaults():
    out = run("sidecar", "--help")
    assert "127.0.0.1" in out.stdout and "8000" in out.stdout


@pytest.mark.parametrize("command", ["up", "sidecar", "follow", "replay", "train", "demo", "dashboards"])
def test_a_commands_description_wraps_as_paragraphs_at_80_columns(command):
    """Each paragraph of a command's description fills its lines: no ragged half-line where the docstring
    happened to break (typer's rich help keeps a docstring's single line breaks)."""
    out = run(command, "--help", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("\u256d"))  # the first box: the options
    text = [line.rstrip() for line in lines[start:end]]
    for row, following in zip(text, text[1:]):
        if row and following:  # the same paragraph: the next word would not have fit on this line
            assert len(row) + 1 + len(following.split()[0]) > 78, "\n".join(text)


@pytest.mark.parametrize(
    "args, env, names",
    [
        (["sidecar", "--port", "-5"], None, "port"),
        (["sidecar"], {"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": "lots"}, "OTEL_GRPO_SIDECAR_MAX_BODY_BYTES=lots"),
        (["sidecar", "--db", "/proc/no-such-dir/s.db"], None, "/proc/no-such-dir/s.db"),  # was 69 lines
        (["sidecar", "--db", "/dev/null/s.db"], None, "/dev/null/s.db"),
        (["train", "--set", "grpo.epsilon_low=5"], None, "epsilon_low"),
        (["train", "--fault", "meltdown@3"], None, "meltdown"),
        (["train", "--preset", "tiny", "--steps", "3", "--fault", "kl-spike@3"], None,
         "fault kl-spike@3 (--fault) comes after the last step (2 of --steps 3): it would never be injected"),
        (["demo", "--steps", "3", "--fault", "kl-spike@1000", "--dir", "{tmp}/demo"], None,
         "fault kl-spike@1000 (--fault) comes after the last step (2 of --steps 3)"),  # before the stack starts
        (["train", "--step-delay", "-1"], None, "min_step_seconds (--step-delay) must be >= 0, got -1.0"),  # named all three
        (["train", "--preset", "tiny", "--steps", "1", "--telemetry", "--output-dir", "{tmp}"],
         {"OTEL_EXPORTER_OTLP_PROTOCOL": "foo"},
         "OTEL_EXPORTER_OTLP_PROTOCOL=foo"),  # the variable the user set, not OTEL_GRPO_OTLP_PROTOCOL
        (["up", "--dir", "/proc/foo"], None, "--dir /proc/foo: cannot be created there"),  # was 78 lines
        (["train", "--output-dir", "/etc/passwd/run"], None, "/etc/passwd is a file, not a directory"),  # was 41 lines
        (["train", "--output-dir", "/etc/passwd"], None, "--output-dir /etc/passwd: is a file, not a directory"),
        (["train", "--preset", "tiny", "--no-telemetry", "--output-dir", "/proc/foo"], None,
         "--output-dir /proc/foo: cannot be created there"),  # seen only as the trainer creates it
        (["train", "--preset", "tiny", "--no-telemetry", "--set", "output_dir=/etc/passwd/run"], None,
         "output_dir /etc/passwd/run: /etc/passwd is a file, not a directory"),
        (["up", "--dir", "/etc/passwd/stack"], None, "/etc/passwd is a file, not a directory"),
        (["sidecar", "--db", "/etc/passwd/x.db"], None, "/etc/passwd is a file, not a directory"),  # "File exists"
        (["sidecar", "--db", "/"], None, "--db /: is a directory, not a file"),
        (["sidecar", "--db", "{tmp}/s.db", "--log-file", "/proc/nope/x.log"], None,
         "cannot write the log file: --log-file /proc/nope/x.log"),  # was logging's 50-line traceback
        # click's usage errors, one line too (typer draws them as a box of five or more)
        (["follow", "--jsonl", "x", "--poll", "0"], None, "Invalid value for '--poll'"),
        (["train", "--stpes", "3"], None, "No such option: --stpes"),
        (["replay"], None, "Missing argument 'output_dir'"),
        (["demo", "--fault", "meltdown@3"], None, "meltdown"),
        (["demo", "--trainer-log", "{tmp}", "--dir", "{tmp}/d"], None,
         "--trainer-log {tmp}: is a directory, not a file"),  # was IsADirectoryError once the stack was up
        (["demo", "--trainer-log", "/etc/passwd/t.log"], None, "--trainer-log /etc/passwd/t.log: /etc/passwd is a file"),
        (["sidecar", "--db", "{tmp}/s.db", "--log-level", "bogus"], None,
         "Invalid value for --log-level: 'bogus' is not one of critical"),  # was uvicorn's KeyError
        (["dashboards", "--root", "/no/such/checkout", "--check"], None, "'/no/such/checkout' does not exist"),
        (["replay", "{tmp}", "--endpoint", "sidecar:8000"], None, "--endpoint sidecar:8000: expected an http"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args, env, names, tmp_path):
    out = run(*(a.replace("{tmp}", str(tmp_path)) for a in args), env=env)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and names.replace("{tmp}", str(tmp_path)) in lines[0], out.stderr
    assert lines[0].startswith(f"otel-grpo {args[0]}: "), lines[0]  # every command says who is speaking
    assert not any((tmp_path / name).exists() for name in ("d", "s.db", "demo"))  # nothing written before the check
    assert "Traceback" not in out.stderr


def test_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run("sidecar", "--port", str(port), "--db", str(tmp_path / "s.db"))
    assert out.returncode == 1
    assert out.stderr.strip() == f"otel-grpo sidecar: cannot listen on 127.0.0.1:{port}: Address already in use (another sidecar? choose --port)"


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs (root may mount one here); skipped where mounting is not allowed."""
    where = tmp_path / "ro"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    yield where
    subprocess.run(["umount", str(where)], check=True)


def test_a_read_only_file_system_says_so(read_only_dir):
    for args in (["sidecar", "--db", str(read_only_dir / "s.db")], ["up", "--dir", str(read_only_dir / "stack")],
                 ["train", "--output-dir", str(read_only_dir / "run")]):
        out = run(*args)
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].endswith(f"{read_only_dir} is on a read-only file system"), out.stderr


def test_resume_without_a_checkpoint_is_one_line_naming_the_directory(tmp_path):
    """Not a silent fresh start under the old run's name: a mistyped --output-dir would train from
    scratch (and a fresh run's first step would empty its metrics.jsonl)."""
    out = run("train", "--preset", "tiny", "--no-telemetry", "--resume", "--output-dir", str(tmp_path / "run"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-grpo train: invalid config: resume: no checkpoint"), out.stderr
    assert str(tmp_path / "run") in lines[0] and "fresh run" in lines[0]
    assert not (tmp_path / "run").exists()


def test_train_help_says_what_resume_does_without_a_checkpoint():
    out = run("train", "--help", env={"COLUMNS": "200"})
    assert "Without a checkpoint there, an error" in " ".join(out.stdout.split())


def test_dashboards_refuses_a_folder_that_is_not_an_otel_grpo_checkout(tmp_path):
    """The default --root is the working directory: in a project of the user's own it replaced their
    prometheus/prometheus.yml and docs/alerts.md. Now it is one line and nothing is written; an empty directory
    is where the files are generated outside a checkout, and a folder generated into before is regenerated."""
    (tmp_path / "prometheus").mkdir()
    (tmp_path / "prometheus" / "prometheus.yml").write_text("mine\n")
    out = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "dashboards"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("otel-grpo dashboards: --root .: not an otel-grpo checkout") and "empty directory" in lines[0]
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*"))] == ["prometheus", "prometheus/prometheus.yml"]
    assert (tmp_path / "prometheus" / "prometheus.yml").read_text() == "mine\n"

    elsewhere = tmp_path / "generated"
    elsewhere.mkdir()
    assert run("dashboards", "--root", str(elsewhere)).returncode == 0
    assert (elsewhere / "prometheus" / "prometheus.yml").exists()
    again = run("dashboards", "--root", str(elsewhere))
    assert (again.returncode, again.stdout.strip()) == (0, "0 file(s) written"), again.stderr


@pytest.mark.parametrize("run_id", ["/tmp/elsewhere", "../x", "a/./b"])
def test_demo_refuses_a_run_id_the_trainer_would_before_starting_anything(tmp_path, run_id):
    """`--run-id /abs` started the whole stack, the trainer then refused the id, and the summary went to
    /abs/summary.json; `../x` wrote <dir>/x/summary.json, outside <dir>/runs. Checked first now, by the
    trainer's own rule: nothing is started or written."""
    out = run("demo", "--exit", "--dir", str(tmp_path / "d"), "--run-id", run_id)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("otel-grpo demo: ") and f"run_id {run_id!r}" in lines[0], lines[0]
    assert "starting" not in out.stdout and not (tmp_path / "d").exists()


@pytest.mark.parametrize("fixture", ["garbage", "another preset"])
def test_resume_from_a_checkpoint_that_does_not_fit_is_one_line_naming_it(tmp_path, fixture):
    """A corrupt checkpoint.pt was pickle's ValueError, another preset's torch's RuntimeError (size mismatch,
    pages of it): now one line naming the file and what is wrong with it."""
    run_dir = tmp_path / "run"
    if fixture == "garbage":
        run_dir.mkdir()
        (run_dir / "checkpoint.pt").write_bytes(b"garbage\n")
        preset = "tiny"
    else:
        first = run("train", "--preset", "tiny", "--steps", "1", "--no-telemetry", "--output-dir", str(run_dir))
        assert first.returncode == 0 and (run_dir / "checkpoint.pt").exists(), first.stderr
        preset = "demo"
    out = run("train", "--preset", preset, "--no-telemetry", "--resume", "--output-dir", str(run_dir))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith(f"otel-grpo train: invalid config: resume: {run_dir / 'checkpoint.pt'} "), lines[0]
    assert ("is not a checkpoint torch can read" if fixture == "garbage" else "holds weights of another model") in lines[0]
