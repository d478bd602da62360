"""cryptography 51 deprecates DSA, and asyncssh 2.24.1 touches ``dsa.*`` at import: ten
``CryptographyDeprecationWarning`` lines on stderr for every SSH command. The lock keeps
cryptography below 51; the SSH transport also silences exactly that warning from asyncssh's
modules before it imports asyncssh, and nothing else."""

from __future__ import annotations

import warnings

from cryptography.utils import CryptographyDeprecationWarning

from gpumon.backends.transport.ssh import _quiet_asyncssh

DSA = "DSA is deprecated and support will be removed in a future release."


def _warn_from(module: str, category: type[Warning]) -> list[warnings.WarningMessage]:
    """The warnings a ``warnings.warn`` made in module ``module`` leaves shown, after
    ``_quiet_asyncssh`` (as asyncssh.crypto.misc does at line 32 under cryptography 51)."""
    code = compile("warnings.warn(category(DSA), stacklevel=1)", f"<{module}>", "exec")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _quiet_asyncssh()
        exec(code, {"__name__": module, "warnings": warnings, "category": category, "DSA": DSA})
    return seen


def test_the_dsa_deprecation_from_asyncssh_is_silenced() -> None:
    assert _warn_from("asyncssh.crypto.misc", CryptographyDeprecationWarning) == []
    assert _warn_from("asyncssh", CryptographyDeprecationWarning) == []


def test_the_same_warning_from_another_module_still_shows() -> None:
    (shown,) = _warn_from("paramiko.dsskey", CryptographyDeprecationWarning)
    assert DSA in str(shown.message)
    # A module whose name only starts like asyncssh's is not asyncssh.
    assert len(_warn_from("asyncsshx.crypto", CryptographyDeprecationWarning)) == 1


def test_another_category_from_asyncssh_still_shows() -> None:
    (shown,) = _warn_from("asyncssh.crypto.misc", DeprecationWarning)
    assert shown.category is DeprecationWarning
