"""Where the scheduler gets its prompts from.

A `PromptSource` gives every prompt id in dataset order, says whether it holds an id, and gives the
whole prompt (token ids, answer) for an id when the scheduler admits it into a cohort. The scheduler
keeps per prompt only its id and its difficulty memory; token ids stay in the source. A list of
Prompts (`InMemoryPrompts`) is one source; the prompt table file a training set is streamed into
(`ada_ray.data.prompt_table.PromptTable`, memory-mapped) is the other, which keeps a million prompts'
token ids out of the PromptQueue's memory.
"""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence, Union, runtime_checkable

from ada_ray.algo.types import Prompt


@runtime_checkable
class PromptSource(Protocol):
    def __len__(self) -> int: ...

    def __contains__(self, prompt_id: object) -> bool: ...

    def ids(self) -> list[str]:
        """Every prompt id, in dataset order."""
        ...

    def get(self, prompt_id: str) -> Prompt: ...

    def get_many(self, prompt_ids: Sequence[str]) -> list[Prompt]:
        """`get` of each id, in order (a source may read them in one go)."""
        ...

    def priors(self) -> Iterator[tuple[str, float]]:
        """(prompt id, offline pass rate) of every prompt that has one."""
        ...


class InMemoryPrompts:
    """A PromptSource over a list of Prompts (tests, small training sets)."""

    def __init__(self, prompts: Sequence[Prompt]):
        self.by_id = {p.prompt_id: p for p in prompts}
        if len(self.by_id) != len(prompts):
            raise ValueError("duplicate prompt ids in the training set")

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, prompt_id: object) -> bool:
        return prompt_id in self.by_id

    def ids(self) -> list[str]:
        return list(self.by_id)

    def get(self, prompt_id: str) -> Prompt:
        return self.by_id[prompt_id]

    def get_many(self, prompt_ids: Sequence[str]) -> list[Prompt]:
        return [self.by_id[pid] for pid in prompt_ids]

    def priors(self) -> Iterator[tuple[str, float]]:
        return ((p.prompt_id, p.prior_pass_rate) for p in self.by_id.values() if p.prior_pass_rate is not None)


def as_source(prompts: Union[PromptSource, Sequence[Prompt]]) -> PromptSource:
    """A list or tuple of Prompts becomes an InMemoryPrompts; a PromptSource is used as it is."""
    if isinstance(prompts, (list, tuple)):
        return InMemoryPrompts(prompts)
    if not isinstance(prompts, PromptSource):
        raise TypeError(f"prompts must be a list of Prompts or a PromptSource, got {type(prompts).__name__}")
    return prompts
