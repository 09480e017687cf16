"""A save that writes is work to the stall alerts; one that writes nothing is not (`beat_while_writing`)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from otel_grpo.telemetry import Telemetry
from otel_grpo.telemetry._writes import WriteWatch


def _keep(path, n: int = 5) -> None:
    """A folder that already keeps `n` checkpoints of a few files, as a long run's output dir does."""
    for step in range(n):
        ckpt = path / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        for name in ("model.safetensors", "optimizer.pt", "trainer_state.json"):
            (ckpt / name).write_bytes(b"x" * 100)
        os.utime(ckpt, ns=(step * 10**9, step * 10**9))  # older than anything written from now on


def test_a_look_sees_a_new_checkpoint_and_its_files_growing_but_not_a_folder_left_alone(tmp_path):
    out = tmp_path / "out"
    _keep(out)
    watch = WriteWatch(out)
    assert not watch.changed()  # nothing written since it was made
    new = out / "checkpoint-5"
    new.mkdir()
    assert watch.changed()  # a new folder
    shard = new / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"x" * 10)
    assert watch.changed()  # a new file inside the newest folder
    assert not watch.changed()
    with shard.open("ab") as f:
        f.write(b"y" * 10)
    assert watch.changed()  # the file grew
    nested = new / "global_step5"
    nested.mkdir()
    (nested / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"z")
    assert watch.changed()
    with (nested / "zero_pp_rank_0_mp_rank_00_optim_states.pt").open("ab") as f:
        f.write(b"z" * 100)
    assert watch.changed()  # two folders down the chain
    (out / "checkpoint-0" / "optimizer.pt").unlink()  # a rotated checkpoint: removed files are work too
    assert watch.changed()
    assert not watch.changed()


def test_a_folder_that_is_not_there_yet_is_no_error_and_a_file_is_watched_itself(tmp_path):
    watch = WriteWatch(tmp_path / "later")
    assert not watch.changed()
    (tmp_path / "later").mkdir()
    assert watch.changed()  # it appeared
    single = tmp_path / "checkpoint.pt"  # `torch.save` into one file
    watch = WriteWatch(single)
    assert not watch.changed()
    single.write_bytes(b"x")
    assert watch.changed()
    with single.open("ab") as f:
        f.write(b"y")
    assert watch.changed() and not watch.changed()


def _activity(captured) -> list[float]:
    points = captured.metrics().get("grpo.process.activity_time")
    return [p.value for p in points.data.data_points] if points is not None else []


def test_writes_during_the_block_beat_and_a_block_that_writes_nothing_does_not(make_captured, tmp_path):
    captured = make_captured()
    tel = captured.tel
    with tel.step(0):
        pass
    out = tmp_path / "ckpt"
    began = time.time()
    with tel.beat_while_writing(out, every_s=0.05):
        time.sleep(0.3)  # a save stuck before its first byte: no beat
        assert tel.flush(10) and _activity(captured) == []
        out.mkdir()
        with (out / "model.safetensors").open("wb") as f:
            for _ in range(8):  # a slow disk: a chunk every 0.2 s
                f.write(b"x" * 1024)
                f.flush()
                time.sleep(0.2)
    assert tel.flush(10)
    (beat,) = _activity(captured)
    assert began + 0.3 <= beat <= time.time()
    assert [p.value for p in captured.metrics()["grpo.step_index"].data.data_points] == [0.0]  # work, not a step
    # after the block nothing is watched: writes there beat no more
    time.sleep(1.1)  # past the once-a-second limit of heartbeats
    (out / "late").write_bytes(b"x")
    time.sleep(0.3)
    assert tel.flush(10) and _activity(captured) == [beat]


def test_a_rank_that_does_not_export_watches_nothing(tmp_path):
    tel = Telemetry.disabled()
    before = {t.name for t in threading.enumerate()}
    with tel.beat_while_writing(tmp_path, every_s=0.01):
        assert {t.name for t in threading.enumerate()} == before


@pytest.mark.parametrize("kwargs, named", [({"path": 3}, "path"), ({"path": "x", "every_s": 0}, "every_s"),
                                           ({"path": "x", "every_s": True}, "every_s"),
                                           ({"path": "x", "every_s": float("nan")}, "every_s")])
def test_bad_arguments_are_refused_by_name(kwargs, named):
    tel = Telemetry.disabled()
    with pytest.raises(ValueError, match=f"^{named}:"):
        tel.beat_while_writing(**kwargs)
