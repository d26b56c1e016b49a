"""`Operation`: the protocol every compiled operation of minijit implements.

    op = SomeOperation(...)      # TensorOperation, EinsumPlan, SpMM, or a target's subclass of them
    op.setup(...)                # where the operation is configured after construction
    op.execute(...)              # run it (any number of times, from any thread)
    op.listing()                 # what runs, as text
    op.flops                     # floating-point operations of one call (2 per multiply-add)
    op.info()                    # a dict: target, dtype, shapes, kernel family, ...

A public class (`minijit.TensorOperation`, `minijit.EinsumPlan`, `minijit.sparse.SpMM`) keeps
its constructor: its ``_implementation`` classmethod asks the arguments' target object for the
subclass that serves it (`minijit.targets.Target.operation_class`, the registry; e.g.
``TensorOperation(target="cuda")`` builds a `minijit.cuda.CudaTensorOperation`), so
``isinstance(op, TensorOperation)`` holds for every target and each subclass carries only its own
target's attributes.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

__all__ = ["Operation", "OperationMeta"]


class OperationMeta(ABCMeta):
    """Construction through the public class: ``Public(*args, **kwargs)`` asks
    ``Public._implementation(*args, **kwargs)`` (when ``Public`` itself defines it) for
    ``(subclass, args, kwargs)`` and builds that subclass from those arguments (its ``__init__``
    runs once, with the arguments it takes)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        pick = cls.__dict__.get("_implementation")
        if pick is not None:
            impl, args, kwargs = pick.__get__(None, cls)(*args, **kwargs)
            if impl is not cls:
                if not issubclass(impl, cls):
                    raise TypeError(f"{cls.__name__}._implementation returned {impl.__name__}, not a subclass")
                return impl(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class Operation(metaclass=OperationMeta):
    """The protocol: ``setup``, ``execute``, ``listing``, ``flops`` and ``info``."""

    @abstractmethod
    def setup(self, *args: Any, **kwargs: Any) -> Any:
        """Configure the operation (operations configured by their constructor accept no
        arguments and return None)."""

    @abstractmethod
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run the operation on arrays (see each implementation for the operands)."""

    @abstractmethod
    def listing(self) -> str:
        """What runs, as text (the plan tree, kernels or nodes)."""

    @property
    @abstractmethod
    def flops(self) -> int:
        """Floating-point operations of one call (2 per multiply-add); 0 before setup."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """A summary as a dict; at least ``target``, ``dtype``, ``shapes`` and ``kernel``."""


class Absent:
    """A member that a subclass does not have: reading it raises AttributeError naming it."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def __get__(self, obj: object, owner: type | None = None) -> object:
        raise AttributeError(f"{self.name}: {self.reason}")


def absent(cls: type, names: list[str] | tuple[str, ...], reason: str) -> None:
    """Hide the inherited members ``names`` on ``cls`` (`Absent`: ``hasattr`` is then False)."""
    for name in names:
        setattr(cls, name, Absent(name, reason))
