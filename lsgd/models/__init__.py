"""The papers' models as plain ``torch.nn`` modules (no torchvision), each citing its paper.

Every constructor takes the input channels and classes, so one architecture serves gray
and colour data; :func:`build_model` picks one by name (:data:`~lsgd.models.catalog.MODELS`
or any ``wrn-D-K``) for an input shape. :mod:`lsgd.models.gpt` holds the language models.
"""

from lsgd.models.catalog import MODELS, build_model
from lsgd.models.cnn7 import CNN7, cnn7
from lsgd.models.mlp import MLP, mlp
from lsgd.models.resnet20 import ResNet20, resnet20
from lsgd.models.resnet50 import ResNet50, resnet50, stem_for
from lsgd.models.vgg import VGG16, vgg16
from lsgd.models.wide_resnet import WideResNet, wide_resnet

__all__ = [
    "CNN7", "MLP", "MODELS", "ResNet20", "ResNet50", "VGG16", "WideResNet", "build_model",
    "cnn7", "mlp", "resnet20", "resnet50", "stem_for", "vgg16", "wide_resnet"]
