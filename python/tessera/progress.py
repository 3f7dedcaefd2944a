"""Progress where people look for it, from a run's events, with optional packages only: a
tqdm bar (tqdm.auto: a widget in notebooks) over worker 0's batches, and the per-epoch
metrics drawn with matplotlib. Without those packages the bar is silently off, and plotting
says what to install."""
import collections


class ProgressBar:
    """Worker 0's progress through `num_epochs` epochs as a tqdm bar, its latest metrics and
    samples/s beside it. A no-op when tqdm is not importable or `enabled` is False."""

    def __init__(self, num_epochs, description, enabled=None):
        self._num_epochs, self._description = num_epochs, description
        self._tqdm = None
        if enabled is not False:
            try:
                from tqdm.auto import tqdm
                self._tqdm = tqdm
            except ImportError:
                if enabled:
                    raise
        self._bar = None
        self._batches_per_epoch = 0

    def update(self, event):
        from tessera.client import Batch, Epoch, Started  # the event types; no import cycle
        if self._tqdm is None or event.rank != 0:
            return
        if isinstance(event, Started):
            self._batches_per_epoch = event.batches_per_epoch
            self._bar = self._tqdm(total=self._num_epochs * event.batches_per_epoch,
                                   desc=self._description, unit="batch")
        elif self._bar is not None and isinstance(event, Batch):
            self._bar.n = event.epoch * self._batches_per_epoch + event.batch
            self._bar.set_postfix({**dict(sorted(event.metrics.items())),
                                   "samples/s": round(event.samples_per_second)})
        elif self._bar is not None and isinstance(event, Epoch):
            self._bar.n = (event.epoch + 1) * self._batches_per_epoch
            self._bar.set_postfix({**{f"test_{k}": v for k, v in sorted(event.eval.items())},
                                   "samples/s": round(event.samples_per_second)})

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class History:
    """Worker 0's per-epoch metrics: history.train["accuracy"] is a list, one value per
    epoch (and history.eval, history.seconds)."""

    def __init__(self, name):
        self.name = name
        self.train = collections.defaultdict(list)
        self.eval = collections.defaultdict(list)
        self.seconds = []

    def add(self, epoch_event):
        for key, value in epoch_event.train.items():
            self.train[key].append(value)
        for key, value in epoch_event.eval.items():
            self.eval[key].append(value)
        self.seconds.append(epoch_event.seconds)

    def plot(self):
        """A matplotlib Figure with one panel per metric, training and test values by epoch
        (a notebook shows it; figure.savefig("run.png") writes it)."""
        try:
            from matplotlib.figure import Figure
            from matplotlib.ticker import MaxNLocator
        except ImportError:
            raise ImportError("plotting needs matplotlib (Debian: python3-matplotlib)") from None
        metrics = sorted(set(self.train) | set(self.eval))
        if not metrics:
            raise ValueError(f"job '{self.name}' has no finished epoch to plot yet")
        figure = Figure(figsize=(4.5 * len(metrics), 3.5), layout="constrained")
        for axes, metric in zip(figure.subplots(1, len(metrics), squeeze=False)[0], metrics):
            for label, values in (("train", self.train.get(metric)),
                                  ("test", self.eval.get(metric))):
                if values:
                    axes.plot(range(1, len(values) + 1), values, marker="o", label=label)
            axes.set(title=metric, xlabel="epoch")
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.legend()
        figure.suptitle(self.name)
        return figure
