"""Region mode: forecasting every cell of a lat/lon box, one device or many (issue 16); docs/architecture.md lists
the modules in the order data flows through them. Training and the comparison with the point model are
``lstmnb.experiments.region_skill``. Nothing is imported here, so ``import lstmnb.region.grid`` pulls in no torch."""

# the region model's variants: k weights per cell, no mix (the point model), a dense n x n relation
VARIANTS = ("sparse", "none", "dense")
