"""The stop-conformance kit: any stopper against the plugin's victim zoo, one row per kind.

Public API: ``Stopper`` (the protocol a Python adapter follows; ``--stopper module:Class``),
``Tree`` (what its ``start`` gets: ``argv``, ``shell``, ``adopt()``), ``VICTIMS`` (the zoo),
``BUILTIN`` (the built-in adapters by name) and ``main`` (the command line). The modules
behind it are the kit's own; `make bench` uses them for its peer table.
"""

from .adapters import BUILTIN
from .cli import main
from .stopper import Stopper
from .zoo import VICTIMS, Tree

__all__ = ["BUILTIN", "VICTIMS", "Stopper", "Tree", "main"]
