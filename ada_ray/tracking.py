"""Experiment tracking: MLflow, plus a metrics.jsonl in the run directory that is always written.

Default store: sqlite inside the run directory (no server needed), artifacts next to it.
``MLFLOW_TRACKING_URI`` / ``tracking.uri`` and ``tracking.experiment`` are honoured. A resumed run
attaches to the same MLflow run (``MLFLOW_RUN_ID``, else the id recorded in the run directory).
When the tracking server is unreachable the run goes on: one warning, metrics buffered in memory,
and everything buffered is sent when the server answers again. Keys are sanitised to what MLflow
accepts.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Optional

_KEY_BAD = re.compile(r"[^0-9A-Za-z_\-. /:]")
MAX_BUFFERED = 200_000


def sanitize_key(key: str) -> str:
    """MLflow keys allow alphanumerics, _ - . space / : (others become _)."""
    return _KEY_BAD.sub("_", key)[:250]


class Tracker:
    def __init__(self, run_dir: Path, enabled: bool, uri: Optional[str], experiment: str,
                 run_name: str, log=print, resume_run_id: Optional[str] = None):
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.log = log
        self.jsonl = open(self.run_dir / "metrics.jsonl", "a")
        self.run_id: Optional[str] = None
        self.client = None
        self.experiment = experiment
        self.run_name = run_name
        self._pending_metrics: list = []
        self._pending_params: dict[str, str] = {}
        self._pending_artifacts: list[tuple[str, Optional[str]]] = []
        self._warned = False
        self._next_retry = 0.0
        if not enabled:
            return
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
        self.uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.run_dir / 'mlflow.db'}"
        self._record = self.run_dir / "mlflow_run.json"
        self.run_id = os.environ.get("MLFLOW_RUN_ID") or self._recorded_run_id() or resume_run_id
        self._connect()

    # -- connection --------------------------------------------------------------------------------

    def _recorded_run_id(self) -> Optional[str]:
        if self._record.is_file():
            rec = json.loads(self._record.read_text())
            if rec.get("uri") == self.uri:
                return rec.get("run_id")
        return None

    def _connect(self) -> bool:
        if self.client is not None and self.run_id is not None and self._attached:
            return True
        if time.monotonic() < self._next_retry:
            return False
        try:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(self.uri)
            exp = client.get_experiment_by_name(self.experiment)
            if exp is None:
                loc = None
                if self.uri.startswith("sqlite:"):
                    loc = (self.run_dir / "mlartifacts").as_uri()
                exp_id = client.create_experiment(self.experiment, artifact_location=loc)
            else:
                exp_id = exp.experiment_id
            if self.run_id is not None:
                from mlflow.exceptions import MlflowException

                try:
                    client.get_run(self.run_id)  # attach to the run being resumed
                    client.update_run(self.run_id, status="RUNNING")
                except MlflowException as exc:
                    if getattr(exc, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                        raise
                    self.log(f"tracking: run {self.run_id} is not in {self.uri}; starting a new MLflow run")
                    self.run_id = None
            if self.run_id is None:
                self.run_id = client.create_run(exp_id, run_name=self.run_name).info.run_id
            self._record.write_text(json.dumps({"uri": self.uri, "run_id": self.run_id}))
            self.client = client
            self._attached = True
            if self._warned:
                self.log(f"tracking: MLflow at {self.uri} is reachable again; sending buffered data")
            self._flush()
            return True
        except Exception as exc:  # noqa: BLE001 - any failure means: keep training, retry later
            self._offline(exc)
            return False

    _attached = False

    def _offline(self, exc: Exception) -> None:
        self._attached = False
        self._next_retry = time.monotonic() + 10.0
        if not self._warned:
            self._warned = True
            self.log(f"tracking: MLflow at {self.uri} is unreachable ({type(exc).__name__}: "
                     f"{str(exc).splitlines()[0][:160]}); training goes on, metrics are buffered")

    def _flush(self) -> None:
        from mlflow.entities import Metric, Param

        if self._pending_params:
            items = list(self._pending_params.items())
            for i in range(0, len(items), 100):
                self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i:i + 100]])
            self._pending_params = {}
        while self._pending_metrics:
            chunk = self._pending_metrics[:1000]
            self.client.log_batch(self.run_id, metrics=[Metric(k, v, ts, step) for k, v, ts, step in chunk])
            del self._pending_metrics[:1000]
        while self._pending_artifacts:
            path, sub = self._pending_artifacts[0]
            if Path(path).exists():
                if Path(path).is_dir():
                    self.client.log_artifacts(self.run_id, path, sub)
                else:
                    self.client.log_artifact(self.run_id, path, sub)
            self._pending_artifacts.pop(0)

    def _send(self) -> None:
        if not self.enabled:
            return
        if not self._connect():
            return
        try:
            self._flush()
        except Exception as exc:  # noqa: BLE001
            self._offline(exc)

    # -- logging -----------------------------------------------------------------------------------

    def log_params(self, params: dict[str, Any]) -> None:
        for k, v in params.items():
            self._pending_params[sanitize_key(k)] = str(v)[:6000]
        self._send()

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None}
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        if not self.enabled:
            return
        ts = int(time.time() * 1000)
        for k, v in clean.items():
            if v == v and abs(v) != float("inf"):  # MLflow rejects NaN/inf
                self._pending_metrics.append((sanitize_key(k), v, ts, step))
        if len(self._pending_metrics) > MAX_BUFFERED:
            del self._pending_metrics[: len(self._pending_metrics) - MAX_BUFFERED]
        self._send()

    def log_artifact(self, path: str | Path, subdir: Optional[str] = None) -> None:
        if self.enabled:
            self._pending_artifacts.append((str(path), subdir))
            self._send()

    def close(self, status: str = "FINISHED") -> None:
        self.jsonl.close()
        if not self.enabled:
            return
        self._next_retry = 0.0
        self._send()
        if self.client is not None and self.run_id is not None and self._attached:
            try:
                self.client.set_terminated(self.run_id, status=status)
            except Exception as exc:  # noqa: BLE001
                self._offline(exc)
        if self._pending_metrics or self._pending_params:
            self.log(f"tracking: {len(self._pending_metrics)} metric values could not be sent to {self.uri}; "
                     f"they are in {self.run_dir / 'metrics.jsonl'}")
