"""`python -m otel_grpo.cli ...` (what torchrun launches)."""

from . import main

main()
