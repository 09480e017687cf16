"""A real TRL job for the follower: `trl.GRPOTrainer` on the tiny local model (tests/_support/tiny_trl.py)
with `log_completions=True`, writing TRL's own completions parquet and its final checkpoint.

    python trl_writer.py OUTPUT_DIR STEPS [checkpoint|save_state] [save_steps=N] [crash_after=N] [resume=1] [seed=N]
                         [completions=0] [tokens_seen=1]

`checkpoint` (default): a checkpoint at the last step (`trainer_state.json` with
`global_step == max_steps`), and every `save_steps` steps before it. `crash_after=N`: the job
dies (exit code 17, nothing flushed) once step N is logged and saved, before step N+1 is;
`resume=1`: `trainer.train(resume_from_checkpoint=True)`, a relaunch from the latest checkpoint
in OUTPUT_DIR; `seed`: GRPOConfig's (another one samples other completions); `TRL_WRITER_TAG`
in the environment: the text `log_extra` column's value (default `extra`), which marks each
sample row with the attempt that wrote it. `completions=0`: `log_completions=False` (no parquet: the
trainer states are all the follower sees). `tokens_seen=1`: `include_num_input_tokens_seen="all"`, with which
transformers puts `train_runtime` in every training log. `save_state`: no checkpoint; the script calls
`trainer.save_state()` after training, as TRL's example scripts do, which writes the
end-of-training summary (`train_loss`) into `<output_dir>/trainer_state.json`; that run
also evaluates before its first step (`eval_on_start`: `eval_` values logged at step 0).

`steps_per_generation=2`: every generation batch serves two steps, so TRL writes the same
rows into two consecutive parquet files (the follower must send them once). The words reward
also calls TRL's `log_extra` with a numeric column (`chars`) and a text one (`note`): TRL
writes them after the reward columns, and they are not rewards.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# By path: a `tests` package installed by another wheel could shadow ours on sys.path.
_spec = importlib.util.spec_from_file_location("tiny_trl", Path(__file__).parents[2] / "_support" / "tiny_trl.py")
tiny_trl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny_trl)

REWARD_WEIGHTS = (1.0, 0.5)  # tiny_trl's reward_weights for reward_words, reward_short


def reward_words(completions, log_extra=None, **kwargs):
    """tiny_trl's reward_words, logging two extra completions columns as a user's reward function may."""
    if log_extra is not None:
        log_extra("chars", [float(len(c)) for c in completions])
        log_extra("note", [os.environ.get("TRL_WRITER_TAG", "extra")] * len(completions))
    return tiny_trl.reward_words(completions, **kwargs)


def crash_after(step: int):
    """A callback that kills the job at the end of step `step + 1`'s update, before that step logs or saves."""
    from transformers import TrainerCallback

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step > step:
                os._exit(17)

    return Crash()


if __name__ == "__main__":
    steps = int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "checkpoint"
    options = dict(arg.split("=", 1) for arg in sys.argv[4:])
    saving = {"save_strategy": "steps", "save_steps": int(options.get("save_steps", steps))} if mode == "checkpoint" \
        else {"save_strategy": "no", "eval_on_start": True, "per_device_eval_batch_size": 4,
              "eval_dataset": tiny_trl.make_dataset(8)}
    callbacks = [crash_after(int(options["crash_after"]))] if "crash_after" in options else None
    trainer = tiny_trl.make_grpo_trainer(sys.argv[1], log_completions=options.get("completions") != "0",
                                         max_steps=steps, steps_per_generation=2,
                                         reward_weights=list(REWARD_WEIGHTS), seed=int(options.get("seed", 0)),
                                         reward_funcs=[reward_words, tiny_trl.reward_short], callbacks=callbacks,
                                         include_num_input_tokens_seen="all" if options.get("tokens_seen") == "1"
                                         else "no", **saving)
    trainer.train(resume_from_checkpoint=True if options.get("resume") == "1" else None)
    if mode == "save_state":
        trainer.save_state()
