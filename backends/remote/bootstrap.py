"""Ships modules of this package to the target's interpreter and runs one (client side).

    argv, data = program_argv(python, "agent", args=[options])
    stream = await transport.open_stream(argv)
    stream.write(data)

The interpreter gets ``BOOTSTRAP`` as its ``-c`` program. It reads exactly the modules'
bytes from stdin (their sizes are in argv), registers each as ``gpumon_remote.NAME`` (so
``from . import protocol`` works there as it does here), and calls the last one's
``main(argv)`` with ``argv = ["gpumon-NAME", *args]``. stdin stays open after that: the
agent reads its commands from it and exits when it closes. ``gpumon-NAME`` is also in the
process's own argv, which is how the doctor tells gpumon's programs from users of the venv
(``doctor_probe_fs.GPUMON_PROGRAMS``).

Standard library only, Python 3.8 syntax, like everything in this package (this module
itself runs in gpumon, 3.11: ``importlib.resources.files``); the modules it ships must be.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

__all__ = ["BOOTSTRAP", "PACKAGE", "program_argv", "program_tag"]

PACKAGE = "gpumon_remote"  # the package the shipped modules form on the target
BOOTSTRAP = "\n".join(
    [
        "import sys, types",
        "tag, manifest = sys.argv[1], sys.argv[2]",
        "read = sys.stdin.buffer.read",
        f"pkg = types.ModuleType({PACKAGE!r})",
        "pkg.__path__ = []",
        "sys.modules[pkg.__name__] = pkg",
        "for part in manifest.split(','):",
        "    name, size = part.split(':')",
        "    mod = types.ModuleType(pkg.__name__ + '.' + name)",
        "    mod.__package__ = pkg.__name__",
        "    sys.modules[mod.__name__] = mod",
        "    setattr(pkg, name, mod)",
        "    exec(compile(read(int(size)), tag + '/' + name + '.py', 'exec'), mod.__dict__)",
        "sys.argv = [tag] + sys.argv[3:]",
        "mod.main(sys.argv)",
    ]
)


def program_tag(main: str) -> str:
    """The word that names a shipped program in its argv: ``gpumon-agent``."""
    return f"gpumon-{main}"


def module_source(name: str) -> bytes:
    """The bytes of ``gpumon.backends.remote.NAME`` as shipped."""
    return (resources.files(__package__ or "gpumon.backends.remote") / f"{name}.py").read_bytes()


# The modules each program imports (``from . import protocol``), shipped before it.
NEEDS: dict[str, tuple[str, ...]] = {
    "agent": ("protocol", "logfile", "logtail", "fetch", "hoststats", "procfacts", "mig"),
    "doctor_probe": ("logfile", "doctor_probe_fs"),
    "host_procs": (
        "protocol",
        "logfile",
        "logtail",
        "fetch",
        "hoststats",
        "procfacts",
        "mig",
        "agent",
    ),
}


def program_argv(
    python: str,
    main: str,
    *,
    args: Sequence[str] = (),
    flags: Sequence[str] = (),
) -> tuple[list[str], bytes]:
    """The argv that runs module ``main`` (after the modules it needs, ``NEEDS``) with
    ``python`` and ``flags`` (``-u``), and the bytes to write to its stdin."""
    sources = {n: module_source(n) for n in NEEDS.get(main, ()) if n != main}
    sources[main] = module_source(main)  # last: the one whose main() runs
    manifest = ",".join(f"{n}:{len(s)}" for n, s in sources.items())
    argv = [python, *flags, "-c", BOOTSTRAP, program_tag(main), manifest, *args]
    return argv, b"".join(sources.values())
