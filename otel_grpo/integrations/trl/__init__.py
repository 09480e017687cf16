"""TRL's GRPOTrainer, instrumented from its own tensors: `instrument(trainer)`.

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...)
    instrument(trainer)     # run id and output dir from `args`; finish at train end
    trainer.train()

`OtelGrpoCallback` is the log-dict path for any `transformers.Trainer` (and the
fallback when the installed TRL is outside `SUPPORTED_TRL`). `trl_mapping()` is the
table of every key TRL and transformers log and the catalog signal it becomes.
Names are resolved lazily so that `_keys` (the mapping) imports neither transformers
nor TRL. docs/integrations.md is rendered from the catalog by `otel_grpo.generate`.
"""

from ..._extras import require
from ..._lazy import lazy_names

__all__ = ["SUPPORTED_TRL", "OtelGrpoCallback", "instrument", "trl_mapping"]

_WHERE = {
    "SUPPORTED_TRL": "._compat",
    "OtelGrpoCallback": "._callback",
    "instrument": "._instrument",
    "trl_mapping": "._keys",
}


def _needs_trl(name: str) -> None:
    if _WHERE[name] != "._keys":  # the mapping needs neither transformers nor TRL
        require("trl", f"otel_grpo.integrations.trl.{name}")


__getattr__ = lazy_names(__name__, _WHERE, before=_needs_trl)
