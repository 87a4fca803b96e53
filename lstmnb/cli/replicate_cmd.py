"""`lstmnb replicate`: the study's setting on the study's data, its training loss beside the study's printed one."""

from __future__ import annotations

from ..paths import check_cache
from ..rules import CLI
from .checks import check_plot
from .options import add_results_args, check_results_args, results_path, save_plot


def add_replicate(sub, full: bool) -> None:
    p = sub.add_parser(
        "replicate", help="the study's setting on its real data: training loss per epoch beside the study's printed one",
        description="Train --preset published (the study's setting: 2-layer LSTM, hidden 64, batch 128, DataLoader "
                    "with 2 workers, Adam 1e-3, trained on 2020, tested on 2021-01..06) on the study's real ERA5 at "
                    "its two points, print the mean training loss of each epoch beside what the study's notebooks "
                    "printed, say how close they are, and append the run record. About 15 s for 5 epochs on 2 cores.")
    p.add_argument("--epochs", type=int, default=5, help="epochs (default 5; the study printed up to 15)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps or auto")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the losses per epoch as a plot here")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_results_args(p)
    p.set_defaults(func=_run_replicate, check=_check_replicate)


def _check_replicate(args) -> None:
    from ..machine.device import resolve_device
    from ..training import preset_config

    preset_config("published", epochs=args.epochs, device=args.device, experiment="replication").validate(CLI)
    resolve_device(args.device, CLI)
    check_plot(args.plot)
    check_results_args(args)
    check_cache()


def _run_replicate(args) -> int:
    import pandas as pd

    from ..experiments import replication
    from ..report import format_table

    record = replication.replicate(args.epochs, device=args.device, results=results_path(args), progress=args.progress)
    table = replication.loss_table(record)
    with pd.option_context("display.width", 100):
        print(format_table(replication.shown_table(table)))
    print("\n" + replication.verdict(record))
    m, t = record["metrics"], record["timing"]
    print(f"test RMSE 2021-01..06: {m['test_rmse_k']:.3f} K (persistence {m['persistence_rmse_k']:.3f} K); "
          f"{t['train_s']:.1f} s of training on {record['device']['kind']} ({record['device']['name']})")
    save_plot(lambda: replication.plot_losses(table), args.plot)
    return 0
