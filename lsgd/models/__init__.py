"""The papers' models as plain ``torch.nn`` modules (no torchvision).

Every constructor takes the input channels and classes, so one architecture serves
gray and colour data. ``build_model(name, (C, H, W), classes)`` picks one of
:data:`~lsgd.models.catalog.MODELS`: ``cnn7`` (EASGD's 7-layer CNN), ``resnet20``
(CIFAR ResNet-20), ``vgg16`` (VGG-16 with BatchNorm), ``wrn-28-10`` or any other
``wrn-D-K`` (pre-activation WideResNet), ``resnet50`` (the CIFAR stem on inputs up to
64x64, else ImageNet's) and ``mlp`` (a small fully connected network); each module
cites its paper. :mod:`lsgd.models.gpt` holds the language models.
"""

from lsgd.models.catalog import MODELS, build_model, model_names, parse_wrn
from lsgd.models.cnn7 import CNN7, cnn7
from lsgd.models.mlp import MLP, mlp
from lsgd.models.resnet20 import ResNet20, resnet20
from lsgd.models.resnet50 import ResNet50, resnet50, stem_for
from lsgd.models.vgg import VGG16, vgg16
from lsgd.models.wide_resnet import WideResNet, wide_resnet

__all__ = [
    "CNN7", "MLP", "MODELS", "ResNet20", "ResNet50", "VGG16", "WideResNet", "build_model",
    "cnn7", "mlp", "model_names", "parse_wrn", "resnet20", "resnet50", "stem_for", "vgg16",
    "wide_resnet",
]
