"""Names a package resolves on first use (PEP 562): one `attach` for `minijit` and `minijit.einsum`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def attach(
    package: str, namespace: dict[str, Any], lazy: Mapping[str, str], submodules: frozenset[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose globals are ``namespace``: a public name of
    ``lazy`` (name -> module) from its module, or a submodule of ``submodules``, imported when first
    asked for and then kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is not None:
            value = getattr(import_module(module), name)
        elif name in submodules:
            value = import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())) | submodules)

    return __getattr__, __dir__
