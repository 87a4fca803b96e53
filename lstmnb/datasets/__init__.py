"""The datasets lstmnb ships or builds, as stores the data package reads (``lstmnb.data``).

=================  ===================================================================================
``arco_layout``    writing, checking and building into the cache a store in the ARCO-ERA5 layout
``weather``        the synthetic weather of the sample store
``sample``         the embedded synthetic store (an area: boxes, region mode)
``study``          the study's real ERA5 at its two points, shipped as ``era5_t2m_study_points.npz``
                   with its checksum and Copernicus notice (the default source for points)
=================  ===================================================================================

``airline_passengers.csv`` is the classic monthly series the from-scratch LSTM (``lstmnb.scratch``) starts on.
Nothing here imports ``lstmnb.data``: it reads these stores, they do not read anything.
"""
