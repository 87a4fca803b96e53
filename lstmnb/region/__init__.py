"""Region mode: forecasting every cell of a lat/lon box, one device or many (issue 16).

Modules, in the order data flows through them (imports point downward only):

- ``grid``: a box Dataset (time, latitude, longitude) as per-cell series (time, point), so the point
  pipeline trains one global model on all cells; the cells' grid; per-cell scores as (lat, lon) maps
  (also from a box run's record); cells placed along the direction the weather moves.
- ``relation``: which cells mix with which (k nearest cells), and the mix itself: an index gather, a
  torch sparse CSR product, or a dense n x n product, all computing the same thing.
- ``model``: the region forecaster, the point ``Forecaster`` shared by every cell, whose input at each
  hour includes a learned mix of its neighbours' weather and its recent change (sparse, dense, or none:
  then it is the point model); on area batches, or on keyed samples for the point Trainer.
- ``data``: a box's keyed windows (the point pipeline's samples as (cell, hour) keys) and area batches.
- ``maps``: per-cell maps as figures, each panel its own scale, differences centred on 0.
- ``memory``: memory and step time against the area's size, dense vs sparse; the memory model.
- ``shard``: the region split into row bands over DDP ranks, halo rows exchanged each step.

Training and the comparison with the point model are ``lstmnb.experiments.region_skill`` (experiments
sit above training, which sits above this package).

Nothing is imported here (only the variants' names are defined), so ``import lstmnb.region.grid`` does not
pull in torch.
"""

# the region model's variants: k weights per cell, no mix (the point model), a dense n x n relation
VARIANTS = ("sparse", "none", "dense")
