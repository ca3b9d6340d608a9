"""Production-side constants of the staging formats (docs/contract.md s3-s4).

``megamoe`` never imports ``oracle`` (the oracle is the independent reference), so
the few numbers the staging kernels and the Torch path need are defined here,
once for ``megamoe``; the host tests check them against ``oracle.formats``.
"""

from __future__ import annotations

E4M3_MAX = 448.0
E5M2_MAX = 57344.0
E2M1_MAX = 6.0
E4M3_TINY = 2.0**-6  # smallest normal E4M3: the NVFP4 scale floor
MX_BLOCK = 32
NVFP4_BLOCK = 16
SCALE_COLUMN_MULTIPLE = 4
E8M0_BIAS = 127
E8M0_NAN = 0xFF
E8M0_MIN_EXP = -127
E8M0_MAX_EXP = 127
FP8_NAN_BYTE = 0x7F  # the one NaN byte written for E4M3 and E5M2 payloads (and NVFP4 scales)
MX_EMAX_ELEM = {"e4m3": 8, "e5m2": 15}
MX_FMAX = {"e4m3": E4M3_MAX, "e5m2": E5M2_MAX}
FLT_MAX = 3.4028234663852886e38
SAFE_FP8_FMAX = 448.0
SAFE_FP8_TINY = 448e-30
SAFE_FP8_SAFE_MIN = 1.3165537626040637e-36
SAFE_FP8_ZERO_SCALE = 1e-30
SAFE_FP8_WIRE_LANES = 4

MASKED_ID = -1

# Route rule names (docs/contract.md s2), in the order used to pick the first violation of a slot
# (sorted by name, as ``oracle.routing.find_route_violations`` sorts them).
RULE_DUPLICATE_ID = "duplicate_id"
RULE_ID_OUT_OF_RANGE = "id_out_of_range"
RULE_NON_FINITE_SCORE = "non_finite_score"
RULE_NON_FINITE_INPUT = "non_finite_input"
ROUTE_RULES = (RULE_DUPLICATE_ID, RULE_ID_OUT_OF_RANGE, RULE_NON_FINITE_SCORE)
RULES_PER_SLOT = 4
"""Row status code of slot ``k``, rule index ``j`` (``ROUTE_RULES``): ``k * 4 + j + 1``; 0 = good.

A non-finite safe-FP8 input row with an active slot has code ``ROW_CODE_NON_FINITE_INPUT``
(larger than every slot code, so a route violation of the same row is reported first); a row
with no active slot is never consumed and fails nothing (docs/contract.md
s4.safe-fp8-inactive-row)."""
ROW_CODE_NON_FINITE_INPUT = 1 << 20
