"""`otel-grpo follow`: a framework's own log files re-emitted as otel-grpo telemetry, with no code change.

    from otel_grpo.integrations.follow import Follower, State, VerlMetrics, VerlRollouts
    tel = Telemetry.from_env(run_id="exp-1")
    state = State.load(".otel-grpo-follow/exp-1.json")
    state.lock()              # one follower per state file: ValueError naming the other one
    follower = Follower(tel, [VerlMetrics("exp-1.jsonl", total_steps=500), VerlRollouts("rollouts/")], state)
    if follower.run(stop_event):
        tel.finish()          # the files show the run ended
    else:
        tel.shutdown()        # stopped by the user: the run may go on

Sources: verl's file logger JSONL (`VerlMetrics`) and generation dumps (`VerlRollouts`),
TRL's output dir (`TrlOutput`: completions parquet, trainer state), and any
`{"step": N, ...}` JSONL (`JsonlStream`). Names go through the catalog's resolver with the
source's peer (`verl`, `trl`); a step is sent exactly once across kills, restarts and failed
exports; hostile files are skipped and reported once.
"""

from ._loop import Follower, FollowOptions, Source, start
from ._state import State
from ._tail import LineTail, Position
from ._trl import TrlOutput
from ._rollouts import VerlRollouts
from ._verl import JsonlStream, VerlMetrics

__all__ = [
    "FollowOptions",
    "Follower",
    "JsonlStream",
    "LineTail",
    "Position",
    "Source",
    "State",
    "TrlOutput",
    "VerlMetrics",
    "VerlRollouts",
    "start",
]
