"""The ops' errors as the Python API raises them, in every build.

The stable-ABI build (torch-ext/stable/) cannot raise a TypeError: nothing thrown through the
LibTorch stable ABI becomes one, so its type errors (a dtype, a layout) arrive as RuntimeErrors
with the same text. Torch 2.13 and 2.14 hand its value errors (std::invalid_argument) to Python
as ValueErrors; torch 2.15 turns every exception of a stable kernel into a RuntimeError with
the same text. So the text tells them apart: only the type checks say "must have ... dtype" or
"must be a dense (strided) tensor". The versioned build (versioned/, ATen) raises TypeErrors
and ValueErrors itself; nothing here changes them.

An op names itself in its messages ("spec_verify.accept: ..."); called with its uniforms given,
it is a *_with_uniforms function, and the messages name that ("spec_verify.accept_with_uniforms:
..."): `api_error` renames them.
"""
from __future__ import annotations

import re
from typing import Optional

# The type errors of the ops (SV_CHECK_TYPE in torch-ext/common/checks.cpp: a dtype or a layout).
_TYPE_ERROR = re.compile(r"^spec_verify\.\w+: \w+ must (have (an integer|a real \(not bool\)) dtype, got |"
                         r"have dtype \S+(, \S+)*( or \S+)?, got |be a dense \(strided\) tensor, got layout )")


def api_error(e: BaseException, op: Optional[str] = None) -> Optional[BaseException]:
    """The exception the Python API raises for an op's exception `e`, or None to raise `e` as it
    is. `op`: the op's name, when the call gave its uniforms (then messages name
    `<op>_with_uniforms`)."""
    message = str(e)
    renamed = op is not None and message.startswith(f"spec_verify.{op}:")
    if renamed:
        message = f"spec_verify.{op}_with_uniforms:" + message[len(f"spec_verify.{op}:"):]
    if type(e) is RuntimeError and message.startswith(("spec_verify.", "spec_verify:")):
        return (TypeError if _TYPE_ERROR.match(message) else ValueError)(message)
    if renamed and isinstance(e, (ValueError, TypeError)):
        return type(e)(message)
    return None


def typed(fn):
    """`fn` (an op) with its errors as the Python API raises them (`api_error`); calling an op of
    `ops` directly shows the stable build's RuntimeErrors."""
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            error = api_error(e)
            if error is None:
                raise
            raise error from None
    call.__name__ = getattr(fn, "__name__", "op")
    call.__wrapped__ = fn
    return call
