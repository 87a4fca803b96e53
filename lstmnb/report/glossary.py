"""The words the report uses, each defined once: notebook 06 ends with this glossary and README carries
the same text (a test holds the two together)."""

from __future__ import annotations

from .published import TIED_WITHIN
from .timing_quality import REPEATS_DISAGREE

GLOSSARY: dict[str, str] = {
    "published setting": "the study's training setting: a 2-layer LSTM with 64 hidden units, 24 h window, 1 h "
                         "lead, batch 128, Adam at 1e-3, fp32, a DataLoader with 2 workers (`--preset published`).",
    "published problem": "the study's data and split: its real ERA5 2 m temperature at 40N and 20N, 280E, hourly, "
                         "trained on 2020 and tested on 2021-01..06.",
    "like for like": "the published setting on the published problem, on the DataLoader path as the study ran it "
                     "(2 workers started afresh each epoch, pageable memory): the only runs whose seconds stand "
                     "beside the study's; anything else is shown under its own labels.",
    "fast path / fast input": "the training set held as tensors on the device and batches drawn by shuffled "
                              "index, with no per-sample Python: lstmnb's faster input path.",
    "DataLoader path": "a per-sample PyTorch `Dataset` read through a `DataLoader` with worker processes, as "
                       "the study fed its model.",
    "blend": "lstmnb's reported forecast: per point, a convex mix of the network, persistence and climatology, "
             "its weights fitted on the validation part (never worse than persistence there).",
    "cycles input": "an extra input of the fitted seasonal and diurnal cycle of each point, learned from the "
                    "training part (its seasonal part only where training covers a year; the diurnal part always).",
    "x CPU": "a GPU's speedup: the seconds of a CPU doing the same work divided by the GPU's; every label says "
             "which CPU. It is the GPU's own machine's where the records hold one; every published GPU is put over "
             "the study's one CPU run, whose platform the study does not state.",
    "persistence": "the baseline forecast that the temperature stays what it was at the last observed hour.",
    "climatology": "the baseline forecast of the usual temperature for that date and hour (29 February: 28 "
                   "February's), from the training part (the hour-of-day mean when training is shorter than a year).",
    "MSE skill score": "1 - MSE_model / MSE_baseline: 0 is as good as the baseline, 1 is perfect, below 0 is "
                       "worse than the baseline.",
    "warm-up epoch": "the first epoch of a run (and of each resumption of it), which also pays one-off costs "
                     "(memory, kernels, worker start); each epoch of the record says whether it was one (`warmup`); "
                     "steady figures leave them out, the published table's totals include them.",
    "samples/s": "training samples processed per second of training (an epoch's samples over its seconds).",
    "MFU": "model FLOPs utilisation: the model's FLOPs per second over this machine's own measured matrix-"
           "multiply rate (how much of the hardware the training step uses).",
    "strong scaling": "a fixed global batch split over N workers; speedup = t1 / tN.",
    "weak scaling": "each worker keeps its batch, so the global batch grows N-fold; scaled speedup = "
                    "throughput at N / throughput at 1.",
    "efficiency": "speedup / N: 1.0 means N workers are N times faster.",
    "all-reduce": "the collective that sums (then averages) every rank's gradients so all ranks take the same "
                  "step; ring all-reduce moves 2(N-1)K/N values per rank for K parameters.",
    "busbw": "bus bandwidth of an all-reduce, as nccl-tests define it: algbw (bytes / time) x 2(N-1)/N, "
             "comparable across N.",
    "CUDA graph": "a GPU training step recorded once and replayed with one launch, instead of launching each of "
                  "its kernels from Python every step (`--cuda-graph`).",
    "launch-bound": "a step whose time is set by the CPU launching many small kernels, not by the GPU's "
                    "arithmetic: a faster GPU barely helps, a CUDA graph does.",
    "synthetic vs real data": "real: the study's ERA5 values, shipped with lstmnb (the default); synthetic: "
                              "lstmnb's made-up weather of the same layout, for areas and region mode, always "
                              "labelled synthetic.",
    "reference records": "real run records lstmnb wrote on NVIDIA H100s (another machine: on the study's real data "
                         "its setting, the recommended setting and the from-scratch engines; on synthetic data the "
                         "former one-layer setting), shipped with the package and always labelled as such.",
    "measured here / published": "measured here: your own run records; published: the study's figures as it "
                                 "printed them (one run each).",
    "repeats": f"runs of one setting timed several times, alternated; tables show their median and mark rows "
               f"whose repeats differ by more than {REPEATS_DISAGREE:.0%} or that ran beside busy processes.",
    "flagged": "a published figure whose note says it cannot be what it says (the T4's CPU-like 10- and 15-epoch "
               "times, the P100's equal 5- and 10-epoch times): named beside the study's ranking, never ranked or "
               "called tied.",
    "tied": f"two single-run times within {TIED_WITHIN:.0%} of each other: within run-to-run noise, so neither is "
            "called faster.",
}


def glossary_markdown() -> str:
    """The glossary as a Markdown list, one term a line (06's end and README's Glossary section)."""
    return "\n".join(f"- **{term}**: {text}" for term, text in GLOSSARY.items())
