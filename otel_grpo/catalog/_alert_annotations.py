"""Annotations the alert rules add for the sidecar, which reads them from Alertmanager's webhook."""

CLOCK_OFFSET_ANNOTATION = "clock_offset_seconds"
"""On every alert of a run: its latest process's clock offset when the alert was evaluated, in seconds (what
Prometheus adds to the times the process exports to put them on its own clock; `%.3f`; empty where the run
exports no clock). An alert's `startsAt` minus it is the alert's start on the trainer's clock, the clock the
sidecar's step times are on."""
