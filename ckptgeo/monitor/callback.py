"""The monitor as a ``transformers.TrainerCallback``.

::

    monitor = Monitor(tokenizer, ["copy-L1"], "runs/live", schedule=25)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collate)
    trainer.add_callback(MonitorCallback(monitor, trainer=trainer))
    trainer.train()

The callback measures at step 0 (``on_train_begin``) and at every scheduled step (``on_step_end``,
after the optimiser update of that step, so the weights equal the ``checkpoint-N`` the Trainer would
save there). Given the ``trainer``, it logs each measuring step's numbers through
:meth:`transformers.Trainer.log` (:meth:`ckptgeo.monitor.core.Reading.log_values`: ``rankme/L{k}``,
``accuracy``, the events found there as ``event/acquisition_step``, ``event/collapse_step/L{k}``, ...,
and with ``forecast_from`` the forecast as ``forecast/median_step``, ``forecast/p_next``, ...), so every
reporting integration the Trainer was set up with (``report_to``: TensorBoard, W&B, MLflow, ...; the
Trainer puts them under ``train/``) and ``trainer.state.log_history`` get them, and it puts the monitor's
one-line status in the Trainer's progress bar. Without ``trainer`` it still measures, writes the
dataset and reports events. Only the world's main process measures (``state.is_world_process_zero``).
"""

from __future__ import annotations

import contextlib
import logging

from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import TrainerCallback

from ckptgeo.monitor.core import Monitor

__all__ = ["MonitorCallback"]

log = logging.getLogger("ckptgeo.monitor")


class MonitorCallback(TrainerCallback):
    """Run a :class:`~ckptgeo.monitor.core.Monitor` inside ``transformers.Trainer``.

    Parameters
    ----------
    monitor : Monitor
    trainer : transformers.Trainer, optional
        Logs the values through ``trainer.log`` and shows the status in its progress bar.
    measure_start : bool, default=True
        Measure step 0 (the initial weights) at ``on_train_begin`` if the schedule includes it.
    """

    def __init__(self, monitor: Monitor, *, trainer=None, measure_start: bool = True):
        self.monitor = monitor
        self.trainer = trainer
        self.measure_start = measure_start

    def _bar(self):
        if self.trainer is None:
            return None
        from transformers.trainer_callback import ProgressCallback

        for cb in self.trainer.callback_handler.callbacks:
            if isinstance(cb, ProgressCallback):
                return cb.training_bar
        return None

    def _measure(self, state, control, model) -> None:
        if not state.is_world_process_zero or not self.monitor.due(state.global_step):
            return
        if model is None and self.trainer is not None:
            model = self.trainer.model
        bar = self._bar()
        # event lines go above the progress bar (as the Trainer's own log lines do), not into it
        with logging_redirect_tqdm() if bar is not None else contextlib.nullcontext():
            reading = self.monitor.step(model, state.global_step)
        if reading is None:
            return
        if self.trainer is not None:
            should_log = control.should_log  # Trainer.log clears it: the Trainer's own log of this step stays due
            self.trainer.log(reading.log_values())
            control.should_log = should_log
        if bar is not None:
            bar.set_postfix_str(self.monitor.status(), refresh=False)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.monitor.planned_steps is None and state.max_steps and state.max_steps > 0:
            self.monitor.planned_steps = int(state.max_steps)   # the forecast's clock (Monitor: planned_steps)
        if self.measure_start and state.global_step == 0:
            self._measure(state, control, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._measure(state, control, model)
