"""The warping parameters as one value: `Warping`, checked where it is built and nowhere
else in Python (the ops keep their own guard for direct callers of `sv.ops`).

Every public function that takes `temperature`, `top_k`, `top_p` and `min_p` builds one
`Warping` from them, naming itself in the messages; a decoder builds its own once, at
construction, and hands it down to the ops' wrappers, which unpack it into the op's
arguments at the call (`*warping`: the fields are in the ops' argument order).

To add a warping parameter: a field here and its check in `Warping.__new__`; the op schemas
and the kernels (DESIGN.md, "To change a rule, touch these"); the keyword in the public
signatures that take the others.
"""
from __future__ import annotations

from typing import NamedTuple

from ._api import _INT64_MAX, _float, _index

_F32_MAX = 3.4028234663852886e38  # the largest finite float32: a temperature is used as one


class _Fields(NamedTuple):
    temperature: float
    top_k: int
    top_p: float
    min_p: float


class Warping(_Fields):
    """The warping parameters (DESIGN.md, "Warping (logits in)"), checked: a named tuple of
    `(temperature, top_k, top_p, min_p)` in the ops' argument order.

    Args:
        temperature (`float`, *optional*, defaults to 1.0): >= 0 and finite in float32; 0 =
            greedy.
        top_k (`int`, *optional*, defaults to 0): >= 0; 0 = off.
        top_p (`float`, *optional*, defaults to 1.0): in (0, 1]; 1 = off.
        min_p (`float`, *optional*, defaults to 0.0): in [0, 1); 0 = off.
        what (`str`, *optional*, defaults to `"Warping"`): who is asking, the prefix of the
            messages ("spec_verify.warp", "SpeculativeDecoder.from_logits").

    NumPy scalars and 0-d tensors are numbers; a bool is not. The values are kept as Python
    floats and an int.

    Raises:
        TypeError: a parameter of the wrong type, e.g. "{what}: temperature must be a float,
            got bool".
        ValueError: a parameter out of range, e.g. "{what}: top_p must be a float in (0, 1]
            (1 = off), got 0.0".
    """

    __slots__ = ()

    def __new__(cls, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, *, what: str = "Warping") -> "Warping":
        # The common case (Python numbers in range) costs a few type and range tests.
        if not (type(temperature) is float and type(top_k) is int and type(top_p) is float
                and type(min_p) is float and 0.0 <= temperature <= _F32_MAX and 0 <= top_k <= _INT64_MAX
                and 0.0 < top_p <= 1.0 and 0.0 <= min_p < 1.0):
            temperature = _float(temperature, f"{what}: temperature")
            top_k = _index(top_k, f"{what}: top_k")
            top_p = _float(top_p, f"{what}: top_p")
            min_p = _float(min_p, f"{what}: min_p")
            if not 0.0 <= temperature <= _F32_MAX:
                raise ValueError(f"{what}: temperature must be a float >= 0 (0 = greedy), finite in float32, "
                                 f"got {temperature}")
            if not 0 <= top_k <= _INT64_MAX:
                raise ValueError(f"{what}: top_k must be an int >= 0 (0 = off), got {top_k}")
            if not 0.0 < top_p <= 1.0:
                raise ValueError(f"{what}: top_p must be a float in (0, 1] (1 = off), got {top_p}")
            if not 0.0 <= min_p < 1.0:
                raise ValueError(f"{what}: min_p must be a float in [0, 1) (0 = off), got {min_p}")
        return tuple.__new__(cls, (temperature, top_k, top_p, min_p))

    @classmethod
    def _make(cls, iterable) -> "Warping":
        return cls(*iterable)  # checked, as every other way of making one

    def _replace(self, **changes) -> "Warping":
        return type(self)(**{**self._asdict(), **changes})

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, nothing drawn."""
        return self.temperature == 0.0

    def __str__(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self._asdict().items())
