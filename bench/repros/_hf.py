"""What the rv19d repros (transformers' architectures) share: transformers imported without a torchvision built for
another torch (these models need none of it; its import would break transformers'), then the tree under test
(``GS_ROOT``, as ``_setup`` reads it)."""
import sys

try:
    import torchvision  # noqa: F401
except Exception:  # noqa: BLE001
    for _name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[_name]
    sys.modules["torchvision"] = None

import transformers  # noqa: E402

from _setup import te, torch  # noqa: E402

__all__ = ["te", "torch", "transformers"]
