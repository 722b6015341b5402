"""Progress display for training and evaluation: a rich live bar on a terminal, plain log lines
otherwise (Ray jobs, CI, files). Shows step, reward, groups/s, samples per group, staleness, ETA."""

from __future__ import annotations

import sys
import time


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds < 0:
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    def __init__(self, total: int, mode: str = "auto", start: int = 0, log=print):
        self.total = total
        self.start_step = start
        self.t0 = time.time()
        self.log = log
        use_rich = mode == "rich" or (mode == "auto" and sys.stdout.isatty())
        self.mode = "off" if mode == "off" else ("rich" if use_rich else "plain")
        self._bar = None
        if self.mode == "rich":
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                     TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False)
            self._task = self._bar.add_task("train", total=total, completed=start, info="")
            self._bar.start()

    def eta(self, step: int) -> float:
        done = step - self.start_step
        if done <= 0:
            return float("nan")
        return (time.time() - self.t0) / done * (self.total - step)

    def update(self, step: int, m: dict, line: str) -> None:
        if self.mode == "off":
            return
        if self.mode == "rich":
            info = (f"reward {m.get('train/round0_reward', float('nan')):.3f}  "
                    f"groups/s {m.get('perf/groups_per_s', 0):.2f}  "
                    f"samples/group {m.get('train/samples_per_prompt', 0):.1f}  "
                    f"stale {m.get('train/staleness_mean', 0):.2f}")
            self._bar.update(self._task, completed=step, info=info)
            if any(k.startswith("eval/") for k in m):
                self._bar.console.print(line)
        else:
            self.log(f"{line} eta {_fmt_eta(self.eta(step))}")

    def message(self, text: str) -> None:
        if self.mode == "rich":
            self._bar.console.print(text)
        elif self.mode == "plain":
            self.log(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
