"""Restricted mode (RestrictedPython inside gVisor): SECURITY.md R1-R12, and the Northwind example unchanged.

gVisor is the boundary; restricted mode is defense in depth. Each R snippet runs
twice: in a plain sandboxed kernel it must succeed (so the case is a real escape,
not a typo), and in restricted mode it must fail with the reason of the guard
meant to stop it: refused by the host's compile check before the cell runs
(status `rejected`, nothing sent to the kernel) or stopped at run time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cellgate.kernel.restricted import check

ROOT = Path(__file__).resolve().parents[2]
NORTHWIND = ROOT / "examples" / "northwind"
COUNTED = ROOT / "tests" / "tools" / "counted.py"

COMPILE = "RestrictedCompileError"
NOT_IMPORTABLE = r"import of '{}' is not allowed in restricted mode"

# Each escape: the snippet (which succeeds in a plain kernel: the baseline proves the case is real),
# and the exception name and message pattern the guard that stops it must give in restricted mode.
ESCAPES: dict[str, tuple[str, str, str]] = {
    "R1 subclasses walk": (
        "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0](['true']).wait()",
        COMPILE, r'"__subclasses__" is an invalid attribute name'),
    "R2 generator frame walk": (
        "def g():\n    yield getattr(getattr(gen, 'gi_frame'), 'f_back')\ngen = g()\nleak = next(gen)\n"
        "getattr(leak, 'f_builtins').get('__import__')('os')",
        "AttributeError", r'"gi_frame" is a restricted name'),
    "R3 format traversal": ("'{0.__class__.__mro__[1]}'.format(1)",
                            "NotImplementedError", r"format\*\(\) methods of `str` is not safe"),
    "R3 format_map traversal": ("str.format_map('{a.__dict__}', {'a': str})",
                                "NotImplementedError", r"format\*\(\) methods of `str` is not safe"),
    "R3 Formatter.get_field": ("import string\nstring.Formatter().get_field('0.__class__', (1,), {})",
                               "ImportError", NOT_IMPORTABLE.format("string")),
    "R3 format through a callable's globals": ("import json\n'{0.__globals__[codecs]}'.format(json.dumps)",
                                               "NotImplementedError", r"format\*\(\) methods of `str` is not safe"),
    "R4 AttributeError.obj": (
        "import datetime\ntry:\n    datetime.nope\nexcept AttributeError as e:\n    m = e.obj\n"
        "    assert m is not None, 'AttributeError.obj is empty'\n    m.sys.modules['os']",
        "AssertionError", r"^AttributeError\.obj is empty$"),
    "R5 try/except*": ("try:\n    pass\nexcept* ValueError:\n    pass", COMPILE, r"TryStar statements are not allowed"),
    "R6 guard shadowing, def": ("def f(_getattr_=None, /): pass", COMPILE, r'"_getattr_" is an invalid variable name'),
    "R6 guard shadowing, lambda": ("f = lambda _getitem_, /: None", COMPILE, r'"_getitem_" is an invalid variable name'),
    "R7 traceback frame walk": ("try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_back.f_globals",
                                COMPILE, r'"f_globals" is a restricted name'),
    "R7 traceback via getattr": (
        "try:\n    1/0\nexcept Exception as e:\n    getattr(getattr(e, '__traceback__'), 'tb_frame').f_globals",
        COMPILE, r'"f_globals" is a restricted name'),
    "R7 sys._getframe": ("import sys\nsys._getframe().f_builtins['__import__']('os')",
                         COMPILE, r'"f_builtins" is a restricted name'),
    "R8 random._os": ("import random\nrandom._os.getpid()", COMPILE, r'"_os" is an invalid attribute name'),
    "R8 module graph": ("import json\njson.decoder.re.enum.sys.modules['os']",
                        "AttributeError", r"module 'enum' is not reachable in restricted mode"),
    "R8 indirect getattr": ("import datetime\nlist(map(getattr, [datetime], ['sys']))[0].modules['os']",
                            "AttributeError", r"module 'sys' is not reachable in restricted mode"),
    "R8 warnings.sys": ("import warnings\nwarnings.sys", "ImportError", NOT_IMPORTABLE.format("warnings")),
    "R9 ctypes": ("import ctypes", "ImportError", NOT_IMPORTABLE.format("ctypes")),
    "R9 _ctypes": ("import _ctypes", COMPILE, r'"_ctypes" is an invalid variable name'),
    "R9 gc": ("import gc\nheap = gc.get_objects()", "ImportError", NOT_IMPORTABLE.format("gc")),
    "R9 inspect": ("import inspect", "ImportError", NOT_IMPORTABLE.format("inspect")),
    "R9 code": ("import code", "ImportError", NOT_IMPORTABLE.format("code")),
    "R9 __import__": ("__import__('o' + 's')", COMPILE, r'"__import__" is an invalid variable name'),
    "R9 importlib": ("import importlib\nimportlib.import_module('os')", "ImportError", NOT_IMPORTABLE.format("importlib")),
    "R9 breakpoint": ("hook = breakpoint", COMPILE, r'"breakpoint" is a reserved name'),
    "R10 __code__ swap": ("def f(): pass\ndef g(): pass\nf.__code__ = g.__code__", COMPILE,
                          r'"__code__" is an invalid attribute name'),
    "R10 augmented dunder": ("def f(): pass\nf.__doc__ = ''\nf.__doc__ += 'x'", COMPILE,
                             r'"__doc__" is an invalid attribute name'),
    "R10 setattr": ("def f(): pass\ndef g(): pass\nsetattr(f, '__code__', g.__code__)", COMPILE,
                    r'"__code__" is an invalid attribute name'),
    "R10 hasattr probe": ("def f(): pass\nassert hasattr(f, '__globals__'), 'hasattr saw nothing'",
                          "AssertionError", r"^hasattr saw nothing$"),
    "R11 getattr on builtins": ("getattr(__builtins__, 'ev' + 'al')", COMPILE, r'"__builtins__" is an invalid variable name'),
    "R11 fullwidth eval": ("ｅｖａｌ('1')", COMPILE, r"Eval calls are not allowed"),
    "R11 exec of built text": ("exec(bytes([105, 109, 112, 111, 114, 116, 32, 111, 115]).decode())",
                               COMPILE, r"Exec calls are not allowed"),
    "open a host file": ("open('/etc/passwd').read()", "NameError", r"^name 'open' is not defined$"),
    "make a type": ("type('X', (), {})", "NameError", r"^name 'type' is not defined$"),
}


@pytest.fixture(scope="module")
def restricted(session_factory):
    return session_factory(tools=[NORTHWIND / "tools.py"], restricted=True)


@pytest.fixture(scope="module")
def plain(session_factory):
    return session_factory(tools=[NORTHWIND / "tools.py"])


@pytest.mark.parametrize("case", list(ESCAPES.values()), ids=list(ESCAPES))
def test_escapes_work_in_a_plain_kernel_and_are_stopped_by_their_guard(plain, restricted,
                                                                        case: tuple[str, str, str]) -> None:
    snippet, ename, reason = case
    baseline = plain.execute(snippet)
    assert baseline.ok, f"the escape does not even work without restricted mode: {baseline.error}"
    result = restricted.execute(snippet)
    assert result.status == ("rejected" if ename == COMPILE else "error"), result.text
    assert result.error["ename"] == ename and re.search(reason, result.error["evalue"]), result.error
    assert restricted.execute("print('still usable')").stdout == "still usable\n"


def test_northwind_runs_unchanged(restricted) -> None:
    result = restricted.execute((NORTHWIND / "late_orders.py").read_text())
    assert result.ok and result.stdout == "10000 312\n"
    assert len(result.calls) == 313


def test_a_rejected_program_never_reaches_the_kernel_or_a_tool(session_factory, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    box = session_factory(tools=[COUNTED], restricted=True)
    result = box.execute("tools.charge(5)\nprint(().__class__)")
    assert result.status == "rejected" and result.calls == []
    assert "__class__" in result.error["evalue"] and result.limits_hit == ["restricted"]
    assert not count.exists()  # the charge on line 1 never ran: the whole program was refused
    assert box.execute("print(tools.charge(2))").stdout == "charged 2\n"
    assert count.read_text() == "2\n"


def test_R12_the_host_check_compiles_and_never_runs(capfd: pytest.CaptureFixture[str]) -> None:
    program = "@print('PWNED')\ndef f(x=print('PWNED2')): pass\nimport os\nos.system('echo PWNED3')"
    assert check(program) == []  # valid restricted Python: the verdict is the kernel's guards'
    assert check("().__class__") != []
    out, err = capfd.readouterr()
    assert "PWNED" not in out + err
