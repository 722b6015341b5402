"""vLLM worker extension: the sampler side of the WeightBus, inside vLLM's worker.

vLLM mixes this class into its worker (``worker_extension_cls``); the sampler calls the methods by
name through ``collective_rpc`` - no pickled callables, so VLLM_ALLOW_INSECURE_SERIALIZATION stays
off. Each worker joins the bus as rank ``base_rank + self.rank`` (tensor-parallel workers are
separate bus ranks) and loads the broadcast weights by parameter name with vLLM's in-place
``reload_weights``, streaming bucket after bucket.

Tied parameters (e.g. ``lm_head.weight`` is ``embed_tokens.weight`` with tie_word_embeddings) are
recorded when the worker joins the bus and re-tied after every reload: vLLM's layer-wise reload
restores a layer it got no tensor for (the tied head) from its old kernel tensors and does not
redo its post-load processing (on CPU: the packed GEMM), which would leave the head on the old
weights.
"""

from __future__ import annotations



def _tied_parameters(model) -> list[tuple[str, str, str, str]]:
    """(module, name, source module, source name) for every parameter registered twice."""
    first: dict[int, tuple[str, str]] = {}
    ties = []
    for mod_name, mod in model.named_modules():
        for p_name, p in mod.named_parameters(recurse=False):
            if id(p) in first:
                ties.append((mod_name, p_name) + first[id(p)])
            else:
                first[id(p)] = (mod_name, p_name)
    return ties


def _retie(model, ties) -> None:
    """Point tied parameters at their source again and redo the layer's post-load processing
    (on CPU that re-creates the packed GEMM the head uses; a no-op for unquantized GPU layers)."""
    for mod_name, p_name, src_mod, src_name in ties:
        mod = model.get_submodule(mod_name)
        setattr(mod, p_name, getattr(model.get_submodule(src_mod), src_name))
        method = getattr(mod, "quant_method", None)
        if method is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(mod)



class WeightBusWorkerExtension:
    def ada_join_bus(self, host: str, port: int, base_rank: int, world_size: int, backend: str,
                     timeout_s: float) -> int:
        from ada_ray.sync.weight_bus import WeightBusReceiver

        rank = base_rank + int(getattr(self, "rank", 0))
        device = str(getattr(self, "device", "cpu")) if backend == "nccl" else "cpu"
        self._ada_bus = WeightBusReceiver(host, port, rank, world_size, backend, timeout_s, device)
        self._ada_bus.connect()
        self._ada_version = -1
        self._ada_ties = _tied_parameters(self.model_runner.get_model())
        return rank

    def ada_receive_weights(self, meta: dict) -> int:
        bus = getattr(self, "_ada_bus", None)
        if bus is None:
            raise RuntimeError("ada_receive_weights before ada_join_bus")
        self.reload_weights(weights_iterator=bus.receive(meta), is_checkpoint_format=True)
        _retie(self.model_runner.get_model(), getattr(self, "_ada_ties", []))
        self._ada_version = int(meta["version"])
        return self._ada_version

    def ada_leave_bus(self) -> None:
        bus = getattr(self, "_ada_bus", None)
        if bus is not None:
            bus.close()
        self._ada_bus = None

    def ada_weight_checksum(self) -> float:
        """Sum of all parameters (tests: did the weights change?)."""
        import torch

        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model_runner.get_model().parameters()))
