"""The demo GRPO trainer: a small transformer learning a verifiable digit task, fully instrumented.

    from otel_grpo.trainer import GRPOTrainer, load_config
    result = GRPOTrainer(load_config(preset="tiny", overrides=["steps=3"])).train()
"""

from .._extras import require

require("trainer", "otel_grpo.trainer")  # one line naming the extra, not torch's ModuleNotFoundError

from ._config import GRPOConfig, OptimConfig, RolloutCorrectionConfig, TrainConfig
from .._fault_spec import FAULT_KINDS, Fault
from ._faults import FaultConfig
from ._loading import ConfigError, load_config, to_dict
from ._loop import GRPOTrainer, TrainResult
from ._model import ModelConfig, TinyGPT
from ._presets import PRESETS
from ._task import DigitTask, TaskConfig
from ._tokenizer import CharTokenizer

__all__ = [
    "FAULT_KINDS",
    "PRESETS",
    "CharTokenizer",
    "ConfigError",
    "DigitTask",
    "Fault",
    "FaultConfig",
    "GRPOConfig",
    "GRPOTrainer",
    "ModelConfig",
    "OptimConfig",
    "RolloutCorrectionConfig",
    "TaskConfig",
    "TinyGPT",
    "TrainConfig",
    "TrainResult",
    "load_config",
    "to_dict",
]
