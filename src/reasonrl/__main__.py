"""``python -m reasonrl`` is the ``reasonrl`` command (torchrun starts ranks this way)."""

from .cli import main

main()
