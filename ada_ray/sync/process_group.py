"""A standalone process group (gloo or NCCL) built from a TCPStore.

It never touches torch.distributed's default group, which belongs to the learners' DeepSpeed
engine. The store's listening socket is bound by us to the configured host (127.0.0.1 on one
machine) and handed to TCPStore, and gloo's pair sockets use a device bound to the same host, so
nothing listens on other interfaces.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Optional

import torch.distributed as dist


def bound_listen_socket(host: str, port: int = 0) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one). Raises OSError if the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot bind the weight bus store to {host}:{port}: {exc}") from None
    sock.listen(128)
    return sock


def make_store(host: str, port: int, world_size: int, is_master: bool, timeout_s: float,
               listen_socket: Optional[socket.socket] = None) -> dist.TCPStore:
    timeout = timedelta(seconds=timeout_s)
    if is_master:
        if listen_socket is None:
            raise ValueError("the master store needs a bound listen socket")
        return dist.TCPStore(host, port, world_size, True, timeout, wait_for_workers=False,
                             master_listen_fd=listen_socket.fileno(), use_libuv=True)
    return dist.TCPStore(host, port, world_size, False, timeout)


def make_group(store: dist.Store, rank: int, world_size: int, backend: str, host: str, timeout_s: float,
               device=None):
    """A process group of `world_size` ranks over `store`, not registered as the default group."""
    prefixed = dist.PrefixStore(f"ada_ray_bus/{backend}", store)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timedelta(seconds=timeout_s)
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        return dist.ProcessGroupGloo(prefixed, rank, world_size, opts)
    if backend == "nccl":
        import torch

        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timedelta(seconds=timeout_s)
        pg = dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
        if device is not None:
            torch.cuda.set_device(device)
        return pg
    raise ValueError(f"unknown weight bus backend {backend!r}: expected gloo or nccl")


def bus_backend(requested: str, sampler_gpu: bool, learner_gpu: bool, colocated: bool = False) -> str:
    """The weight bus backend: NCCL when asked for, or on auto when both sides have GPUs and do not
    share them; gloo otherwise (CPU, or a colocated sampler and learner on one GPU)."""
    if requested == "nccl":
        return "nccl"
    if requested == "auto" and sampler_gpu and learner_gpu and not colocated:
        return "nccl"
    return "gloo"
