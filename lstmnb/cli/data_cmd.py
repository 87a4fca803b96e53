"""`lstmnb data`: extract ERA5 series into the cache, or show what the cache holds."""

from __future__ import annotations

from ..errors import ConfigError, DataError, OutputError
from ..paths import check_cache, check_writable
from ..rules import CLI
from .options import TYPED, add_request_args, request_from_args, write_output


def add_data(sub, full: bool) -> None:
    p = sub.add_parser(
        "data", help="extract ERA5 point or box series into the local cache (progress bar, resumable)",
        description="Extract ERA5 series for points or a lat/lon box and keep them in the local cache, so training and "
                    "notebooks read them instantly afterwards. With no options it extracts the published request (2 m "
                    "temperature at 40N and 20N, 280E, 2020-01-01..2021-06-30) from the study's real ERA5 shipped with "
                    "lstmnb, offline; a --box comes from the synthetic sample (--source sample). Use --source arco-v3 "
                    "for any point, box or date of ERA5 in the cloud (anonymous access). An interrupted extraction "
                    "resumes where it stopped: finished blocks stay in the cache.",
        epilog="examples:\n"
               "  lstmnb data                                   # the default request, the study's real data\n"
               "  lstmnb data --source arco-v3 --point 40,-80 --start 2020-01-01 --end 2020-12-31\n"
               "  lstmnb data --box 38,42,279,281 --variable 2m_temperature --variable surface_pressure\n"
               "  lstmnb data --status                          # what is cached, and where")
    add_request_args(p)
    g = p.add_argument_group("extraction")
    g.add_argument("--refresh", action="store_true", help="ignore cached blocks and fetch everything again")
    g.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="connections, and about half the chunk reads in flight (default 128; more hides more "
                        "round trips; a server that closes every connection may want fewer, e.g. 8)")
    g.add_argument("--block-hours", type=int, default=None, metavar="H",
                   help="hours per cache block (default 168, a week)")
    g.add_argument("--credentials", default=None, metavar="FILE|google_default",
                   help="Google credentials for a private copy of the store (default: anonymous)")
    g.add_argument("--csv", default=None, metavar="FILE", help="also write the tidy table to this CSV file (a new "
                                                                   "file unless --overwrite)")
    g.add_argument("--overwrite", action="store_true", help="let --csv replace an existing file")
    g.add_argument("--status", action="store_true", help="show what the cache holds and exit")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=_run_data, check=lambda args: _check_data(args, p))


def _check_data(args, parser) -> None:
    """The request, the extraction sizes, the credentials file (whatever the source), the CSV path and the cache;
    --status with a request or extraction option is refused (it would show the whole cache as if the option applied)."""
    from ..data import check_credentials
    from ..data.fetch import check_sizes

    if args.status:
        given = [a.option_strings[0] for a in parser._actions if a.dest not in ("help", "status", "progress")
                 and getattr(args, a.dest, a.default) != a.default]
        if given:
            raise ConfigError(f"--status lists the whole cache and takes no request or extraction options; leave "
                              f"out {', '.join(given)} (or drop --status to extract)")
        return
    check_credentials(args.credentials)
    request_from_args(args)
    check_sizes(args.block_hours, args.concurrency, CLI)
    if args.csv is not None:
        csv = check_writable(args.csv, "file", "--csv")
        if csv.exists() and not args.overwrite:
            raise OutputError(f"--csv {args.csv} already exists; give --overwrite to replace it, or another path")
    check_cache()


def _check_trainable(ds, cache) -> None:
    """The series as ``train`` would take it, judged by the check ``train`` uses (``windows.series_array``:
    hourly steps, no repeated or missing hour, no NaN): a store ``train`` refuses is refused here too."""
    import numpy as np

    from ..windows import series_array

    values = [ds[v].transpose("time", ...).values.reshape(ds.sizes["time"], -1) for v in ds.data_vars]
    try:
        series_array(np.stack(values, axis=-1), ds["time"].values)
    except DataError as exc:
        raise DataError(f"{exc} (`lstmnb train` refuses it too; the hours read stay in the cache {cache})") from None


def _run_data(args) -> int:
    from .. import data
    from ..data.cache import extracts_root, status

    if args.status:
        rows = status()
        print(f"cache: {extracts_root()}")
        if not rows:
            print("nothing cached yet; run `lstmnb data`")
            return 0
        import pandas as pd

        from ..report import format_table

        table = pd.DataFrame(rows).set_index("store").assign(MB=lambda t: t["bytes"] / 1e6)
        print(format_table(table[["variable", "area", "blocks", "hours", "MB"]], floatfmt="{:,.2f}"))
        return 0
    ds = data.extract(request_from_args(args), progress=args.progress, refresh=args.refresh,
                      storage_options={"token": args.credentials} if args.credentials else None,
                      concurrency=args.concurrency, block_hours=args.block_hours, say=TYPED)
    _check_trainable(ds, extracts_root())
    print(data.summary(ds))
    print(f"cached     {extracts_root()}")
    if args.csv:
        write_output(args.csv, "--csv", lambda tmp: data.to_frame(ds).to_csv(tmp, index=False),
                     "the series is in the cache (lstmnb data --status)")
        print(f"csv        {args.csv}")
    return 0

