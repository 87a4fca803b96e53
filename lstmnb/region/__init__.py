"""Region mode: forecasting every cell of a lat/lon box, one device or many (issue 16). The modules, in
the order data flows through them: docs/architecture.md. Training and the comparison with the point model
are ``lstmnb.experiments.region_skill`` (experiments sit above training, which sits above this package).

Nothing is imported here, so ``import lstmnb.region.grid`` does not pull in torch.
"""

# the region model's variants: k weights per cell, no mix (the point model), a dense n x n relation
VARIANTS = ("sparse", "none", "dense")
