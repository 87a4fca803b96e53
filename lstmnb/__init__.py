"""lstmnb: LSTM forecasters of ERA5 2 m temperature and honest measurements of parallel training speed.

The package follows the data flow (docs/architecture.md). Two names of the documented Python API are aliases,
imported on first use (PEP 562) so that `import lstmnb` stays light: ``lstmnb.era5`` is ``lstmnb.data`` and
``lstmnb.train`` is ``lstmnb.training``.
"""

__version__ = "0.1.0"

_ALIASES = {"era5": "lstmnb.data", "train": "lstmnb.training"}


def __getattr__(name: str):
    if name in _ALIASES:
        import importlib

        globals()[name] = module = importlib.import_module(_ALIASES[name])
        return module
    raise AttributeError(f"module 'lstmnb' has no attribute {name!r}")
