"""The epochs experiment of the published table: one run per (input path, epochs, repeat), each with
its own warm-up, because that is what the published table timed."""

from __future__ import annotations

from typing import Any, Iterable

from ..errors import ConfigError
from ..records import Recorder
from ..training import train, with_overrides


def epochs_experiment(windows, data_info: dict[str, Any], base_cfg, epochs_list: Iterable[int],
                      input_paths: Iterable[str] = ("fast", "dataloader"), *, results,
                      repeats: int = 1, experiment: str = "epochs") -> list[dict[str, Any]]:
    """Train one run per (input path, epochs, repeat), the repeats alternated as below; returns the records."""
    epochs_list = [int(e) for e in epochs_list]
    if not epochs_list or min(epochs_list) < 1:
        raise ConfigError(f"epochs_list={epochs_list!r} must be a non-empty list of whole numbers >= 1")
    if repeats < 1:
        raise ConfigError(f"repeats={repeats!r} must be >= 1")
    recorder = Recorder(results)
    # repeats alternate: every (input path, epochs) once before any twice, so that a minute in which other
    # processes keep the cores busy slows one repeat of several rows, not every repeat of one row
    for _ in range(repeats):
        for path in input_paths:
            for epochs in epochs_list:
                cfg = with_overrides(base_cfg, input_path=path, epochs=epochs, experiment=experiment)
                recorder.add(train(windows, cfg, data_info=data_info).record)
    return recorder.records
