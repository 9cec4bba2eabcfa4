"""Suite-wide setup. bittensor writes under ~/.bittensor at import: point HOME at a temp folder first."""

from __future__ import annotations

import os
import tempfile

os.environ["HOME"] = tempfile.mkdtemp(prefix="gauntlet-test-home-")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

torch.set_num_threads(1)
