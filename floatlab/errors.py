"""floatlab's own warning category: :class:`FloatlabWarning`, the base of the warnings floatlab
gives, so that a program can filter them all at once (``warnings.simplefilter("ignore",
FloatlabWarning)``) or one kind by its subclass.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     warnings.warn("a note", FloatlabWarning)
>>> caught[0].category.__name__
'FloatlabWarning'
"""

from __future__ import annotations

__all__ = ["FloatlabWarning"]


class FloatlabWarning(UserWarning):
    """The base of floatlab's warnings (a :class:`UserWarning`: shown once per place by default).

    >>> issubclass(FloatlabWarning, UserWarning)
    True
    """
