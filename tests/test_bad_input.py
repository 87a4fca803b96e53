"""Bad input through the `lstmnb` command (issue 15): every case below is refused before any work with
exit status 2, one line on stderr that names the bad value and what is valid, no traceback, nothing on
stdout, and every existing file unchanged (checksums of the whole temporary tree, results and cache
folders included). The cases run in-process through ``lstmnb.cli.main``: validation comes before any
work, so each takes milliseconds."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from lstmnb import cli
from lstmnb.machine.device import cpu_cores
from lstmnb.errors import ConfigError
from lstmnb.experiments.allreduce import AllreduceConfig
from lstmnb.experiments.scaling import ScalingConfig
from lstmnb.experiments.size import SizeConfig
from lstmnb.experiments.sweep import SweepConfig
from lstmnb.models import ModelConfig
from lstmnb.region.memory import MemoryCase
from lstmnb.region.model import RegionConfig
from lstmnb.scratch.fit import ScratchConfig
from lstmnb.training import TrainConfig

T = ["train", "--start", "2020-01-01", "--end", "2020-01-31", "--epochs", "1", "--hidden", "8", "--no-progress"]
NB = ["notebooks", "run", "--profile", "ci"]
SB = ["scratch", "bench", "--epochs", "1", "--repeats", "1"]
RO = "{ro}"  # a read-only folder (see read_only_folder)
BEYOND = str(cpu_cores() + 1)  # more local ranks than this machine has cores (each gloo rank needs one)


def case(id_, argv, *fragments, env=None):
    """One bad input: ``argv`` (with {tmp} and {ro} filled in) must fail with a line holding ``fragments``."""
    return pytest.param(argv, fragments, env or {}, id=id_)


CASES = [
    # --- train: every option out of range, of the wrong type, empty or nonsense ------------------------------
    case("weight-decay-negative", T + ["--weight-decay", "-1"], "--weight-decay -1", ">= 0"),
    case("blend-unknown", T + ["--blend", "mean"], "--blend mean is not one of off, persistence, baselines"),
    case("point-weights-unknown", T + ["--point-weights", "size"], "--point-weights size is not one of none, persistence"),
    case("weight-decay-nan", T + ["--weight-decay", "nan"], "--weight-decay nan", ">= 0"),
    case("split-dates-word", T + ["--split-dates", "abc"], "--split-dates abc must", "two dates VAL_START,TEST_START"),
    case("split-dates-one-date", T + ["--split-dates", "2020-01-20"], "--split-dates 2020-01-20 must", "two dates"),
    case("split-dates-not-dates", T + ["--split-dates", "abc,def"], "split date 'abc'", "not a date like"),
    case("split-dates-reversed", T + ["--split-dates", "2020-01-25,2020-01-20"], "--split-dates 2020-01-25,2020-01-20:", "must not come after"),
    case("split-dates-outside-data", T + ["--split-dates", "2019-01-01,2019-02-01"], "'2019-01-01'",
         "outside the data's time range 2020-01-01..2020-01-31"),
    case("split-dates-and-fractions", T + ["--split-dates", "2020-01-20,2020-01-25", "--fractions", "0.5,0.25,0.25"],
         "--fractions 0.5,0.25,0.25 and --split-dates 2020-01-20,2020-01-25", "give one of them"),
    case("split-dates-and-default-fractions", T + ["--split-dates", "2020-01-20,2020-01-25", "--fractions",
                                                    "0.7,0.15,0.15"], "--fractions 0.7,0.15,0.15 and --split-dates",
         "give one of them"),
    case("published-and-fractions", T + ["--preset", "published", "--fractions", "0.7,0.15,0.15"],
         "--preset published, which splits by the dates", "give one of them"),
    case("seed-huge", T + ["--seed", "1180591620717411303424"], "--seed 1180591620717411303424", "<= 18446744073709551615"),
    case("seed-negative", T + ["--seed", "-1"], "--seed -1", ">= 0"),
    case("seed-word", T + ["--seed", "x"], "--seed", "invalid int value: 'x'"),
    case("grad-clip-negative", T + ["--grad-clip", "-1"], "--grad-clip -1", "positive number"),
    case("grad-clip-zero", T + ["--grad-clip", "0"], "--grad-clip 0", "omit it for no clipping"),
    case("grad-clip-nan", T + ["--grad-clip", "nan"], "--grad-clip nan", "positive number"),
    case("device-empty", T + ["--device", ""], "--device ''", "auto, cpu, cuda"),
    case("device-word", T + ["--device", "gpu"], "--device gpu", "auto, cpu, cuda"),
    case("device-bad-index", T + ["--device", "cuda:x"], "--device cuda:x", "cuda:N"),
    case("device-absent-gpu", T + ["--device", "cuda:99"], "--device cuda:99", "; use --device cpu"),  # no GPU, or not 100
    case("start-empty", T + ["--start", ""], "--start '' is not an ISO date"),
    case("end-empty", T + ["--end", ""], "--end '' is not an ISO date"),
    case("start-no-such-date", T + ["--start", "2020-13-45"], "--start 2020-13-45 is not an ISO date"),
    case("start-day-first", T + ["--start", "13/02/2020"], "--start 13/02/2020 is not an ISO date"),  # was 13 Feb; 01/02: 2 Jan
    case("end-before-start", T + ["--end", "2019-12-01"], "--end 2019-12-01 is before --start 2020-01-01"),
    case("checkpoint-empty", T + ["--checkpoint", ""], "--checkpoint ''", "give a name"),
    case("checkpoint-is-folder", T + ["--checkpoint", "{tmp}/adir"], "--checkpoint", "is a folder; give a file path"),
    case("checkpoint-read-only", T + ["--checkpoint", RO + "/ck.pt"], "--checkpoint", "read-only"),
    case("checkpoint-under-a-file", T + ["--checkpoint", "{tmp}/plain.txt/ck.pt"], "plain.txt", "is a file, not a folder"),
    case("checkpoint-corrupt", T + ["--checkpoint", "{tmp}/corrupt.pt", "--resume"], "corrupt.pt", "corrupt or half-written",
         "delete it to start over, or give --overwrite-checkpoint instead of --resume"),  # was: "run without --resume"
    case("checkpoint-corrupt-new-run", T + ["--checkpoint", "{tmp}/corrupt.pt"], "not a readable checkpoint",
         "--overwrite-checkpoint replaces it, or delete it"),
    case("checkpoint-checksum-file-damaged", T + ["--checkpoint", "{tmp}/badsum.pt", "--resume"],
         "the checksum file {tmp}/badsum.pt.sha256 beside checkpoint {tmp}/badsum.pt is damaged",
         "write its checksum anew (sha256sum {tmp}/badsum.pt > {tmp}/badsum.pt.sha256)"),  # was blamed on the checkpoint
    case("checkpoint-checksum-path-is-folder", T + ["--checkpoint", "{tmp}/adir.pt"], "adir.pt.sha256 is a folder",
         "move or delete that folder"),
    case("checkpoint-checksum-path-is-folder-resume", T + ["--checkpoint", "{tmp}/adir.pt", "--resume"],
         "adir.pt.sha256 is a folder"),
    case("checkpoint-same-file-as-results", T + ["--checkpoint", "{tmp}/same.jsonl", "--results", "{tmp}/same.jsonl"],
         "--checkpoint {tmp}/same.jsonl and --results {tmp}/same.jsonl are the same file", "give two paths"),
    case("checkpoint-same-file-as-results-env", T + ["--checkpoint", "{tmp}/results/runs.jsonl"],
         "and $LSTMNB_RESULTS {tmp}/results are the same file"),
    case("checkpoint-flipped-bit", T + ["--checkpoint", "{tmp}/flipped.pt", "--resume"],
         "flipped.pt does not match the SHA-256 in flipped.pt.sha256", "one of them was changed after it was written"),
    case("checkpoint-without-its-checksum", T + ["--checkpoint", "{tmp}/nosum.pt", "--resume"],
         "nosum.pt has no nosum.pt.sha256 beside it", "sha256sum {tmp}/nosum.pt > {tmp}/nosum.pt.sha256",
         "--overwrite-checkpoint instead of --resume"),  # every save writes it: an old, foreign or half-copied file
    case("profile-unknown", T + ["--profile", "nope"], "unknown profile 'nope'", "choose from"),
    case("ddp-nproc-beyond-cores", T + ["--strategy", "ddp", "--device", "cpu", "--nproc", BEYOND],
         f"{BEYOND} ranks on this node", "give --nproc at most"),
    case("omp-num-threads-word", T, "OMP_NUM_THREADS='abc'", "whole number >= 1", env={"OMP_NUM_THREADS": "abc"}),
    case("omp-num-threads-empty", T, "OMP_NUM_THREADS=''", "whole number >= 1", "unset it",
         env={"OMP_NUM_THREADS": ""}),
    case("omp-num-threads-blank", ["results"], "OMP_NUM_THREADS=' '", "whole number >= 1",
         env={"OMP_NUM_THREADS": " "}),
    case("results-env-blank", ["results"], "$LSTMNB_RESULTS is empty", "give a .jsonl file or a folder",
         env={"LSTMNB_RESULTS": " "}),
    case("train-results-env-blank", T, "$LSTMNB_RESULTS is empty", "give a .jsonl file or a folder",
         env={"LSTMNB_RESULTS": " "}),
    case("omp-num-threads-zero", ["results"], "lstmnb results: error: OMP_NUM_THREADS='0'", "whole number >= 1",
         env={"OMP_NUM_THREADS": "0"}),
    case("resume-without-checkpoint", T + ["--resume"], "--resume", "needs a checkpoint path to resume from (--checkpoint)"),
    case("results-empty", T + ["--results", ""], "--results is empty", ".jsonl file or a folder"),
    # contradictory options that were ignored without a word (rc 0): refused in one line
    case("results-and-no-record", T + ["--results", "{tmp}/r.jsonl", "--no-record"],
         "--results {tmp}/r.jsonl and --no-record both given", "give one"),
    case("replicate-results-and-no-record", ["replicate", "--no-record", "--results", "/sys"],
         "--results /sys and --no-record both given", "give one"),
    case("qs-results-and-no-record", ["quickstart", "--no-record", "--results", "{tmp}/r.jsonl"],
         "--results {tmp}/r.jsonl and --no-record", "give one"),
    case("allreduce-results-and-no-record", ["bench", "allreduce", "--no-record", "--results", "{tmp}/r.jsonl"],
         "--results {tmp}/r.jsonl and --no-record", "give one"),
    case("overwrite-checkpoint-without-checkpoint", T + ["--overwrite-checkpoint"],
         "--overwrite-checkpoint needs a checkpoint path to replace (--checkpoint)", "leave it out"),
    case("speed-target-rmse-and-fraction", ["bench", "speed", "--target-rmse", "1", "--target-fraction", "0.5"],
         "--target-rmse 1 and --target-fraction 0.5 both given", "give one"),
    case("results-read-only", T + ["--results", RO + "/r.jsonl"], "--results file", "read-only"),
    case("results-plain-file", T + ["--results", "{tmp}/plain.txt"], "plain.txt", "without the .jsonl suffix"),
    case("results-jsonl-is-folder", T + ["--results", "{tmp}/dir.jsonl"], "dir.jsonl", "is a folder"),
    case("stop-at-target-without-target", T + ["--stop-at-target"], "--stop-at-target", "needs --target-rmse"),
    case("dropout-one-layer", T + ["--dropout", "0.5"], "--dropout 0.5", "--layers >= 2"),
    case("dropout-one", T + ["--dropout", "1", "--layers", "2"], "--dropout 1 ", "[0, 1)"),
    case("dropout-negative", T + ["--dropout", "-0.1", "--layers", "2"], "--dropout -0.1", "[0, 1)"),
    case("point-and-box", T + ["--point", "40,280", "--box", "30,50,270,290"], "--point and --box", "give grid points or one box"),
    case("point-latitude", T + ["--point", "91,280"], "--point 91,280: latitude 91 is outside -90..90"),
    case("point-south-latitude", T + ["--point", "-91,151"], "--point -91,151: latitude -91 is outside -90..90"),
    case("point-longitude", T + ["--point", "40,400"], "--point 40,400: longitude 400 is outside -180..180"),
    case("point-one-number", T + ["--point", "40"], "'40' is not LAT,LON", "-33,151"),
    case("point-empty", T + ["--point", ""], "'' is not LAT,LON", "40,280"),
    case("point-nan", T + ["--point", "nan,280"], "--point nan,280: latitude nan is outside -90..90"),
    case("box-three-numbers", T + ["--box", "1,2,3"], "--box 1,2,3: a box must be 4 numbers LAT_MIN,LAT_MAX,LON_MIN,LON_MAX"),
    case("box-latitudes-reversed", T + ["--box", "50,40,270,290"], "--box 50,40,270,290: lat_min 50", "LAT_MIN,LAT_MAX"),
    # longitudes east first: not a box round the globe (359,1 across the prime meridian stays a box)
    case("box-longitudes-swapped", T + ["--box", "39,41,281,279"], "--box 39,41,281,279: longitudes 281,279 span 358 degrees",
         "WEST,EAST with WEST first going east, e.g. 279,281", "across the prime meridian e.g. 359,1"),
    case("data-box-longitudes-swapped", ["data", "--box", "39,41,281,279"], "--box 39,41,281,279: longitudes 281,279",
         "e.g. 279,281"),
    case("region-skill-box-over-180", ["region", "skill", "--box", "39,41,-100,100"],
         "--box 39,41,-100,100: longitudes -100,100 span 200 degrees", "at most 180"),
    case("box-words", T + ["--box", "a,b,c,d"], "'a,b,c,d'", "comma-separated list of numbers"),
    case("epochs-zero", T + ["--epochs", "0"], "--epochs 0", ">= 1"),
    case("epochs-fraction", T + ["--epochs", "1.5"], "--epochs", "invalid int value: '1.5'"),
    case("epochs-huge", T + ["--epochs", "99999999999"], "--epochs 99999999999", "<= 2147483647"),
    case("batch-size-zero", T + ["--batch-size", "0"], "--batch-size 0", ">= 1"),
    case("lr-zero", T + ["--lr", "0"], "--lr 0 ", "positive number"),
    case("lr-negative", T + ["--lr", "-1e-3"], "--lr -0.001", "positive number"),
    case("lr-inf", T + ["--lr", "inf"], "--lr inf", "positive number"),
    case("lr-word", T + ["--lr", "fast"], "--lr", "invalid float value: 'fast'"),
    case("lr-schedule", T + ["--lr-schedule", "linear"], "--lr-schedule linear", "constant, onecycle, cosine"),
    case("input-path", T + ["--input-path", "slow"], "--input-path slow", "fast, dataloader"),
    case("amp", T + ["--amp", "fp8"], "--amp fp8", "off, auto, bf16, fp16"),
    case("strategy", T + ["--strategy", "horovod"], "--strategy horovod", "single, dataparallel, ddp"),
    case("nproc-zero", T + ["--nproc", "0"], "--nproc 0", ">= 1"),
    case("nproc-huge", T + ["--nproc", "100000"], "--nproc 100000", "<= "),
    case("num-workers-negative", T + ["--num-workers", "-1"], "--num-workers -1", ">= 0"),
    case("threads-zero", T + ["--threads", "0"], "--threads 0", ">= 1"),
    case("bucket-cap-zero", T + ["--bucket-cap-mb", "0"], "--bucket-cap-mb 0", "positive number"),
    # was accepted: the ranks started, then torch's DDP failed with a cut-off TypeError (its bytes overflow an int64)
    case("bucket-cap-beyond-ddp", T + ["--strategy", "ddp", "--nproc", "2", "--bucket-cap-mb", "1e30"],
         "--bucket-cap-mb 1e+30", "positive number of MB up to 1000000"),
    case("dist-timeout-nan", T + ["--dist-timeout-s", "nan"], "--dist-timeout-s nan", "1 to 604800 s"),
    case("dist-timeout-below-a-second", T + ["--dist-timeout-s", "1e-9"], "--dist-timeout-s 1e-09", "1 to 604800 s"),
    case("window-zero", T + ["--window", "0"], "--window 0", ">= 1"),
    case("window-beyond-the-data", T + ["--window", "1000"], "--window 1000 (+ lead 1 h",
         "longer than the training part"),
    case("amp-on-the-cpu", T + ["--amp", "bf16", "--device", "cpu"], "--amp bf16 is for CUDA devices",
         "(use --amp off)"),  # was amp='bf16' ... (use amp='off')
    case("lead-hours-zero", T + ["--lead-hours", "0"], "--lead-hours 0", ">= 1"),
    case("horizon-negative", T + ["--horizon", "-2"], "--horizon -2", ">= 1"),
    case("hidden-zero", T + ["--hidden", "0"], "--hidden 0", ">= 1"),
    case("hidden-beyond-memory", T + ["--hidden", "1000000"], "--hidden 1000000 with --layers 1", "GiB"),
    case("layers-zero", T + ["--layers", "0"], "--layers 0", ">= 1"),
    case("eval-batch-size-zero", T + ["--eval-batch-size", "0"], "--eval-batch-size 0", ">= 1"),
    case("cell", T + ["--cell", "rnn"], "--cell rnn", "lstm"),
    case("target-rmse-zero", T + ["--target-rmse", "0"], "--target-rmse 0 ", "positive number of kelvin"),
    case("target-rmse-nan", T + ["--target-rmse", "nan"], "--target-rmse nan", "positive number"),
    case("patience-zero", T + ["--patience", "0"], "--patience 0", ">= 1"),
    case("fractions-two", T + ["--fractions", "0.5,0.5"], "--fractions 0.5,0.5 ", "three positive numbers"),
    case("fractions-sum", T + ["--fractions", "0.5,0.5,0.5"], "--fractions 0.5,0.5,0.5", "summing to 1"),
    case("fractions-nan", T + ["--fractions", "nan,0.5,0.5"], "--fractions nan,0.5,0.5", "summing to 1"),
    case("fractions-words", T + ["--fractions", "a,b,c"], "'a,b,c'", "comma-separated list of numbers"),
    case("experiment-empty", T + ["--experiment", ""], "--experiment ''", "give a name"),
    case("profile-name-empty", T + ["--profile", ""], "--profile ''", "give a name"),
    case("source-empty", T + ["--source", ""], "--source '' is empty; a source is study", "sample (synthetic)"),
    case("source-missing-path", T + ["--source", "/nonexistent/store.zarr"], "--source /nonexistent/store.zarr is neither",
         "neither a known name nor an existing path"),
    case("source-not-zarr", T + ["--source", "{tmp}/adir"], "adir", "is not a Zarr store"),
    case("source-typo", T + ["--source", "sampel"], "--source sampel is neither", "did you mean 'sample'"),
    case("variable-empty", T + ["--variable", ""], "--variable '' must name at least one variable", "e.g. 2m_temperature"),
    case("unknown-option", T + ["--epochz", "3"], "unrecognized arguments", "--epochz"),
    case("option-without-value", ["train", "--epochs"], "--epochs", "expected one argument"),
    case("cache-is-a-file", T, "cache folder", "is a file, not a folder", env={"LSTMNB_CACHE": "{tmp}/plain.txt"}),
    case("cache-read-only", T, "cache folder", "read-only", env={"LSTMNB_CACHE": RO + "/cache"}),
    # $LSTMNB_RESULTS named as the source of the path: these said "--results", which was not given
    case("results-env-read-only", T, "$LSTMNB_RESULTS file", "read-only", env={"LSTMNB_RESULTS": RO}),
    case("results-env-plain-file", T, "$LSTMNB_RESULTS {tmp}/plain.txt is a file without the .jsonl suffix",
         "a folder for runs.jsonl", env={"LSTMNB_RESULTS": "{tmp}/plain.txt"}),
    case("results-env-under-a-file", ["replicate"], "$LSTMNB_RESULTS file {tmp}/plain.txt/x/runs.jsonl cannot be written",
         "is a file, not a folder", env={"LSTMNB_RESULTS": "{tmp}/plain.txt/x"}),
    case("results-given-beside-env", T + ["--results", "{tmp}/plain.txt"], "--results {tmp}/plain.txt is a file",
         ".jsonl", env={"LSTMNB_RESULTS": RO}),
    # --- results --------------------------------------------------------------------------------------------
    case("results-last-negative", ["results", "--last", "-1"], "--last -1", "0 shows all runs"),
    case("results-last-word", ["results", "--last", "all"], "--last", "invalid int value: 'all'"),
    case("results-missing-path", ["results", "/nonexistent/runs.jsonl"], "'/nonexistent/runs.jsonl' does not exist",
         ".jsonl"),
    case("results-experiment-empty", ["results", "--experiment", ""], "--experiment is empty", "experiment name"),
    case("results-corrupt-file", ["results", "{tmp}/corrupt.jsonl"], "corrupt.jsonl holds no valid run record",
         "all 2 line(s) are corrupt (1 not a JSON object, 1 failing the record schema; the first: {tmp}/corrupt.jsonl:1, field status"),
    case("results-empty-file", ["results", "{tmp}/empty.jsonl"], "empty.jsonl is empty", "run `lstmnb train` first"),
    case("results-folder-without-records", ["results", "{tmp}/adir"], "adir holds no results file (.jsonl)",
         "run `lstmnb train` first"),
    case("cost-corrupt-file", ["bench", "cost", "{tmp}/corrupt.jsonl"], "lstmnb bench cost: error: no run records",
         "all 2 line(s) are corrupt"),
    # --- data -----------------------------------------------------------------------------------------------
    case("data-concurrency-zero", ["data", "--concurrency", "0"], "--concurrency 0 must be a whole number >= 1"),
    case("data-concurrency-huge", ["data", "--concurrency", "1000000"], "--concurrency 1000000 must be a whole number >= 1 and <= 4096"),
    case("data-block-hours-zero", ["data", "--block-hours", "0"], "--block-hours 0 must be a whole number >= 1"),
    case("data-credentials-missing", ["data", "--credentials", "/nonexistent/key.json"], "'/nonexistent/key.json' not found",
         "service-account JSON"),
    case("data-credentials-not-json", ["data", "--credentials", "{tmp}/plain.txt"], "plain.txt is not JSON",
         "service-account JSON"),
    case("data-credentials-json-list", ["data", "--credentials", "{tmp}/list.json"], "is not a JSON object",
         "service_account, authorized_user"),
    case("data-credentials-missing-keys", ["data", "--credentials", "{tmp}/sa_missing.json"],
         "(service_account) lacks client_email, private_key", "service-account JSON"),
    case("data-credentials-empty", ["data", "--credentials", ""], "credentials '' is empty", "anonymous access"),
    case("data-csv-is-folder", ["data", "--csv", "{tmp}/adir"], "--csv", "is a folder"),
    case("data-csv-exists", ["data", "--csv", "{tmp}/plain.txt"], "--csv {tmp}/plain.txt already exists",
         "give --overwrite to replace it"),
    case("data-status-overwrite", ["data", "--status", "--overwrite"], "leave out --overwrite"),
    case("data-csv-read-only", ["data", "--csv", RO + "/x.csv"], "--csv", "read-only"),
    case("data-csv-empty", ["data", "--csv", ""], "--csv path is empty", "file name"),
    case("data-start-word", ["data", "--start", "yesterday-ish"], "--start yesterday-ish is not an ISO date"),
    case("data-point-south-one-number", ["data", "--point", "-33"], "'-33' is not LAT,LON", "-33,151"),
    case("data-cache-is-a-file", ["data"], "cache folder", "is a file", env={"LSTMNB_CACHE": "{tmp}/plain.txt"}),
    case("data-status-with-source", ["data", "--status", "--source", "/nonexistent"], "--status lists the whole cache",
         "leave out --source"),
    case("data-status-with-point", ["data", "--status", "--point", "95,0"], "--status lists the whole cache",
         "leave out --point"),
    case("data-status-with-csv", ["data", "--status", "--csv", "{tmp}/x.csv", "--refresh"], "leave out --refresh, --csv",
         "drop --status to extract"),
    # --- notebooks ------------------------------------------------------------------------------------------
    case("nb-profile-unknown", ["notebooks", "run", "--profile", "nope"], "unknown profile 'nope'", "choose from"),
    case("nb-profile-empty", ["notebooks", "run", "--profile", ""], "profile name ''", "choose from"),
    case("nb-profile-missing-file", ["notebooks", "run", "--profile", "{tmp}/missing.yaml"], "missing.yaml not found",
         "existing .yaml file"),
    case("nb-profile-invalid-yaml", ["notebooks", "run", "--profile", "{tmp}/bad_yaml.yaml"], "is not valid YAML",
         "line"),
    case("nb-profile-timeout-text", ["notebooks", "run", "--profile", "{tmp}/timeout_text.yaml"],
         "cell_timeout_s='five minutes'", "whole number of seconds >= 1"),
    case("nb-profile-empty", ["notebooks", "run", "--profile", "{tmp}/empty.yaml"], "empty.yaml is empty (no settings)",
         "ci, "),
    case("nb-profile-comment-only", ["notebooks", "run", "--profile", "{tmp}/comment.yaml"],
         "comment.yaml is empty (no settings)"),
    case("nb-profile-unknown-key", ["notebooks", "run", "--profile", "{tmp}/unknown_key.yaml"], "['kernal']",
         "allowed: label"),
    case("nb-profile-unknown-parameter", ["notebooks", "run", "--profile", "{tmp}/unknown_param.yaml"], "'epocs'",
         "declared by no notebook"),
    case("nb-profile-a-list", ["notebooks", "run", "--profile", "{tmp}/list.yaml"], "must be a YAML mapping", "a list"),
    case("nb-start-no-such-date", NB + ["-p", "start", "2021-13-45"], "parameter start='2021-13-45' is not an ISO date"),
    case("nb-epochs-list-word", NB + ["-p", "epochs_list", "x"], "epochs_list='x'", "must be a list"),
    case("nb-epochs-list-zero", NB + ["-p", "epochs_list", "[0]"], "epochs_list=[0]", "whole numbers >= 1"),
    case("nb-window-zero", NB + ["-p", "window", "0"], "window=0", ">= 1"),
    case("nb-window-beyond-the-data", NB + ["-p", "window", "100000"], "parameter window=100000 (+ lead",
         "longer than the training part", "notebook 02_model reads"),
    case("nb-points-latitude", NB + ["-p", "points", "[[91, 0]]"], "parameter points 91,0: latitude 91 is outside -90..90"),
    case("nb-device", NB + ["-p", "device", "gpu"], "device='gpu'", "auto, cpu"),
    case("nb-input-paths", NB + ["-p", "input_paths", "[slow]"], "input_paths=['slow']", "fast, dataloader"),
    case("nb-recommended", NB + ["-p", "recommended", "{batch_size: 0}"], "recommended: batch_size=0", ">= 1"),
    case("nb-parameter-unknown", NB + ["-p", "epocs", "1"], "'epocs' not declared", "their parameters"),
    case("nb-only-unknown", NB + ["--only", "99"], "unknown notebook '99'", "choose from 01_data_access"),
    case("nb-timeout-zero", NB + ["--timeout", "0"], "--timeout 0 must be a whole number of seconds >= 1"),
    case("nb-kernel-empty", NB + ["--kernel", ""], "--kernel '' is empty", "Jupyter kernel name"),
    case("nb-runs-dir-a-file", NB + ["--runs-dir", "{tmp}/plain.txt"], "--runs-dir", "is a file, not a folder"),
    case("nb-runs-dir-read-only", NB + ["--runs-dir", RO + "/runs"], "--runs-dir", "read-only"),
    case("nb-notebooks-missing", NB + ["--notebooks", "/nonexistent"], "'/nonexistent' does not exist", "folder"),
    case("nb-notebooks-empty", NB + ["--notebooks", ""], "notebook folder ''", "does not exist"),
    case("nb-list-notebooks-missing", ["notebooks", "list", "--notebooks", "/nonexistent"], "'/nonexistent'", "does not exist"),
    case("nb-no-profile", ["notebooks", "run"], "required", "--profile"),
    # --- quickstart: checked whole before the training run ------------------------------------------------
    case("qs-profile-unknown", ["quickstart", "--profile", "nope"], "unknown profile 'nope'", "choose from"),
    case("qs-profile-bad-file", ["quickstart", "--profile", "{tmp}/timeout_text.yaml"], "cell_timeout_s=", ">= 1"),
    case("qs-epochs-zero", ["quickstart", "--epochs", "0"], "--epochs 0", ">= 1"),
    case("qs-results-read-only", ["quickstart", "--results", RO + "/r.jsonl"], "--results file", "read-only"),
    case("qs-runs-dir-a-file", ["quickstart", "--runs-dir", "{tmp}/plain.txt"], "--runs-dir", "is a file"),
    # --- bench ----------------------------------------------------------------------------------------------
    case("speed-target-fraction", ["bench", "speed", "--target-fraction", "5"], "--target-fraction 5.0", "(0, 1]"),
    case("speed-target-fraction-zero", ["bench", "speed", "--target-fraction", "0"], "--target-fraction 0.0", "(0, 1]"),
    case("speed-repeats-zero", ["bench", "speed", "--repeats", "0"], "--repeats 0", ">= 1"),
    case("ladder-epochs-zero", ["bench", "ladder", "--epochs", "0"], "--epochs 0", ">= 1"),
    case("ladder-rounds-negative", ["bench", "ladder", "--rounds=-2"], "--rounds -2", ">= 1"),
    case("ladder-threads-beyond", ["bench", "ladder", "--threads", "100000"], "--threads 100000", "<="),
    case("speed-max-epochs-zero", ["bench", "speed", "--max-epochs", "0"], "--max-epochs 0", ">= 1"),
    # counts beyond any run (they overflowed C ints deep inside, or ran on past every timeout)
    case("speed-max-epochs-huge", ["bench", "speed", "--max-epochs", "99999999999999"], "--max-epochs 99999999999999",
         "<= 2147483647"),
    case("scratch-epochs-huge", SB[:2] + ["--epochs", "99999999999"], "--epochs 99999999999", "<= 2147483647"),
    case("scratch-repeats-huge", SB[:2] + ["--repeats", "99999999999"], "--repeats 99999999999", "<= 2147483647"),
    case("scratch-hidden-beyond-memory", SB + ["--versions", "numpy", "--hidden", "100000000"], "--hidden 100000000",
         "GiB for the weights", "this machine has"),
    case("region-memory-steps-huge", ["region", "memory", "--steps", "100000000000"], "--steps 100000000000",
         "<= 2147483647"),
    case("region-skill-channels-beyond-neighbours", ["region", "skill", "--channels", "100000"], "--channels 100000",
         "must be 1..8", "more mixes than neighbours"),  # was a 30 GB allocation's traceback, after 'none' trained
    case("region-scaling-steps-huge", ["region", "scaling", "--steps", "99999999999999"], "--steps 99999999999999",
         "<= 2147483647"),
    # steady-epoch figures from one epoch would be the warm-up's: a 2-rank 'speedup' of 3.4x was printed
    case("speed-max-epochs-one", ["bench", "speed", "--max-epochs", "1"], "--max-epochs 1", "give --max-epochs 2 or more"),
    case("scaling-one-epoch", ["bench", "scaling", "--epochs", "1"], "--epochs 1 leaves no steady epoch", "2 or more"),
    case("size-one-epoch", ["bench", "size", "--epochs", "1"], "--epochs 1 leaves no steady epoch", "2 or more"),
    case("speed-target-rmse-negative", ["bench", "speed", "--target-rmse", "-1"], "--target-rmse -1.0", "positive"),
    case("speed-only-twice", ["bench", "speed", "--only", "published,fast,published"], "--only published,fast,published "
         "repeats published", "give each contender once, e.g. published,fast"),  # ran twice, two identical rows
    case("speed-only-unknown", ["bench", "speed", "--only", "fastest"], "'fastest' not known", "published,fast,recommended"),
    case("speed-device-empty", ["bench", "speed", "--device", ""], "--device ''", "auto, cpu"),
    case("speed-results-empty", ["bench", "speed", "--results", ""], "--results is empty", ".jsonl"),
    case("speed-results-read-only", ["bench", "speed", "--results", RO + "/s.jsonl"], "--results file", "read-only"),
    case("size-points-zero", ["bench", "size", "--points", "0"], "--points 0", ">= 1"),
    case("size-points-huge", ["bench", "size", "--points", "2,100000"], "--points 100000 must be between 1 and the box's 801 grid cells"),
    case("size-variants", ["bench", "size", "--variants", "gpu"], "--variants gpu", "cpu, cuda-eager, cuda-graph"),
    case("size-plot-suffix", ["bench", "size", "--plot", "{tmp}/p.xyz"], "cannot write .xyz", ".png"),
    case("size-plot-read-only", ["bench", "size", "--plot", RO + "/p.png"], "--plot", "read-only"),
    case("scaling-world-size-zero", ["bench", "scaling", "--world-sizes", "0"], "--world-sizes 0", "whole numbers in 1.."),
    case("scaling-not-divisible", ["bench", "scaling", "--world-sizes", "3"], "not divisible by world size(s) [3]",
         "use a multiple of 3"),
    case("scaling-comm-steps", ["bench", "scaling", "--comm-steps", "-1"], "--comm-steps -1", "0..10000"),
    case("scaling-comm-steps-huge", ["bench", "scaling", "--comm-steps", "999999999999"], "--comm-steps 999999999999",
         "0..10000"),
    case("scaling-bucket-cap-beyond-ddp", ["bench", "scaling", "--bucket-cap-mb", "1e30"], "--bucket-cap-mb 1e+30",
         "up to 1000000"),
    case("scaling-mode", ["bench", "scaling", "--mode", "diagonal"], "'diagonal'", "choose from 'strong', 'weak', 'both'"),
    case("scaling-plot-folder", ["bench", "scaling", "--device", "cpu", "--plot", "{tmp}/adir"], "--plot", "is a folder"),
    case("scaling-world-sizes-beyond-cores", ["bench", "scaling", "--device", "cpu", "--mode", "weak", "--world-sizes",
                                              "1," + BEYOND], f"{BEYOND} ranks on this node", "give --world-sizes at most"),
    case("scaling-profile-unknown", ["bench", "scaling", "--profile", "nope"], "unknown profile 'nope'", "choose from"),
    case("allreduce-budget-negative", ["bench", "allreduce", "--budget-s", "-1"], "--budget-s -1 ", "positive number of seconds"),
    case("allreduce-world-size-one", ["bench", "allreduce", "--world-size", "1"], "--world-size 1", "2.."),
    case("allreduce-world-size-huge", ["bench", "allreduce", "--world-size", "100000"], "--world-size 100000", "2.."),
    case("allreduce-world-size-beyond-cores", ["bench", "allreduce", "--device", "cpu", "--world-size", BEYOND],
         f"{BEYOND} ranks on this node", "give --world-size at most"),
    case("allreduce-min-bytes-zero", ["bench", "allreduce", "--min-bytes", "0"], "'0' is not a size >= 1 byte", "64K"),
    case("allreduce-min-bytes-small", ["bench", "allreduce", "--min-bytes", "2"], "--min-bytes 2 must be at least 4"),
    case("allreduce-max-below-min", ["bench", "allreduce", "--min-bytes", "4K", "--max-bytes", "1K"],
         "--max-bytes 1024 is below --min-bytes 4096"),
    case("allreduce-factor-one", ["bench", "allreduce", "--factor", "1"], "--factor 1 must be a whole number >= 2"),
    case("allreduce-max-bytes-memory", ["bench", "allreduce", "--max-bytes", "100000G"], "--max-bytes 107374182400000", "GiB of memory"),
    case("allreduce-min-bytes-inf", ["bench", "allreduce", "--min-bytes", "inf"], "'inf' is not a size", "64K"),
    case("allreduce-device", ["bench", "allreduce", "--device", "tpu"], "--device tpu", "auto, cpu"),
    case("allreduce-hidden-zero", ["bench", "allreduce", "--hidden", "0"], "--hidden 0", ">= 1"),
    case("allreduce-cell", ["bench", "allreduce", "--cell", "rnn"], "--cell rnn", "lstm"),
    case("allreduce-step-zero", ["bench", "allreduce", "--device", "cpu", "--step-s", "0"], "--step-s 0.0", "positive number"),
    # the options as typed (these said "start" and "max_batch", SweepConfig's fields)
    case("sweep-first-batch-zero", ["bench", "batch-sweep", "--first-batch", "0"], "--first-batch 0",
         "whole number >= 1 (the sweep's first batch size)"),
    case("sweep-factor-one", ["bench", "batch-sweep", "--factor", "1"], "--factor 1", "whole number >= 2"),
    case("sweep-window-beyond-the-data", ["bench", "batch-sweep", "--window", "100000"], "--window 100000 (+",
         "longer than the training part"),
    case("sweep-max-below-first", ["bench", "batch-sweep", "--max-batch", "1"], "--max-batch 1 is below --first-batch 32",
         "at least the first"),
    case("sweep-max-below-given-first", ["bench", "batch-sweep", "--first-batch", "64", "--max-batch", "48"],
         "--max-batch 48 is below --first-batch 64", "at least the first"),
    case("region-memory-k-beyond-area", ["region", "memory", "--sides", "4", "--variants", "sparse", "--neighbours",
                                         "1000"], "--neighbours 1000", "(4 x 4) has 16 cells, so k must be 0..15"),
    case("region-memory-k-beyond-target", ["region", "memory", "--sides", "4", "--target", "2x3", "--neighbours", "8"],
         "--neighbours 8", "(2 x 3) has 6 cells, so k must be 0..5"),
    case("region-memory-threads-beyond", ["region", "memory", "--threads", "100000"], "--threads 100000",
         "whole number >= 1 and <= "),  # was accepted: 100,000 torch threads on this machine's cores
    case("region-memory-batch-beyond-memory", ["region", "memory", "--batch", "100000000"], "--batch 100000000,",
         "even the 3 x 3 area measured first is predicted to need", "give a smaller --batch"),  # was torch's alloc error
    case("region-scaling-neighbours-zero", ["region", "scaling", "--neighbours", "0"], "--neighbours 0",
         "whole number >= 1"),  # was accepted until the data was read
    case("nproc-without-parallel", T + ["--nproc", "2"], "--nproc 2 needs --strategy ddp", "one process"),
    case("sweep-memory-cap-negative", ["bench", "batch-sweep", "--memory-cap-mb", "-1"], "--memory-cap-mb -1 ", "positive"),
    case("sweep-memory-cap-inf", ["bench", "batch-sweep", "--memory-cap-mb", "inf"], "--memory-cap-mb inf", "positive"),
    case("sweep-memory-cap-beyond-any-machine", ["bench", "batch-sweep", "--memory-cap-mb", "1e15"],
         "--memory-cap-mb 1e+15", "at most 1073741824 (1 PiB"),
    case("cost-prices-text", ["bench", "cost", "--prices", "{tmp}/plain.txt"], "holds a str", "'devices'"),
    case("cost-prices-list", ["bench", "cost", "--prices", "{tmp}/list.yaml"], "holds a list", "'devices'"),
    case("cost-prices-invalid-yaml", ["bench", "cost", "--prices", "{tmp}/bad_yaml.yaml"], "is not valid YAML", "line"),
    case("cost-prices-missing", ["bench", "cost", "--prices", "/nonexistent/prices.yaml"], "is not a file",
         "lstmnb/prices.yaml"),
    case("cost-prices-binary", ["bench", "cost", "--prices", "{tmp}/binary.bin"], "cannot be read as text",
         "UnicodeDecodeError"),
    case("cost-prices-negative", ["bench", "cost", "--prices", "{tmp}/neg_price.yaml"], "price_per_device_hour=-1",
         "number >= 0"),
    case("cost-plot-suffix", ["bench", "cost", "--plot", "{tmp}/c.xyz"], "cannot write .xyz", ".svg"),
    case("cost-missing-path", ["bench", "cost", "/nonexistent"], "'/nonexistent' does not exist", ".jsonl"),
    # --- scratch bench --------------------------------------------------------------------------------------
    case("scratch-seed-negative", SB + ["--seed", "-1"], "--seed -1", "0..18446744073709551615"),
    case("scratch-dtype", SB + ["--dtype", "float16"], "--dtype float16 is not one of float64, float32"),
    case("region-memory-k-negative", ["region", "memory", "--neighbours", "-1"],
         "--neighbours -1 must be a whole number >= 0 (0: no mix)"),
    case("scratch-seed-huge", SB + ["--seed", str(2**70)], f"--seed {2**70}", "0..18446744073709551615"),
    case("scratch-era5-hours", SB + ["--data", "era5", "--hours", "1000000000"], "--hours 1000000000", "1..13128"),
    case("scratch-airline-hours", SB + ["--data", "airline", "--hours", "5"], "--hours 5 is for --data era5",
         "leave --hours out"),
    case("scratch-window-zero", SB + ["--window", "0"], "--window 0", "must be a whole number >= 1"),
    # a window no part of the series can fill: said before any data is read, with the largest that fits
    case("scratch-window-past-the-data", SB + ["--window", "21"], "--window 21: the shortest part of the airline "
         "series (70/15/15 of its 143 steps) has 21, too few for one sample; give a window below 21"),
    case("scratch-era5-hours-short", SB + ["--data", "era5", "--hours", "30"], "--window 24: the shortest part",
         "give a window below 4 or more --hours"),
    case("scratch-versions-empty", SB + ["--versions", ""], "--versions ''", "loops,numpy"),
    case("scratch-versions-unknown", SB + ["--versions", "numpy,fortran"], "'fortran' not known", "loops,numpy"),
    case("scratch-data", SB + ["--data", "mnist"], "--data mnist", "airline"),
    case("scratch-hidden-zero", SB + ["--hidden", "0"], "--hidden 0", "must be a whole number >= 1"),
    case("scratch-batch-zero", SB + ["--batch-size", "0"], "--batch-size 0", "must be a whole number >= 1"),
    case("scratch-optimizer", SB + ["--optimizer", "lbfgs"], "--optimizer lbfgs", "adam"),
    case("scratch-lr-zero", SB + ["--lr", "0"], "--lr 0 ", "positive number"),
    case("scratch-clip-negative", SB + ["--clip", "-1"], "--clip -1 must be a positive number (0: no clipping)"),
    case("scratch-threads-zero", SB + ["--threads", "0"], "--threads 0", "whole number in 1.."),
    case("scratch-threads-beyond", SB + ["--threads", "100000"], "--threads 100000", "whole number in 1.."),
    case("scratch-repeats-zero", ["scratch", "bench", "--repeats", "0"], "--repeats 0", ">= 1"),
    case("scratch-plot-suffix", SB + ["--plot", "{tmp}/v.xyz"], "cannot write .xyz", ".pdf"),
    case("scratch-results-read-only", SB + ["--results", RO + "/r.jsonl"], "--results file", "read-only"),
    # --- doctor and the command itself ---------------------------------------------------------------------
    case("doctor-profile-unknown", ["doctor", "--profile", "nope"], "unknown profile 'nope'", "choose from"),
    case("doctor-cache-is-a-file", ["doctor"], "cache folder", "is a file, not a folder",
         env={"LSTMNB_CACHE": "{tmp}/plain.txt"}),
    case("command-unknown", ["trian"], "invalid choice: 'trian'", "choose from 'train'"),
    case("bench-kind-unknown", ["bench", "sped"], "invalid choice: 'sped'", "'speed'"),
    case("bench-kind-missing", ["bench"], "required: KIND", "lstmnb bench --help"),
    case("notebooks-action-missing", ["notebooks"], "required: ACTION", "lstmnb notebooks --help"),
    case("scratch-action-missing", ["scratch"], "required: ACTION", "lstmnb scratch --help"),
]


def _writable(folder: Path) -> bool:
    try:
        probe = folder / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return True
    except OSError:
        return False


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nobody here can write to: a chmod 555 folder, or (as root, who ignores permissions) a
    read-only system folder; None when there is neither."""
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "kept.txt").write_text("kept")
    ro.chmod(0o555)
    try:
        if not _writable(ro):
            yield ro
            return
        yield next((p for p in (Path("/sys"), Path("/proc/sys")) if p.is_dir() and not _writable(p)), None)
    finally:
        ro.chmod(0o755)


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory) -> bytes:
    """The bytes of a real checkpoint: one epoch of a tiny run."""
    import numpy as np
    import pandas as pd

    from lstmnb.training import TrainConfig, train
    from lstmnb.windows import make_windows

    t = pd.date_range("2020-03-01", periods=24 * 20, freq="h")
    w = make_windows(285 + np.sin(np.arange(len(t)))[:, None], t, TrainConfig(window=12).window_config())
    path = tmp_path_factory.mktemp("ckpt") / "c.pt"
    train(w, TrainConfig(window=12, hidden=4, epochs=1, progress=False, device="cpu", threads=1, checkpoint=str(path)))
    return path.read_bytes()


@pytest.fixture
def world(tmp_path, monkeypatch, read_only_folder, real_checkpoint):
    """A working folder, a cache and a results folder with content, and the malformed files the cases name."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "kept.bin").write_bytes(os.urandom(64))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "runs.jsonl").write_text(json.dumps({
        "schema": 1, "run_id": "x", "started": "2024-05-01T12:00:00+00:00", "experiment": "train", "status": "ok",
        "device": {"kind": "cpu"}}) + "\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "adir").mkdir()
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "adir.pt.sha256").mkdir()
    (tmp_path / "plain.txt").write_text("just some text\n")
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00\x81" * 16)
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "corrupt.pt.sha256").write_text(f"{hashlib.sha256(b'not a checkpoint').hexdigest()}  corrupt.pt\n")
    (tmp_path / "nosum.pt").write_bytes(real_checkpoint)  # a good checkpoint copied without its checksum
    flipped = bytearray(real_checkpoint)
    flipped[len(flipped) // 2] ^= 0x08  # one bit in the middle of torch.save's bytes
    (tmp_path / "flipped.pt").write_bytes(bytes(flipped))
    (tmp_path / "flipped.pt.sha256").write_text(f"{hashlib.sha256(real_checkpoint).hexdigest()}  flipped.pt\n")
    (tmp_path / "badsum.pt").write_bytes(real_checkpoint)  # a good checkpoint, its checksum file damaged
    (tmp_path / "badsum.pt.sha256").write_text("this is not a checksum\n")
    (tmp_path / "corrupt.jsonl").write_text(json.dumps({"schema": 1, "run_id": "c", "started": 12345, "experiment": ["a"],
                                                        "status": 5, "device": {"kind": "cpu"}}) + "\nnot json\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bad_yaml.yaml").write_text("label: [unclosed\nkernel: python3\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "comment.yaml").write_text("# a profile to fill in later\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "sa_missing.json").write_text(json.dumps({"type": "service_account", "project_id": "p"}))
    (tmp_path / "neg_price.yaml").write_text(yaml.safe_dump({"devices": {"cpu": {"price_per_device_hour": -1}}}))
    for name, body in (("timeout_text", {"label": "x", "cell_timeout_s": "five minutes"}),
                       ("unknown_key", {"label": "x", "kernal": "python3"}),
                       ("unknown_param", {"label": "x", "parameters": {"epocs": 5}})):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(body))
    monkeypatch.setenv("LSTMNB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LSTMNB_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path, read_only_folder


def snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` with its content's hash (folders: 'dir')."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def fill(text: str, tmp: Path, ro: Path | None) -> str:
    if "{ro}" in text and ro is None:
        pytest.skip("no read-only folder on this machine (root without a read-only system folder)")
    return text.replace("{tmp}", str(tmp)).replace("{ro}", str(ro))


@pytest.mark.parametrize("argv, fragments, env", CASES)
def test_bad_input_is_refused_in_one_line_before_any_work(world, monkeypatch, capsys, argv, fragments, env):
    tmp, ro = world
    for key, value in env.items():
        monkeypatch.setenv(key, fill(value, tmp, ro))
    argv = [fill(a, tmp, ro) for a in argv]
    before = snapshot(tmp)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.endswith("\n"), err  # one line
    assert "Traceback" not in err and out == "", (out, err)  # no trace; nothing ran
    for fragment in fragments:
        assert fill(fragment, tmp, ro) in err, (fragment, err)
    assert snapshot(tmp) == before  # no existing file changed, nothing created


def test_every_sub_command_checks_its_input_before_it_runs():
    """The one validation layer: each runnable sub-command has a ``check`` that main calls first."""
    missing = [" ".join(path) for path, p in _leaf_parsers() if p.get_default("check") is None]
    assert missing == []


def _leaf_parsers():
    """(sub-command words, parser) of every runnable sub-command."""
    def leaves(p, path):
        subs = [a for a in p._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            yield path, p
        for action in subs:
            for name, child in action.choices.items():
                yield from leaves(child, path + [name])

    return list(leaves(cli.build_parser(), []))


def test_every_sub_command_refuses_results_beside_no_record(world, capsys):
    """--results with --no-record was ignored without a word (exit 0, nothing written): every sub-command
    that offers both refuses them together in one line, before any work."""
    tmp, _ = world
    offering = [path for path, p in _leaf_parsers() if any("--no-record" in a.option_strings for a in p._actions)]
    assert {"train", "replicate", "quickstart", "skill", "bench allreduce"} <= {" ".join(p) for p in offering}
    before = snapshot(tmp)
    for path in offering:
        code = cli.main(path + ["--no-record", "--results", str(tmp / "r.jsonl")])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, (path, code, err)
        assert f"--results {tmp / 'r.jsonl'} and --no-record both given" in err, (path, err)
    assert snapshot(tmp) == before


# --- inputs that need the data to be judged, and inputs that run with a note ------------------------------
# These read the sample (the session cache): each gives one line on stderr, a note on a run that goes ahead
# (an error, exit status 2, would leave nothing written but cache blocks).
TD = ["train", "--start", "2020-01-01", "--end", "2020-01-31", "--epochs", "1", "--hidden", "8", "--no-progress",
      "--threads", "1", "--device", "cpu", "--results", "{tmp}/r.jsonl"]
DATA_CASES = [
    pytest.param(TD + ["--variable", "2m_temprature"], 2, ("--variable 2m_temprature: not in the study's data",
                                                         "--source sample"), id="variable-misspelt"),
    pytest.param(TD + ["--batch-size", "1000000000"], 0, ("lstmnb: warning: --batch-size 1000000000 is more than the",
                                                          "training samples of this data: each epoch is one step of all"),
                 id="batch-size-beyond-data"),
    pytest.param(TD + ["--checkpoint", "{tmp}/missing.pt", "--resume"], 0,
                 ("lstmnb: warning: --resume: no checkpoint at {tmp}/missing.pt yet, so this is a new run",),
                 id="resume-without-a-checkpoint-yet"),
    pytest.param(["bench", "batch-sweep", "--start", "2020-01-01", "--end", "2020-01-31", "--window", "12", "--device",
                  "cpu", "--no-progress", "--first-batch", "100000", "--results", "{tmp}/r.jsonl"], 2,
                 ("--first-batch 100000 is more than the", "training samples; give at most"),
                 id="sweep-first-batch-beyond-the-data"),
    pytest.param(["scratch", "bench", "--versions", "numpy", "--epochs", "1", "--repeats", "1", "--batch-size", "1000",
                  "--results", "{tmp}/r.jsonl"], 0,
                 ("lstmnb: warning: --batch-size 1000 is more than the 88 training samples of this data",
                  "each epoch is one step of all 88"), id="scratch-batch-size-beyond-data"),
]


@pytest.mark.parametrize("argv, status, fragments", DATA_CASES)
def test_inputs_judged_with_the_data_give_one_line(sample_store_path, tmp_path, monkeypatch, capsys, argv, status,
                                                   fragments):
    monkeypatch.chdir(tmp_path)
    code = cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert code == status and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    for fragment in fragments:
        assert fragment.replace("{tmp}", str(tmp_path)) in err, (fragment, err)
    recorded = (tmp_path / "r.jsonl").exists()
    assert recorded == (status == 0)  # a noted run ran and recorded; a refused one records nothing


@pytest.mark.parametrize("request_args, cfg_args, message", [
    ({}, {"epochs": 0}, "epochs=0 must be a whole number"),  # the config first: no data is read for a bad one
    ({}, {"split_dates": "2020-01-15,2020-01-20"}, "must be two dates VAL_START,TEST_START"),
    ({}, {"fractions": "0.7,0.15,0.15"}, "must be three positive numbers"),
    ({"points": (40, 280)}, {}, r"^points=\(40, 280\) must be a list of \(lat, lon\) pairs"),
    ({"start": "01/02/2020"}, {}, "^start='01/02/2020' is not an ISO date"),
    ({"start": __import__("datetime").date(2020, 1, 1)}, {}, r"^start=datetime.date\(2020, 1, 1\) is not an ISO date"),
    ({"source": Path("/nonexistent")}, {}, r"^source=\w+Path\(.*must be text \(str\(path\) for a local store\)"),    # the setting is named before the checkpoint it names is read (a file that is no checkpoint)
    ({}, {"checkpoint": "{tmp}/c.pt", "resume": True, "overwrite_checkpoint": True}, "resume=True continues"),
])
def test_the_python_api_refuses_bad_values_in_one_line_before_reading_data(tmp_path, monkeypatch, request_args,
                                                                           cfg_args, message):
    from lstmnb import era5, train

    monkeypatch.setenv("LSTMNB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "c.pt").write_bytes(b"not a checkpoint")
    cfg_args = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v for k, v in cfg_args.items()}
    with pytest.raises(ConfigError, match=message):
        train.run(era5.Request(**request_args), train.TrainConfig(**cfg_args), results=tmp_path / "r.jsonl")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "r.jsonl").exists()


def test_one_rule_refuses_the_same_value_at_every_door_as_it_was_given(capsys):
    """TrainConfig.lr's Rule, declared once beside the field, refuses a rate of 0 from the command line, a notebook
    parameter and Python, each naming it as it was given there (issue 51)."""
    from lstmnb.notebooks.params import check_values
    from lstmnb.training import TrainConfig

    why = r"must be a positive number \(omit it for the rate by lead\)$"
    assert cli.main(T + ["--lr", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and __import__("re").search(r"error: --lr 0 " + why, err.strip()), err
    with pytest.raises(ConfigError, match=r"^parameter lr=0 " + why):
        check_values({"lr": 0}, {"lr": 0.001})
    with pytest.raises(ConfigError, match=r"^parameter recommended: lr=0 " + why):
        check_values({"recommended": {"lr": 0}}, {"recommended": {}})
    with pytest.raises(ConfigError, match=r"^lr=0\.0 " + why):
        TrainConfig(lr=0.0).validate()


def test_the_data_requests_checks_name_a_setting_as_it_was_given(capsys):
    """The data request's checks (``data.check_request``, one home) name a bad start, end or point as the user gave
    it: ``--start``/``--point`` on the command line, ``parameter start=`` for a notebook, ``start=`` in Python."""
    from lstmnb.data import Request, check_request
    from lstmnb.notebooks.params import check_values

    iso = r"is not an ISO date or time \(text such as 2020-01-01 or 2020-01-01T06\)$"
    for argv, said in ((["data", "--start", "2020-02-30"], "--start 2020-02-30 " + iso),
                       (["data", "--end", "2019-12-31"], "--end 2019-12-31 is before --start 2020-01-01$"),
                       (["data", "--point", "40,280", "--point", "40,-181"],
                        r"--point 40,-181: longitude -181 is outside -180\.\.180 \(or 0\.\.360\)$")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and __import__("re").search("error: " + said, err.strip()), err
    with pytest.raises(ConfigError, match=r"^parameter start='2020-02-30' " + iso):
        check_values({"start": "2020-02-30"}, {"start": "2020-01-01"})
    with pytest.raises(ConfigError, match=r"^parameter end='2019-12-31' is before start 2020-01-01$"):
        check_values({"end": "2019-12-31"}, {"end": "2020-01-21"})
    with pytest.raises(ConfigError, match=r"^points 40,-181: longitude -181 is outside"):
        check_request(Request(points=((40, 280), (40, -181))))
    with pytest.raises(ConfigError, match=r"^start='2020-02-30' " + iso):
        check_request(Request(start="2020-02-30"))


def test_a_training_run_checks_its_config_once(tmp_path, monkeypatch, capsys):
    """`lstmnb train` checks its config once (it was three times: the command's check, the data's preparation
    and the training); a value changed after a check is checked again."""
    from lstmnb.training import TrainConfig

    checks = []
    real = TrainConfig._check_splits
    monkeypatch.setattr(TrainConfig, "_check_splits", lambda self, say: checks.append(say) or real(self, say))
    monkeypatch.setenv("LSTMNB_CACHE", str(tmp_path / "cache"))
    assert cli.main(T + ["--device", "cpu", "--threads", "1", "--results", str(tmp_path / "r.jsonl")]) == 0, \
        capsys.readouterr().err
    assert len(checks) == 1
    cfg = TrainConfig()
    cfg.validate()
    cfg.validate()
    assert len(checks) == 2
    cfg.epochs = 0
    with pytest.raises(ConfigError, match="epochs=0"):
        cfg.validate()


@pytest.fixture(scope="module")
def flawed_stores(small_store, tmp_path_factory):
    """Local stores made from the small store, each with a flaw `train` refuses (issue 49)."""
    import numpy as np
    import xarray as xr

    ds, root = xr.open_zarr(small_store, chunks=None).load(), tmp_path_factory.mktemp("flawed")
    nan, all_nan = ds.copy(deep=True), ds.copy(deep=True)
    nan["2m_temperature"][100:103] = np.nan
    all_nan["2m_temperature"][:] = np.nan
    flawed = {"gap-48h": ds.isel(time=np.r_[0:72, 120:240]), "six-hourly": ds.isel(time=slice(0, None, 6)),
              "nan-hours": nan, "all-nan": all_nan, "repeated-hour": ds.isel(time=np.r_[0:100, 99:240])}
    for name, store in flawed.items():
        for v in store.variables.values():
            v.encoding = {}
        store.to_zarr(root / f"{name}.zarr", zarr_format=2, consolidated=True)
    return root


@pytest.mark.parametrize("flaw, fragment", [
    ("gap-48h", "not hourly: 2020-01-03 23:00:00 is followed by 2020-01-06 00:00:00"),
    ("six-hourly", "not hourly: 2020-01-01 00:00:00 is followed by 2020-01-01 06:00:00"),
    ("nan-hours", "the series has 3 missing (NaN) hours, first at 2020-01-05 04:00:00"),
    ("all-nan", "the series has 240 missing (NaN) hours"),
    ("repeated-hour", "not hourly: 2020-01-05 03:00:00 is followed by 2020-01-05 03:00:00"),
])
def test_data_refuses_a_store_train_refuses_with_trains_line(flawed_stores, tmp_path, monkeypatch, capsys, flaw,
                                                            fragment):
    """`lstmnb data` printed the hour count and "cached" for each of these; `train` refused each in one line."""
    monkeypatch.setenv("LSTMNB_CACHE", str(tmp_path / "cache"))
    request = ["--source", str(flawed_stores / f"{flaw}.zarr"), "--point", "40,280", "--start", "2020-01-01",
               "--end", "2020-01-10", "--no-progress"]
    lines = {}
    for argv in (["data", *request, "--csv", str(tmp_path / "t.csv")],
                 ["train", *request, "--epochs", "1", "--hidden", "8", "--no-record", "--device", "cpu"]):
        code = cli.main(argv)
        out, err = capsys.readouterr()
        lines[argv[0]] = err.strip().splitlines()[-1]
        assert code == 2 and "Traceback" not in err and "cached" not in out, (argv[0], code, out, err)
        assert fragment in lines[argv[0]], (argv[0], err)
    assert lines["train"].split("error: ")[1] in lines["data"]  # the one check, word for word
    assert not (tmp_path / "t.csv").exists()



def _validate(cls, *args, **kw):
    return lambda: cls(**kw).validate(*args)


def _request(**kw):
    from lstmnb.data import Request, check_request

    return lambda: check_request(Request(**kw))


WRONG_KINDS = [  # (what validates, the refusal's start)
    (_validate(SweepConfig, start="x"), "start='x' must be a whole number >= 1 (the sweep's first batch size)"),
    (_validate(SweepConfig, memory_cap_mb="x"), "memory_cap_mb='x' must be a positive number of MB"),
    (_validate(ScalingConfig, TrainConfig(), world_sizes=0), "world_sizes=0 must be whole numbers in 1.."),
    (_validate(ScalingConfig, TrainConfig(), global_batch=0), "global_batch=0 must be a whole number >= 1"),
    (_validate(ScalingConfig, TrainConfig(), comm_split_steps="x"), "comm_split_steps='x' must be 0..10000"),
    (_validate(AllreduceConfig, min_iters="x"), "min_iters='x' must be a whole number >= 1"),
    (_validate(AllreduceConfig, min_iters=9, max_iters=3), "min_iters=9 is above max_iters=3"),
    (_validate(SizeConfig, points=-1), "points=-1 must be whole numbers >= 1"),
    (_validate(SizeConfig, variants=0), "variants=0 must be one or more of"),
    (_validate(MemoryCase, n_features="x"), "n_features='x' must be a whole number >= 1"),
    (_validate(ScratchConfig, optimizer=[0]), "optimizer=[0] is not one of sgd, adam"),
    (_validate(ScratchConfig, clip="x"), "clip='x' must be a positive number"),
    (_validate(ModelConfig, dropout="x"), "dropout='x' must be a number in [0, 1)"),
    (_validate(RegionConfig, channels="x"), "channels='x' must be a whole number >= 1"),
    (_request(points=0), "points=0 must be a list of (lat, lon) pairs"),
    (_request(box=0, points=None), "box=0 must be 4 numbers"),
    (_request(variables=-1), "variables=-1 must name at least one variable"),
]


@pytest.mark.parametrize("call, message", WRONG_KINDS, ids=[m.split(" ")[0] for _, m in WRONG_KINDS])
def test_python_configs_refuse_a_value_of_the_wrong_kind_in_one_line(call, message):
    """A config made in Python with a value of the wrong kind (text for a count, a number for a list) is refused
    in one line naming it, where the comparison inside validate() raised a TypeError."""
    with pytest.raises(ConfigError) as err:
        call()
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
