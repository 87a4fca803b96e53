"""lstmnb: LSTM forecasters of ERA5 2 m temperature and honest measurements of parallel training speed."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``lstmnb.era5``, the former name of ``lstmnb.data`` (``from lstmnb import era5`` is documented),
    imported only when asked for so that ``import lstmnb`` stays light (PEP 562)."""
    if name == "era5":
        import importlib
        import sys

        data = importlib.import_module(".data", __name__)
        # Temporary bridge: lstmnb/cli_commands.py still says `from .era5_cache import ...` after
        # `from . import era5`; remove this line once it imports from lstmnb.data.cache.
        sys.modules.setdefault(f"{__name__}.era5_cache", data.cache)
        return data
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
