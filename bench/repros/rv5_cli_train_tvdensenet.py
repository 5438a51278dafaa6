"""`python examples/train.py --model tvdensenet` trains examples/models.py's DenseNet, not its TVDenseNet (the
torchvision-layout DenseNet the name and the README's DenseNet results refer to): train.build's last
branch is `ResNet if name == "resnet" else DenseNet`."""
import sys
from pathlib import Path

from _setup import ROOT, torch  # the tree under test: GS_ROOT

sys.path.insert(0, str(Path(ROOT) / "examples"))
import train  # noqa: E402

model, _, _ = train.build("tvdensenet", 2, 32, 10, torch.device("cpu"))
print(f"train.build('tvdensenet') -> {type(model).__name__} (expected TVDenseNet)")
sys.exit(0 if type(model).__name__ == "TVDenseNet" else 1)
