"""Region mode: forecasting every cell of a lat/lon box, one device or many (issue 16).

Modules, in the order data flows through them (imports point downward only):

- ``grid``: a box Dataset (time, latitude, longitude) as per-cell series (time, point), so the point
  pipeline trains one global model on all cells; the cells' grid; per-cell scores as (lat, lon) maps
  (also from a box run's record) and their plot.
- ``relation``: which cells mix with which (k nearest cells), and the mix itself: an index gather, a
  torch sparse CSR product, or a dense n x n product, all computing the same thing.
- ``model``: the region forecaster, a per-cell LSTM with shared weights whose input at each step
  includes a learned mix of neighbouring cells' inputs (sparse, dense, or none as the control).
- ``data``: splits, train-only scaling and windows over time for the whole region at once, with
  persistence and climatology per cell.
- ``train``: training and per-cell evaluation of the region model, the skill map.
- ``memory``: memory and step time against the area's size, dense vs sparse; the memory model.
- ``shard``: the region split into row bands over DDP ranks, halo rows exchanged each step.

Nothing is imported here (only the variants' names are defined), so ``import lstmnb.region.grid`` does not
pull in torch.
"""

# the region model's variants: k weights per cell, no mix (the per-cell control), a dense n x n relation
VARIANTS = ("sparse", "none", "dense")
