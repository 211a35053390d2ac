"""The data sets, by name, and the checks of a model against its data.

* ``datasets``: what a data set is (:class:`Dataset`), scikit-learn's digits, the synthetic
  underflow task, and the data sets by name (:func:`get_data`);
* ``text``: character-level text, the shipped corpus and its vocabulary (:func:`load_text`), and
  :func:`check_model_and_data`.

>>> get_data("underflow", seed=0).n_classes, DATASETS
(10, ('digits', 'underflow', 'text'))
"""

from floatlab.train.data.datasets import (
    DATASETS,
    Dataset,
    data_name,
    get_data,
    load_digits,
    make_underflow_task,
)
from floatlab.train.data.text import check_model_and_data, load_text

__all__ = [
    "DATASETS",
    "Dataset",
    "check_model_and_data",
    "data_name",
    "get_data",
    "load_digits",
    "load_text",
    "make_underflow_task",
]
