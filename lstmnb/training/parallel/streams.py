"""Dropout's random numbers when a batch is split over ranks or GPUs. Every part seeds torch from ``cfg.seed`` so
the starting weights agree, but left there each would draw the same dropout masks (rank 1's k-th sample losing the
units rank 0's k-th loses), which one process on the whole batch never does. So after the weights are made, each
part past the first draws from its own stream, derived from the seed, its rank (or GPU) and the epoch it starts at
(a resumed run starts new streams there). Rank 0 and cuda:0 keep the seed's stream (a resumed rank 0 the
checkpoint's): one rank draws what a one-process run draws. The batches' order comes from the Trainer's own
generator, never these streams, so every rank still takes its share of the same permutation."""

from __future__ import annotations

import numpy as np
import torch


def stream_seed(seed: int, part: int, epoch: int = 0) -> int:
    """The seed of part ``part``'s stream (a rank, or a GPU index): distinct for every (seed, part, epoch)."""
    return int(np.random.SeedSequence([int(seed), int(part), int(epoch)]).generate_state(1, np.uint64)[0])


def own_rank_stream(seed: int, rank: int, epoch: int = 0) -> None:
    """Rank ``rank`` draws dropout from its own stream (torch's global generators: CPU, and the rank's CUDA device);
    rank 0 keeps the stream it has."""
    if rank:
        torch.manual_seed(stream_seed(seed, rank, epoch))


def own_replica_streams(seed: int, device_ids: list[int], epoch: int = 0) -> None:
    """DataParallel's replicas draw dropout on their own GPUs: each GPU past the first gets its own stream."""
    torch.cuda.init()  # the per-GPU generators exist once CUDA has started
    for i in device_ids[1:]:
        torch.cuda.default_generators[i].manual_seed(stream_seed(seed, i, epoch))
