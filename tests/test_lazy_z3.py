"""import lazygraph leaves z3 out (it is loaded when a user rule is proven), and the public names still work."""

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.strip()


def test_import_and_first_call_leave_z3_out() -> None:
    code = (
        "import sys, numpy as np, lazygraph as lg\n"
        "a = lg.asarray(np.arange(12.0).reshape(3, 4))\n"
        "r = ((a * 2 + 1).sum()).numpy()\n"
        "assert float(r) == float((np.arange(12.0) * 2 + 1).sum()), r\n"
        "print('z3' in sys.modules, 'optimizer.superopt.verify' in sys.modules)\n"
    )
    assert _run(code) == "False False"


def test_rule_refused_resolves_lazily() -> None:
    code = (
        "import sys, lazygraph as lg\n"
        "from optimizer.superopt.user import RuleRefused as R\n"
        "from lazygraph.superopt import RuleRefused\n"
        "print(lg.superopt.RuleRefused is R and RuleRefused is R, 'z3' in sys.modules)\n"
    )
    assert _run(code) == "True True"


def test_unknown_attribute_still_raises() -> None:
    import lazygraph.superopt as so

    with pytest.raises(AttributeError):
        so.no_such_name  # noqa: B018
