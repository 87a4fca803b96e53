"""lstmnb: LSTM forecasters of ERA5 2 m temperature and honest measurements of parallel training speed.

The package follows the data flow (docs/architecture.md). Two names of the documented Python API are
kept as aliases, resolved on first use so that `import lstmnb` stays light:
``lstmnb.era5`` is ``lstmnb.data`` and ``lstmnb.train`` is ``lstmnb.training``.
"""

__version__ = "0.1.0"

_ALIASES = {"era5": "lstmnb.data", "train": "lstmnb.training"}


def __getattr__(name: str):
    """The aliases above, imported only when asked for so that ``import lstmnb`` stays light (PEP 562)."""
    if name in _ALIASES:
        import importlib

        module = importlib.import_module(_ALIASES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'lstmnb' has no attribute {name!r}")
