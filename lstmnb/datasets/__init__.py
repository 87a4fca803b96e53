"""The datasets lstmnb ships or builds (docs/architecture.md lists them), as stores ``lstmnb.data`` reads.
Nothing here imports ``lstmnb.data``.
"""
