"""lsgd's methods inside the trainers users already run: :mod:`lsgd.integrations.accelerate`
(Hugging Face Accelerate) and :mod:`lsgd.integrations.lightning` (PyTorch Lightning). Each
imports its trainer only when used (extras ``.[accelerate]``, ``.[lightning]``)."""
