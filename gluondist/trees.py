"""Two small tools the training side uses in many places: a walk over nested tuples of arrays
(:func:`tree_map`: an optimizer's state, a net's inputs) and a cache of what was made from
arrays, kept while the arrays are the same objects (:class:`Kept`: views, prepared calls)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence


def tree_map(fn: Callable, tree, seq: Optional[type] = None, path: tuple = ()):
    """``tree`` (None, a leaf, or a tuple or list of trees) with every leaf replaced by
    ``fn(leaf, path)``, ``path`` the indices that lead to it; None stays None. Sequences keep
    their type, or become ``seq``."""
    if tree is None:
        return None
    if isinstance(tree, (tuple, list)):
        return (seq or type(tree))(tree_map(fn, t, seq, path + (j,)) for j, t in enumerate(tree))
    return fn(tree, path)


def leaves(tree) -> list:
    """The leaves of ``tree`` (see :func:`tree_map`), in order."""
    found: list = []
    tree_map(lambda leaf, _: found.append(leaf), tree)
    return found


class Kept:
    """Values made from arrays, each kept under a name while its arrays are the same objects
    (a trainer passes the same gradients and staging arrays every step, and slicing or building
    a call's arguments costs more than the copy or update they serve)."""

    def __init__(self):
        self._kept: dict = {}

    def get(self, name, arrays: Sequence, make: Callable):
        """The value kept under ``name`` for ``arrays``, or ``make()``'s, kept from now."""
        kept = self._kept.get(name)
        if kept is not None and len(kept[0]) == len(arrays):
            for a, b in zip(kept[0], arrays):  # a loop: this runs for every chunk of a step
                if a is not b:
                    break
            else:
                return kept[1]
        value = make()
        self._kept[name] = (list(arrays), value)
        return value
