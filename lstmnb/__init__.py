"""lstmnb: LSTM forecasters of ERA5 2 m temperature and honest measurements of parallel training speed."""

__version__ = "0.1.0"
