"""The running system: the PromptQueue, S samplers, L learners and the WeightBus between them.

`Runtime` builds the actors from the config (placement groups, hardware), and gives the driver
loop a handful of verbs: wait for a cohort, train on it, broadcast the new weights, evaluate,
collect stats, shut down. Every blocking call has a timeout and a clear error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import ray

from ada_ray import storage
from ada_ray.driver import cluster as cl
from ada_ray.actors.learner import Learner
from ada_ray.actors.queue_coordinator import build_queue
from ada_ray.actors.queue_relay import QueueRelay, relay_enabled
from ada_ray.actors.ray_payloads import OWNERS_NAMESPACE, owner_actor_name
from ada_ray.actors.sampler import Sampler
from ada_ray.algo.payloads import CohortPayloadsLost
from ada_ray.algo.queue_shards import shard_states
from ada_ray.algo.types import Signal
from ada_ray.learner.batching import learner_shares, share_batches
from ada_ray.config import AdaRayConfig, to_dict
from ada_ray.driver.run_storage import not_shared, probe_problems
from ada_ray.errors import AdaRayError
from ada_ray.sync.process_group import bus_backend


class RuntimeFailure(AdaRayError, RuntimeError):
    pass


@dataclass
class Runtime:
    cfg: AdaRayConfig
    cluster: cl.Cluster
    queue: Any
    samplers: list
    learners: list
    bus_world: int
    groups: list = field(default_factory=list)  # placement groups
    version: int = 0
    model_path: str = ""
    sampler_env: dict = field(default_factory=dict)
    replaced: int = 0  # samplers replaced after dying or failing a broadcast
    # the queue actors samplers lease from: [queue] with one queue shard; with K > 1 the K shards
    # behind `queue` (a QueueCoordinator), sampler i on shard i % K
    shards: list = field(default_factory=list)
    log: Any = print
    stall_note_s: float = 60.0  # a cohort wait this long is logged (queue stats: ready, leased and by whom)
    generations: dict = field(default_factory=dict)  # sampler index -> how many times it was replaced
    # replacements still starting: index -> (its ready() call, when it was asked for); the run goes
    # on with the other samplers meanwhile (they are the weight bus), and a sampler joins once it is up
    starting: dict = field(default_factory=dict)
    gone: set = field(default_factory=set)  # indices whose replacement could not start: the run has fewer samplers
    last_stats: dict = field(default_factory=dict)  # index -> its last stats (what an inactive slot reports)
    relays: dict = field(default_factory=dict)  # (node id, shard) -> its QueueRelay (sampler.queue_relay)

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def build(cls, cfg: AdaRayConfig, cluster: cl.Cluster, model_path: str, prompts: list,
              estimator_state: Optional[dict] = None, log=print) -> "Runtime":
        cl.check_resources(cfg, cluster.resources)
        cl.config_error_for_hardware(cfg, cluster.resources)
        d = to_dict(cfg)
        s, lr = cfg.sampler, cfg.learner
        sampler_gpu, learner_gpu = s.num_gpus > 0, lr.num_gpus > 0
        queue, shards = build_queue(prompts, d, estimator_state, options=dict(
            num_cpus=0, runtime_env={"env_vars": dict(cl.BASE_ENV)}, scheduling_strategy=cl.on_this_node()))
        if cfg.weight_sync.colocated:  # sampler i and learner i in bundle i of one group
            lpg = spg = cl.colocated_group(cfg)
        else:
            lpg, spg = cl.learner_group(cfg), cl.sampler_group(cfg)
        renv = {"env_vars": dict(cl.BASE_ENV)}
        learners = [Learner.options(num_cpus=lr.num_cpus, num_gpus=lr.num_gpus, runtime_env=renv,
                                    scheduling_strategy=cl.in_bundle(lpg, i)).remote(i, lr.num_learners, d, model_path,
                                                                                      learner_gpu)
                    for i in range(lr.num_learners)]
        env = cl.sampler_env(cfg, sampler_gpu)
        rt = cls(cfg, cluster, queue, [], learners, 1 + s.num_samplers * s.tensor_parallel_size, [lpg, spg],
                 model_path=model_path, sampler_env=env, log=log, shards=shards)
        samplers = [rt._new_sampler(i, 0) for i in range(s.num_samplers)]
        rt.samplers = samplers
        t0 = time.time()
        host, port = _get(learners[0].address.remote(cluster.local), 120, "learner 0 address")
        _get([lrn.setup.remote(host, port, cluster.local) for lrn in learners], 600, "learner setup (DeepSpeed)")
        _get([sp.ready.remote() for sp in samplers], cfg.sampler.start_timeout_s, "sampler start (vLLM engine)")
        log(f"actors up in {time.time() - t0:.1f}s: {len(samplers)} sampler(s), {len(learners)} learner(s)")
        rt.open_bus()
        return rt

    def active(self) -> list[tuple[int, Any]]:
        """(index, handle) of the samplers that are up: not starting, not given up."""
        return [(i, sp) for i, sp in enumerate(self.samplers) if i not in self.starting and i not in self.gone]

    def _queue_of(self, index: int):
        """What sampler `index` leases from and reports to: its queue shard, or (sampler.queue_relay) the
        relay to that shard on the node of the sampler's bundle (made on first use; a replacement in the
        same bundle gets the same relay, or a new one if it died)."""
        shard = index % len(self.shards) if self.shards else 0
        queue = self.shards[shard] if self.shards else self.queue
        if not relay_enabled(self.cfg.sampler):
            return queue
        node = ray.util.placement_group_table(self.groups[1])["bundles_to_node_id"][index]
        key = (node, shard)
        relay = self.relays.get(key)
        if relay is not None:
            try:  # a relay that died (its node's samplers died with their calls) is made again
                ray.get(relay.stats.remote(), timeout=30)
                return relay
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                self.log(f"queue relay on node {node[:8]} (shard {shard}) is gone: starting a new one")
                ray.kill(relay, no_restart=True)
        relay = self.relays[key] = QueueRelay.options(
            num_cpus=0, max_restarts=0, runtime_env={"env_vars": dict(cl.BASE_ENV)},
            scheduling_strategy=cl.on_node(node)).remote(queue, f"node {node[:8]} shard {shard}")
        return relay

    def sampler_id(self, index: int) -> str:
        """The queue's name for sampler `index`: a replacement gets a new one (sampler-1.2: the second
        replacement of sampler 1), so the queue can refuse the old process for good."""
        g = self.generations.get(index, 0)
        return f"sampler-{index}" if g == 0 else f"sampler-{index}.{g}"

    def _new_sampler(self, index: int, version: int):
        s = self.cfg.sampler
        owner = owner_actor_name(self.sampler_id(index))  # readers find its payload batches by this name
        return Sampler.options(num_cpus=s.num_cpus, num_gpus=s.num_gpus * s.tensor_parallel_size,
                               runtime_env={"env_vars": dict(cl.BASE_ENV, **self.sampler_env)},
                               scheduling_strategy=cl.in_bundle(self.groups[1], index), max_restarts=0,
                               name=owner, namespace=OWNERS_NAMESPACE).remote(
            self.sampler_id(index), to_dict(self.cfg), self.model_path, self._queue_of(index), s.num_gpus > 0, version,
            self.sampler_env, owner)

    def open_bus(self) -> None:
        """The weight bus among the learner and the samplers that are up (ranks in index order)."""
        ws = self.cfg.weight_sync
        backend = bus_backend(ws.backend, self.cfg.sampler.num_gpus > 0, self.cfg.learner.num_gpus > 0, ws.colocated)
        host = ws.host
        if host == "auto":
            host = "127.0.0.1" if self.cluster.local else _get(self.learners[0].address.remote(False), 60, "address")[0]
        tp = self.cfg.sampler.tensor_parallel_size
        active = self.active()
        self.bus_world = 1 + len(active) * tp
        host, port = _get(self.learners[0].bus_open.remote(self.bus_world, host), 60, "weight bus open")
        refs = [self.learners[0].bus_connect.remote()]
        refs += [sp.join_bus.remote(host, port, 1 + j * tp, self.bus_world, backend, ws.timeout_s)
                 for j, (_, sp) in enumerate(active)]
        # every side settles first (a rank that failed at once leaves the others waiting out their
        # rendezvous): nothing is still joining when the bus is closed and opened again
        timeout = ws.timeout_s + 30
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            raise RuntimeFailure(f"weight bus connect did not finish within {timeout:.0f}s")
        ray.get(refs)  # a side that failed raises here

    def rebuild_bus(self, leaving: list[int] = ()) -> None:
        """Every sampler that is up (but those in `leaving`, which are not on it yet) leaves the bus; it is opened
        again among the samplers up now, and the current weights are sent (a new one has none yet).
        A sampler found dead on the way (it died of the same fault as one being replaced, e.g. their relay
        killed, or in between) is replaced in turn and the bus opened without it: a second death during a
        rebuild never ends the run. A failure with no sampler dead is raised."""
        failed: Optional[BaseException] = None
        for i, sp in self.active():
            if i not in leaving:
                try:
                    _get(sp.leave_bus.remote(), 60, "leave weight bus")
                except Exception as exc:  # noqa: BLE001 - a dead sampler is found below
                    failed = exc
        _get(self.learners[0].bus_close.remote(), 60, "close weight bus")
        if self._replace_dead("died while the weight bus was rebuilt", failed):
            return  # rebuilt without it, weights sent
        if not self.active():  # no sampler is up: the bus opens again when one is
            return
        try:
            self.open_bus()
        except Exception as exc:  # noqa: BLE001
            _get(self.learners[0].bus_close.remote(), 60, "close weight bus")
            self._replace_dead("died while the weight bus was opened", exc)  # or raises exc
            return
        self._broadcast(self.version)

    def _replace_dead(self, why: str, failure: Optional[BaseException]) -> bool:
        """Samplers whose process or loop is gone are replaced (which rebuilds the bus): whether any was.
        None is and `failure` is given: it is raised (a live sampler that failed is not a fault we heal)."""
        dead = self.dead_samplers(timeout_s=5.0, hung_too=False)
        if dead:
            self.replace_samplers(dead, why)
            return True
        if failure is not None:
            raise failure
        return False

    # -- verbs of the driver loop ----------------------------------------------------------------

    def start_sampling(self) -> None:
        _get([sp.start_sampling.remote() for _, sp in self.active()], 60, "start sampling")

    def wait_cohort(self, step: int, timeout_s: float, poll_s: float = 10.0):
        """The cohort of `step` (Signal.END when there is none, Signal.TIMEOUT after `timeout_s`).
        Every `poll_s` the samplers are checked; a dead one is replaced (its work goes out again)
        and the wait goes on."""
        start = time.monotonic()
        deadline, next_note = start + timeout_s, start + self.stall_note_s
        while True:
            left = deadline - time.monotonic()
            got = _get(self.queue.wait_cohort.remote(step, max(0.0, min(poll_s, left))), poll_s + 60,
                       "wait for cohort")
            if got != Signal.TIMEOUT or left <= poll_s:
                return got
            dead = self.dead_samplers()
            if dead:
                self.replace_samplers(dead, "died")
            self.poll_starting()
            if time.monotonic() >= next_note:  # a long wait is said, with who holds the work, never silent
                next_note = time.monotonic() + self.stall_note_s
                self.log(f"waiting {time.monotonic() - start:.0f}s for cohort {step}: queue {self.queue_stats()}")

    # -- fault tolerance ------------------------------------------------------------------------

    def dead_samplers(self, timeout_s: float = 30.0, hung_too: bool = True) -> list[int]:
        """Indices of samplers (that are up) that are gone, or whose loop died; with `hung_too`, also those
        that do not answer a trivial call within `timeout_s`."""
        active = self.active()
        refs = [sp.ready.remote() for _, sp in active]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        dead = []
        for (i, _), r in zip(active, refs):
            if r not in ready:
                if hung_too:
                    dead.append(i)  # not answering a trivial call: hung
                continue
            try:
                ray.get(r)
            except Exception:  # noqa: BLE001 - RayActorError, loop died
                dead.append(i)
        return dead

    def _retire(self, i: int) -> None:
        """Kill sampler i and retire its id at the queue: its leased work goes out again, anything it still
        asks for (a call in flight) gets no work, its payloads are sampled again. Killed first: a live
        culprit leasing after its release would take work down with it."""
        try:
            ray.kill(self.samplers[i], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        _get(self.queue.release_sampler.remote(self.sampler_id(i), True), 60, "release sampler")

    def replace_samplers(self, indices: list[int], why: str) -> None:
        """Kill these samplers and ask for new ones, without waiting for them: the weight bus is rebuilt at
        once among the others, which go on sampling (and get the weights), and each new one joins when it
        is up (`poll_starting`). (No indices: only rebuild the bus and resend the weights.)"""
        for i in indices:
            self.log(f"sampler-{i} {why}: replacing it; its leased work goes out again")
            self._retire(i)
            self.generations[i] = self.generations.get(i, 0) + 1
            self.samplers[i] = self._new_sampler(i, self.version)
            self.starting[i] = (self.samplers[i].ready.remote(), time.monotonic())
        self.replaced += len(indices)
        self.rebuild_bus()  # among the others (the new ones are starting, not on it)
        if not self.active():  # nothing else samples: wait here for the new ones (the stall note says so)
            self.log(f"no sampler is up: waiting for {len(self.starting)} replacement(s) to start")
            deadline = time.monotonic() + self.cfg.sampler.start_timeout_s
            while self.starting and not self.active() and time.monotonic() < deadline:
                self.poll_starting(wait_s=min(5.0, max(0.0, deadline - time.monotonic())))
            self.poll_starting()  # past the deadline: the ones still starting are given up
            if not self.active():
                raise RuntimeFailure(f"no sampler could be started within sampler.start_timeout_s = "
                                     f"{self.cfg.sampler.start_timeout_s:g}s: the run cannot go on")

    def poll_starting(self, wait_s: float = 0.0) -> list[int]:
        """Replacements that are up join: the bus is rebuilt with them, they get the current weights and
        start sampling. One that failed to start, or is not up within sampler.start_timeout_s (no free
        resources), is given up with a warning: the run goes on with fewer samplers. The indices joined."""
        if not self.starting:
            return []
        refs = [ref for ref, _ in self.starting.values()]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        joined = []
        for i, (ref, asked) in list(self.starting.items()):
            why = None
            if ref in done:
                try:
                    ray.get(ref)
                    joined.append(i)
                    self.log(f"{self.sampler_id(i)} is up after {time.monotonic() - asked:.0f}s: it joins the weight bus")
                except Exception as exc:  # noqa: BLE001 - it died starting
                    why = f"it failed to start ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
            elif time.monotonic() - asked > self.cfg.sampler.start_timeout_s:
                why = (f"it was not up within sampler.start_timeout_s = {self.cfg.sampler.start_timeout_s:g}s "
                       "(no free resources for it?)")
            if why:
                del self.starting[i]
                self.gone.add(i)
                self._retire(i)
                self.log(f"WARNING: {self.sampler_id(i)} could not be replaced: {why}; the run goes on with "
                         f"{len(self.active())} sampler(s) of {len(self.samplers)}")
        if joined:
            for i in joined:
                del self.starting[i]
            self.rebuild_bus(leaving=joined)  # the new ones are not on the old bus
            _get([self.samplers[i].start_sampling.remote() for i in joined], 60, "start sampling")
        return joined

    def train(self, cohort, step: int) -> dict:
        shares = learner_shares(cohort.groups, len(self.learners), self.cfg.learner.mini_batches)
        if any(share_batches(share) for share in shares):  # payloads off the queue: learners fetch them first
            lost = _get([lrn.stage.remote(share) for lrn, share in zip(self.learners, shares)], 900,
                        "learner payload fetch")
            if any(lost):
                raise CohortPayloadsLost([o for owners in lost for o in owners])
            shares = [None] * len(self.learners)
        outs = _get([lrn.train_step.remote(share, step) for lrn, share in zip(self.learners, shares)], 3600,
                    "learner step")
        merged: dict[str, float] = {}
        total = sum(max(o.get("tokens", 0.0), 1.0) for o in outs)
        for o in outs:
            w = max(o.get("tokens", 0.0), 1.0) / total
            for k, v in o.items():
                if k in ("nonfinite_minibatches", "nonfinite_streak", "train_seconds", "tokens"):
                    merged[k] = max(merged.get(k, 0.0), v) if k != "tokens" else merged.get(k, 0.0) + v
                else:
                    merged[k] = merged.get(k, 0.0) + w * v
        return merged

    def return_cohort(self, cohort, owners: list[str]) -> int:
        """The cohort could not be trained (payloads of `owners` lost): back to the queue, those prompts
        sampled again; samplers that died are replaced. Prompts restarted."""
        n = _get(self.queue.return_cohort.remote(cohort, list(owners)), 60, "return cohort")
        dead = self.dead_samplers()
        if dead:
            self.replace_samplers(dead, "died (its payloads were lost)")
        return n

    def _broadcast(self, version: int) -> dict:
        """One update: the meta to every sampler (one call each), the tensors over the bus. A sampler
        that fails or does not finish in time is named, replaced, and the update is redone."""
        meta = _get(self.learners[0].weight_meta.remote(version), 120, "weight meta")
        active = self.active()
        recv = [sp.update_weights.remote(meta) for _, sp in active]
        senders = self.learners if self.cfg.learner.zero_stage == 3 else self.learners[:1]
        send = [lrn.bus_send.remote(meta) for lrn in senders]
        timeout = self.cfg.weight_sync.timeout_s + 30
        ready, _ = ray.wait(send + recv, num_returns=len(send + recv), timeout=timeout)
        failed = []
        for (i, _), r in zip(active, recv):
            try:
                if r not in ready:
                    raise TimeoutError(f"no answer within {timeout:.0f}s")
                ray.get(r)
            except Exception as exc:  # noqa: BLE001
                failed.append((i, exc))
        if failed:
            names = ", ".join(f"sampler-{i} ({type(e).__name__}: {str(e).splitlines()[0][:120]})" for i, e in failed)
            self.log(f"weight broadcast of version {version} failed for {names}")
            for r in send:  # let the sender's collective finish or time out before rebuilding
                try:
                    ray.get(r, timeout=timeout)
                except Exception:  # noqa: BLE001
                    pass
            # the culprits: samplers that are gone or did not answer; the others saw the collective
            # break under them and only need the rebuilt bus
            dead = set(self.dead_samplers())
            culprits = sorted(dead | {i for i, e in failed if isinstance(e, TimeoutError)})
            for i, _ in failed:
                if i not in culprits:
                    _get(self.queue.release_sampler.remote(self.sampler_id(i)), 60, "release sampler")
            self.replace_samplers(culprits, "failed the weight broadcast")  # rebuilds the bus, redoes the update
            return {"bytes": 0, "seconds": float("nan")}
        return ray.get(send[0])

    def sync_weights(self, version: int) -> dict:
        """Broadcast the learner's weights as `version` to every sampler, then tell the queue (replacements
        that are up join first)."""
        self.poll_starting()
        # a sampler that died since the last update would hang the collective until weight_sync.timeout_s
        # (and break it under the others): one trivial call each first, and the dead are replaced
        dead = self.dead_samplers(timeout_s=5.0, hung_too=False)
        if dead:
            self.replace_samplers(dead, "died")
        t0 = time.perf_counter()
        self.version = version
        stats = self._broadcast(version)
        seconds = time.perf_counter() - t0
        _get(self.queue.set_version.remote(version), 60, "queue version")
        mb = stats.get("bytes", 0) / 1e6
        return {"sync/seconds": seconds, "sync/send_seconds": stats.get("seconds", 0.0), "sync/mb": mb,
                "sync/mb_per_s": mb / max(stats.get("seconds", 1e-9), 1e-9)}

    def evaluate(self, prompts: list, k: int, temperature: float, seed: int, max_tokens: Optional[int] = None):
        """k samples per prompt, prompts spread over the samplers; same seeds as ada_ray.evaluate."""
        from ada_ray.evaluate import summarize

        active = [sp for _, sp in self.active()]
        n = len(active)
        per = (len(prompts) + n - 1) // n
        refs = []
        for i, sp in enumerate(active):
            chunk = prompts[i * per:(i + 1) * per]
            refs.append(sp.evaluate.remote([list(p.token_ids) for p in chunk], [p.answer for p in chunk], k,
                                           temperature, seed, max_tokens, i * per))
        outs = _get(refs, 3600, "evaluation")
        correct = [c for o in outs for c in o["correct"]]
        return summarize([p.difficulty for p in prompts], correct, k, sum(o["errors"] for o in outs))

    # -- checkpoints ------------------------------------------------------------------------------

    def check_shared_dir(self, location: str) -> None:
        """Every learner writes a probe into the run's storage location (a folder or a URI) and the
        driver reads it back; refuse to start when a learner cannot write there or the driver cannot
        see what it wrote (a folder not on a disk they share, a URI a node cannot reach)."""
        probe = storage.join(location, ".write_probe")
        storage.delete(probe)
        answers = _get([lrn.write_probe.remote(probe) for lrn in self.learners], 120, "learner write probe")
        problems = probe_problems(probe, answers)
        storage.delete(probe)
        if problems:
            raise cl.ResourceError(not_shared(location, ray.util.get_node_ip_address(), problems))

    def save_learners(self, directory: Optional[str], tag: str, hf_dir: str, tokenizer_from: str) -> None:
        """Every rank saves its DeepSpeed state (none when `directory` is None) and takes part in
        gathering (ZeRO-3); rank 0 writes HF. Folders or URIs: at a URI each learner uploads its own part."""
        _get([lrn.save_checkpoint.remote(directory, tag, hf_dir, tokenizer_from) for lrn in self.learners], 1800,
             "learner checkpoint")

    def load_learners(self, directory: str, tag: str) -> int:
        versions = _get([lrn.load_checkpoint.remote(directory, tag) for lrn in self.learners], 1800,
                        "learner checkpoint load")
        return versions[0]

    def queue_state(self) -> dict:
        return _get(self.queue.state_dict.remote(), 300, "queue state")

    def load_queue(self, state: dict) -> None:
        shard_states(state, self.cfg.trainer.queue_shards)  # saved with another trainer.queue_shards: a clear error
        _get(self.queue.load_state_dict.remote(state), 300, "queue restore")

    def sampler_stats(self) -> list[dict]:
        """Per sampler slot; one that is starting or given up reports its last figures."""
        active = self.active()
        for (i, _), st in zip(active, _get([sp.stats.remote() for _, sp in active], 60, "sampler stats")):
            self.last_stats[i] = st
        zero = {"busy_s": 0.0, "idle_s": 0.0, "update_s": 0.0, "tokens": 0, "samples": 0, "version": -1}
        return [self.last_stats.get(i, zero) for i in range(len(self.samplers))]

    def queue_stats(self) -> dict:
        return _get(self.queue.stats.remote(), 60, "queue stats")

    def shutdown(self) -> dict:
        """Stop everything; returns the queue's final accounting."""
        accounting: dict = {}
        try:
            accounting = _get(self.queue.stop.remote(), 60, "queue stop")
        finally:
            for _, sp in self.active():
                try:
                    ray.get(sp.stop.remote(), timeout=60)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
            queues = [self.queue] + [q for q in self.shards if q is not self.queue]
            for a in self.samplers + self.learners + queues + list(self.relays.values()):
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
            for pg in {id(pg): pg for pg in self.groups}.values():  # colocated: one group, listed twice
                try:
                    ray.util.remove_placement_group(pg)
                except Exception:  # noqa: BLE001
                    pass
        return accounting


def _get(refs, timeout_s: float, what: str):
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RuntimeFailure(f"{what} did not finish within {timeout_s:.0f}s") from None
