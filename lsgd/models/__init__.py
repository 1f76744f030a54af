"""The papers' models as plain ``torch.nn`` modules.

Every constructor takes the number of input channels and classes, so one
architecture serves gray (Fashion-MNIST, digits) and colour (CIFAR, ImageNet)
data. ``build_model(name, (C, H, W), classes)`` picks one by name from
:data:`~lsgd.models.registry.MODELS`:

=============  ==============================================================
``cnn7``       EASGD's 7-layer CNN (Zhang, Choromanska & LeCun, 2015)
``resnet20``   CIFAR ResNet-20, option-A shortcuts (He et al., 2016)
``vgg16``      VGG-16 with BatchNorm, CIFAR variant (Simonyan & Zisserman 2015)
``wrn-28-10``  WideResNet-28-10, pre-activation (Zagoruyko & Komodakis, 2016);
               any ``wrn-D-K`` (D = 6n+4, K >= 1) builds too, e.g. ``wrn-16-4``
``resnet50``   ResNet-50, bottlenecks 3-4-6-3 (He et al., 2016): the CIFAR stem
               (3x3 stride-1 conv, no max-pool) on inputs up to 64x64, the
               ImageNet stem (7x7 stride-2 conv, max-pool) on larger ones
``mlp``        a small fully connected network (flatten, Linear/ReLU, Linear)
=============  ==============================================================

No torchvision is needed: everything is written here.
"""

from lsgd.models.cnn7 import CNN7, cnn7
from lsgd.models.mlp import MLP, mlp
from lsgd.models.registry import MODELS, build_model, model_names, parse_wrn
from lsgd.models.resnet20 import ResNet20, resnet20
from lsgd.models.resnet50 import ResNet50, resnet50, stem_for
from lsgd.models.vgg import VGG16, vgg16
from lsgd.models.wide_resnet import WideResNet, wide_resnet

__all__ = [
    "CNN7",
    "MLP",
    "MODELS",
    "ResNet20",
    "ResNet50",
    "VGG16",
    "WideResNet",
    "build_model",
    "cnn7",
    "mlp",
    "model_names",
    "parse_wrn",
    "resnet20",
    "resnet50",
    "stem_for",
    "vgg16",
    "wide_resnet",
]
