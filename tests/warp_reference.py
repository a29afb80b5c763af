"""The warp of DESIGN.md ("Warping") in float64, the oracle the tests hold the logits ops to:
one reference, spec_verify.testing.warp (torch-ext/spec_verify/testing/warp.py), shared with
the conformance suite, loaded from the source tree by tests/law.py. See that module for the
definition and for `margin` and `CLEAR`."""
from __future__ import annotations

from law import testing

_warp = testing.warp
CLEAR = _warp.CLEAR
Warped = _warp.Warped
_mass_strictly_greater = _warp._mass_strictly_greater
warp_row = _warp.warp_row
warp = _warp.warp
sample_index = _warp.sample_index
accept_reference = _warp.accept_reference
