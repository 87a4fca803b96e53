"""Sub-command definitions for ``lstmnb``: argument parsing only, each calling into a module."""

from __future__ import annotations

import argparse

from .cli import subcommand
