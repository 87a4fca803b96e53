"""`lstmnb train`, `lstmnb results` and `lstmnb quickstart`: one run (or the main job) and the records table."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError, DivergedError, OutputError
from ..paths import check_cache, check_writable
from ..rules import CLI
from .checks import check_plot, check_records_args
from .options import (TYPED, CHECKPOINT_OPTIONS, PARALLEL_OPTIONS, add_records_args, add_request_args,
                      add_results_args, add_train_args, check_results_args, int_list, read_runs, request_from_args,
                      results_option, results_path, save_plot, say_threads, train_config_from_args)
from .notebooks_cmd import print_series


def print_run(record: dict) -> None:
    """The epochs table and the final RMSEs beside the baselines, as `lstmnb train` prints them."""
    from ..report import epochs_table, format_table, metrics_table

    data = record.get("data") or {}
    if data.get("source"):
        print(f"data: {data['source']} ({data.get('kind', 'real')} data), {data.get('start')} .. {data.get('end')}")
    print(format_table(epochs_table(record)))
    print("\n" + format_table(metrics_table(record)))
    t = record["timing"]
    n_warm = t.get("warmup_epochs", 1)  # more than 1: a late CUDA graph capture, or a resumed run's restart
    warm_text = (f"warm-up {n_warm} epochs {t['warmup_s']:.2f} s" if n_warm > 1 and t.get("warmup_s") is not None
                 else f"warm-up epoch {t['warmup_epoch_s']:.2f} s")
    print(f"\ntraining {t['train_s']:.2f} s on {record['device']['kind']} ({record['device']['name']}); "
          f"{warm_text}, median epoch {t['epoch_s_median']:.2f} s, {t['samples_per_s']:,.0f} samples/s")
    if record["metrics"].get("stop_reason"):
        print(f"stopped after {record['metrics']['epochs_run']} epoch(s): {record['metrics']['stop_reason']}")
    if record.get("threads"):
        say_threads(record["threads"])
    graph = record.get("cuda_graph") or {}
    if record["device"]["kind"] == "cuda" and graph:
        replayed = f"; {graph['captured_steps']} of {graph['steps']} steps replayed" if graph.get("used") else ""
        print(f"CUDA graph: {'used' if graph['used'] else 'not used'} ({graph['reason']}{replayed})")
    cudnn = (record.get("backends") or {}).get("cudnn") or {}
    if cudnn.get("enabled") is False:
        print(f"cuDNN: off ({cudnn.get('reason')})")
    ttt = t.get("time_to_target") or {}
    if ttt.get("target_rmse_k") is not None:
        print(f"time to validation RMSE <= {ttt['target_rmse_k']:.3f} K: "
              + (f"{ttt['seconds']:.2f} s (epoch {ttt['epoch']})" if ttt["reached"] else ttt["note"]))


def add_train(sub, full: bool) -> None:
    p = sub.add_parser(
        "train", help="train and evaluate one forecaster; prints epochs and RMSE vs baselines; appends a record",
        description="Train one LSTM forecaster, evaluate it against persistence and climatology on the test "
                    "part, print the epochs table, and append the run record to the results file. "
                    "Defaults: the recommended setting on the study's real ERA5 (window 24 h, hidden 64, residual "
                    "head, each point's fitted cycles as an input, loss weighted by each point's persistence error, "
                    "batch 256, Adam 4e-3, up to 30 epochs with early stopping on validation; the reported forecast "
                    "is per point the blend with persistence and climatology fitted on validation); "
                    "--preset published gives the study's setting exactly (2-layer LSTM, batch 128, Adam 1e-3, "
                    "DataLoader with 2 workers, 5 epochs, trained on 2020, tested on 2021-01..06).")
    add_request_args(p)
    if full:
        add_train_args(p)
    p.add_argument("--map", default=None, metavar="FILE.png",
                   help="with --box: save each cell's score against persistence (model and climatology) as a map")
    add_results_args(p)
    p.set_defaults(func=_run_train, check=_check_train)


def check_training(cfg, request, args, device: bool = True) -> None:
    """What a training run (or a bench of runs) needs, before it starts; ``device`` False: the bench picks devices."""
    from ..machine.device import resolve_device, run_amp
    from ..profiles import load_profile

    cfg.validate(CLI)
    cfg.check_split_in(request, CLI)
    cfg.check_windows_fit(request, CLI)
    if device:  # and the mixed precision it takes there
        run_amp(resolve_device(cfg.device, CLI), cfg.amp, CLI)
    if cfg.profile is not None:
        load_profile(cfg.profile)
    if cfg.strategy == "ddp" and cfg.nproc:  # before the data is read, not once the ranks start
        from ..training.parallel import check_world_size, ddp_device_kind

        check_world_size(ddp_device_kind(cfg.device, CLI), cfg.nproc, "--nproc")
    if cfg.checkpoint:
        from ..records import runs_path

        results = results_path(args)
        if results is not None and runs_path(Path(results).expanduser()).resolve() == Path(cfg.checkpoint).resolve():
            raise ConfigError(f"--checkpoint {cfg.checkpoint} and {results_option(args)} {results} are the "
                              "same file: each epoch's checkpoint would replace the records and the record land in "
                              "the checkpoint; give two paths")
        check_writable(cfg.checkpoint, "file", "--checkpoint")  # read and checked once by the run, before the data
    check_results_args(args)
    check_cache()


def _check_train(args) -> None:
    request = request_from_args(args)
    if args.map is not None and request.box is None:
        raise ConfigError(f"--map {args.map}: a map needs a box of cells; give --box LAT_MIN,LAT_MAX,LON_MIN,LON_MAX")
    check_plot(args.map, "--map")
    check_training(train_config_from_args(args), request, args)


def print_cells(record: dict, map_path: str | None = None) -> None:
    """A box run's per-cell scores in one line (and the skill map saved to ``map_path``)."""
    from ..region.grid import record_maps

    maps = record_maps(record)
    model, pers, clim = (maps[n].values for n in ("model", "persistence", "climatology"))
    print(f"per cell ({model.size} cells, test, {maps.attrs['lead_hours']} h ahead): the model beats persistence "
          f"in {(model < pers).mean():.0%} of them and climatology in {(model < clim).mean():.0%}; mean cell RMSE "
          f"model {model.mean():.3f} K, persistence {pers.mean():.3f} K, climatology {clim.mean():.3f} K")
    if map_path:
        from ..experiments.region_skill import mse_skill_maps
        from ..region.maps import Panel, map_title, plot_panels

        skill = mse_skill_maps(maps, "persistence")
        panels = [Panel(n, skill[n], "MSE skill score vs persistence", "skill") for n in ("model", "climatology")]
        title = map_title("MSE skill score per cell against persistence (1 - MSE / MSE of persistence; above 0 "
                          "is better)", maps)
        save_plot(plot_panels(panels, title), map_path, "--map")


def print_forecast_notes(record: dict) -> None:
    """Once per command: which climatology the baseline is, and what the reported forecast is."""
    clim = (record.get("data") or {}).get("climatology") or {}
    if clim.get("line"):
        print(clim["line"])
    blend = (record.get("skill") or {}).get("blend") or {}
    if blend and blend.get("blend") != "off":
        print(f"reported forecast: {blend['description']} (--blend {blend['blend']}; never worse than persistence "
              "on validation at any point; the record keeps the weights)")


def train_and_print(request, cfg, results, map_path: str | None = None) -> None:
    """``train.run`` (appending the record to ``results`` unless None), then the run as `print_run` shows it and where
    the record went (rank 0 only under torchrun); a record that cannot be written is printed as a JSON line to keep."""
    from ..records import runs_path
    from ..training import run
    from ..training.parallel import is_rank_zero

    # --strategy ddp --nproc N outside torchrun: run() prepares the data once and train() starts N local
    # ranks (lstmnb.training.parallel); rank 0's record comes back here to be printed and appended
    try:
        result = run(request, cfg, results=results, say=TYPED)
    except OutputError as exc:
        if getattr(exc, "result", None) is None:
            raise
        print_run(exc.result.record)
        print("\nthe run's record, not appended (copy this line into a results .jsonl file to keep it):")
        print(json.dumps(exc.result.record, default=str))
        raise
    except DivergedError as exc:  # the epochs before it, where its record went, then the one-line error
        from ..report import epochs_table, format_table

        if exc.result.record.get("epochs"):
            print(format_table(epochs_table(exc.result.record)))
        if results is not None:
            print(f"record {exc.result.record['run_id']} (status diverged) appended to {runs_path(results)}")
        raise
    if not is_rank_zero():
        return
    print_run(result.record)
    if result.record.get("data", {}).get("grid"):
        print_cells(result.record, map_path)
    print_forecast_notes(result.record)
    if result.recorded is not None:
        print(f"run {result.record['run_id']} had finished and was recorded in {result.recorded}: "
              f"nothing appended (use another --checkpoint for a new run)")
    elif results is not None:
        print(f"record {result.record['run_id']} appended to {runs_path(results)}")


def _run_train(args) -> int:
    train_and_print(request_from_args(args), train_config_from_args(args), results_path(args), args.map)
    return 0


def add_results(sub, full: bool) -> None:
    p = sub.add_parser("results", help="table of the recorded runs",
                       description="Show the runs recorded in one or more results files or folders.")
    add_records_args(p)
    p.add_argument("--last", type=int, default=20, help="show the last N runs (default 20; 0 for all)")
    p.add_argument("--by", choices=("run", "machine"), default="run",
                   help="one row per run (default), or per device column of each machine: machine, dates, "
                        "lstmnb commit, torch, CUDA, record counts")
    p.set_defaults(func=_run_results, check=_check_results)


def _check_results(args) -> None:
    if args.last < 0:
        raise ConfigError(f"--last {args.last} must be >= 0 (0 shows all runs)")
    check_records_args(args)


def _run_results(args) -> int:
    import pandas as pd

    from ..report import format_table, machines_table, runs_table

    df = pd.json_normalize(read_runs(args), max_level=2)
    table = machines_table(df) if args.by == "machine" else runs_table(df.tail(args.last) if args.last else df)
    print(format_table(table))  # --last 0: every run
    return 0


def add_quickstart(sub, full: bool) -> None:
    p = sub.add_parser(
        "quickstart", help="the main job: train + evaluate on the study's real data (CPU), then render the notebook series",
        description="Train and evaluate the default forecaster on the study's real ERA5 on CPU (the recommended "
                    "setting: residual LSTM, batch 256, Adam 4e-3, early stopping on validation), print the "
                    "results beside persistence and climatology, then run the notebook series with a quick CPU "
                    "profile and print where the HTML report is. About 6 minutes on 2 CPU cores, up to twice "
                    "that while other jobs keep them busy (README: the quick profile, per notebook).")
    p.add_argument("--profile", default="quick", help="profile for the notebook series (default: quick)")
    p.add_argument("--epochs", type=int, default=None, help="epoch cap of the default run (default: the preset's, 30; "
                                                             "early stopping ends it sooner only if validation stops "
                                                             "improving: on the study's data it ran all 30 here)")
    add_results_args(p)
    p.add_argument("--runs-dir", default="runs", help="where the notebook run folder goes (default: ./runs)")
    p.add_argument("--no-notebooks", dest="notebooks", action="store_false", help="only the training run")
    p.set_defaults(func=_run_quickstart, check=_check_quickstart)


def _quickstart_config(args):
    from ..training import preset_config

    return preset_config(device="cpu", experiment="quickstart", **({"epochs": args.epochs} if args.epochs is not None else {}))


def _check_quickstart(args) -> None:
    check_training(_quickstart_config(args), None, args)
    if args.notebooks:
        from ..notebooks.runner import check_series

        check_series(args.profile, runs_dir=args.runs_dir, other_device="use --profile quick (CPU)")


def _run_quickstart(args) -> int:
    cfg = _quickstart_config(args)
    print(f"== 1/2  default run on the study's real ERA5 (40N and 20N, 280E), CPU, up to {cfg.epochs} epochs")
    train_and_print(None, cfg, results_path(args))
    if not args.notebooks:
        return 0
    from ..notebooks import run_series

    print(f"\n== 2/2  the notebook series, profile {args.profile}")
    series = run_series(args.profile, runs_dir=args.runs_dir)
    print_series(series)
    print(f"\nopen the report: {series.site}" if series.site else f"\n{series.site_note}")
    return 0


def add_skill(sub, full: bool) -> None:
    p = sub.add_parser(
        "skill", help="one model per lead time: RMSE per point beside persistence and climatology, skill scores",
        description="Train one forecaster per lead (default 1, 6 and 24 h, in the order given, each once) on the "
                    "same data and print, per point (as given, with the grid cell used, in the order given) and "
                    "lead, and pooled over the points, the test RMSE of the reported forecast, the network alone, "
                    "persistence and climatology on the same target hours, and the MSE skill score against each "
                    "baseline (1 - MSE / MSE of the baseline: above 0 beats it).")
    add_request_args(p)
    if full:
        add_train_args(p, skip=(*PARALLEL_OPTIONS, *CHECKPOINT_OPTIONS, "lead_hours", "experiment"))
    p.add_argument("--leads", type=int_list, default=(1, 6, 24), help="lead times in hours, each once (default 1,6,24)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="save RMSE and MSE skill score against lead per point here")
    add_results_args(p)
    p.set_defaults(func=_run_skill, check=_check_skill)


def _check_skill(args) -> None:
    from ..experiments.skill import check_leads, check_one_lead
    from ..training import with_overrides

    check_leads(args.leads, CLI)
    check_plot(args.plot)
    cfg = train_config_from_args(args)
    check_one_lead(cfg.horizon, "--horizon")
    check_training(with_overrides(cfg, lead_hours=max(args.leads)), request_from_args(args), args)


def _run_skill(args) -> int:
    import pandas as pd

    from ..experiments import skill
    from ..report import format_table

    records = skill.skill_experiment(
        request_from_args(args), train_config_from_args(args), args.leads, results=results_path(args),
        on_point=lambda r: print(f"  lead {r['skill']['lead_hours']} h: {r['metrics']['stop_reason']}"), say=TYPED)
    table = skill.skill_table(records)
    with pd.option_context("display.width", 250):
        print(format_table(table))
    print("mse_skill_vs_* = the MSE skill score, 1 - MSE_model / MSE_baseline (above 0: the model beats the baseline); "
          "same target hours at every lead")
    if records:
        print_forecast_notes(records[0])
    save_plot(lambda: skill.plot_skill(table), args.plot)
    return 0

