"""What a run, or several, tell: the memory a step keeps, claims over seeds, text a model writes,
the fp8 operands over training.

* ``memory``: the memory ledger (:func:`ledger`, :func:`ledger_for`);
* ``seeds``: runs over seeds and paired gaps with confidence intervals (:func:`run_seeds`,
  :func:`paired_gap`, :func:`late_phase`);
* ``sampling``: text from a trained character model (:func:`sample`);
* ``operands``: the fp8 recipes' operand record as a table;
* ``runs``: runs gathered by label over their seeds (:func:`group_runs`) and what they ended at
  (:func:`final_table`: means, 95% intervals, paired gaps);
* ``plots``: the figures: policies compared over seeds, the fp8 operands over training.

>>> from floatlab.train.models import MLP
>>> led = ledger(MLP(784, (256, 256), 10), "mixed-bf16", batch_size=64)
>>> led.bytes_of("master weights") == 2 * led.bytes_of("weights")
True
"""

from floatlab.train.analysis.memory import Ledger, ledger, ledger_for
from floatlab.train.analysis.operands import operand_summary
from floatlab.train.analysis.plots import compare, plot_operands
from floatlab.train.analysis.runs import final_table, group_runs
from floatlab.train.analysis.sampling import sample
from floatlab.train.analysis.seeds import late_phase, paired_gap, run_seeds

__all__ = [
    "Ledger",
    "compare",
    "final_table",
    "group_runs",
    "late_phase",
    "ledger",
    "ledger_for",
    "operand_summary",
    "paired_gap",
    "plot_operands",
    "run_seeds",
    "sample",
]
