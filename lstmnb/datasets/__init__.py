"""The datasets lstmnb ships or builds (docs/architecture.md), as stores for ``lstmnb.data``, which none imports."""
