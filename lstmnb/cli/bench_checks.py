"""The checks the benches that train share (`lstmnb bench size|scaling|batch-sweep`), run before any work."""

from __future__ import annotations

from .checks import check_profile_name, check_split_dates, check_windows_fit
from .options import check_results_args, request_from_args, train_config_from_args


def check_training_bench(args, cfg=None, device: bool = True) -> None:
    """What every bench that trains needs: its TrainConfig (and its device, unless the bench picks the
    devices), the request, the results file and the cache."""
    from ..machine.device import resolve_device
    from ..paths import check_cache

    cfg = cfg or train_config_from_args(args)
    cfg.validate()
    check_profile_name(cfg.profile)
    if device:
        resolve_device(cfg.device)
    request = request_from_args(args)
    check_split_dates(cfg, request)
    check_windows_fit(cfg, request)
    check_results_args(args)
    check_cache()


def steady_epochs(option: str, epochs: int | None) -> None:
    """A bench whose figures are steady epochs (the first, warm-up epoch left out) needs two or more."""
    from ..errors import ConfigError

    if epochs is not None and epochs < 2:
        raise ConfigError(f"{option} {epochs} leaves no steady epoch to time (the first is the warm-up, which this "
                          f"bench leaves out): give {option} 2 or more")
